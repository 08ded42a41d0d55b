package cosmostracking_test

import (
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmostest"
	"github.com/nimbus-go/functions-subscriber/internal/tracking"
	"github.com/nimbus-go/functions-subscriber/internal/tracking/cosmostracking"
	"github.com/nimbus-go/functions-subscriber/internal/tracking/trackingtest"
)

// newStore returns a store on e's account, in the test's database unless o
// names one.
func newStore(t testing.TB, e *cosmostest.Env, o cosmostracking.Options) *cosmostracking.Store {
	t.Helper()
	if o.DatabaseID == "" {
		o.DatabaseID = e.DB
	}
	s, err := cosmostracking.New(e.Account, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	e := cosmostest.NewEnv(t, "Strong")
	s := newStore(t, e, cosmostracking.Options{})
	trackingtest.Run(t, func(*testing.T) tracking.Store { return s })
}
