package scaffold

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
// skipped. It writes nothing through a symbolic link that leads out of the
// module: when a file it would write, or a directory on its way, is one,
// it refuses before writing anything, naming each.
func Init(opts InitOptions, out io.Writer) error {
	files, err := Render(opts.Endpoint, opts.Resolver)
	if err != nil {
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
