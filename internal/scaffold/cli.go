package scaffold

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/nimbus-go/functions-subscriber/internal/libversion"
)

// command is one nimbus-func command: its usage line (after the program
// name), what it does, and setup, which defines its flags on fs and returns
// the function that runs it with the arguments after the command name.
type command struct {
	name, synopsis, summary, about string
	setup                          func(fs *flag.FlagSet, r *runner) func(args []string) int
}

// commands are nimbus-func's commands, in the order the usage lists them
// (help and version are Run's own).
var commands = []*command{
	{name: "init", synopsis: "init --endpoint NAME [--http FUNC]... [--resolver] [--force] [--dir DIR]",
		summary: "write a new endpoint app's handler, host files, settings and Bicep",
		about: `Write main.go with a sample handler, host.json, functions/, .funcignore,
.gitignore, local.settings.sample.json and infra/bicep/ (and apps/resolver/
with --resolver) into DIR. Existing files are kept unless --force. NAME must
be a name the deployment accepts: a letter, then up to 44 letters, digits,
'.', '_' or '-', and none of the names NimBus's topology reserves. Each
--http FUNC also writes functions/FUNC/function.json, an HTTP function
(POST /api/func, the name in lower case) that the host forwards to the app
as it came, and registers it in main.go.`,
		setup: setupInit},
	{name: "check", synopsis: "check [--resolver] [--dir DIR] [--pkg PKG]",
		summary: "validate the host files and local settings as the Functions host reads them",
		about: `Validate host.json, the function folders and the local settings as the
Functions host reads them. A NimBus__ setting the library does not read must
be one the app declares, and the inbox must be on when the app registers a
transactional handler: to learn both, check builds PKG and runs it with
NIMBUS_DESCRIBE=1. It prints one line per problem and exits 1 when there is
any.`,
		setup: setupCheck},
	{name: "package", synopsis: "package [--resolver] [--dist DIR] [--pkg PKG] [--bin DIR] [--dir DIR]",
		summary: "build the handler and stage the app root in dist/",
		about: `Build the handler (linux/amd64, static) and stage the app root in DIST
(default DIR/dist).`,
		setup: setupPackage},
	{name: "publish", synopsis: "publish APP [--resolver] [package options] [-- func publish options]",
		summary: "package, then publish the app with Core Tools",
		about: `Package, then run 'func azure functionapp publish APP' in DIST; the
arguments after -- go to func.`,
		setup: setupPackage},
	{name: "invoke", synopsis: "invoke [--port N] [--endpoint NAME] [--publisher NAME] [--message-id ID]\n         [--session-id ID] [--delivery-count N] [--dir DIR] EVENT-TYPE JSON",
		summary: "deliver one event to the app running on this machine",
		about: `Deliver one NimBus EventRequest (EVENT-TYPE, the event as JSON, or - to
read it from standard input) to the app running on 127.0.0.1 (go run .) as
the Functions host delivers it to the Subscriber function, and print the
host's answer, the invocation's log line and the messages the endpoint sent
(NimBus__Resolver__Sink=InMemory). The port defaults to
FUNCTIONS_CUSTOMHANDLER_PORT, else 8080; the endpoint to NimBus__Endpoint,
else the one DIR's local settings name; the MessageId to NimBus's default
for the event (EVENT-TYPE-<xxHash64 of JSON>: the same event sent twice is
a duplicate) and the SessionId to the MessageId. invoke exits 1 when the
answer fails the invocation.`,
		setup: setupInvoke},
}

// dirNote explains DIR and PKG, which every command takes.
const dirNote = `DIR is the module directory holding host.json (default: the root of the Go
module of the current directory); PKG is the main package, relative to DIR
(default ".").
`

