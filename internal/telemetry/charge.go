package telemetry

import (
	"context"
	"math"
	"sync/atomic"
)

// Charge sums the Cosmos DB request charges (request units) and counts the
// Cosmos requests of one invocation. It is safe for concurrent use (a purge
// deletes in parallel); a nil *Charge discards.
type Charge struct {
	bits     atomic.Uint64 // float64 bits of the RU sum
	requests atomic.Int64
	// parent, when set, is also charged (a part of an invocation, such as
	// one replayed message, inside the invocation's charge).
	parent *Charge
}

// Add counts one request that charged ru request units.
func (c *Charge) Add(ru float64) {
	if c == nil {
		return
	}
	c.parent.Add(ru)
	c.requests.Add(1)
	if ru <= 0 || math.IsNaN(ru) || math.IsInf(ru, 0) {
		return
	}
	for {
		old := c.bits.Load()
		if c.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+ru)) {
			return
		}
	}
}

// RequestUnits returns the summed charge.
func (c *Charge) RequestUnits() float64 {
	if c == nil {
		return 0
	}
	return math.Float64frombits(c.bits.Load())
}

// Requests returns the number of requests counted.
func (c *Charge) Requests() int64 {
	if c == nil {
		return 0
	}
	return c.requests.Load()
}

type chargeKey struct{}

// WithCharge returns ctx carrying a new Charge, which every Cosmos request
// made with the returned context (or one derived from it) adds to.
func WithCharge(ctx context.Context) (context.Context, *Charge) {
	c := &Charge{}
	return context.WithValue(ctx, chargeKey{}, c), c
}

// WithPartCharge returns ctx carrying a new Charge for a part of the work
// of ctx's Charge: every request made with the returned context adds to
// both.
func WithPartCharge(ctx context.Context) (context.Context, *Charge) {
	c := &Charge{parent: ChargeFrom(ctx)}
	return context.WithValue(ctx, chargeKey{}, c), c
}

// ChargeFrom returns the Charge ctx carries, or nil.
func ChargeFrom(ctx context.Context) *Charge {
	c, _ := ctx.Value(chargeKey{}).(*Charge)
	return c
}
