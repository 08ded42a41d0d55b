package scaffold

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// describeEnv makes an app built on package nimbus print what its
// registrations declare, as one JSON object, and exit without serving
// (package nimbus documents it).
const describeEnv = "NIMBUS_DESCRIBE"

// appSettings learns the settings an app declares; tests replace it.
var appSettings = AppSettings

// describeTimeout bounds building and running the app to learn its
// settings.
const describeTimeout = 5 * time.Minute

// AppSettings builds the main package pkg of the module in dir for this
// machine and runs it with NIMBUS_DESCRIBE set, which makes an app built on
// package nimbus print the app setting names its registrations declare
// (a Container's DatabaseSetting and ContainerSetting) and exit. The app
// runs without the machine's NimBus, Service Bus and Functions settings,
// so an app that does not describe itself stops at once.
func AppSettings(ctx context.Context, dir, pkg string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, describeTimeout)
	defer cancel()
	if _, err := exec.LookPath("go"); err != nil {
		return nil, errors.New("'go' not found on PATH; install Go 1.26 or newer")
	}
	tmp, err := os.MkdirTemp("", "nimbus-func-check-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "app")
	var out bytes.Buffer
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
	build.Dir, build.Stdout, build.Stderr = dir, &out, &out
	if err := build.Run(); err != nil {
		return nil, fmt.Errorf("go build %s: %v: %s", pkg, err, firstLines(out.String(), 3))
	}
	var stdout, stderr bytes.Buffer
	run := exec.CommandContext(ctx, bin)
	run.Dir, run.Stdout, run.Stderr = dir, &stdout, &stderr
	run.Env = append(withoutAppSettings(os.Environ()), describeEnv+"=1")
	run.WaitDelay = time.Second
	if err := run.Run(); err != nil {
		return nil, fmt.Errorf("the app did not describe itself (%v; it needs package nimbus of this version and must call Main or Run): %s", err, firstLines(stderr.String(), 2))
	}
	var d struct {
		Settings *[]string `json:"settings"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &d); err != nil || d.Settings == nil {
		return nil, fmt.Errorf("the app did not describe itself (it printed %q; it needs package nimbus of this version and must call Main or Run)", truncate(strings.TrimSpace(stdout.String()), 120))
	}
	return *d.Settings, nil
}

// withoutAppSettings drops the settings the app or the Functions host read
// from an environment.
func withoutAppSettings(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "nimbus__") || strings.HasPrefix(lk, "servicebusconnection") || strings.HasPrefix(lk, "functions_") || lk == strings.ToLower(describeEnv) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// firstLines returns the first n non-empty lines of s, joined and bounded.
func firstLines(s string, n int) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && len(lines) < n {
			lines = append(lines, l)
		}
	}
	return truncate(strings.Join(lines, " / "), 400)
}
