package retrypolicy

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkDelay measures one delay computation (Exponential, Bounded
// jitter, capped): the cost the pipeline adds to a failed delivery.
func BenchmarkDelay(b *testing.B) {
	p := Policy{MaxRetries: 10, Backoff: Exponential, BaseDelay: 10 * time.Second, MaxDelay: time.Hour, Jitter: JitterBounded, BoundedJitterFactor: 0.25}
	var sink time.Duration
	for i := 0; b.Loop(); i++ {
		sink += p.Delay(i%10, 0.37)
	}
	_ = sink
}

// BenchmarkFor measures choosing a policy in a full Set (20 exception rules,
// none matching, and 100 event types) for a 200-byte error text.
func BenchmarkFor(b *testing.B) {
	var s Set
	for i := 0; i < 20; i++ {
		if err := s.AddExceptionRule(fmt.Sprintf("needle-%d", i), pol(i)); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < 100; i++ {
		if err := s.AddEventType(fmt.Sprintf("Billing.Event%d", i), pol(i)); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.SetDefault(pol(3)); err != nil {
		b.Fatal(err)
	}
	errText := fmt.Sprintf("%0200d", 7)
	for b.Loop() {
		if p, ok := s.For("Billing.Event42", errText, "BillingEndpoint"); !ok || p.MaxRetries != 42 {
			b.Fatal("wrong policy")
		}
	}
}
