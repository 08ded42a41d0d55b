package servicebus

import (
	"math"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// DefaultRetry is the recommended SDK retry setting for [Options.Retry]:
// 4 retries (5 tries), the first retry after about 1 s, each later pause
// about (2^i − 1) s, at most 15 s.
//
// How azservicebus v1.11.0 retries a send or schedule: the operation is
// tried, and a failure the SDK classifies as retryable (connection lost,
// link detached, server busy, timeout) is retried after a pause of
// (2^i − 1) × RetryDelay for retry i, multiplied by a random jitter in
// [0.8, 1.3) and then capped at MaxRetryDelay. Fatal failures (entity not
// found, unauthorized, message too large) and cancellation end the loop at
// once. A link found detached on the first try gets one extra immediate
// try that does not count as a retry. There is no per-try timeout: each
// try, including connecting and attaching the link, runs until it succeeds,
// fails, or the caller's ctx ends.
//
// With DefaultRetry the pauses add up to at most 1.3 + 3.9 + 9.1 + 15 =
// 29.3 s (at least 20.8 s), see [RetryPauseBound]. A send against a broker
// that refuses connections therefore fails after at most about 29.3 s plus
// five quick connection attempts; against a peer that accepts TCP and never
// answers, only the caller's ctx bounds it. Callers must pass a ctx with a
// deadline: the subscriber's 60 s settle window leaves about 30 s for the
// tries themselves. The SDK's own defaults (3 retries, 4 s, 120 s) pause up
// to 57.2 s, which nearly fills that window.
var DefaultRetry = azservicebus.RetryOptions{
	MaxRetries:    4,
	RetryDelay:    time.Second,
	MaxRetryDelay: 15 * time.Second,
}

// The SDK multiplies each pause by a random jitter in [0.8, 1.3).
const (
	minJitter = 0.8
	maxJitter = 1.3
)

// RetryPauseBound returns the longest total pause between tries that one
// operation can spend in SDK retries with o, following azservicebus
// v1.11.0: zero fields take the SDK defaults (3 retries, 4 s, 120 s), a
// negative MaxRetries means no retry, a negative RetryDelay no pause, and
// a negative MaxRetryDelay no cap. The time of the tries themselves is not
// included (each is bounded only by the caller's ctx).
func RetryPauseBound(o azservicebus.RetryOptions) time.Duration {
	return retryPauses(o, maxJitter)
}

// retryPauses sums the pauses of every retry with o for one jitter value.
func retryPauses(o azservicebus.RetryOptions, jitter float64) time.Duration {
	switch {
	case o.MaxRetries == 0:
		o.MaxRetries = 3
	case o.MaxRetries < 0:
		o.MaxRetries = 0
	}
	switch {
	case o.MaxRetryDelay == 0:
		o.MaxRetryDelay = 120 * time.Second
	case o.MaxRetryDelay < 0:
		o.MaxRetryDelay = math.MaxInt64
	}
	switch {
	case o.RetryDelay == 0:
		o.RetryDelay = 4 * time.Second
	case o.RetryDelay < 0:
		o.RetryDelay = 0
	}
	var total float64
	for i := int32(1); i <= o.MaxRetries; i++ {
		factor := math.Exp2(float64(i)) - 1
		total += math.Min(factor*float64(o.RetryDelay)*jitter, float64(o.MaxRetryDelay))
		if total >= math.MaxInt64 {
			return math.MaxInt64
		}
	}
	return time.Duration(math.Round(total))
}