// usage is the overview Run prints without a command, and for help.
func usage() string {
	var b strings.Builder
	b.WriteString("usage: " + programName + " <command> [options]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(&b, "  %-8s %s\n", "version", "print the version of the library "+programName+" belongs to")
	fmt.Fprintf(&b, "  %-8s %s\n", "help", "print a command's usage and options: "+programName+" help <command>")
	b.WriteString("\nRun '" + programName + " help <command>' (or '" + programName + " <command> -h') for a command's options.\n\n" + dirNote)
	return b.String()
}

// findCommand returns the command of that name, or nil.
func findCommand(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// runner is one run of a command: its context, outputs and flag set.
type runner struct {
	ctx            context.Context
	stdout, stderr io.Writer
	cmd            *command
	fs             *flag.FlagSet
	// dir and resolver are the flags every command takes.
	dir      *string
	resolver *bool
}

// newRunner builds the flag set of c, with the flags every command takes,
// and returns the runner and the function setup returned.
func newRunner(ctx context.Context, c *command, stdout, stderr io.Writer) (*runner, func([]string) int) {
	fs := flag.NewFlagSet(programName+" "+c.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // parse prints the command's usage itself
	r := &runner{ctx: ctx, stdout: stdout, stderr: stderr, cmd: c, fs: fs}
	r.dir = fs.String("dir", "", "the module directory holding host.json (default: the module root)")
	r.resolver = fs.Bool("resolver", false, "the Resolver app (apps/resolver) too or instead")
	return r, c.setup(fs, r)
}

// help prints the command's usage, what it does and its flags on w.
func (r *runner) help(w io.Writer) {
	fmt.Fprintf(w, "usage: %s %s\n\n%s\n\n%s\noptions:\n", programName, r.cmd.synopsis, r.cmd.about, dirNote)
	r.fs.SetOutput(w)
	r.fs.PrintDefaults()
	r.fs.SetOutput(r.stderr)
}

// Exit codes of Run.
const (
	exitOK      = 0
	exitFailed  = 1 // the command failed, or check found problems
	exitUsage   = 2
	exitNoFunc  = 127 // Core Tools are not on PATH
	programName = "nimbus-func"
)

// Run runs the nimbus-func command with its arguments (without the program
// name) and returns the process exit code. "<command> -h" and
// "help <command>" print the command's usage and flags on stdout and exit
// 0; a wrong flag or argument prints them on stderr and exits 2.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return exitUsage
	}
	name, args := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) == 0 {
			fmt.Fprint(stdout, usage())
			return exitOK
		}
		c := findCommand(args[0])
		switch {
		case args[0] == "help" || args[0] == "version":
			fmt.Fprint(stdout, usage())
			return exitOK
		case c == nil || len(args) > 1:
			fmt.Fprintf(stderr, "%s help: unknown command %q\n%s", programName, truncate(strings.Join(args, " "), 40), usage())
			return exitUsage
		}
		r, _ := newRunner(ctx, c, stdout, stderr)
		r.help(stdout)
		return exitOK
	case "version", "-version", "--version":
		if len(args) > 0 {
			fmt.Fprintf(stderr, "usage: %s version\n", programName)
			return exitUsage
		}
		fmt.Fprintf(stdout, "%s %s\n", programName, libversion.Get())
		return exitOK
	}
	c := findCommand(name)
	if c == nil {
		fmt.Fprintf(stderr, "%s: unknown command %q\n%s", programName, truncate(name, 40), usage())
		return exitUsage
	}
	_, run := newRunner(ctx, c, stdout, stderr)
	return run(args)
}

// finish turns a command's error into its exit code, printing it.
func (r *runner) finish(err error) int {
	if errors.Is(err, ErrNoFunc) {
		fmt.Fprintf(r.stderr, "%s %s: %v\n%s", programName, r.cmd.name, err, noFuncHint)
		return exitNoFunc
	}
	if err != nil {
		fmt.Fprintf(r.stderr, "%s %s: %v\n", programName, r.cmd.name, err)
		return exitFailed
	}
	return exitOK
}

// usageError prints a wrong use of the command and its usage line on
// stderr and returns exitUsage.
func (r *runner) usageError(format string, args ...any) int {
	fmt.Fprintf(r.stderr, "%s %s: %s\n", programName, r.cmd.name, fmt.Sprintf(format, args...))
	return r.badUsage()
}

// badUsage prints the command's usage line on stderr and returns exitUsage.
func (r *runner) badUsage() int {
	fmt.Fprintf(r.stderr, "usage: %s %s\nRun '%s help %s' for its options.\n", programName, r.cmd.synopsis, programName, r.cmd.name)
	return exitUsage
}

// parse parses the flags; maxArgs >= 0 bounds the positional arguments.
// When it returns false, the command stops with code: 0 after -h (the
// command's help is on stdout), exitUsage after a wrong flag or argument.
func (r *runner) parse(args []string, maxArgs int) (ok bool, code int) {
	if err := r.fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		r.help(r.stdout)
		return false, exitOK
	} else if err != nil {
		return false, r.badUsage()
	}
	if maxArgs >= 0 && r.fs.NArg() > maxArgs {
		return false, r.usageError("unexpected argument %q", truncate(r.fs.Arg(0), 80))
	}
	return true, 0
}

func setupInit(fs *flag.FlagSet, r *runner) func([]string) int {
	endpoint := fs.String("endpoint", "", "the endpoint name (NimBus__Endpoint; required)")
	force := fs.Bool("force", false, "overwrite existing files")
	var httpFuncs []string
	fs.Func("http", "also scaffold the HTTP function `FUNC` (repeatable)", func(v string) error {
		httpFuncs = append(httpFuncs, v)
		return nil
	})
	return func(args []string) int {
		if ok, code := r.parse(args, 0); !ok {
			return code
		}
		if *endpoint == "" {
			return r.usageError("--endpoint is required")
		}
		dir, err := defaultDir(*r.dir)
		if err == nil {
			err = Init(InitOptions{Dir: dir, Endpoint: *endpoint, Resolver: *r.resolver, Force: *force, HTTP: httpFuncs}, r.stdout)
		}
		return r.finish(err)
	}
}

