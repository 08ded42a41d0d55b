// Package libversion finds the version of this module a binary was built
// with, from the binary's build information: the version package nimbus
// reports (heartbeats, logs, telemetry) and `nimbus-func version` prints.
package libversion

import (
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
)

// Dev is the version of a build from a directory, or of a binary without
// build information.
const Dev = "dev"

type marker struct{}

// ModulePath is this module's path: the path of this package without its
// last two elements.
var ModulePath = strings.TrimSuffix(reflect.TypeFor[marker]().PkgPath(), "/internal/libversion")

// Get returns this module's version in the running binary (see Of).
func Get() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Dev
	}
	return Of(bi)
}

// Of returns the version of this module in bi: the main module's when it
// is the main module (a binary built from its own checkout, or installed
// with go install …@version), else the version of the dependency (in a
// team's app or tool, whose main module is the team's). A module replaced
// by another version reports that version. Dev when there is none: a
// build from a directory (a replace by a local path, or the main module's
// "(devel)"), or a binary without the module.
func Of(bi *debug.BuildInfo) string {
	m := &bi.Main
	if m.Path != ModulePath {
		i := slices.IndexFunc(bi.Deps, func(d *debug.Module) bool { return d.Path == ModulePath })
		if i < 0 {
			return Dev
		}
		m = bi.Deps[i]
	}
	if m.Replace != nil {
		m = m.Replace
	}
	if m.Version == "" || m.Version == "(devel)" {
		return Dev
	}
	return m.Version
}
