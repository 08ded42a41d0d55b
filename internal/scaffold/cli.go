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
)

const usage = `usage: nimbus-func <command> [options]

  init --endpoint NAME [--resolver] [--force] [--dir DIR]
        write main.go with a sample handler, host.json, functions/, .funcignore,
        local.settings.sample.json, infra/bicep/ (and apps/resolver/ with
        --resolver); existing files are kept unless --force
  check [--resolver] [--dir DIR] [--pkg PKG]
        validate host.json, the function folders and the local settings as
        the Functions host reads them; a NimBus__ setting the library does
        not read must be one the app declares (check then builds PKG and
        runs it with NIMBUS_DESCRIBE=1 to ask it)
  package [--resolver] [--dist DIR] [--pkg PKG] [--bin DIR] [--dir DIR]
        build the handler (linux/amd64, static) and stage the app root in
        DIST (default DIR/dist)
  publish APP [--resolver] [package options] [-- func publish options]
        package, then run 'func azure functionapp publish APP' in DIST
  invoke [--port N] [--endpoint NAME] [--publisher NAME] [--message-id ID]
         [--session-id ID] [--delivery-count N] [--dir DIR] EVENT-TYPE JSON
        deliver one NimBus EventRequest (EVENT-TYPE, the event as JSON, or -
        to read it from standard input) to the app running on 127.0.0.1
        (go run .) as the Functions host delivers it to the Subscriber
        function, and print the host's answer, the invocation's log line and
        the messages the endpoint sent (NimBus__Resolver__Sink=InMemory)

DIR is the module directory holding host.json (default: the root of the Go
module of the current directory); PKG is the main package, relative to DIR
(default "."). invoke's port defaults to FUNCTIONS_CUSTOMHANDLER_PORT, else
8080; its endpoint to NimBus__Endpoint, else the one DIR's local settings
name; the MessageId to NimBus's default for the event
(EVENT-TYPE-<xxHash64 of JSON>: the same event sent twice is a duplicate)
and the SessionId to the MessageId. invoke exits 1 when the answer fails
the invocation.
`

// Exit codes of Run.
const (
	exitOK      = 0
	exitFailed  = 1 // the command failed, or check found problems
	exitUsage   = 2
	exitNoFunc  = 127 // Core Tools are not on PATH
	programName = "nimbus-func"
)

