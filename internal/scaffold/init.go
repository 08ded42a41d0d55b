package scaffold

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// InitOptions are init's arguments.
type InitOptions struct {
	Dir      string // where the files go; inside a Go module
	Endpoint string
	Resolver bool // also the Resolver app's files
	Force    bool // overwrite existing files
	// HTTP are the names of HTTP functions to scaffold: each gets its
	// function.json (POST at the route of its name in lower case) and a
	// registration in main.go.
	HTTP []string
}

// Init writes the rendered templates into opts.Dir, leaving every existing
// file alone unless opts.Force, and tells out which it wrote and which it
// skipped. It writes nothing through a symbolic link that leads out of the
// module: when a file it would write, or a directory on its way, is one,
// it refuses before writing anything, naming each.
func Init(opts InitOptions, out io.Writer) error {
	files, err := Render(opts.Endpoint, opts.Resolver)
	if err != nil {
		return err
	}
	if files, err = withHTTPFunctions(files, opts.HTTP); err != nil {
		return err
	}
	root, err := ModuleRoot(opts.Dir)
	if err != nil {
		return err
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return err
	}
	type write struct {
		f   File
		dst string
	}
	var writes []write
	var skipped int
	var outside []string
	for _, f := range files {
		dst := filepath.Join(dir, filepath.FromSlash(f.Path))
		if _, err := os.Lstat(dst); err == nil && !opts.Force {
			fmt.Fprintf(out, "skipped %s (it exists; --force overwrites it)\n", f.Path)
			skipped++
			continue
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if problem, err := leavesModule(root, dst); err != nil {
			return err
		} else if problem != "" && !slices.Contains(outside, problem) {
			outside = append(outside, problem)
		}
		writes = append(writes, write{f, dst})
	}
	if len(outside) > 0 {
		return fmt.Errorf("nothing written: init writes nothing through a symbolic link that leads out of the module %s:\n  %s", root, strings.Join(outside, "\n  "))
	}
	for _, w := range writes {
		if err := os.MkdirAll(filepath.Dir(w.dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(w.dst, w.f.Data, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote   %s\n", w.f.Path)
	}
	fmt.Fprintf(out, "init: %d files written, %d skipped for endpoint %s\n", len(writes), skipped, opts.Endpoint)
	fmt.Fprintf(out, "next: 'go get .' adds what main.go imports; copy local.settings.sample.json to local.settings.json and fill in "+
		"the namespace and Cosmos DB account; 'go tool nimbus-func check' validates the host files, "+
		"'go tool nimbus-func invoke' sends an event to the app running locally, 'go tool nimbus-func package' stages dist/\n")
	return nil
}

// leavesModule walks the path of dst below the module root and returns a
// problem naming the first symbolic link on it (dst included) that leads
// out of the module or nowhere; "" when there is none. The parts of dst
// that do not exist yet are created as plain directories and files.
func leavesModule(root, dst string) (string, error) {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(root, dst)
	if err != nil || !filepath.IsLocal(rel) {
		return dst + " is outside the module", nil
	}
	p := root
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		p = filepath.Join(p, part)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			continue
		}
		target, err := filepath.EvalSymlinks(p)
		if err != nil {
			link, _ := os.Readlink(p)
			return fmt.Sprintf("%s is a symbolic link to %s, which does not resolve", p, link), nil
		}
		if in, err := filepath.Rel(realRoot, target); err != nil || !filepath.IsLocal(in) {
			return fmt.Sprintf("%s is a symbolic link to %s", p, target), nil
		}
	}
	return "", nil
}

// ModuleRoot returns the directory holding the go.mod of the module dir is
// in, or an error outside a module.
func ModuleRoot(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory", abs)
	}
	for d := abs; ; {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("%s is not inside a Go module (no go.mod in it or above it): run 'go mod init' first", abs)
		}
		d = parent
	}
}

// httpNameRE is the rule for an HTTP function's name: a function name the
// Functions host accepts.
var httpNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}$`)

// withHTTPFunctions adds to the rendered files, for each name, the
// function.json of an HTTP function (an httpTrigger with authLevel
// function and an http output, which the host forwards as the raw request
// at /api/<route>) and its registration in main.go.
func withHTTPFunctions(files []File, names []string) ([]File, error) {
	if len(names) == 0 {
		return files, nil
	}
	library := functionNames(files, "")
	var regs strings.Builder
	seen := map[string]bool{}
	for _, name := range names {
		own := slices.IndexFunc(library, func(l string) bool { return strings.EqualFold(l, name) })
		switch {
		case !httpNameRE.MatchString(name):
			return nil, fmt.Errorf("--http %q: an HTTP function's name is a letter, then up to 63 letters, digits, '_' or '-'", truncate(name, 80))
		case own >= 0:
			return nil, fmt.Errorf("--http %s: the app's own %s function has this name", name, library[own])
		case seen[strings.ToLower(name)]:
			return nil, fmt.Errorf("--http %s is given twice", name)
		}
		seen[strings.ToLower(name)] = true
		route := strings.ToLower(name)
		files = append(files, File{Path: "functions/" + name + "/function.json", Data: []byte(fmt.Sprintf(httpFunctionJSON, route))})
		fmt.Fprintf(&regs, httpRegistration, route, name, name, route)
	}
	for i, f := range files {
		if f.Path != mainFile {
			continue
		}
		text := string(f.Data)
		text = strings.Replace(text, "import (\n\t\"context\"\n", "import (\n\t\"context\"\n\t\"net/http\"\n", 1)
		at := strings.Index(text, "\t// Reads the settings")
		if at < 0 || !strings.Contains(text, "\"net/http\"") {
			panic("scaffold: main.go template has no place for HTTP functions")
		}
		files[i].Data = []byte(text[:at] + regs.String() + text[at:])
	}
	return files, nil
}

// httpFunctionJSON is an HTTP function's function.json; %s is its route.
const httpFunctionJSON = `{
  "bindings": [
    {
      "type": "httpTrigger",
      "direction": "in",
      "name": "req",
      "authLevel": "function",
      "methods": [
        "post"
      ],
      "route": "%s"
    },
    {
      "type": "http",
      "direction": "out",
      "name": "$return"
    }
  ]
}
`

// httpRegistration registers an HTTP function in main.go: route, name,
// name, route.
const httpRegistration = `	// The HTTP function the Functions host forwards POST /api/%s to, as it
	// came (functions/%s/function.json). Start a workflow here with
	// app.Publish(r.Context(), ...) or a front door's Begin and Commit.
	app.HandleHTTP(nimbus.HTTPFunction{Name: %q, Route: %q, Methods: []string{http.MethodPost},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusAccepted)
		})})
`
