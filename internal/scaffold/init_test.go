package scaffold

import (
	"bytes"
	"context"
	"encoding/json"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// newModule returns a directory holding an empty Go module.
func newModule(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/orders\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// run runs the command in-process and returns its exit code and output.
func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = Run(context.Background(), args, &o, &e)
	return code, o.String(), e.String()
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestInitWritesTheApp(t *testing.T) {
	dir := newModule(t)
	sub := filepath.Join(dir, "svc")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "init", "--endpoint", "Orders", "--dir", sub)
	if code != 0 {
		t.Fatalf("init: exit %d\n%s%s", code, out, errOut)
	}
	want := []string{
		".funcignore", ".gitignore", "functions/CloudEventsIngress/function.json", "functions/DeferredProcessor/function.json",
		"functions/InboxCleanup/function.json", "functions/OutboxSweep/function.json", "functions/Subscriber/function.json", "host.json",
		"infra/bicep/README.md", "infra/bicep/main.bicep", "infra/bicep/main.bicepparam",
		"infra/bicep/modules/cloudevents-ingress.bicep", "infra/bicep/modules/event-forwarding.bicep", "infra/bicep/modules/resolver-app.bicep",
		"infra/bicep/modules/servicebus-access.bicep", "infra/bicep/modules/servicebus-topology.bicep",
		"local.settings.sample.json", "main.go",
	}
	for _, p := range want {
		if _, err := os.Stat(filepath.Join(sub, filepath.FromSlash(p))); err != nil {
			t.Errorf("%s not written: %v", p, err)
		}
		if !strings.Contains(out, "wrote   "+p+"\n") {
			t.Errorf("the output does not say it wrote %s:\n%s", p, out)
		}
	}
	if _, err := os.Stat(filepath.Join(sub, "apps")); !os.IsNotExist(err) {
		t.Errorf("init without --resolver wrote apps/: %v", err)
	}
	if !strings.Contains(out, strconv.Itoa(len(want))+" files written, 0 skipped") {
		t.Errorf("the output does not count %d files written:\n%s", len(want), out)
	}
	// The closing lines name the next commands of the README's flow.
	readme := string(readFile(t, filepath.Join(repoRoot(t), "README.md")))
	_, next, _ := strings.Cut(out, "\nnext: ")
	cmds := regexp.MustCompile(`'([^']+)'`).FindAllStringSubmatch(next, -1)
	if len(cmds) < 4 {
		t.Errorf("the closing lines name %d commands:\n%s", len(cmds), out)
	}
	for _, c := range cmds {
		if !strings.HasPrefix(c[1], "go ") || !strings.Contains(readme, c[1]) {
			t.Errorf("the closing lines name %q, which the README's flow does not use", c[1])
		}
	}

	var ls struct{ Values map[string]string }
	if err := json.Unmarshal(readFile(t, filepath.Join(sub, "local.settings.sample.json")), &ls); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"NimBus__Endpoint", "NimBus__CloudEvents__IngressTopic", "NimBus__CloudEvents__IngressSubscription"} {
		if ls.Values[k] != "Orders" {
			t.Errorf("local.settings.sample.json %s = %q, want Orders", k, ls.Values[k])
		}
	}
	if p := string(readFile(t, filepath.Join(sub, "infra", "bicep", "main.bicepparam"))); !strings.Contains(p, "param endpointName = 'Orders'\n") {
		t.Errorf("main.bicepparam does not set endpointName = 'Orders':\n%s", p)
	}
	for _, f := range want {
		if strings.Contains(string(readFile(t, filepath.Join(sub, f))), endpointPlaceholder) {
			t.Errorf("%s still holds the placeholder %s", f, endpointPlaceholder)
		}
	}
	checkMainGo(t, readFile(t, filepath.Join(sub, "main.go")))
}

// checkMainGo asserts the sample handler is a main package written against
// the public API: nimbus.New, nimbus.HandleEvent with a handler of the
// decoded event that completes it, and app.Main.
func checkMainGo(t *testing.T, src []byte) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", src, parser.ParseComments)
	if err != nil {
		t.Fatalf("main.go does not parse: %v", err)
	}
	if f.Name.Name != "main" {
		t.Errorf("main.go is package %s, want main", f.Name.Name)
	}
	imports := map[string]bool{}
	for _, i := range f.Imports {
		imports[i.Path.Value] = true
	}
	if !imports[`"github.com/nimbus-go/functions-subscriber/nimbus"`] || !imports[`"context"`] {
		t.Errorf("main.go imports %v, want context and the nimbus package", imports)
	}
	for _, call := range []string{"nimbus.New()", `nimbus.HandleEvent(app, "OrderPlaced", func(ctx context.Context, ev *nimbus.Event, o OrderPlaced) (nimbus.Result, error) {`,
		"return nimbus.Completed(), nil", "app.Main()"} {
		if !bytes.Contains(src, []byte(call)) {
			t.Errorf("main.go does not contain %s", call)
		}
	}
}

