// Package scaffold is the logic of the nimbus-func command: the files a
// subscriber endpoint's module needs (main.go, host.json, the function
// folders, the sample local settings, .funcignore, the Bicep templates and,
// optionally, the Resolver app's host files), the checks of those files, and
// the packaging and publishing of the app.
//
// The embedded templates are the one source of truth for these files. The
// repository's own host.json, functions/, apps/resolver/,
// local.settings.sample.json and infra/bicep/ are their rendering for the
// sample endpoint (the NimBus__Endpoint of local.settings.sample.json);
// after changing a template, regenerate them with `go generate
// ./internal/scaffold`, which runs
//
//	go test ./internal/scaffold -run TestRepositoryFilesAreTheTemplates -update
package scaffold

//go:generate go test -run TestRepositoryFilesAreTheTemplates -count=1 . -update

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/nimbus-go/functions-subscriber/internal/config"
)

//go:embed all:templates
var templateFS embed.FS

const (
	templateRoot = "templates"
	// endpointPlaceholder stands for the endpoint name in the templates.
	endpointPlaceholder = "{{endpoint}}"
	// tmplSuffix marks a template whose output ends differently (main.go.tmpl
	// becomes main.go; a .go file here would be compiled as a package).
	tmplSuffix = ".tmpl"
	// resolverDir holds the Resolver app's host files; init writes them only
	// when asked to.
	resolverDir = "apps/resolver"
	// mainFile is the sample handler; it is the team's own code, so the
	// repository (whose main package is handler/) has no rendering of it.
	mainFile = "main.go"
	// funcIgnore keeps local files out of the published package.
	funcIgnore = ".funcignore"
	// gitIgnore keeps local settings and build output out of the team's
	// repository (the repository's own .gitignore is its own).
	gitIgnore = ".gitignore"
)

// The lines of a template between a line {{sample}} and a line
// {{end sample}} are the repository's sample endpoint's alone (its ledger:
// settings, Bicep); those between {{team}} and {{end team}} are what a
// team's module gets instead. A template that is all sample is not written
// into a team's module.
const (
	sampleBegin = "{{sample}}"
	sampleEnd   = "{{end sample}}"
	teamBegin   = "{{team}}"
	teamEnd     = "{{end team}}"
)

// File is one rendered template: its slash-separated path relative to the
// module directory, and its content.
type File struct {
	Path string
	Data []byte
}

// CheckEndpointName reports whether name can be an endpoint name: the rule
// the app applies at start-up (config.CheckEndpointName), which also keeps
// it safe to write into JSON and Bicep strings as it is.
func CheckEndpointName(name string) error {
	return config.CheckEndpointName(name)
}

// Render returns every file init writes for the endpoint, sorted by path:
// the Resolver app's files only with resolver.
func Render(endpoint string, resolver bool) ([]File, error) {
	return render(endpoint, resolver, false)
}

// render renders the templates for a team's module, or with sample for
// the repository's sample endpoint.
func render(endpoint string, resolver, sample bool) ([]File, error) {
	if err := CheckEndpointName(endpoint); err != nil {
		return nil, err
	}
	var files []File
	err := fs.WalkDir(templateFS, templateRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel := strings.TrimPrefix(p, templateRoot+"/")
		if !resolver && inDir(rel, resolverDir) {
			return nil
		}
		b, err := templateFS.ReadFile(p)
		if err != nil {
			return err
		}
		text, err := variant(string(b), sample)
		if err != nil {
			return fmt.Errorf("template %s: %w", rel, err)
		}
		if text == "" {
			return nil
		}
		files = append(files, File{
			Path: strings.TrimSuffix(rel, tmplSuffix),
			Data: []byte(strings.ReplaceAll(text, endpointPlaceholder, endpoint)),
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files, nil
}

// variant keeps the sample's blocks of a template (with sample) or the
// team's (without), dropping the marker lines.
func variant(text string, sample bool) (string, error) {
	var b strings.Builder
	block := ""
	for line := range strings.SplitAfterSeq(text, "\n") {
		switch m := strings.TrimSpace(line); {
		case m == sampleBegin || m == teamBegin:
			if block != "" {
				return "", fmt.Errorf("%s inside %s", m, block)
			}
			block = m
		case m == sampleEnd || m == teamEnd:
			if (m == sampleEnd) != (block == sampleBegin) || block == "" {
				return "", fmt.Errorf("%s without its beginning", m)
			}
			block = ""
		case block == "" || (block == sampleBegin) == sample:
			b.WriteString(line)
		}
	}
	if block != "" {
		return "", fmt.Errorf("%s is not closed", block)
	}
	return b.String(), nil
}

// renderedFile returns the rendering of one file for the endpoint.
func renderedFile(files []File, p string) ([]byte, bool) {
	for _, f := range files {
		if f.Path == p {
			return f.Data, true
		}
	}
	return nil, false
}

// inDir reports whether the slash path p is dir or below it.
func inDir(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// functionNames returns the function folder names of an app root (""
// for the endpoint app, apps/resolver for the Resolver) in the templates.
func functionNames(files []File, appRoot string) []string {
	var names []string
	prefix := path.Join(appRoot, "functions") + "/"
	for _, f := range files {
		if rest, ok := strings.CutPrefix(f.Path, prefix); ok && path.Base(rest) == "function.json" && path.Dir(rest) != "." {
			names = append(names, path.Dir(rest))
		}
	}
	return names
}

// truncate bounds a string taken from the user's files or arguments before
// it is printed.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
