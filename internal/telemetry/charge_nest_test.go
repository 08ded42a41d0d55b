package telemetry

import (
	"context"
	"testing"
)

// A charge started inside another one (a replayed message inside its
// DeferredProcessor invocation) counts its own requests, and the outer one
// counts them too.
func TestNestedChargeAddsToItsParent(t *testing.T) {
	ctx, outer := WithCharge(context.Background())
	ChargeFrom(ctx).Add(1)
	inner, c := WithCharge(ctx)
	ChargeFrom(inner).Add(2.5)
	ChargeFrom(inner).Add(0)
	if c.RequestUnits() != 2.5 || c.Requests() != 2 {
		t.Fatalf("inner: %v RU, %d requests", c.RequestUnits(), c.Requests())
	}
	if outer.RequestUnits() != 3.5 || outer.Requests() != 3 {
		t.Fatalf("outer: %v RU, %d requests", outer.RequestUnits(), outer.Requests())
	}
}
