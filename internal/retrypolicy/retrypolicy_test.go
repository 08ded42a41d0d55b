package retrypolicy

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// below1 is the largest float64 below 1 (.NET's Math.BitDecrement(1.0)).
var below1 = math.Nextafter(1, 0)

// The backoff values of NimBus's RetryPolicyTests
// (GetDelay_DefaultJitter_PreservesExistingBackoffValues).
func TestBackoffWithoutJitter(t *testing.T) {
	five := 5 * time.Second
	cases := []struct {
		name  string
		p     Policy
		count int
		want  time.Duration
	}{
		{"fixed ignores the count", Policy{Backoff: Fixed, BaseDelay: five}, 3, five},
		{"zero backoff is fixed", Policy{BaseDelay: five}, 7, five},
		{"linear 2", Policy{Backoff: Linear, BaseDelay: five}, 2, 15 * time.Second},
		{"linear 0", Policy{Backoff: Linear, BaseDelay: five}, 0, five},
		{"exponential 0", Policy{Backoff: Exponential, BaseDelay: five}, 0, five},
		{"exponential 3", Policy{Backoff: Exponential, BaseDelay: five}, 3, 40 * time.Second},
		{"exponential capped", Policy{Backoff: Exponential, BaseDelay: five, MaxDelay: time.Minute}, 6, time.Minute},
		{"exponential below the cap", Policy{Backoff: Exponential, BaseDelay: five, MaxDelay: time.Minute}, 3, 40 * time.Second},
		{"negative count is 0", Policy{Backoff: Linear, BaseDelay: five}, -4, five},
		{"zero base", Policy{Backoff: Exponential}, 10, 0},
		{"exponential 62 saturates", Policy{Backoff: Exponential, BaseDelay: tick}, 62, time.Duration(maxTicks) * tick},
		{"exponential 63 saturates", Policy{Backoff: Exponential, BaseDelay: time.Second}, 63, time.Duration(maxTicks) * tick},
		{"exponential 1000 capped", Policy{Backoff: Exponential, BaseDelay: time.Second, MaxDelay: time.Hour}, 1000, time.Hour},
		{"linear overflow saturates", Policy{Backoff: Linear, BaseDelay: 1000 * time.Hour}, math.MaxInt32, time.Duration(maxTicks) * tick},
		{"exponential 40", Policy{Backoff: Exponential, BaseDelay: tick}, 40, (1 << 40) * tick},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.p.Delay(c.count, 0.5); got != c.want {
				t.Fatalf("Delay(%d) = %v, want %v", c.count, got, c.want)
			}
		})
	}
}

// GetDelay_FullJitter_StaysWithinExpectedRange.
func TestFullJitter(t *testing.T) {
	base := 10 * time.Second
	p := Policy{Backoff: Fixed, BaseDelay: base, Jitter: JitterFull}
	if got := p.Delay(0, 0.5); got != 15*time.Second {
		t.Errorf("Delay at 0.5 = %v, want 15s", got)
	}
	if got := p.Delay(0, 0); got != base {
		t.Errorf("Delay at 0 = %v, want %v", got, base)
	}
	// The largest jitter stays one tick below twice the delay.
	if got := p.Delay(0, below1); got != 2*base-tick {
		t.Errorf("Delay just below 1 = %v, want %v", got, 2*base-tick)
	}
	if got := p.Delay(0, 1); got != 2*base-tick {
		t.Errorf("Delay at 1 (clamped) = %v, want %v", got, 2*base-tick)
	}
	if got := p.Delay(0, math.NaN()); got != base {
		t.Errorf("Delay at NaN = %v, want %v", got, base)
	}
	r := rand.New(rand.NewPCG(12345, 1))
	for i := 0; i < 1000; i++ {
		if d := p.Delay(0, r.Float64()); d < base || d >= 2*base {
			t.Fatalf("sample %d = %v, outside [%v, %v)", i, d, base, 2*base)
		}
	}
	// Jitter applies to the backoff delay, not to the base.
	e := Policy{Backoff: Exponential, BaseDelay: base, Jitter: JitterFull}
	if got := e.Delay(2, 0.5); got != 60*time.Second {
		t.Errorf("exponential 2 with half jitter = %v, want 60s", got)
	}
}

