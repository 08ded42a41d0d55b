package archtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

const module = "github.com/nimbus-go/functions-subscriber"

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// list returns the module's packages by path below the module, from one
// `go list` per test binary (each test only reads the map).
func list(t *testing.T) map[string]pkg {
	t.Helper()
	pkgs, err := listOnce()
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

var listOnce = sync.OnceValues(func() (map[string]pkg, error) {
	out, err := exec.Command("go", "list", "-json", module+"/...").Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %w", err)
		}
		pkgs[strings.TrimPrefix(p.ImportPath, module+"/")] = p
	}
	return pkgs, nil
})

// noAzureSDK fails t for each of the named packages that depends on an
// Azure SDK or AMQP package, directly or not.
func noAzureSDK(t *testing.T, pkgs map[string]pkg, names ...string) {
	t.Helper()
	for _, name := range names {
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
}

func TestNoAzureSDKBelowTheAdapters(t *testing.T) {
	pkgs := list(t)
	noAzureSDK(t, pkgs, "internal/subscriber", "internal/resolver", "internal/resolverapp", "internal/inbox", "internal/message", "internal/funchost", "internal/config", "internal/tracking", "internal/txn", "internal/outbox")
}

func TestDependenciesPointOneWay(t *testing.T) {
	pkgs := list(t)
	// forbidden[a] lists packages a must not depend on, directly or not.
	forbidden := map[string][]string{
		"internal/cosmos":     {"internal/app", "internal/subscriber", "internal/config", "internal/funchost"},
		"internal/servicebus": {"internal/app", "internal/subscriber", "internal/config", "internal/funchost"},
		// The Deferred adapter implements the pipeline's port, and reaches
		// no further.
		"internal/servicebus/deferred": {"internal/app", "internal/config", "internal/funchost"},
		"internal/inbox/cosmosstore":   {"internal/app", "internal/subscriber", "internal/config"},
		"internal/subscriber":          {"internal/app", "internal/config", "internal/funchost"},
		"internal/funchost":            {"internal/app", "internal/subscriber", "internal/message"},
		"internal/message":             {"internal/app", "internal/subscriber", "internal/funchost"},
		"internal/resolver":            {"internal/app", "internal/subscriber", "internal/config", "internal/funchost", "internal/servicebus", "internal/cosmos", "internal/tracking", "internal/resolverapp"},
		"internal/resolverapp":         {"internal/app", "internal/subscriber", "internal/config", "internal/funchost", "internal/servicebus", "internal/cosmos"},
		// The sweep runs on the txn and resolver ports only.
		"internal/outbox": {"internal/app", "internal/subscriber", "internal/config", "internal/funchost", "internal/servicebus", "internal/cosmos", "internal/txn/cosmostxn"},
	}
	checkForbidden(t, pkgs, forbidden)
	for name, p := range pkgs {
		for _, d := range p.Deps {
			if d == module+"/handler" {
				t.Errorf("%s imports the handler command", name)
			}
		}
	}
}

// The endpoint's pipeline compiles neither the tracking store nor the
// Resolver app's handling: it reaches the Resolver only through the
// Publisher port of package resolver.
func TestThePipelineCompilesNoResolverApp(t *testing.T) {
	pkgs := list(t)
	p, ok := pkgs["internal/subscriber"]
	if !ok {
		t.Fatal("package internal/subscriber not found")
	}
	for _, d := range p.Deps {
		name := strings.TrimPrefix(d, module+"/")
		if name == "internal/tracking" || strings.HasPrefix(name, "internal/tracking/") || name == "internal/resolverapp" {
			t.Errorf("internal/subscriber depends on %s", name)
		}
	}
}

// checkForbidden fails t for every package of forbidden that is missing or
// depends, directly or not, on one of the packages listed for it.
func checkForbidden(t *testing.T, pkgs map[string]pkg, forbidden map[string][]string) {
	t.Helper()
	for name, bad := range forbidden {
		p, ok := pkgs[name]
		if !ok {
			t.Errorf("package %s not found", name)
			continue
		}
		for _, d := range p.Deps {
			for _, b := range bad {
				if d == module+"/"+b {
					t.Errorf("%s depends on %s", name, b)
				}
			}
		}
	}
}

// Only the entry point turns exporting on: the exporters read the OTEL_*
// environment, and the environment is read only there.
func TestOnlyTheEntryPointSetsUpExport(t *testing.T) {
	pkgs := list(t)
	for name, p := range pkgs {
		if name == "nimbus" || strings.HasPrefix(name, "internal/telemetry/export") {
			continue
		}
		for _, imp := range p.Imports {
			if imp == module+"/internal/telemetry/export" {
				t.Errorf("%s imports internal/telemetry/export; only nimbus may", name)
			}
		}
	}
}
