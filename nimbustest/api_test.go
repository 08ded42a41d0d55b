package nimbustest

import (
	"flag"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/dev/apilist"
)

var update = flag.Bool("update", false, "rewrite testdata/api.txt from the package's exported API")

// TestAPI compares the exported API with testdata/api.txt, so that it
// changes only on purpose: after a deliberate change, run
//
//	go test ./nimbustest -run TestAPI -update
//
// and list the change in CHANGELOG.md.
func TestAPI(t *testing.T) {
	apilist.Golden(t, apilist.TypeCheck(t, nil), "testdata/api.txt", *update, "go test ./nimbustest -run TestAPI -update")
}

// The public API exposes no internal type: a test that uses the package
// can name every type it gets.
func TestExportedAPIMentionsNoInternalType(t *testing.T) {
	for _, m := range apilist.InternalMentions(apilist.TypeCheck(t, nil)) {
		t.Errorf("the public API leaks an internal type: %s", m)
	}
}
