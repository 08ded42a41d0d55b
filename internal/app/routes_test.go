package app

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// Every function folder the host loads must have a route in the binary, and
// every route a folder: a folder without a route fails every invocation with
// 404, and a route without a folder is never invoked. The HTTP functions
// (an httpTrigger) are the sample's registrations, which the handler's tests
// check against their folders.
func TestEveryFunctionFolderHasARouteAndEveryRouteAFolder(t *testing.T) {
	entries, err := os.ReadDir(filepath.Join("..", "..", "functions"))
	if err != nil {
		t.Fatal(err)
	}
	var folders []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("..", "..", "functions", e.Name(), "function.json"))
		if err == nil && !strings.Contains(string(b), `"httpTrigger"`) {
			folders = append(folders, strings.ToLower(e.Name()))
		}
	}
	ta := newTestApp(t, nil, nil)
	var routes []string
	for _, f := range ta.Functions() {
		routes = append(routes, strings.ToLower(f))
	}
	sort.Strings(folders)
	sort.Strings(routes)
	if strings.Join(folders, ",") != strings.Join(routes, ",") {
		t.Fatalf("function folders %v != routes %v", folders, routes)
	}
	if len(routes) == 0 {
		t.Fatal("no functions")
	}
}