func TestInitKeepsExistingFilesUnlessForced(t *testing.T) {
	dir := newModule(t)
	if code, out, errOut := run(t, "init", "--endpoint", "Orders", "--dir", dir); code != 0 {
		t.Fatalf("init: exit %d\n%s%s", code, out, errOut)
	}
	host := filepath.Join(dir, "host.json")
	mine := []byte(`{"version": "2.0", "mine": true}`)
	if err := os.WriteFile(host, mine, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "main.go")); err != nil {
		t.Fatal(err)
	}

	// Again, with the Resolver: only what is missing is written.
	code, out, errOut := run(t, "init", "--endpoint", "Orders", "--resolver", "--dir", dir)
	if code != 0 {
		t.Fatalf("init --resolver: exit %d\n%s%s", code, out, errOut)
	}
	if !bytes.Equal(readFile(t, host), mine) {
		t.Error("init overwrote host.json without --force")
	}
	for _, line := range []string{
		"skipped host.json (it exists; --force overwrites it)\n",
		"skipped functions/Subscriber/function.json (it exists; --force overwrites it)\n",
		"wrote   main.go\n",
		"wrote   apps/resolver/host.json\n",
		"wrote   apps/resolver/functions/Resolver/function.json\n",
		"3 files written, 17 skipped",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("the output lacks %q:\n%s", line, out)
		}
	}

	code, out, errOut = run(t, "init", "--endpoint", "Orders", "--resolver", "--force", "--dir", dir)
	if code != 0 {
		t.Fatalf("init --force: exit %d\n%s%s", code, out, errOut)
	}
	want, _ := Render("Orders", true)
	tmpl, _ := renderedFile(want, "host.json")
	if !bytes.Equal(readFile(t, host), tmpl) {
		t.Error("init --force did not overwrite host.json with the template")
	}
	if !strings.Contains(out, "20 files written, 0 skipped") {
		t.Errorf("init --force did not write every file:\n%s", out)
	}
}

func TestInitRefuses(t *testing.T) {
	outside := t.TempDir() // no go.mod here or above
	for _, c := range []struct {
		name     string
		args     []string
		code     int
		msg      string
		checkDir string // must stay empty
	}{
		{"outside a module", []string{"init", "--endpoint", "Orders", "--dir", outside}, 1, "not inside a Go module", outside},
		{"no endpoint", []string{"init", "--dir", outside}, 2, "--endpoint is required", outside},
		{"bad endpoint", []string{"init", "--endpoint", "Orders/Topic", "--dir", newModule(t)}, 1, `endpoint name "Orders/Topic"`, ""},
		{"endpoint too long", []string{"init", "--endpoint", strings.Repeat("a", 51), "--dir", newModule(t)}, 1, "endpoint name", ""},
		// The Bicep's endpointName takes at most 45 characters (the rule
		// from-<endpoint> has at most 50), and NimBus's own names are not
		// an endpoint's.
		{"endpoint over the Bicep's 45 characters", []string{"init", "--endpoint", strings.Repeat("a", 46), "--dir", newModule(t)}, 1, "not a name the deployment takes: want a letter, then up to 44", ""},
		{"the Resolver's name", []string{"init", "--endpoint", "Resolver", "--dir", newModule(t)}, 1, `endpoint name "Resolver" is reserved`, ""},
		{"the Deferred subscription's name", []string{"init", "--endpoint", "deferred", "--dir", newModule(t)}, 1, `endpoint name "deferred" is reserved`, ""},
		{"stray argument", []string{"init", "--endpoint", "Orders", "--dir", outside, "extra"}, 2, `unexpected argument "extra"`, outside},
		{"unknown command", []string{"bootstrap"}, 2, `unknown command "bootstrap"`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := run(t, c.args...)
			if code != c.code || !strings.Contains(errOut, c.msg) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errOut, c.code, c.msg)
			}
			if strings.Contains(out, "wrote") {
				t.Errorf("it wrote files:\n%s", out)
			}
			if c.checkDir != "" {
				if entries, _ := os.ReadDir(c.checkDir); len(entries) != 0 {
					t.Errorf("%s is not empty: %v", c.checkDir, entries)
				}
			}
		})
	}
}

