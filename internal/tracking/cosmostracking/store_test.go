package cosmostracking_test

import (
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmostest"
	"github.com/nimbus-go/functions-subscriber/internal/tracking"
	"github.com/nimbus-go/functions-subscriber/internal/tracking/cosmostracking"
	"github.com/nimbus-go/functions-subscriber/internal/tracking/trackingtest"
)

func newStore(t testing.TB, e *cosmostest.Env, o cosmostracking.Options) *cosmostracking.Store {
	t.Helper()
	s, err := cosmostracking.New(e.Account, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	e := cosmostest.NewEnv(t, "Strong")
	s := newStore(t, e, cosmostracking.Options{})
	trackingtest.Run(t, func(*testing.T) tracking.Store { return s })
}
