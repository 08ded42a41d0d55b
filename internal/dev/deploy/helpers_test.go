package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/config"
)

// handlerSettings are every app setting the handler reads (both apps), with
// the default the sample settings file must show; an empty Default means the
// setting has no default (the sample shows a placeholder or leaves it empty).
// It is config.Settings, so it cannot fall behind the config package.
var handlerSettings = config.Settings

// functionNameRE is Utility.FunctionNameValidationRegex of the Functions host.
var functionNameRE = regexp.MustCompile(`(?i)^[a-z][a-z0-9_\-]{0,127}$`)

// bindingExprRE matches %AppSetting% expressions in binding properties.
var bindingExprRE = regexp.MustCompile(`%([^%]+)%`)

// repoRoot returns the module root (the directory holding go.mod).
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("runtime.Caller failed")
	}
	dir := filepath.Dir(file)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod above %s", file)
		}
		dir = parent
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readJSON decodes path strictly into v: one JSON value, nothing after it.
func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(readFile(t, path))))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s is not valid JSON: %v", path, err)
	}
	if dec.More() {
		t.Fatalf("%s has data after its JSON value", path)
	}
}

// hostJSON is the part of host.json the tests check.
type hostJSON struct {
	Version         string `json:"version"`
	FunctionTimeout string `json:"functionTimeout"`
	ExtensionBundle struct {
		ID      string `json:"id"`
		Version string `json:"version"`
	} `json:"extensionBundle"`
	CustomHandler struct {
		Description struct {
			DefaultExecutablePath string    `json:"defaultExecutablePath"`
			WorkingDirectory      *string   `json:"workingDirectory"`
			Arguments             *[]string `json:"arguments"`
		} `json:"description"`
		EnableForwardingHTTPRequest *bool `json:"enableForwardingHttpRequest"`
	} `json:"customHandler"`
	Extensions struct {
		ServiceBus map[string]any `json:"serviceBus"`
	} `json:"extensions"`
}

// binding is one entry of a function.json "bindings" array.
type binding map[string]any

type functionJSON struct {
	Bindings []binding `json:"bindings"`
}

// function is a function folder in the repository.
type function struct {
	Name string
	Path string // functions/<Name>/function.json, absolute
}

// repoFunctions lists the functions of both apps: functions/*/function.json
// (the endpoint app) and apps/resolver/functions/*/function.json.
func repoFunctions(t *testing.T, root string) []function {
	t.Helper()
	return append(appFunctions(t, root), appFunctions(t, filepath.Join(root, "apps", "resolver"))...)
}

// appFunctions lists appRoot/functions/*/function.json, sorted by name.
func appFunctions(t *testing.T, appRoot string) []function {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(appRoot, "functions", "*", "function.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fs []function
	for _, m := range matches {
		fs = append(fs, function{Name: filepath.Base(filepath.Dir(m)), Path: m})
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].Name < fs[j].Name })
	if len(fs) == 0 {
		t.Fatalf("no functions/*/function.json in %s", appRoot)
	}
	return fs
}

// sampleSettings reads local.settings.sample.json.
func sampleSettings(t *testing.T, root string) (isEncrypted bool, values map[string]string) {
	t.Helper()
	var s struct {
		IsEncrypted *bool             `json:"IsEncrypted"`
		Values      map[string]string `json:"Values"`
	}
	readJSON(t, filepath.Join(root, "local.settings.sample.json"), &s)
	if s.IsEncrypted == nil {
		t.Fatal("local.settings.sample.json: IsEncrypted is missing")
	}
	if s.Values == nil {
		t.Fatal("local.settings.sample.json: Values is missing")
	}
	return *s.IsEncrypted, s.Values
}

// parseTimeSpan parses the .NET TimeSpan forms host.json and the settings use
// ([d.]hh:mm[:ss[.fraction]]) with the handler's own parser, refusing the Go
// duration forms the handler also accepts: the host reads host.json itself.
func parseTimeSpan(s string) (time.Duration, error) {
	if !strings.Contains(s, ":") {
		return 0, fmt.Errorf("%q is not a TimeSpan", s)
	}
	return config.ParseDuration(s)
}

func TestParseTimeSpan(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"00:10:00":    10 * time.Minute,
		"7.00:00:00":  7 * 24 * time.Hour,
		"00:00:00.80": 800 * time.Millisecond,
		"01:30":       90 * time.Minute,
	} {
		if got, err := parseTimeSpan(in); err != nil || got != want {
			t.Errorf("parseTimeSpan(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "10", "24:00:00", "00:60:00", "x.00:00:00", "00:00:61"} {
		if _, err := parseTimeSpan(in); err == nil {
			t.Errorf("parseTimeSpan(%q) succeeded; want an error", in)
		}
	}
}