// init writes nothing through a symbolic link that leads out of the
// module: a linked directory on the way to a file, or, with --force, a
// linked file. It refuses before writing anything, naming the link.
func TestInitWritesNothingThroughALinkOutOfTheModule(t *testing.T) {
	for _, c := range []struct {
		name  string
		force bool
		link  func(t *testing.T, mod, outside string) string // returns the link's path
	}{
		{"a linked directory", false, func(t *testing.T, mod, outside string) string {
			link := filepath.Join(mod, "functions")
			if err := os.Symlink(outside, link); err != nil {
				t.Fatal(err)
			}
			return link
		}},
		{"a linked directory deeper down", false, func(t *testing.T, mod, outside string) string {
			if err := os.MkdirAll(filepath.Join(mod, "infra"), 0o755); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(mod, "infra", "bicep")
			if err := os.Symlink(outside, link); err != nil {
				t.Fatal(err)
			}
			return link
		}},
		{"a linked file overwritten with --force", true, func(t *testing.T, mod, outside string) string {
			target := filepath.Join(outside, "host.json")
			if err := os.WriteFile(target, []byte("theirs"), 0o644); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(mod, "host.json")
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			return link
		}},
		{"a link that resolves nowhere, with --force", true, func(t *testing.T, mod, outside string) string {
			link := filepath.Join(mod, "main.go")
			if err := os.Symlink(filepath.Join(outside, "missing", "main.go"), link); err != nil {
				t.Fatal(err)
			}
			return link
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			mod, outside := newModule(t), t.TempDir()
			link := c.link(t, mod, outside)
			beforeOut, beforeMod := staged(t, outside), staged(t, mod)
			args := []string{"init", "--endpoint", "Orders", "--dir", mod}
			if c.force {
				args = append(args, "--force")
			}
			code, out, errOut := run(t, args...)
			if code != exitFailed || !strings.Contains(errOut, "nothing written") || !strings.Contains(errOut, link+" is a symbolic link to ") {
				t.Errorf("init: exit %d\n%s%s\nwant exit 1 naming %s", code, out, errOut, link)
			}
			if got := staged(t, outside); strings.Join(got, ",") != strings.Join(beforeOut, ",") {
				t.Errorf("outside the module: %v, before %v", got, beforeOut)
			}
			if got := staged(t, mod); strings.Join(got, ",") != strings.Join(beforeMod, ",") {
				t.Errorf("in the module: %v, before %v", got, beforeMod)
			}
			if b, err := os.ReadFile(filepath.Join(outside, "host.json")); err == nil && string(b) != "theirs" {
				t.Errorf("the link's target was overwritten: %q", b)
			}
		})
	}
}

// A link that stays inside the module is followed, and a linked file is
// left alone without --force.
func TestInitFollowsLinksInsideTheModule(t *testing.T) {
	mod, outside := newModule(t), t.TempDir()
	if err := os.Mkdir(filepath.Join(mod, "shared"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(mod, "shared"), filepath.Join(mod, "functions")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "host.json"), []byte("theirs"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "host.json"), filepath.Join(mod, "host.json")); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "init", "--endpoint", "Orders", "--dir", mod)
	if code != 0 || !strings.Contains(out, "skipped host.json (it exists; --force overwrites it)") {
		t.Fatalf("init: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(mod, "shared", "Subscriber", "function.json")); err != nil {
		t.Errorf("the linked functions directory inside the module was not written: %v", err)
	}
	if b := readFile(t, filepath.Join(outside, "host.json")); string(b) != "theirs" {
		t.Errorf("the linked host.json was overwritten: %q", b)
	}
}

