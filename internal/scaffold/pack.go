package scaffold

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// PackageOptions are package's arguments.
type PackageOptions struct {
	Dir      string // the module directory holding host.json and functions/
	Resolver bool   // stage the Resolver app (Dir/apps/resolver) instead
	Dist     string // the staging directory; default Dir/dist
	Pkg      string // the main package, relative to Dir; default "."
	Bin      string // where the binary is built first; default a temporary directory
}

// build builds the main package pkg in dir into out for the Functions Linux
// workers; tests replace it.
var build = GoBuild

// distMarker marks a directory package staged, so that package recreates it
// without ever deleting a directory it did not stage.
const distMarker = ".nimbus-package"

// functionNameRE is the Functions host's rule for function names
// (case-insensitive; "host" is reserved).
var functionNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,127}$`)

// GoBuild builds a static linux/amd64 executable (cgo off, trimmed paths,
// no symbol table), the platform of the Functions Linux workers.
func GoBuild(ctx context.Context, dir, pkg, out string, log io.Writer) error {
	if _, err := exec.LookPath("go"); err != nil {
		return errors.New("'go' not found on PATH; install Go 1.26 or newer")
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=amd64", "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w", pkg, err)
	}
	return nil
}

// Package builds the handler and stages the app root the Functions host
// needs in opts.Dist: host.json, the binary named as host.json's
// defaultExecutablePath (mode 0755), <Name>/function.json for every
// functions/<Name>/ (the host only looks at the app root's immediate
// sub-directories), .funcignore and local.settings.json. It validates the
// app and refuses a non-empty staging directory it did not stage before it
// builds anything. It returns the staging directory.
func Package(ctx context.Context, opts PackageOptions, out io.Writer) (string, error) {
	if _, err := ModuleRoot(opts.Dir); err != nil {
		return "", err
	}
	appName, appRoot := "endpoint", opts.Dir
	if opts.Resolver {
		appName, appRoot = "resolver", filepath.Join(opts.Dir, filepath.FromSlash(resolverDir))
	}
	dist := opts.Dist
	if dist == "" {
		dist = filepath.Join(opts.Dir, "dist")
	}
	dist, err := filepath.Abs(dist)
	if err != nil {
		return "", err
	}

	exe, err := executableName(filepath.Join(appRoot, "host.json"))
	if err != nil {
		return "", err
	}
	functions, err := appFunctions(appRoot, exe)
	if err != nil {
		return "", err
	}
	if err := checkDist(dist); err != nil {
		return "", err
	}

	bin := opts.Bin
	if bin == "" {
		tmp, err := os.MkdirTemp("", "nimbus-func-build-")
		if err != nil {
			return "", err
		}
		defer os.RemoveAll(tmp)
		bin = tmp
	}
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return "", err
	}
	built := filepath.Join(bin, exe)
	pkg := opts.Pkg
	if pkg == "" {
		pkg = "."
	}
	if err := build(ctx, opts.Dir, pkg, built, out); err != nil {
		return "", err
	}
	fmt.Fprintf(out, "package: built %s (linux/amd64, static)\n", built)

	if err := os.RemoveAll(dist); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dist, 0o755); err != nil {
		return "", err
	}
	steps := []copyStep{
		{filepath.Join(appRoot, "host.json"), "host.json", 0o644},
		{built, exe, 0o755},
	}
	for _, name := range functions {
		steps = append(steps, copyStep{filepath.Join(appRoot, "functions", name, "function.json"), filepath.Join(name, "function.json"), 0o644})
	}
	for _, s := range steps {
		if err := copyFile(s.src, filepath.Join(dist, s.dst), s.mode); err != nil {
			return "", err
		}
	}
	ignore, _ := templateFS.ReadFile(templateRoot + "/" + funcIgnore)
	note, settings, err := localSettings(appRoot, opts.Resolver)
	if err != nil {
		return "", err
	}
	for name, data := range map[string][]byte{
		distMarker:            []byte("staged by nimbus-func package; this directory is recreated on every run\n"),
		funcIgnore:            ignore,
		"local.settings.json": settings,
	} {
		if err := os.WriteFile(filepath.Join(dist, name), data, 0o644); err != nil {
			return "", err
		}
	}

	fmt.Fprintf(out, "package: staged the %s app in %s\n", appName, dist)
	if err := listFiles(dist, out); err != nil {
		return "", err
	}
	fi, err := os.Stat(filepath.Join(dist, exe))
	if err != nil {
		return "", err
	}
	fmt.Fprintf(out, "package: executable: %s (%d bytes, mode 0755)\n", exe, fi.Size())
	fmt.Fprintf(out, "package: functions: %s\n", strings.Join(functions, " "))
	fmt.Fprintf(out, "package: %s\n", note)
	return dist, nil
}

// executableName reads customHandler.description.defaultExecutablePath:
// the file name the host starts, which must sit in the app root.
func executableName(hostJSON string) (string, error) {
	b, err := os.ReadFile(hostJSON)
	if err != nil {
		return "", err
	}
	var h struct {
		CustomHandler struct {
			Description struct {
				DefaultExecutablePath string `json:"defaultExecutablePath"`
			} `json:"description"`
		} `json:"customHandler"`
	}
	if err := decodeHostJSON(b, &h); err != nil {
		return "", fmt.Errorf("%s: %w", hostJSON, err)
	}
	exe := h.CustomHandler.Description.DefaultExecutablePath
	if exe == "" {
		return "", fmt.Errorf("%s has no customHandler.description.defaultExecutablePath", hostJSON)
	}
	if !plainFileRE.MatchString(exe) {
		return "", fmt.Errorf("%s: defaultExecutablePath %q must be a plain file name in the app root", hostJSON, truncate(exe, 80))
	}
	return exe, nil
}

// appFunctions returns the function folders of an app root, sorted, after
// checking each has a function.json and a name the host accepts.
func appFunctions(appRoot, exe string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(appRoot, "functions"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		name := e.Name()
		if _, err := os.Stat(filepath.Join(appRoot, "functions", name, "function.json")); err != nil {
			return nil, fmt.Errorf("functions/%s/function.json is missing", truncate(name, 80))
		}
		switch {
		case !functionNameRE.MatchString(name):
			return nil, fmt.Errorf("function name %q is not valid for the Functions host", truncate(name, 80))
		case strings.EqualFold(name, "host"):
			return nil, errors.New("'host' is a reserved function name")
		case strings.EqualFold(name, exe):
			return nil, fmt.Errorf("function folder %q would collide with the executable %q", name, exe)
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no functions/*/function.json found in %s", appRoot)
	}
	sort.Strings(names)
	return names, nil
}

// checkDist refuses a staging directory package may not recreate.
func checkDist(dist string) error {
	fi, err := os.Stat(dist)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s exists and is not a directory", dist)
	}
	entries, err := os.ReadDir(dist)
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dist, distMarker)); err != nil {
		return fmt.Errorf("%s is not empty and was not staged by nimbus-func package; refusing to delete it", dist)
	}
	return nil
}

// localSettings returns the local.settings.json to stage for `func start`:
// the app root's own (git-ignored; .funcignore keeps it out of the
// published package) or, when it has none, a minimal one that tells Core
// Tools the worker runtime.
func localSettings(appRoot string, resolver bool) (note string, data []byte, err error) {
	data, err = os.ReadFile(filepath.Join(appRoot, "local.settings.json"))
	if err == nil {
		return "local.settings.json copied from " + appRoot, data, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", nil, err
	}
	values := map[string]string{"FUNCTIONS_WORKER_RUNTIME": "custom"}
	if resolver {
		values["NimBus__App"] = "Resolver"
	}
	data, err = json.MarshalIndent(map[string]any{"IsEncrypted": false, "Values": values}, "", "  ")
	if err != nil {
		return "", nil, err
	}
	return "minimal local.settings.json written (copy local.settings.sample.json to " +
		filepath.Join(appRoot, "local.settings.json") + " to run locally)", append(data, '\n'), nil
}

// copyStep copies src to dst (relative to the staging directory) with mode.
type copyStep struct {
	src, dst string
	mode     os.FileMode
}

func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		return err
	}
	return os.Chmod(dst, mode) // WriteFile's mode is filtered by the umask
}

// listFiles prints the staged files but the marker, sorted.
func listFiles(dist string, out io.Writer) error {
	var files []string
	err := filepath.WalkDir(dist, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == distMarker {
			return err
		}
		rel, err := filepath.Rel(dist, p)
		files = append(files, filepath.ToSlash(rel))
		return err
	})
	sort.Strings(files)
	for _, f := range files {
		fmt.Fprintf(out, "  %s\n", f)
	}
	return err
}

// PublishOptions are publish's arguments.
type PublishOptions struct {
	PackageOptions
	App  string   // the function app in Azure
	Args []string // more `func azure functionapp publish` options
}

// ErrNoFunc is returned when Core Tools are not on PATH.
var ErrNoFunc = errors.New("'func' (Azure Functions Core Tools v4) not found on PATH")

// noFuncHint tells how to install Core Tools.
const noFuncHint = `Install it, for example with Node.js available:  npm install -g azure-functions-core-tools@4
Other installers: https://learn.microsoft.com/azure/azure-functions/functions-run-local
`

// Publish packages the app and runs `func azure functionapp publish APP`
// in the staging directory. It publishes no app settings.
func Publish(ctx context.Context, opts PublishOptions, out io.Writer) error {
	if opts.App == "" || strings.HasPrefix(opts.App, "-") {
		return errors.New("publish needs the function app's name")
	}
	funcPath, err := exec.LookPath("func")
	if err != nil {
		return ErrNoFunc
	}
	dist, err := Package(ctx, opts.PackageOptions, out)
	if err != nil {
		return err
	}
	args := append([]string{"azure", "functionapp", "publish", opts.App}, opts.Args...)
	fmt.Fprintf(out, "publish: func %s\n", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, funcPath, args...)
	cmd.Dir = dist
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("func azure functionapp publish: %w", err)
	}
	return nil
}