// GetDelay_BoundedJitter_StaysWithinConfiguredRange.
func TestBoundedJitter(t *testing.T) {
	base := 10 * time.Second
	p := Policy{Backoff: Fixed, BaseDelay: base, Jitter: JitterBounded, BoundedJitterFactor: 0.4}
	if got := p.Delay(0, 0.5); got != 12*time.Second {
		t.Errorf("Delay at 0.5 = %v, want 12s", got)
	}
	upper := 14 * time.Second
	if got := p.Delay(0, below1); got >= upper || got != upper-tick {
		t.Errorf("Delay just below 1 = %v, want %v", got, upper-tick)
	}
	r := rand.New(rand.NewPCG(54321, 2))
	for i := 0; i < 1000; i++ {
		if d := p.Delay(0, r.Float64()); d < base || d >= upper {
			t.Fatalf("sample %d = %v, outside [%v, %v)", i, d, base, upper)
		}
	}
	zero := Policy{BaseDelay: base, Jitter: JitterBounded}
	if got := zero.Delay(0, 0.9); got != base {
		t.Errorf("factor 0 = %v, want %v", got, base)
	}
	for _, bad := range []float64{-0.01, math.NaN(), math.Inf(1)} {
		q := Policy{BaseDelay: base, Jitter: JitterBounded, BoundedJitterFactor: bad}
		if got := q.Delay(0, 0.5); got != base {
			t.Errorf("invalid factor %v: Delay = %v, want no jitter (%v)", bad, got, base)
		}
		if err := q.Validate(); err == nil || !strings.Contains(err.Error(), "BoundedJitterFactor") {
			t.Errorf("invalid factor %v: Validate = %v", bad, err)
		}
	}
}

// The jitter share is truncated to whole ticks, as NimBus truncates it.
func TestJitterTruncatesToTicks(t *testing.T) {
	p := Policy{BaseDelay: 3 * tick, Jitter: JitterFull}
	// 3 ticks · 0.5 = 1.5 ticks of jitter → 1 tick.
	if got := p.Delay(0, 0.5); got != 4*tick {
		t.Errorf("Delay = %v, want %v", got, 4*tick)
	}
	// 3 ticks · below1 ≈ 2.999… → 2 ticks (kept below 3).
	if got := p.Delay(0, below1); got != 5*tick {
		t.Errorf("Delay = %v, want %v", got, 5*tick)
	}
	// 1 tick · 0.99 → 0 ticks.
	one := Policy{BaseDelay: tick, Jitter: JitterFull}
	if got := one.Delay(0, 0.99); got != tick {
		t.Errorf("Delay = %v, want %v", got, tick)
	}
}

// GetDelay_MaxDelayCapsAfterJitter and
// GetDelay_MaxDelayCapsJitterThatWouldOverflowTimeSpan.
func TestMaxDelayCapsAfterJitter(t *testing.T) {
	base, maxD := 10*time.Second, 12*time.Second
	cases := []struct {
		name string
		p    Policy
		want time.Duration
	}{
		{"uncapped full", Policy{BaseDelay: base, Jitter: JitterFull}, 15 * time.Second},
		{"capped full", Policy{BaseDelay: base, Jitter: JitterFull, MaxDelay: maxD}, maxD},
		{"capped bounded", Policy{BaseDelay: base, Jitter: JitterBounded, BoundedJitterFactor: 0.5, MaxDelay: maxD}, maxD},
		{"huge base, full jitter, capped", Policy{BaseDelay: time.Duration(math.MaxInt64 - 1000), Jitter: JitterFull, MaxDelay: 5 * time.Minute}, 5 * time.Minute},
		{"huge factor, capped", Policy{BaseDelay: base, Jitter: JitterBounded, BoundedJitterFactor: math.MaxFloat64, MaxDelay: 5 * time.Minute}, 5 * time.Minute},
		{"huge factor, uncapped, saturates", Policy{BaseDelay: base, Jitter: JitterBounded, BoundedJitterFactor: math.MaxFloat64}, time.Duration(maxTicks) * tick},
		{"huge base, full jitter, uncapped, saturates", Policy{BaseDelay: time.Duration(math.MaxInt64 - 1000), Jitter: JitterFull}, time.Duration(maxTicks) * tick},
		{"cap below base", Policy{BaseDelay: base, MaxDelay: time.Second}, time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.p.Delay(0, 0.5); got != c.want {
				t.Fatalf("Delay = %v, want %v", got, c.want)
			}
		})
	}
}

func TestRetries(t *testing.T) {
	p := Policy{MaxRetries: 2}
	for count, want := range map[int]bool{0: true, 1: true, 2: false, 3: false} {
		if got := p.Retries(count); got != want {
			t.Errorf("Retries(%d) = %v, want %v", count, got, want)
		}
	}
	if (Policy{}).Retries(0) {
		t.Error("MaxRetries 0 retries")
	}
}

func TestValidate(t *testing.T) {
	good := Policy{MaxRetries: 3, Backoff: Exponential, BaseDelay: time.Second, MaxDelay: time.Minute, Jitter: JitterBounded, BoundedJitterFactor: 0.25}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (Policy{}).Validate(); err != nil {
		t.Fatalf("zero policy: %v", err)
	}
	bad := Policy{MaxRetries: -1, Backoff: "Quadratic", BaseDelay: -time.Second, MaxDelay: time.Nanosecond, Jitter: "Some", BoundedJitterFactor: -1}
	err := bad.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"MaxRetries", "Quadratic", "BaseDelay", "MaxDelay", "ticks", "Some", "BoundedJitterFactor"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s: %v", want, err)
		}
	}
}

