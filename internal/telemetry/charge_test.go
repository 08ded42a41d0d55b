package telemetry

import (
	"context"
	"math"
	"sync"
	"testing"
)

func TestChargeSumsConcurrently(t *testing.T) {
	ctx, c := WithCharge(context.Background())
	if ChargeFrom(ctx) != c || ChargeFrom(context.Background()) != nil {
		t.Fatal("ChargeFrom does not return the context's charge")
	}
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ChargeFrom(ctx).Add(1.25)
		}()
	}
	wg.Wait()
	c.Add(0)          // a request without a charge header still counts
	c.Add(math.NaN()) // a broken header adds no RU
	c.Add(-3)
	if c.RequestUnits() != 125 || c.Requests() != 103 {
		t.Fatalf("RU %v over %d requests, want 125 over 103", c.RequestUnits(), c.Requests())
	}
	var none *Charge
	none.Add(1)
	if none.RequestUnits() != 0 || none.Requests() != 0 {
		t.Fatal("a nil charge is not empty")
	}
}
