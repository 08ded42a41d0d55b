// Package retrypolicy decides whether, and after how long, a failed event is
// retried with a RetryRequest, with NimBus's retry-policy semantics:
//
//   - A Policy has MaxRetries, a backoff (Fixed, Linear or Exponential), a
//     BaseDelay, an optional MaxDelay cap, a jitter mode (None, Full or
//     Bounded) and, for Bounded jitter, BoundedJitterFactor (default 0.25).
//   - The delay before retry number retryCount+1 (retryCount is the failed
//     delivery's RetryCount, 0 for the original delivery) is
//     Fixed BaseDelay, Linear BaseDelay·(retryCount+1), Exponential
//     BaseDelay·2^retryCount; jitter then adds up to 100 % (Full) or up to
//     BoundedJitterFactor (Bounded) of that delay, uniformly; MaxDelay caps
//     the result.
//   - A RetryRequest is sent only while retryCount < MaxRetries.
//   - A Set chooses the policy for a failure: the first exception rule
//     whose text occurs in the error text (case-insensitively; a rule may be
//     scoped to event types), else the policy of the event type (matched
//     case-insensitively), else the default policy. No policy means no
//     RetryRequest.
//
// Durations are counted in 100 ns ticks, as .NET's TimeSpan counts them, so
// the delays equal NimBus's to the tick. Where NimBus's arithmetic would
// overflow (a very large delay, or Exponential past 2^62), the delay here
// saturates at the largest time.Duration (about 292 years) before the
// MaxDelay cap, instead of wrapping or throwing.
//
// The package is pure: no I/O, no clock, no global random source (the
// caller passes the random number that drives the jitter).
package retrypolicy

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Backoff is how the delay grows with the retry count (NimBus's
// BackoffStrategy).
type Backoff string

// Backoff strategies, named as NimBus names them.
const (
	Fixed       Backoff = "Fixed"
	Linear      Backoff = "Linear"
	Exponential Backoff = "Exponential"
)

// Jitter spreads retry delays (NimBus's JitterMode).
type Jitter string

// Jitter modes, named as NimBus names them.
const (
	// JitterNone uses the backoff delay unchanged.
	JitterNone Jitter = "None"
	// JitterFull adds up to 100 % of the backoff delay.
	JitterFull Jitter = "Full"
	// JitterBounded adds up to BoundedJitterFactor of the backoff delay.
	JitterBounded Jitter = "Bounded"
)

// NimBus's defaults for the fields a configuration may leave out.
const (
	DefaultBackoff             = Fixed
	DefaultBaseDelay           = time.Minute
	DefaultJitter              = JitterNone
	DefaultBoundedJitterFactor = 0.25
)

// tick is the unit of .NET's TimeSpan.
const tick = 100 * time.Nanosecond

// maxTicks is the largest tick count a time.Duration holds.
const maxTicks = int64(math.MaxInt64 / int64(tick))

// Policy is one retry policy. The zero Backoff and Jitter mean Fixed and
// None.
type Policy struct {
	// MaxRetries is how many RetryRequests an event gets: one is sent
	// while the failed delivery's RetryCount is below it. 0 means none (a
	// per-event-type policy with 0 turns retries off for that type).
	MaxRetries int
	Backoff    Backoff
	// BaseDelay is the Fixed delay, the Linear step and the Exponential
	// start.
	BaseDelay time.Duration
	// MaxDelay caps the delay after jitter; 0 means no cap (NimBus's null).
	MaxDelay time.Duration
	Jitter   Jitter
	// BoundedJitterFactor is the largest proportional increase of Bounded
	// jitter: finite and not negative (0.25 adds up to 25 %).
	BoundedJitterFactor float64
}

// Retries reports whether a failed delivery whose RetryCount is retryCount
// gets a RetryRequest under p (NimBus: retryCount < MaxRetries).
func (p Policy) Retries(retryCount int) bool { return retryCount < p.MaxRetries }

// Validate returns an error listing every field of p that NimBus would
// refuse or that does not fit a TimeSpan, nil when p is usable.
func (p Policy) Validate() error {
	var problems []string
	if p.MaxRetries < 0 {
		problems = append(problems, fmt.Sprintf("MaxRetries %d is negative", p.MaxRetries))
	}
	switch p.Backoff {
	case "", Fixed, Linear, Exponential:
	default:
		problems = append(problems, fmt.Sprintf("Backoff %q is not Fixed, Linear or Exponential", string(p.Backoff)))
	}
	switch p.Jitter {
	case "", JitterNone, JitterFull, JitterBounded:
	default:
		problems = append(problems, fmt.Sprintf("Jitter %q is not None, Full or Bounded", string(p.Jitter)))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"BaseDelay", p.BaseDelay}, {"MaxDelay", p.MaxDelay}} {
		switch {
		case d.v < 0:
			problems = append(problems, fmt.Sprintf("%s %s is negative", d.name, d.v))
		case d.v%tick != 0:
			problems = append(problems, fmt.Sprintf("%s %s is not a whole number of 100 ns ticks", d.name, d.v))
		}
	}
	if f := p.BoundedJitterFactor; math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		problems = append(problems, fmt.Sprintf("BoundedJitterFactor %v is not finite and non-negative", f))
	}
	if len(problems) > 0 {
		return errors.New("invalid retry policy: " + strings.Join(problems, "; "))
	}
	return nil
}