func pol(n int) Policy { return Policy{MaxRetries: n, BaseDelay: time.Minute} }

// NimBus's RetryPolicyProviderTests.
func TestSetFor(t *testing.T) {
	t.Run("no config", func(t *testing.T) {
		var s Set
		if _, ok := s.For("OrderPlaced", "some error", ""); ok {
			t.Fatal("a policy without configuration")
		}
		var nilSet *Set
		if _, ok := nilSet.For("OrderPlaced", "x", ""); ok || !nilSet.Empty() || !s.Empty() {
			t.Fatal("nil or empty set has a policy")
		}
	})
	type call struct {
		eventType, errText string
		want               int // MaxRetries of the expected policy; -1 for none
	}
	cases := []struct {
		name  string
		build func(*Set) error
		calls []call
	}{
		{"default is the fallback", func(s *Set) error { return s.SetDefault(pol(5)) },
			[]call{{"AnyEvent", "any exception", 5}, {"", "", 5}}},
		{"event type wins over default", func(s *Set) error {
			return join(s.AddEventType("OrderPlaced", pol(10)), s.SetDefault(pol(1)))
		}, []call{{"OrderPlaced", "some error", 10}, {"PaymentCaptured", "some error", 1}}},
		{"event type case-insensitive", func(s *Set) error { return s.AddEventType("OrderPlaced", pol(3)) },
			[]call{{"orderplaced", "error", 3}, {"ORDERPLACED", "", 3}, {"OrderPlacedV2", "", -1}, {"", "", -1}}},
		{"exception rule matches", func(s *Set) error {
			return join(s.AddExceptionRule("timeout", pol(2)), s.SetDefault(pol(5)))
		}, []call{{"OrderPlaced", "Connection timeout after 30s", 2}, {"OrderPlaced", "refused", 5}}},
		{"exception rule case-insensitive", func(s *Set) error { return s.AddExceptionRule("timeout", pol(3)) },
			[]call{{"AnyEvent", "TIMEOUT occurred", 3}, {"AnyEvent", "time out", -1}}},
		{"rule miss falls to event type", func(s *Set) error {
			return join(s.AddExceptionRule("timeout", pol(1)), s.AddEventType("OrderPlaced", pol(5)))
		}, []call{{"OrderPlaced", "NullReferenceException", 5}, {"OrderPlaced", "Connection timeout", 1}}},
		{"scoped rule", func(s *Set) error {
			return join(s.AddExceptionRule("timeout", pol(2), "OrderPlaced"), s.SetDefault(pol(5)))
		}, []call{{"OrderPlaced", "timeout error", 2}, {"orderplaced", "timeout error", 2}, {"PaymentCaptured", "timeout error", 5}, {"", "timeout", 5}}},
		{"empty error text skips rules", func(s *Set) error {
			return join(s.AddExceptionRule("timeout", pol(1)), s.SetDefault(pol(5)))
		}, []call{{"OrderPlaced", "", 5}}},
		{"first matching rule wins", func(s *Set) error {
			return join(s.AddExceptionRule("time", pol(7)), s.AddExceptionRule("timeout", pol(8)))
		}, []call{{"X", "timeout", 7}}},
		{"second event type policy replaces the first", func(s *Set) error {
			return join(s.AddEventType("OrderPlaced", pol(1)), s.AddEventType("orderplaced", pol(4)))
		}, []call{{"OrderPlaced", "", 4}}},
		{"MaxRetries 0 per type overrides the default", func(s *Set) error {
			return join(s.AddEventType("OrderPlaced", pol(0)), s.SetDefault(pol(5)))
		}, []call{{"OrderPlaced", "", 0}, {"Other", "", 5}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var s Set
			if err := c.build(&s); err != nil {
				t.Fatal(err)
			}
			for _, cl := range c.calls {
				p, ok := s.For(cl.eventType, cl.errText, "BillingEndpoint")
				switch {
				case cl.want < 0 && ok:
					t.Errorf("For(%q, %q) = %+v, want none", cl.eventType, cl.errText, p)
				case cl.want >= 0 && (!ok || p.MaxRetries != cl.want):
					t.Errorf("For(%q, %q) = %+v, %v; want MaxRetries %d", cl.eventType, cl.errText, p, ok, cl.want)
				}
			}
		})
	}
}

func TestSetRefusesBadInput(t *testing.T) {
	var s Set
	if err := s.AddEventType("", pol(1)); err == nil {
		t.Error("empty event type accepted")
	}
	if err := s.AddExceptionRule("", pol(1)); err == nil {
		t.Error("empty rule text accepted")
	}
	bad := Policy{MaxRetries: -1}
	if s.SetDefault(bad) == nil || s.AddEventType("A", bad) == nil || s.AddExceptionRule("x", bad) == nil {
		t.Error("invalid policy accepted")
	}
	if !s.Empty() {
		t.Error("refused input was kept")
	}
}

func join(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
