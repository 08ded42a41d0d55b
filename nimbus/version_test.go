package nimbus

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/libversion"
)

// An explicit version is reported as it is; otherwise the build
// information's (internal/libversion tests how it is found).
func TestBuildVersion(t *testing.T) {
	if got := buildVersion("1.2.3"); got != "1.2.3" {
		t.Errorf("an explicit version: %q", got)
	}
	if got, want := buildVersion(""), libversion.Get(); got != want {
		t.Errorf("no version: %q, want the build information's %q", got, want)
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
