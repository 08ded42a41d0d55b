package archtest

import (
	"path"
	"strings"
	"testing"
)

// The sample endpoint is built only on the public package: none of its
// non-test files imports a package under internal/, as a team's own
// endpoint module could not.
func TestSampleEndpointUsesOnlyThePublicPackage(t *testing.T) {
	p, ok := list(t)["handler"]
	if !ok {
		t.Fatal("package handler not found")
	}
	if len(p.Imports) == 0 {
		t.Fatal("package handler lists no imports")
	}
	for _, imp := range p.Imports {
		if strings.HasPrefix(imp, module+"/") && imp != module+"/nimbus" {
			t.Errorf("handler imports %s; it may import only %s/nimbus of this module", imp, module)
		}
	}
}

// Nothing inside the module builds on the public package except the sample
// endpoint and the public test package nimbustest: the internal packages
// stay independent of it, so it can change shape without touching them.
func TestOnlyTheSampleImportsThePublicPackage(t *testing.T) {
	for name, p := range list(t) {
		if name == "handler" || name == "nimbus" || name == "nimbustest" {
			continue
		}
		for _, d := range p.Deps {
			if d == module+"/nimbus" {
				t.Errorf("%s depends on the public package nimbus", name)
			}
		}
	}
}

// The test package nimbustest is imported by tests only: no package's
// non-test files depend on it (nimbus and the sample endpoint included),
// so no production binary links it.
func TestOnlyTestsImportNimbustest(t *testing.T) {
	pkgs := list(t)
	if _, ok := pkgs["nimbustest"]; !ok {
		t.Fatal("package nimbustest not found")
	}
	for name, p := range pkgs {
		for _, d := range p.Deps {
			if d == module+"/nimbustest" {
				t.Errorf("%s depends on nimbustest; import it from _test.go files only", name)
			}
		}
	}
}

// internal/dev holds what only tests and local tooling use: outside it,
// only scripts/ (the demo, the stand-ins' launcher, the load run) and the
// test-support packages beside the packages they test (nimbustest,
// cosmostest, the conformance suites: a name that ends in "test") import it
// from non-test files, so no endpoint or Resolver binary links it.
func TestOnlyToolingDependsOnDev(t *testing.T) {
	pkgs := list(t)
	for name, p := range pkgs {
		if strings.HasPrefix(name, "internal/dev/") || strings.HasPrefix(name, "scripts/") || strings.HasSuffix(path.Base(name), "test") {
			continue
		}
		for _, d := range p.Deps {
			if strings.HasPrefix(d, module+"/internal/dev/") {
				t.Errorf("%s depends on %s, which only tests and local tooling may use", name, strings.TrimPrefix(d, module+"/"))
			}
		}
	}
}
