package archtest

import "testing"

// The session-state port, its in-memory store and its conformance suite
// import no Azure SDK; the Cosmos store never reaches into the composition,
// the configuration or the pipelines.
func TestSessionPackageGraph(t *testing.T) {
	pkgs := list(t)
	noAzureSDK(t, pkgs, "internal/session", "internal/session/sessiontest")
	forbidden := map[string][]string{
		"internal/session":               {"internal/app", "internal/subscriber", "internal/config", "internal/funchost", "internal/cosmos", "internal/servicebus", "internal/resolver", "internal/resolverapp", "internal/tracking"},
		"internal/session/cosmossession": {"internal/app", "internal/subscriber", "internal/config", "internal/funchost", "internal/servicebus", "internal/resolver", "internal/resolverapp", "internal/tracking"},
	}
	checkForbidden(t, pkgs, forbidden)
}
