package scaffold

import (
	"strings"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/libversion"
)

// Each command's -h, and help with its name, print its usage, what it does
// and every flag with its text on stdout, and exit 0, as a Go command does.
func TestCommandHelp(t *testing.T) {
	flags := map[string][]string{
		"init":    {"-endpoint", "the endpoint name (NimBus__Endpoint; required)", "-force", "-resolver", "-dir"},
		"check":   {"-pkg", "asked what it registers", "-resolver", "-dir"},
		"package": {"-dist", "-pkg", "-bin", "-resolver", "-dir"},
		"publish": {"-dist", "-pkg", "-bin", "-resolver", "-dir", "func azure functionapp publish APP"},
		"invoke":  {"-port", "-endpoint", "-publisher", "-message-id", "-session-id", "-delivery-count", "default 1", "-dir"},
	}
	for _, c := range commands {
		want, ok := flags[c.name]
		if !ok {
			t.Errorf("command %s has no case here", c.name)
			continue
		}
		code, out, errOut := run(t, c.name, "-h")
		if code != exitOK || errOut != "" || !strings.HasPrefix(out, "usage: nimbus-func "+c.name+" ") {
			t.Errorf("%s -h: exit %d, stderr %q, stdout:\n%s\nwant exit 0 and the command's usage on stdout", c.name, code, errOut, out)
		}
		for _, w := range append(want, "options:", c.about) {
			if !strings.Contains(out, w) {
				t.Errorf("%s -h does not show %q:\n%s", c.name, w, out)
			}
		}
		for _, args := range [][]string{{"help", c.name}, {c.name, "--help"}, {c.name, "--dir", ".", "-help"}} {
			if code, o, e := run(t, args...); code != exitOK || o != out || e != "" {
				t.Errorf("%q: exit %d, stderr %q, stdout:\n%s\nwant what %s -h prints", args, code, e, o, c.name)
			}
		}
	}
	for _, args := range [][]string{{"help"}, {"-h"}, {"help", "help"}} {
		code, out, errOut := run(t, args...)
		if code != exitOK || errOut != "" || !strings.HasPrefix(out, "usage: nimbus-func <command>") || !strings.Contains(out, "nimbus-func help <command>") {
			t.Errorf("%q: exit %d, stderr %q, stdout:\n%s", args, code, errOut, out)
		}
		for _, c := range commands {
			if !strings.Contains(out, "  "+c.name+" ") {
				t.Errorf("%q does not list %s:\n%s", args, c.name, out)
			}
		}
	}
}

// A wrong flag or argument prints what is wrong and the command's usage on
// stderr, nothing on stdout, and exits 2.
func TestCommandUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"init", "--bogus"}, "flag provided but not defined: -bogus\nusage: nimbus-func init --endpoint NAME"},
		{[]string{"init"}, "nimbus-func init: --endpoint is required\nusage: nimbus-func init --endpoint NAME"},
		{[]string{"check", "extra"}, "nimbus-func check: unexpected argument \"extra\"\nusage: nimbus-func check "},
		{[]string{"help", "nope"}, "nimbus-func help: unknown command \"nope\"\nusage: nimbus-func <command>"},
		{[]string{"nope"}, "nimbus-func: unknown command \"nope\""},
		{[]string{"version", "x"}, "usage: nimbus-func version"},
	} {
		code, out, errOut := run(t, c.args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr:\n%s\nwant exit 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
}

// version and -version print the version of the library the command was
// built with, as package nimbus reports it.
func TestCommandVersion(t *testing.T) {
	want := "nimbus-func " + libversion.Get() + "\n"
	for _, arg := range []string{"version", "-version", "--version"} {
		if code, out, errOut := run(t, arg); code != exitOK || out != want || errOut != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %q", arg, code, out, errOut, want)
		}
	}
}