func setupCheck(fs *flag.FlagSet, r *runner) func([]string) int {
	pkg := fs.String("pkg", ".", "the main package, relative to DIR, asked what it registers")
	return func(args []string) int {
		if ok, code := r.parse(args, 0); !ok {
			return code
		}
		dir, err := defaultDir(*r.dir)
		if err != nil {
			return r.finish(err)
		}
		problems := Check(dir, CheckOptions{Resolver: *r.resolver, App: func() (AppDescription, error) {
			return describeApp(r.ctx, dir, *pkg)
		}})
		for _, p := range problems {
			fmt.Fprintln(r.stdout, p)
		}
		switch len(problems) {
		case 0:
			fmt.Fprintf(r.stdout, "%s check: the host files are fine\n", programName)
			return exitOK
		case 1:
			fmt.Fprintf(r.stderr, "%s check: 1 problem\n", programName)
		default:
			fmt.Fprintf(r.stderr, "%s check: %d problems\n", programName, len(problems))
		}
		return exitFailed
	}
}

// setupPackage serves package and publish, whose APP may come before the
// options.
func setupPackage(fs *flag.FlagSet, r *runner) func([]string) int {
	var p PackageOptions
	fs.StringVar(&p.Dist, "dist", "", "the staging directory (default DIR/dist); recreated on every run")
	fs.StringVar(&p.Pkg, "pkg", ".", "the main package to build, relative to DIR")
	fs.StringVar(&p.Bin, "bin", "", "where the binary is built first (default a temporary directory)")
	publish := r.cmd.name == "publish"
	return func(args []string) int {
		var app string
		if publish && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			app, args = args[0], args[1:]
		}
		if ok, code := r.parse(args, -1); !ok {
			return code
		}
		rest := r.fs.Args()
		if !publish && len(rest) > 0 {
			return r.usageError("unexpected argument %q", truncate(rest[0], 80))
		}
		if publish && app == "" {
			if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
				return r.usageError("the function app's name is required")
			}
			app, rest = rest[0], rest[1:]
		}
		var err error
		if p.Dir, err = defaultDir(*r.dir); err != nil {
			return r.finish(err)
		}
		p.Resolver = *r.resolver
		if publish {
			return r.finish(Publish(r.ctx, PublishOptions{PackageOptions: p, App: app, Args: rest}, r.stdout))
		}
		_, err = Package(r.ctx, p, r.stdout)
		return r.finish(err)
	}
}

func setupInvoke(fs *flag.FlagSet, r *runner) func([]string) int {
	var o InvokeOptions
	fs.IntVar(&o.Port, "port", 0, "the app's port on 127.0.0.1 (default FUNCTIONS_CUSTOMHANDLER_PORT, else 8080)")
	fs.StringVar(&o.Event.Endpoint, "endpoint", "", "the receiving endpoint, To (default NimBus__Endpoint, else the local settings')")
	fs.StringVar(&o.Event.Publisher, "publisher", "LocalPublisher", "the publishing endpoint, From")
	fs.StringVar(&o.Event.MessageID, "message-id", "", "the MessageId (default NimBus's: EVENT-TYPE-<hash of JSON>)")
	fs.StringVar(&o.Event.SessionID, "session-id", "", "the SessionId (default the MessageId)")
	fs.IntVar(&o.Event.DeliveryCount, "delivery-count", 1, "the broker's delivery count")
	return func(args []string) int {
		pos, ok, code := r.parseInterspersed(args)
		if !ok {
			return code
		}
		if len(pos) != 2 {
			return r.usageError("want EVENT-TYPE and JSON, got %d arguments", len(pos))
		}
		o.Event.EventTypeID = pos[0]
		var err error
		if o.Event.EventJSON, err = eventJSON(pos[1]); err != nil {
			return r.usageError("%v", err)
		}
		if o.Event.DeliveryCount < 1 {
			return r.usageError("--delivery-count must be at least 1")
		}
		if err = invokeDefaults(&o, *r.dir); err != nil {
			return r.finish(err)
		}
		if err = Invoke(r.ctx, o, r.stdout); errors.Is(err, ErrNotCompleted) {
			return exitFailed
		}
		return r.finish(err)
	}
}

// parseInterspersed parses the flags wherever they are among the
// positional arguments, which it returns in order; ok and code as parse's.
func (r *runner) parseInterspersed(args []string) (pos []string, ok bool, code int) {
	for {
		if ok, code := r.parse(args, -1); !ok {
			return nil, false, code
		}
		if r.fs.NArg() == 0 {
			return pos, true, 0
		}
		pos = append(pos, r.fs.Arg(0))
		args = r.fs.Args()[1:]
	}
}

// eventJSON returns the event argument: JSON, or "-" for standard input.
func eventJSON(arg string) (string, error) {
	b := []byte(arg)
	if arg == "-" {
		var err error
		if b, err = io.ReadAll(io.LimitReader(os.Stdin, 64<<20)); err != nil {
			return "", fmt.Errorf("reading the event from standard input: %w", err)
		}
	}
	if !json.Valid(b) {
		return "", fmt.Errorf("the event is not valid JSON: %s", truncate(string(b), 80))
	}
	return strings.TrimSpace(string(b)), nil
}

// defaultDir returns dir, or the root of the current directory's module.
func defaultDir(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return ModuleRoot(wd)
}
