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

// describeApp learns what an app registers; tests replace it.
var describeApp = DescribeApp

// describeTimeout bounds building and running the app to describe it.
const describeTimeout = 5 * time.Minute

// AppDescription is what an app built on package nimbus registers, as it
// describes itself.
type AppDescription struct {
	// Settings are the app setting names its registrations read besides
	// the library's (a Container's DatabaseSetting and ContainerSetting).
	Settings []string
	// Transactional are the event types of its transactional handlers,
	// which need the inbox.
	Transactional []string
	// HTTPFunctions are the HTTP functions it registers.
	HTTPFunctions []DescribedHTTP
}

// DescribedHTTP is an HTTP function an app registers: its function name,
// route and methods (none: any).
type DescribedHTTP struct {
	Name    string   `json:"name"`
	Route   string   `json:"route"`
	Methods []string `json:"methods"`
}

// DescribeApp builds the main package pkg of the module in dir for this
// machine and runs it with NIMBUS_DESCRIBE set, which makes an app built on
// package nimbus print what its registrations declare and exit. The app
// runs without the machine's NimBus, Service Bus and Functions settings,
// so an app that does not describe itself stops at once.
func DescribeApp(ctx context.Context, dir, pkg string) (AppDescription, error) {
	ctx, cancel := context.WithTimeout(ctx, describeTimeout)
	defer cancel()
	if _, err := exec.LookPath("go"); err != nil {
		return AppDescription{}, errors.New("'go' not found on PATH; install Go 1.26 or newer")
	}
	tmp, err := os.MkdirTemp("", "nimbus-func-check-")
	if err != nil {
		return AppDescription{}, err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "app")
	var out bytes.Buffer
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
	build.Dir, build.Stdout, build.Stderr = dir, &out, &out
	if err := build.Run(); err != nil {
		return AppDescription{}, fmt.Errorf("go build %s: %v: %s", pkg, err, firstLines(out.String(), 3))
	}
	var stdout, stderr bytes.Buffer
	run := exec.CommandContext(ctx, bin)
	run.Dir, run.Stdout, run.Stderr = dir, &stdout, &stderr
	run.Env = append(withoutAppSettings(os.Environ()), describeEnv+"=1")
	run.WaitDelay = time.Second
	if err := run.Run(); err != nil {
		return AppDescription{}, fmt.Errorf("the app did not describe itself (%v; it needs package nimbus of this version and must call Main or Run): %s", err, firstLines(stderr.String(), 2))
	}
	var d struct {
		Settings      *[]string       `json:"settings"`
		Transactional []string        `json:"transactionalEventTypes"`
		HTTP          []DescribedHTTP `json:"httpFunctions"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &d); err != nil || d.Settings == nil {
		return AppDescription{}, fmt.Errorf("the app did not describe itself (it printed %q; it needs package nimbus of this version and must call Main or Run)", truncate(strings.TrimSpace(stdout.String()), 120))
	}
	return AppDescription{Settings: *d.Settings, Transactional: d.Transactional, HTTPFunctions: d.HTTP}, nil
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
