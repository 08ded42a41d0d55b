package config

import (
	"strings"
	"testing"
)

// An endpoint app starts only with a name its deployment takes: the
// endpoint's topic, subscription and the rule from-<endpoint> (at most 50
// characters) are named after it, and NimBus's own names are reserved in
// any case. The Resolver app does not read the setting.
func TestEndpointNameIsOneTheDeploymentTakes(t *testing.T) {
	for name, want := range map[string]string{
		"BillingEndpoint":       "",
		"a":                     "",
		"Billing.v2_eu-west":    "",
		strings.Repeat("a", 45): "",
		strings.Repeat("a", 46): "not a name the deployment takes",
		"Resolver":              "is reserved: NimBus's topology names Resolver",
		"deferred":              "is reserved: NimBus's topology names Deferred",
		"DEFERREDPROCESSOR":     "is reserved",
		"Continuation":          "is reserved",
		"retry":                 "is reserved",
		"ResolverEndpoint":      "",
		"9Billing":              "not a name the deployment takes",
		"Billing Endpoint":      "not a name the deployment takes",
		"Billing/Eu":            "not a name the deployment takes",
		"Facturación":           "not a name the deployment takes",
		strings.Repeat("é", 20): "not a name the deployment takes",
	} {
		err := CheckEndpointName(name)
		if want == "" {
			if err != nil {
				t.Errorf("%q refused: %v", name, err)
			}
		} else if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error saying %q", name, err, want)
		}
		_, lerr := load(t, map[string]string{KeyEndpoint: name})
		if want == "" {
			if lerr != nil {
				t.Errorf("start-up with %q: %v", name, lerr)
			}
			continue
		}
		ps := problems(t, lerr)
		if len(ps) != 1 || !strings.HasPrefix(ps[0], KeyEndpoint+"=") || !strings.Contains(ps[0], want) {
			t.Errorf("start-up with %q: problems %q, want one naming %s and saying %q", name, ps, KeyEndpoint, want)
		}
	}
}
