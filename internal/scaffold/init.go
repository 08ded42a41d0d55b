package scaffold

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// InitOptions are init's arguments.
type InitOptions struct {
	Dir      string // where the files go; inside a Go module
	Endpoint string
	Resolver bool // also the Resolver app's files
	Force    bool // overwrite existing files
}

// Init writes the rendered templates into opts.Dir, leaving every existing
// file alone unless opts.Force, and tells out which it wrote and which it
// skipped.
func Init(opts InitOptions, out io.Writer) error {
	files, err := Render(opts.Endpoint, opts.Resolver)
	if err != nil {
		return err
	}
	if _, err := ModuleRoot(opts.Dir); err != nil {
		return err
	}
	var wrote, skipped int
	for _, f := range files {
		dst := filepath.Join(opts.Dir, filepath.FromSlash(f.Path))
		if _, err := os.Lstat(dst); err == nil && !opts.Force {
			fmt.Fprintf(out, "skipped %s (it exists; --force overwrites it)\n", f.Path)
			skipped++
			continue
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, f.Data, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote   %s\n", f.Path)
		wrote++
	}
	fmt.Fprintf(out, "init: %d files written, %d skipped for endpoint %s\n", wrote, skipped, opts.Endpoint)
	fmt.Fprintf(out, "next: copy local.settings.sample.json to local.settings.json and fill in the namespace and Cosmos DB account; "+
		"'nimbus-func check' validates the host files, 'nimbus-func package' stages dist/\n")
	return nil
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
