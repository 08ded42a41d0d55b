package cosmos

import (
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// DefaultRetry is the recommended Config.Retry: 3 retries, 200 ms doubling
// to at most 2 s between tries, 10 s per try.
//
// # What retries, with azcosmos v1.5.0
//
// Two layers retry. azcore's retry policy wraps each request; inside each
// of its tries, azcosmos's own client retry policy may resend the request
// before answering.
//
// azcosmos (data-plane requests: point reads, creates, deletes, queries),
// within one azcore try:
//   - 429 is not handled here: it goes to azcore (below).
//   - 503, 408, 500, 502, 504 answered to a write, and 503 to a read on an
//     account without PreferredRegions (this package sets none): returned
//     at once, marked non-retriable, so azcore does not retry them either.
//   - 408 to a read: one retry after 1 s; 500, 502, 504 to a read: one
//     immediate retry (a second one only across regions); then returned
//     non-retriable.
//   - 404 with sub-status 1002 (read session not available): one retry.
//   - 403 with sub-status 3 or 1008 (write forbidden, account not found
//     in region): retried after 1 s each, up to 120 times, while it
//     refreshes the account's regions. Only the per-try timeout bounds it.
//   - Connection failures: a read, or a write that provably never left
//     this host (dial, DNS, TLS handshake), is retried 3 times after 1 s
//     each, then once more across regions; a write that may have reached
//     the service (EOF, reset, timeout mid-exchange) is returned at once.
//     Either way the final error is non-retriable for azcore.
//   - 410 and 449 are not retried on these paths (ReadMany and the change
//     feed retry a partition split's 410 themselves; the partition key
//     range cache retries 429 without limit).
//
// azcore, around each request: retries 408, 429, 500, 502, 503, 504 and
// transport errors that azcosmos did not mark non-retriable, at most
// MaxRetries times; it waits x-ms-retry-after-ms when the answer carries
// it, and does not retry at all when that wait exceeds MaxRetryDelay
// (the 429 comes back at once), otherwise (2^n−1)·RetryDelay·[0.8, 1.3)
// capped at MaxRetryDelay. A try cut off by TryTimeout while a request is
// in flight is not retried (azcosmos reports it non-retriable); one cut
// off during an azcosmos sleep (the 403 loop) is. In practice, on
// data-plane requests azcore retries only 429. The account reads (this
// package's consistency read, and the SDK's own read of the account's
// regions before a client's first request) have no azcosmos layer: azcore
// retries all of the above there. The package's tests send each of these
// answers to the SDK and count the requests, so an SDK upgrade that
// changes them fails there.
//
// # Worst case with DefaultRetry
//
// One operation makes at most MaxRetries+1 = 4 tries of at most TryTimeout
// = 10 s each (the per-try deadline also bounds azcosmos's in-try retries
// and its 1 s sleeps, and an Entra token fetch), separated by at most
// MaxRetryDelay = 2 s: 4·10 s + 3·2 s = 46 s. Without a Retry-After the
// three waits are at most 0.26 + 0.78 + 1.82 = 2.86 s, so four quick
// failures (e.g. 429s with small Retry-After) take about 3 s. A client's
// first request also waits for the SDK's account read, bounded the same
// way (46 s) and not cancelable by the caller. The caller's context
// deadline cuts every wait short. With azcore's defaults instead (no
// per-try timeout, 60 s cap) the only bound is the HTTP client's own
// timeout (65 s per attempt with the SDK's default transport), and the
// 403 loop above could run for minutes.
var DefaultRetry = policy.RetryOptions{
	MaxRetries:    3,
	RetryDelay:    200 * time.Millisecond,
	MaxRetryDelay: 2 * time.Second,
	TryTimeout:    10 * time.Second,
}