// Delay is the wait before the RetryRequest for an event that has been
// retried retryCount times (0 for the first failure), as NimBus's
// RetryPolicy.GetDelay computes it; rnd in [0,1) drives the jitter (it is
// not consulted when Jitter is None). A negative retryCount counts as 0;
// rnd below 0 (or NaN) counts as 0 and rnd at or above 1 as the largest
// float64 below 1. A BoundedJitterFactor that Validate refuses adds no
// jitter.
func (p Policy) Delay(retryCount int, rnd float64) time.Duration {
	if retryCount < 0 {
		retryCount = 0
	}
	base := int64(p.BaseDelay / tick)
	if base < 0 {
		base = 0
	}
	var d int64
	switch p.Backoff {
	case Linear:
		d = satMul(base, int64(retryCount)+1)
	case Exponential:
		if retryCount >= 63 {
			d = satMul(base, math.MaxInt64)
		} else {
			d = satMul(base, int64(1)<<retryCount)
		}
	default:
		d = base
	}

	var capTicks int64 = -1
	if p.MaxDelay > 0 {
		capTicks = int64(p.MaxDelay / tick)
	}
	switch p.Jitter {
	case JitterFull:
		d = jitter(d, 1, clampUnit(rnd), capTicks)
	case JitterBounded:
		f := p.BoundedJitterFactor
		if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
			f = 0
		}
		d = jitter(d, f, clampUnit(rnd), capTicks)
	}
	if capTicks >= 0 && d > capTicks {
		d = capTicks
	}
	return time.Duration(d) * tick
}

// jitter adds a uniform share, up to factor, of delay (in ticks): the
// share is truncated to whole ticks and kept strictly below the largest
// share, and a sum above capTicks (when it is not negative) is capTicks,
// as NimBus's ApplyJitter does. Sums past maxTicks saturate.
func jitter(delay int64, factor, rnd float64, capTicks int64) int64 {
	maxJitter := float64(delay) * factor
	jf := maxJitter * rnd
	var j int64
	if jf >= float64(maxTicks) {
		j = maxTicks
	} else {
		j = int64(jf)
	}
	if maxJitter > 0 && float64(j) >= maxJitter {
		j = int64(math.Ceil(maxJitter)) - 1
		if math.Ceil(maxJitter) > float64(maxTicks) {
			j = maxTicks
		}
	}
	sum := satAdd(delay, j)
	if capTicks >= 0 && sum > capTicks {
		return capTicks
	}
	return sum
}

