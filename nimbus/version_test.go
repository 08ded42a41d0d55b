package nimbus

import (
	"errors"
	"fmt"
	"runtime/debug"
	"testing"
)

// The version reported is this library's: in a team's app, the version of
// the dependency, not of the team's module.
func TestLibraryVersion(t *testing.T) {
	const lib = "github.com/nimbus-go/functions-subscriber"
	if modulePath != lib {
		t.Fatalf("modulePath %q, want %q", modulePath, lib)
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
		if got := libraryVersion(&c.bi); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	if got := buildVersion("1.2.3"); got != "1.2.3" {
		t.Errorf("an explicit version: %q", got)
	}
}

// Main's exit codes: 0 clean, 2 for settings, 1 for anything else.
func TestExitCode(t *testing.T) {
	settings := &SettingsError{Problems: []string{"NimBus__Endpoint is required"}}
	for err, want := range map[error]int{
		nil:                                  0,
		settings:                             2,
		fmt.Errorf("start-up: %w", settings): 2,
		errors.New("nimbus: server stopped"): 1,
	} {
		if got := exitCode(err); got != want {
			t.Errorf("exitCode(%v) = %d, want %d", err, got, want)
		}
	}
	if got, want := settings.Error(), "invalid configuration:\n  - NimBus__Endpoint is required"; got != want {
		t.Errorf("SettingsError text %q, want %q", got, want)
	}
}