// A team's module gets the team's app: none of the sample endpoint's ledger
// (settings, Bicep module, parameters), the inbox on (as the Bicep deploys
// it, and as a transactional handler needs it), and a .gitignore keeping the
// local settings and the staged package out of the team's repository. The
// repository's rendering keeps the sample's ledger.
func TestInitWritesTheTeamsAppNotTheSample(t *testing.T) {
	dir := newModule(t)
	if code, out, errOut := run(t, "init", "--endpoint", "Orders", "--dir", dir, "--resolver"); code != 0 {
		t.Fatalf("init: exit %d\n%s%s", code, out, errOut)
	}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b := readFile(t, p)
		for _, s := range []string{"Sample__Ledger", "sample-ledger", "SampleLedger", "sampleLedger", "{{"} {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s holds %q", p, s)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var ls struct{ Values map[string]string }
	if err := json.Unmarshal(readFile(t, filepath.Join(dir, "local.settings.sample.json")), &ls); err != nil {
		t.Fatal(err)
	}
	if v := ls.Values["NimBus__Inbox__Enabled"]; v != "true" {
		t.Errorf("local.settings.sample.json NimBus__Inbox__Enabled = %q, want true", v)
	}
	gi := string(readFile(t, filepath.Join(dir, ".gitignore")))
	for _, line := range []string{"local.settings.json", "/dist/"} {
		if !slices.Contains(strings.Split(gi, "\n"), line) {
			t.Errorf(".gitignore has no line %q:\n%s", line, gi)
		}
	}
	// The app settings array of a team's main.bicep closes the concat it opens.
	main := string(readFile(t, filepath.Join(dir, "infra", "bicep", "main.bicep")))
	if _, rest, ok := strings.Cut(main, "appSettings: concat(["); !ok || !strings.Contains(rest, "\n      ])\n") {
		t.Errorf("main.bicep's appSettings: concat([ is not closed by ])")
	}

	repo, err := render("BillingEndpoint", true, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"infra/bicep/modules/sample-ledger.bicep", "infra/bicep/main.bicep", "local.settings.sample.json", "infra/bicep/main.bicepparam"} {
		if b, ok := renderedFile(repo, p); !ok || !bytes.Contains(b, []byte("edger")) {
			t.Errorf("the sample's rendering of %s lacks the ledger", p)
		}
	}
}

// A template's sample and team blocks must be well formed.
func TestTemplateVariants(t *testing.T) {
	const tmpl = "a\n{{sample}}\nsample\n{{end sample}}\n{{team}}\nteam\n{{end team}}\nz\n"
	for sample, want := range map[bool]string{true: "a\nsample\nz\n", false: "a\nteam\nz\n"} {
		if got, err := variant(tmpl, sample); err != nil || got != want {
			t.Errorf("variant(sample %t) = %q, %v; want %q", sample, got, err, want)
		}
	}
	for _, bad := range []string{"{{sample}}\n", "{{end sample}}\n", "{{sample}}\n{{team}}\n", "{{team}}\n{{end sample}}\n"} {
		if _, err := variant(bad, true); err == nil {
			t.Errorf("variant(%q) accepted", bad)
		}
	}
	if got, _ := variant("{{sample}}\nonly the sample\n{{end sample}}\n", false); got != "" {
		t.Errorf("an all-sample template renders %q for a team", got)
	}
}

// init --http writes an HTTP function's function.json and registers it in
// main.go, which builds against this checkout's nimbus; check accepts the
// result when the app describes the functions, and init refuses names the
// host or the app could not serve.
func TestInitWritesHTTPFunctions(t *testing.T) {
	dir := newModule(t)
	code, out, errOut := run(t, "init", "--endpoint", "Orders", "--http", "PlaceOrder", "--http", "CancelOrder", "--dir", dir)
	if code != 0 {
		t.Fatalf("init: exit %d\n%s%s", code, out, errOut)
	}
	for _, name := range []string{"PlaceOrder", "CancelOrder"} {
		var doc struct {
			Bindings []map[string]any `json:"bindings"`
		}
		if err := json.Unmarshal(readFile(t, filepath.Join(dir, "functions", name, "function.json")), &doc); err != nil {
			t.Fatal(err)
		}
		if len(doc.Bindings) != 2 || doc.Bindings[0]["type"] != "httpTrigger" || doc.Bindings[0]["authLevel"] != "function" ||
			doc.Bindings[0]["route"] != strings.ToLower(name) || doc.Bindings[1]["type"] != "http" || doc.Bindings[1]["name"] != "$return" {
			t.Errorf("functions/%s/function.json: %v", name, doc.Bindings)
		}
	}
	main := readFile(t, filepath.Join(dir, "main.go"))
	for _, want := range []string{`Name: "PlaceOrder", Route: "placeorder"`, `Name: "CancelOrder", Route: "cancelorder"`, `"net/http"`} {
		if !strings.Contains(string(main), want) {
			t.Errorf("main.go lacks %s", want)
		}
	}
	// main.go builds: inside this module, so it uses this checkout's nimbus.
	testdata := filepath.Join(repoRoot(t), "internal", "scaffold", "testdata")
	if err := os.MkdirAll(testdata, 0o755); err != nil {
		t.Fatal(err)
	}
	pkgDir, err := os.MkdirTemp(testdata, "inithttp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(pkgDir) })
	if err := os.WriteFile(filepath.Join(pkgDir, "main.go"), main, 0o644); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "vet", "./"+filepath.Base(pkgDir))
	build.Dir = filepath.Dir(pkgDir)
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the main.go init wrote does not build: %v\n%s", err, b)
	}
	described := func() (AppDescription, error) {
		return AppDescription{HTTPFunctions: []DescribedHTTP{
			{Name: "CancelOrder", Route: "cancelorder", Methods: []string{"POST"}}, {Name: "PlaceOrder", Route: "placeorder", Methods: []string{"POST"}}}}, nil
	}
	if problems := Check(dir, CheckOptions{App: described}); len(problems) != 0 {
		t.Errorf("check: %q", problems)
	}

	for _, c := range []struct{ name, want string }{
		{"Place Order", "an HTTP function's name is a letter"},
		{"subscriber", "the app's own Subscriber function has this name"},
	} {
		if code, _, errOut := run(t, "init", "--endpoint", "Orders", "--http", c.name, "--dir", newModule(t)); code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("--http %q: exit %d, %q; want it refused with %q", c.name, code, errOut, c.want)
		}
	}
}
