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
// 404, and a route without a folder is never invoked.
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
		if _, err := os.Stat(filepath.Join("..", "..", "functions", e.Name(), "function.json")); err == nil {
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
