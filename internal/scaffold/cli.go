package scaffold

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"unicode/utf16"

	"go.opentelemetry.io/otel/trace"

	"github.com/nimbus-go/functions-subscriber/internal/libversion"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
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
	{name: "invoke", synopsis: "invoke [--port N] [--endpoint NAME] [--publisher NAME] [--message-id ID]\n         [--session-id ID] [--delivery-count N] [--correlation-id ID] [--parent-message-id ID]\n" +
		"         [--originating-message-id ID] [--originating-from NAME] [--from NAME]\n         [--traceparent TP] [--dir DIR] EVENT-TYPE JSON\n" +
		"       invoke --forward-from ADDRESS --message-id ID [--port N] [--endpoint NAME] [--from NAME]\n         [--delivery-count N] [--dir DIR]",
		summary: "deliver one event to the app running on this machine",
		about: `Deliver one NimBus EventRequest (EVENT-TYPE, the event as JSON, or - to
read it from standard input) to the app running on 127.0.0.1 (go run .) as
the Functions host delivers it to the Subscriber function, and print the
delivery with its lineage, the host's answer, the invocation's log line and
the messages the endpoint sent (NimBus__Resolver__Sink=InMemory). The port
defaults to FUNCTIONS_CUSTOMHANDLER_PORT, else 8080; the endpoint to
NimBus__Endpoint, else the one DIR's local settings name; the MessageId to
NimBus's default for the event (EVENT-TYPE-<xxHash64 of JSON>: the same
event sent twice is a duplicate) and the SessionId to the MessageId. An
event further down a workflow takes its lineage from --correlation-id (else
a new GUID), --parent-message-id and --originating-message-id (else self),
--originating-from and --from (else --publisher) and --traceparent (else
none).

With --forward-from, the event is one another app on this machine published
(also run with NimBus__Resolver__Sink=InMemory): invoke reads the messages
that app sent, takes the event with MessageId --message-id as it was
published (an EventRequest without From), and delivers it as NimBus's
forwarder subscription does: From = --from, else the event's
OriginatingFrom (the publishing endpoint), a new EventId, To = this
endpoint; its MessageId, SessionId, CorrelationId, lineage, trace context
and body are kept. ADDRESS is the other app's PORT, HOST:PORT or
http://HOST:PORT. invoke exits 1 when the answer fails the invocation.`,
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
	fs.StringVar(&o.Event.Publisher, "publisher", "LocalPublisher", "the publishing endpoint, From and OriginatingFrom")
	fs.StringVar(&o.Event.MessageID, "message-id", "", "the MessageId (default NimBus's: EVENT-TYPE-<hash of JSON>); with --forward-from, the published event's")
	fs.StringVar(&o.Event.SessionID, "session-id", "", "the SessionId (default the MessageId)")
	fs.IntVar(&o.Event.DeliveryCount, "delivery-count", 1, "the broker's delivery count")
	fs.StringVar(&o.Event.CorrelationID, "correlation-id", "", "the CorrelationId of the workflow (default a new GUID)")
	fs.StringVar(&o.Event.ParentMessageID, "parent-message-id", "", "the ParentMessageId: the MessageId of the delivery that published the event (default self)")
	fs.StringVar(&o.Event.OriginatingMessageID, "originating-message-id", "", "the OriginatingMessageId: the MessageId of the workflow's first event (default self)")
	fs.StringVar(&o.Event.OriginatingFrom, "originating-from", "", "the OriginatingFrom (default --publisher)")
	fs.StringVar(&o.Event.From, "from", "", "the From the forwarder stamps: the endpoint whose topic the event was published on (default --publisher; with --forward-from, the event's OriginatingFrom)")
	fs.StringVar(&o.Event.TraceParent, "traceparent", "", "the W3C traceparent the event was published under (default none)")
	fs.StringVar(&o.ForwardFrom, "forward-from", "", "deliver the event the app at this address (PORT, HOST:PORT or http://HOST:PORT) published with --message-id, as NimBus's forwarder does")
	return func(args []string) int {
		pos, ok, code := r.parseInterspersed(args)
		if !ok {
			return code
		}
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for _, name := range []string{"endpoint", "publisher", "message-id", "session-id", "correlation-id", "parent-message-id",
			"originating-message-id", "originating-from", "from", "traceparent", "forward-from"} {
			v := fs.Lookup(name).Value.String()
			switch {
			case set[name] && strings.TrimSpace(v) == "":
				return r.usageError("--%s is empty: give a value, or leave the flag out for its default", name)
			case (name == "message-id" || name == "session-id" || name == "correlation-id") && utf16Len(v) > message.MaxIDLength:
				return r.usageError("--%s has %d characters; Service Bus accepts at most %d", name, utf16Len(v), message.MaxIDLength)
			}
		}
		if o.Event.DeliveryCount < 1 {
			return r.usageError("--delivery-count must be at least 1")
		}
		if set["traceparent"] && !validTraceParent(o.Event.TraceParent) {
			return r.usageError("--traceparent %q is not a W3C traceparent (00-<32 hex trace id>-<16 hex span id>-<2 hex flags>)", truncate(o.Event.TraceParent, 64))
		}
		if o.ForwardFrom != "" {
			var err error
			if o.ForwardFrom, err = appAddress(o.ForwardFrom); err != nil {
				return r.usageError("--forward-from: %v", err)
			}
			if len(pos) != 0 {
				return r.usageError("with --forward-from the event is the one the other app published: give no EVENT-TYPE and JSON, got %d arguments", len(pos))
			}
			if !set["message-id"] {
				return r.usageError("--forward-from needs --message-id: the MessageId of the event the other app published")
			}
			for _, name := range []string{"publisher", "session-id", "correlation-id", "parent-message-id", "originating-message-id", "originating-from", "traceparent"} {
				if set[name] {
					return r.usageError("--%s does not go with --forward-from: the forwarded event keeps the published one's", name)
				}
			}
		} else {
			if len(pos) != 2 {
				return r.usageError("want EVENT-TYPE and JSON, got %d arguments", len(pos))
			}
			o.Event.EventTypeID = pos[0]
			var err error
			if o.Event.EventJSON, err = eventJSON(pos[1]); err != nil {
				return r.usageError("%v", err)
			}
		}
		if err := invokeDefaults(&o, *r.dir); err != nil {
			return r.finish(err)
		}
		err := Invoke(r.ctx, o, r.stdout)
		if errors.Is(err, ErrNotCompleted) {
			return exitFailed
		}
		return r.finish(err)
	}
}

// appAddress returns the base URL of the app at addr: a port on
// 127.0.0.1, HOST:PORT, or an http(s) URL.
func appAddress(addr string) (string, error) {
	if p, err := strconv.Atoi(addr); err == nil {
		if p <= 0 || p > 65535 {
			return "", fmt.Errorf("%d is not a port number", p)
		}
		return "http://" + net.JoinHostPort("127.0.0.1", addr), nil
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Port() == "" || strings.Trim(u.Path, "/") != "" || u.RawQuery != "" {
		return "", fmt.Errorf("%q is not an app's address: want PORT, HOST:PORT or http://HOST:PORT", truncate(addr, 128))
	}
	return u.Scheme + "://" + u.Host, nil
}

// validTraceParent reports whether v is a traceparent a propagator reads
// as a valid span context.
func validTraceParent(v string) bool {
	ctx := telemetry.Extract(context.Background(), map[string]any{telemetry.PropTraceParent: v})
	return trace.SpanContextFromContext(ctx).IsValid()
}

// utf16Len is the length of s in UTF-16 code units, as Service Bus counts
// an id.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
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
