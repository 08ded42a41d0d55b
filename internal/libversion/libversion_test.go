package libversion

import (
	"runtime/debug"
	"testing"
)

// The version reported is this library's: in a team's app, the version of
// the dependency, not of the team's module.
func TestOf(t *testing.T) {
	const lib = "github.com/nimbus-go/functions-subscriber"
	if ModulePath != lib {
		t.Fatalf("ModulePath %q, want %q", ModulePath, lib)
	}
	team := debug.Module{Path: "example.com/billing", Version: "v1.4.0"}
	cases := []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"a team's app", debug.BuildInfo{Main: team, Deps: []*debug.Module{
			{Path: "github.com/rs/zerolog", Version: "v1.35.1"}, {Path: lib, Version: "v0.1.0"}}}, "v0.1.0"},
		{"a team's app built from its checkout", debug.BuildInfo{Main: debug.Module{Path: "example.com/billing", Version: "(devel)"},
			Deps: []*debug.Module{{Path: lib, Version: "v0.1.0"}}}, "v0.1.0"},
		{"the library replaced by a local directory", debug.BuildInfo{Main: team, Deps: []*debug.Module{
			{Path: lib, Version: "v0.1.0", Replace: &debug.Module{Path: "../functions-subscriber"}}}}, "dev"},
		{"the library replaced by a fork's version", debug.BuildInfo{Main: team, Deps: []*debug.Module{
			{Path: lib, Version: "v0.1.0", Replace: &debug.Module{Path: "example.com/fork", Version: "v0.1.1-fix"}}}}, "v0.1.1-fix"},
		{"the library's own binary, installed at a version", debug.BuildInfo{Main: debug.Module{Path: lib, Version: "v0.1.0"}}, "v0.1.0"},
		{"the library's own binary, built from its checkout", debug.BuildInfo{Main: debug.Module{Path: lib, Version: "(devel)"}}, "dev"},
		{"no library", debug.BuildInfo{Main: team}, "dev"},
	}
	for _, c := range cases {
		if got := Of(&c.bi); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