func clampUnit(r float64) float64 {
	switch {
	case math.IsNaN(r) || r < 0:
		return 0
	case r >= 1:
		return math.Nextafter(1, 0)
	}
	return r
}

// satMul multiplies non-negative a and b, saturating at maxTicks.
func satMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > maxTicks/b {
		return maxTicks
	}
	return a * b
}

// satAdd adds non-negative a and b, saturating at maxTicks.
func satAdd(a, b int64) int64 {
	if a > maxTicks-b {
		return maxTicks
	}
	return a + b
}

// Set holds the retry policies of an endpoint: a default, per-event-type
// policies and exception rules (NimBus's DefaultRetryPolicyProvider). Build
// it before the first delivery; For is then safe for concurrent use. A nil
// *Set has no policies.
type Set struct {
	def    *Policy
	byType map[string]Policy
	rules  []rule
}

type rule struct {
	contains string // lower case
	types    map[string]bool
	policy   Policy
}

// foldKey is the case-insensitive key of an event type id.
func foldKey(s string) string { return strings.ToLower(s) }

// SetDefault sets the policy used when no other applies.
func (s *Set) SetDefault(p Policy) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("default: %w", err)
	}
	s.def = &p
	return nil
}

// AddEventType sets the policy of one event type, matched
// case-insensitively; a second call for the same type replaces the first,
// as in NimBus.
func (s *Set) AddEventType(eventTypeID string, p Policy) error {
	if eventTypeID == "" {
		return errors.New("event type policy: empty event type id")
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("event type %s: %w", eventTypeID, err)
	}
	if s.byType == nil {
		s.byType = map[string]Policy{}
	}
	s.byType[foldKey(eventTypeID)] = p
	return nil
}

// AddExceptionRule adds a rule that applies p when the failure's error text
// contains exceptionContains (case-insensitively), only for the listed
// event types when any are given. Rules are tried in the order added,
// before the event-type policies.
func (s *Set) AddExceptionRule(exceptionContains string, p Policy, eventTypeIDs ...string) error {
	if exceptionContains == "" {
		return errors.New("exception rule: empty text")
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("exception rule %q: %w", exceptionContains, err)
	}
	r := rule{contains: strings.ToLower(exceptionContains), policy: p}
	for _, id := range eventTypeIDs {
		if r.types == nil {
			r.types = map[string]bool{}
		}
		r.types[foldKey(id)] = true
	}
	s.rules = append(s.rules, r)
	return nil
}

// Empty reports whether s has no policy at all.
func (s *Set) Empty() bool {
	return s == nil || (s.def == nil && len(s.byType) == 0 && len(s.rules) == 0)
}

// For returns the policy for a failure of an event of type eventTypeID
// whose error text is errText, false when none applies (then no
// RetryRequest is sent). As NimBus's DefaultRetryPolicyProvider: the first
// exception rule in scope whose text occurs in errText (an empty errText
// matches no rule), else the event type's policy (an empty eventTypeID has
// none), else the default. endpoint is accepted because NimBus's provider
// takes it (the message's To); NimBus's provider ignores it, and so does
// this one: an app serves one endpoint.
func (s *Set) For(eventTypeID, errText, endpoint string) (Policy, bool) {
	_ = endpoint
	if s == nil {
		return Policy{}, false
	}
	if errText != "" && len(s.rules) > 0 {
		lower := strings.ToLower(errText)
		key := foldKey(eventTypeID)
		for _, r := range s.rules {
			if r.types != nil && !r.types[key] {
				continue
			}
			if strings.Contains(lower, r.contains) {
				return r.policy, true
			}
		}
	}
	if eventTypeID != "" {
		if p, ok := s.byType[foldKey(eventTypeID)]; ok {
			return p, true
		}
	}
	if s.def != nil {
		return *s.def, true
	}
	return Policy{}, false
}
