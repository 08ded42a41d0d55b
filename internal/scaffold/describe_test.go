package scaffold

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// writeModule writes a module of files (slash path → content) and returns
// its directory.
func writeModule(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, content := range files {
		f := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// An app that does not build, or does not describe itself, is no answer:
// the error says why.
func TestDescribeAppThatCannotAnswer(t *testing.T) {
	for _, c := range []struct {
		name, main, want string
	}{
		{"does not build", "package main\n\nfunc main() { undefined() }\n", "go build .: exit status 1: "},
		{"prints nothing", "package main\n\nfunc main() {}\n", `the app did not describe itself (it printed ""`},
		{"fails", "package main\n\nimport \"os\"\n\nfunc main() { os.Stderr.WriteString(\"start-up failed: NimBus__Endpoint is missing\\n\"); os.Exit(2) }\n",
			"the app did not describe itself (exit status 2; it needs package nimbus of this version and must call Main or Run): start-up failed: NimBus__Endpoint is missing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeModule(t, map[string]string{"go.mod": "module example.com/app\n\ngo 1.26\n", "main.go": c.main})
			d, err := DescribeApp(t.Context(), dir, ".")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("description %+v, error %v; want an error with %q", d, err, c.want)
			}
		})
	}
}

// The app is run without the machine's app settings, with only
// NIMBUS_DESCRIBE added.
func TestDescribeAppRunsTheAppWithoutTheMachinesSettings(t *testing.T) {
	t.Setenv("NimBus__Endpoint", "FromTheMachine")
	t.Setenv("FUNCTIONS_CUSTOMHANDLER_PORT", "8080")
	dir := writeModule(t, map[string]string{"go.mod": "module example.com/app\n\ngo 1.26\n", "main.go": `package main

import (
	"encoding/json"
	"os"
	"strings"
)

func main() {
	var names []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "NimBus") || strings.HasPrefix(k, "FUNCTIONS_") || k == "NIMBUS_DESCRIBE" {
			names = append(names, k)
		}
	}
	_ = json.NewEncoder(os.Stdout).Encode(map[string][]string{"settings": names})
}
`})
	d, err := DescribeApp(t.Context(), dir, ".")
	if err != nil || strings.Join(d.Settings, ",") != "NIMBUS_DESCRIBE" {
		t.Errorf("the app saw %q (%v), want only NIMBUS_DESCRIBE", d.Settings, err)
	}
}

// check builds the team's app and accepts the NimBus__ settings its
// HandleTx containers declare; any other unknown one is still a problem.
func TestCheckAcceptsTheSettingsTheAppDeclares(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an app on this checkout")
	}
	dir := moduleOnCheckout(t)
	if code, out, errOut := run(t, "init", "--endpoint", "Invoices", "--dir", dir); code != 0 {
		t.Fatalf("init: %d\n%s%s", code, out, errOut)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(`package main

import (
	"context"

	"github.com/nimbus-go/functions-subscriber/nimbus"
)

func main() {
	app := nimbus.New()
	app.HandleTx("InvoicePaid", nimbus.Container{DatabaseID: "Billing", ContainerID: "invoices", PartitionKeyPath: "/customerId",
		DatabaseSetting: "NimBus__Invoices__DatabaseId", ContainerSetting: "NimBus__Invoices__ContainerId"},
		func(*nimbus.Event) (string, error) { return "c", nil },
		func(context.Context, *nimbus.Event, *nimbus.Tx) (nimbus.Result, error) { return nimbus.Completed(), nil })
	app.Main()
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	editJSON(t, dir, "local.settings.sample.json", values(func(v map[string]any) {
		v["NimBus__Invoices__DatabaseId"] = "Payments"
		v["NimBus__Invoices__ContainerId"] = "invoices"
		v["NimBus__Invoices__Partition"] = "x"
	}))
	const want = "local.settings.sample.json: Values.NimBus__Invoices__Partition is not a setting this version of the library reads, nor one the app's registrations declare\n"
	if code, out, errOut := run(t, "check", "--dir", dir); code != 1 || out != want {
		t.Errorf("check: exit %d\n%s%s\nwant exit 1 and\n%s", code, out, errOut, want)
	}
}

// moduleOnCheckout returns a new module that requires this checkout (a
// replace directive) with every requirement of the checkout's go.mod and
// its go.sum, so that it builds from the module cache alone. The go
// commands run offline for the rest of the test.
func moduleOnCheckout(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "mod", "edit", "-json")
	cmd.Dir = root
	b, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Module  struct{ Path string }
		Go      string
		Require []struct{ Path, Version string }
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	gomod := "module example.com/invoices\n\ngo " + m.Go + "\n\nrequire " + m.Module.Path + " v0.0.0\n\nrequire (\n"
	for _, r := range m.Require {
		gomod += "\t" + r.Path + " " + r.Version + "\n"
	}
	gomod += ")\n\nreplace " + m.Module.Path + " => " + root + "\n"
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOPROXY", "off")
	t.Setenv("GOWORK", "off")
	return writeModule(t, map[string]string{"go.mod": gomod, "go.sum": string(sum)})
}
