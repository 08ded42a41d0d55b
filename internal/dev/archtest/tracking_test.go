package archtest

import "testing"

// The tracking contract, its in-memory store and its conformance suite
// import no Azure SDK; the Cosmos provider never reaches into the
// composition, the configuration or the pipelines.
func TestTrackingPackageGraph(t *testing.T) {
	pkgs := list(t)
	noAzureSDK(t, pkgs, "internal/tracking", "internal/tracking/trackingtest")
	forbidden := map[string][]string{
		"internal/tracking":                {"internal/app", "internal/subscriber", "internal/config", "internal/funchost", "internal/cosmos", "internal/resolver", "internal/resolverapp"},
		"internal/tracking/cosmostracking": {"internal/app", "internal/subscriber", "internal/config", "internal/funchost", "internal/resolver", "internal/resolverapp"},
	}
	checkForbidden(t, pkgs, forbidden)
}
