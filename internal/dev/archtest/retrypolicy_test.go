package archtest

import (
	"strings"
	"testing"
)

// The retry-policy package is pure: it imports no Azure SDK and no other
// package of this module, so the configuration and the pipeline can both
// use it.
func TestRetryPolicyPackageIsPure(t *testing.T) {
	p, ok := list(t)["internal/retrypolicy"]
	if !ok {
		t.Fatal("package internal/retrypolicy not found")
	}
	for _, d := range p.Deps {
		if strings.Contains(d, "azure-sdk-for-go") || strings.Contains(d, "go-amqp") || strings.HasPrefix(d, module+"/") {
			t.Errorf("internal/retrypolicy depends on %s", d)
		}
	}
}
