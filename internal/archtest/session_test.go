package archtest

import (
	"strings"
	"testing"
)

// The session-state port, its in-memory store and its conformance suite
// import no Azure SDK; the Cosmos store never reaches into the composition,
// the configuration or the pipelines.
func TestSessionPackageGraph(t *testing.T) {
	pkgs := list(t)
	for _, name := range []string{"internal/session", "internal/session/sessiontest"} {
		p, ok := pkgs[name]
		if !ok {
			t.Fatalf("package %s not found", name)
		}
		for _, d := range p.Deps {
			if strings.Contains(d, "azure-sdk-for-go") || strings.Contains(d, "go-amqp") {
				t.Errorf("%s depends on %s", name, d)
			}
		}
	}
	forbidden := map[string][]string{
		"internal/session":               {"internal/app", "internal/subscriber", "internal/config", "internal/funchost", "internal/cosmos", "internal/servicebus", "internal/resolver", "internal/resolverapp", "internal/tracking"},
		"internal/session/cosmossession": {"internal/app", "internal/subscriber", "internal/config", "internal/funchost", "internal/servicebus", "internal/resolver", "internal/resolverapp", "internal/tracking"},
	}
	checkForbidden(t, pkgs, forbidden)
}
