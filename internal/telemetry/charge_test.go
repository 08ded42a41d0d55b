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

// A part's charge counts its own requests and adds them to the whole's.
func TestPartChargeAddsToTheWhole(t *testing.T) {
	ctx, whole := WithCharge(context.Background())
	whole.Add(2)
	pctx, part := WithPartCharge(ctx)
	if ChargeFrom(pctx) != part {
		t.Fatal("ChargeFrom does not return the part's charge")
	}
	ChargeFrom(pctx).Add(3)
	ChargeFrom(pctx).Add(0.5)
	if part.RequestUnits() != 3.5 || part.Requests() != 2 {
		t.Fatalf("part: RU %v over %d requests, want 3.5 over 2", part.RequestUnits(), part.Requests())
	}
	if whole.RequestUnits() != 5.5 || whole.Requests() != 3 {
		t.Fatalf("whole: RU %v over %d requests, want 5.5 over 3", whole.RequestUnits(), whole.Requests())
	}
	_, orphan := WithPartCharge(context.Background())
	orphan.Add(1)
	if orphan.RequestUnits() != 1 {
		t.Fatalf("a part without a whole: RU %v, want 1", orphan.RequestUnits())
	}
}
