package archtest

import (
	"strings"
	"testing"
)

// The tracking contract, its in-memory store and its conformance suite
// import no Azure SDK; the Cosmos provider never reaches into the
// composition, the configuration or the pipelines.
func TestTrackingPackageGraph(t *testing.T) {
	pkgs := list(t)
	for _, name := range []string{"internal/tracking", "internal/tracking/trackingtest"} {
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
		"internal/tracking":                {"internal/app", "internal/subscriber", "internal/config", "internal/funchost", "internal/cosmos", "internal/resolver", "internal/resolverapp"},
		"internal/tracking/cosmostracking": {"internal/app", "internal/subscriber", "internal/config", "internal/funchost", "internal/resolver", "internal/resolverapp"},
	}
	checkForbidden(t, pkgs, forbidden)
}