// Run runs the nimbus-func command with its arguments (without the program
// name) and returns the process exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet(programName+" "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	dir := fs.String("dir", "", "the module directory holding host.json (default: the module root)")
	resolver := fs.Bool("resolver", false, "the Resolver app (apps/resolver) too or instead")

	var err error
	switch cmd {
	case "init":
		endpoint := fs.String("endpoint", "", "the endpoint name (NimBus__Endpoint)")
		force := fs.Bool("force", false, "overwrite existing files")
		if !parse(fs, args, 0) {
			return exitUsage
		}
		if *endpoint == "" {
			fmt.Fprintf(stderr, "%s init: --endpoint is required\n", programName)
			return exitUsage
		}
		if *dir, err = defaultDir(*dir); err != nil {
			break
		}
		err = Init(InitOptions{Dir: *dir, Endpoint: *endpoint, Resolver: *resolver, Force: *force}, stdout)
	case "check":
		pkg := fs.String("pkg", ".", "the main package, relative to DIR, asked for the settings it declares")
		if !parse(fs, args, 0) {
			return exitUsage
		}
		if *dir, err = defaultDir(*dir); err != nil {
			break
		}
		problems := Check(*dir, CheckOptions{Resolver: *resolver, AppSettings: func() ([]string, error) {
			return appSettings(ctx, *dir, *pkg)
		}})
		for _, p := range problems {
			fmt.Fprintln(stdout, p)
		}
		if len(problems) > 0 {
			fmt.Fprintf(stderr, "%s check: %d problems\n", programName, len(problems))
			return exitFailed
		}
		fmt.Fprintf(stdout, "%s check: the host files are fine\n", programName)
	case "package", "publish":
		var p PackageOptions
		fs.StringVar(&p.Dist, "dist", "", "the staging directory (default DIR/dist); recreated on every run")
		fs.StringVar(&p.Pkg, "pkg", ".", "the main package to build, relative to DIR")
		fs.StringVar(&p.Bin, "bin", "", "where the binary is built first (default a temporary directory)")
		var app string
		if cmd == "publish" && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			app, args = args[0], args[1:]
		}
		if !parse(fs, args, -1) {
			return exitUsage
		}
		rest := fs.Args()
		if cmd == "package" && len(rest) > 0 {
			fmt.Fprintf(stderr, "%s package: unexpected argument %q\n", programName, truncate(rest[0], 80))
			return exitUsage
		}
		if cmd == "publish" && app == "" {
			if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
				fmt.Fprintf(stderr, "usage: %s publish <function-app-name> [options] [-- func publish options]\n", programName)
				return exitUsage
			}
			app, rest = rest[0], rest[1:]
		}
		if p.Dir, err = defaultDir(*dir); err != nil {
			break
		}
		p.Resolver = *resolver
		if cmd == "package" {
			_, err = Package(ctx, p, stdout)
		} else {
			err = Publish(ctx, PublishOptions{PackageOptions: p, App: app, Args: rest}, stdout)
		}
	case "invoke":
		var o InvokeOptions
		fs.IntVar(&o.Port, "port", 0, "the app's port on 127.0.0.1 (default FUNCTIONS_CUSTOMHANDLER_PORT, else 8080)")
		fs.StringVar(&o.Event.Endpoint, "endpoint", "", "the receiving endpoint, To (default NimBus__Endpoint, else the local settings')")
		fs.StringVar(&o.Event.Publisher, "publisher", "LocalPublisher", "the publishing endpoint, From")
		fs.StringVar(&o.Event.MessageID, "message-id", "", "the MessageId (default NimBus's: EVENT-TYPE-<hash of JSON>)")
		fs.StringVar(&o.Event.SessionID, "session-id", "", "the SessionId (default the MessageId)")
		fs.IntVar(&o.Event.DeliveryCount, "delivery-count", 1, "the broker's delivery count")
		pos, ok := parseInterspersed(fs, args)
		if !ok {
			return exitUsage
		}
		if len(pos) != 2 {
			fmt.Fprintf(stderr, "usage: %s invoke [options] EVENT-TYPE JSON\n", programName)
			return exitUsage
		}
		o.Event.EventTypeID = pos[0]
		if o.Event.EventJSON, err = eventJSON(pos[1]); err != nil {
			fmt.Fprintf(stderr, "%s invoke: %v\n", programName, err)
			return exitUsage
		}
		if o.Event.DeliveryCount < 1 {
			fmt.Fprintf(stderr, "%s invoke: --delivery-count must be at least 1\n", programName)
			return exitUsage
		}
		if err = invokeDefaults(&o, *dir); err != nil {
			break
		}
		if err = Invoke(ctx, o, stdout); errors.Is(err, ErrNotCompleted) {
			return exitFailed
		}
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "%s: unknown command %q\n%s", programName, truncate(cmd, 40), usage)
		return exitUsage
	}
	if errors.Is(err, ErrNoFunc) {
		fmt.Fprintf(stderr, "%s %s: %v\n%s", programName, cmd, err, noFuncHint)
		return exitNoFunc
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", programName, cmd, err)
		return exitFailed
	}
	return exitOK
}

// parse parses the flags; maxArgs >= 0 bounds the positional arguments.
func parse(fs *flag.FlagSet, args []string, maxArgs int) bool {
	if err := fs.Parse(args); err != nil {
		return false
	}
	if maxArgs >= 0 && fs.NArg() > maxArgs {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), truncate(fs.Arg(0), 80))
		return false
	}
	return true
}

// parseInterspersed parses the flags wherever they are among the
// positional arguments, which it returns in order.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, bool) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, false
		}
		if fs.NArg() == 0 {
			return pos, true
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
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
