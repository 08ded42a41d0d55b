package scaffold

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/nimbus-go/functions-subscriber/internal/config"
)

// CheckOptions are check's arguments besides the directory.
type CheckOptions struct {
	// Resolver checks the Resolver app in dir/apps/resolver too.
	Resolver bool
	// App describes what the app registers: the setting names it reads
	// besides the library's, and its transactional handlers. It is called
	// at most once, and only when a local settings file holds a NimBus__
	// name the library does not read or turns the inbox off; nil declares
	// nothing.
	App func() (AppDescription, error)
}

// Check validates the host files of the endpoint app in dir (and, with
// opts.Resolver, of the Resolver app in dir/apps/resolver) against what
// this version of the library needs, reading them as the Functions host
// does (keys case-insensitively). It returns one line per problem, each
// naming the file; none means the files are fine.
func Check(dir string, opts CheckOptions) []string {
	files, err := Render("Endpoint", opts.Resolver)
	if err != nil {
		return []string{err.Error()}
	}
	c := &checker{dir: dir, templates: files, describe: opts.App}
	c.app("", true)
	if opts.Resolver {
		c.app(resolverDir, false)
	}
	return c.problems
}

type checker struct {
	dir       string
	templates []File
	problems  []string
	describe  func() (AppDescription, error)
	// host is the endpoint app's host.json as read (nil when unreadable).
	host map[string]any
	// desc is the app's description once asked (asked tells).
	asked   bool
	desc    AppDescription
	descErr error
}

func (c *checker) addf(file, format string, args ...any) {
	c.problems = append(c.problems, file+": "+fmt.Sprintf(format, args...))
}

// readJSON decodes the file at the slash path rel strictly into v (with
// the comments and trailing commas the host accepts when host is set: see
// hostJSONText). It reports a problem and returns false when the file is
// missing or invalid.
func (c *checker) readJSON(rel string, v any, host bool) bool {
	b, err := os.ReadFile(filepath.Join(c.dir, filepath.FromSlash(rel)))
	if errors.Is(err, fs.ErrNotExist) {
		c.addf(rel, "is missing")
		return false
	}
	switch {
	case err == nil && host:
		err = decodeHostJSON(b, v)
	case err == nil:
		err = decodeStrict(b, v)
	}
	if err != nil {
		c.addf(rel, "%s", truncate(err.Error(), 200))
		return false
	}
	return true
}

func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("not valid JSON: %w", err)
	}
	if dec.More() {
		return errors.New("not valid JSON: data after the JSON value")
	}
	return nil
}

// app checks one app root: its host.json, its function folders and its
// local settings (required for the endpoint app, checked when present for
// the Resolver).
func (c *checker) app(root string, needSettings bool) {
	exe := c.hostJSON(path.Join(root, "host.json"))
	bindings := c.functions(root, exe)
	c.settings(root, needSettings, bindings)
}

// requiredFunctions says, for each function an app must run, what stops
// when it is disabled. The others may be disabled: CloudEventsIngress
// while CloudEvents are off, and InboxCleanup, which only purges expired
// inbox records.
var requiredFunctions = map[string]string{
	"Subscriber":        "no event would reach the endpoint",
	"DeferredProcessor": "parked messages would never be replayed, so a blocked session would stay blocked",
	"Resolver":          "the Resolver app would track nothing",
}

// hostJSON checks host.json and returns the executable it names ("" when
// it names none).
func (c *checker) hostJSON(rel string) string {
	var h map[string]any
	if !c.readJSON(rel, &h, true) {
		return ""
	}
	if rel == "host.json" {
		c.host = h
	}
	c.caseDuplicates(rel, "", h)
	c.want(rel, h, "version", "2.0", false)
	c.want(rel, h, "extensionBundle.id", "Microsoft.Azure.Functions.ExtensionBundle", false)
	if _, ok := lookup(h, "extensionBundle.version"); !ok {
		c.addf(rel, "extensionBundle.version is missing, want a version range such as \"[4.*, 5.0.0)\"")
	}
	if _, ok := lookup(h, "customHandler"); !ok {
		c.addf(rel, "customHandler is missing: the host would not start the handler binary")
		return ""
	}
	// A custom handler cannot settle messages, so a 2xx answer completes
	// the message only with auto-completion; sessions stay ordered only
	// with one call per session. (HTTP forwarding, which the app's HTTP
	// functions need, is checked with them.)
	for _, n := range hostNeeds {
		c.want(rel, h, n.key, n.want, true)
	}
	c.lockRenewal(rel, h)
	c.functionsList(rel, h, path.Dir(rel))

	v, _ := lookup(h, "customHandler.description.defaultExecutablePath")
	exe, _ := v.(string)
	if !plainFileRE.MatchString(exe) {
		c.addf(rel, "customHandler.description.defaultExecutablePath is %s, want a plain file name in the app root (the binary package stages), such as \"handler\"", show(v))
		return ""
	}
	return exe
}

// functionsList checks host.json's optional "functions" array, the only
// functions the host loads when it is present: it must name every
// required function of the app root.
func (c *checker) functionsList(rel string, h map[string]any, root string) {
	v, ok := lookup(h, "functions")
	if !ok {
		return
	}
	list, ok := v.([]any)
	if !ok {
		c.addf(rel, "functions is %s, want a list of function names (or none, to load every function)", show(v))
		return
	}
	if root == "." {
		root = ""
	}
	for _, name := range functionNames(c.templates, root) {
		role, required := requiredFunctions[name]
		if !required || slices.ContainsFunc(list, func(e any) bool { s, _ := e.(string); return strings.EqualFold(s, name) }) {
			continue
		}
		c.addf(rel, "functions does not name %s, so the host would not load it: %s", name, role)
	}
}

// plainFileRE is a file name directly in the app root.
var plainFileRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// lockRenewal checks that a session's lock is renewed for as long as an
// invocation may run; otherwise a long invocation loses its session and
// the message is delivered again while it still runs.
func (c *checker) lockRenewal(rel string, h map[string]any) {
	t, ok1 := lookup(h, "functionTimeout")
	r, ok2 := lookup(h, "extensions.serviceBus.maxAutoLockRenewalDuration")
	if !ok1 || !ok2 {
		return
	}
	ts, _ := t.(string)
	rs, _ := r.(string)
	timeout, err1 := config.ParseDuration(ts)
	renewal, err2 := config.ParseDuration(rs)
	switch {
	case err1 != nil:
		c.addf(rel, "functionTimeout is %s, want a TimeSpan such as \"00:10:00\"", show(t))
	case err2 != nil:
		c.addf(rel, "extensions.serviceBus.maxAutoLockRenewalDuration is %s, want a TimeSpan such as \"00:11:00\"", show(r))
	case renewal < timeout:
		c.addf(rel, "extensions.serviceBus.maxAutoLockRenewalDuration %s is shorter than functionTimeout %s: a long invocation would lose its session lock", rs, ts)
	}
}

// want reports a problem unless the value at the dotted key is want;
// optional accepts a missing value (the host's default is want).
func (c *checker) want(rel string, doc map[string]any, key string, want any, optional bool) {
	got, ok := lookup(doc, key)
	switch {
	case !ok && optional:
	case !ok:
		c.addf(rel, "%s is missing, want %s", key, show(want))
	case !sameValue(key, got, want):
		c.addf(rel, "%s is %s, want %s", key, show(got), show(want))
	}
}

// lookup returns the value at a dotted key of a decoded JSON object,
// matching each key case-insensitively, as the host reads host.json and
// function.json. When an object has several keys differing only in case
// (reported by caseDuplicates), the one spelt as key is taken, else the
// first in byte order.
func lookup(doc map[string]any, key string) (any, bool) {
	var v any = doc
	for _, k := range strings.Split(key, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = get(m, k); !ok {
			return nil, false
		}
	}
	return v, true
}

// get returns the value of the key of m equal to k in case.
func get(m map[string]any, k string) (any, bool) {
	if v, ok := m[k]; ok {
		return v, true
	}
	var found string
	for mk := range m {
		if strings.EqualFold(mk, k) && (found == "" || mk < found) {
			found = mk
		}
	}
	if found == "" {
		return nil, false
	}
	return m[found], true
}

// caseDuplicates reports every object in v (at the dotted path at) that
// has keys differing only in case: the host reads keys case-insensitively
// and would take only one of them.
func (c *checker) caseDuplicates(rel, at string, v any) {
	switch x := v.(type) {
	case map[string]any:
		byFold := map[string][]string{}
		for _, k := range sortedKeys(x) {
			byFold[strings.ToLower(k)] = append(byFold[strings.ToLower(k)], k)
		}
		for _, k := range sortedKeys(x) {
			if keys := byFold[strings.ToLower(k)]; len(keys) > 1 && keys[0] == k {
				where := "the top level"
				if at != "" {
					where = at
				}
				c.addf(rel, "%s has the keys %s, which differ only in case: the host reads keys case-insensitively and takes one of them; keep one", where, quoteAll(keys))
			}
			c.caseDuplicates(rel, join(at, k), x[k])
		}
	case []any:
		for i, e := range x {
			c.caseDuplicates(rel, at+"["+strconv.Itoa(i)+"]", e)
		}
	}
}

func join(at, k string) string {
	if at == "" {
		return k
	}
	return at + "." + k
}

func quoteAll(keys []string) string {
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = strconv.Quote(truncate(k, 60))
	}
	return strings.Join(q, " and ")
}

// enumKeys are the properties whose string values the host compares
// case-insensitively (binding types, directions and data types).
var enumKeys = map[string]bool{"type": true, "direction": true, "datatype": true, "cardinality": true}

// sameValue reports whether the host reads got as want for the property
// key (the last part of a dotted key): equal JSON, or a bool or number
// written as a string (host.json goes through .NET configuration, binding
// properties through Newtonsoft.Json; both convert), or an enum value in
// another case.
func sameValue(key string, got, want any) bool {
	if reflect.DeepEqual(got, want) {
		return true
	}
	gs, ok := got.(string)
	if !ok {
		return false
	}
	switch w := want.(type) {
	case bool:
		return strings.EqualFold(gs, strconv.FormatBool(w))
	case float64:
		f, err := strconv.ParseFloat(strings.TrimSpace(gs), 64)
		return err == nil && f == w
	case string:
		return enumKeys[strings.ToLower(key[strings.LastIndex(key, ".")+1:])] && strings.EqualFold(gs, w)
	}
	return false
}

// show formats a JSON value for a problem line, bounded.
func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "?"
	}
	return truncate(string(b), 80)
}

// usedBinding is a binding of a function folder, for the settings checks.
type usedBinding struct {
	file    string
	binding map[string]any
}

// functions checks the function folders of an app root against the
// templates and returns the bindings it read.
func (c *checker) functions(root, exe string) []usedBinding {
	dirRel := path.Join(root, "functions")
	want := functionNames(c.templates, root)
	entries, err := os.ReadDir(filepath.Join(c.dir, filepath.FromSlash(dirRel)))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.addf(dirRel, "%s", truncate(err.Error(), 200))
	}
	present := map[string]bool{}
	var httpFolders []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		present[e.Name()] = true
		if !contains(want, e.Name()) && root == "" && c.httpFunction(path.Join(dirRel, e.Name()), e.Name()) {
			httpFolders = append(httpFolders, e.Name())
		} else if !contains(want, e.Name()) {
			c.addf(path.Join(dirRel, e.Name()), "the handler serves no function of this name (it serves %s, and the HTTP functions the app registers); the host would call it and fail every invocation", strings.Join(want, ", "))
		}
		if exe != "" && strings.EqualFold(e.Name(), exe) {
			c.addf(path.Join(dirRel, e.Name()), "the function folder would collide with the executable %q in the staged app root", exe)
		}
	}
	var used []usedBinding
	for _, name := range want {
		rel := path.Join(dirRel, name, "function.json")
		if !present[name] {
			c.addf(rel, "is missing")
			continue
		}
		var doc map[string]any
		if !c.readJSON(rel, &doc, true) {
			continue
		}
		c.caseDuplicates(rel, "", doc)
		if d, ok := get(doc, "disabled"); ok && isTrue(d) {
			if role, required := requiredFunctions[name]; required {
				c.addf(rel, "disabled is %s: the host would not run %s, and %s", show(d), name, role)
			}
		}
		got, ok := bindingList(doc)
		if !ok {
			v, _ := get(doc, "bindings")
			c.addf(rel, "bindings is %s, want a list of bindings", show(v))
			continue
		}
		var tmpl map[string]any
		b, _ := renderedFile(c.templates, rel)
		if err := decodeStrict(b, &tmpl); err != nil {
			panic("scaffold: template " + rel + ": " + err.Error())
		}
		want, _ := bindingList(tmpl)
		c.bindings(rel, got, want)
		for _, b := range got {
			used = append(used, usedBinding{rel, b})
		}
	}
	if root == "" {
		c.httpRegistrations(dirRel, httpFolders)
	}
	return used
}

// httpFunction checks the function folder rel (of an endpoint app) that
// is none of the library's as an HTTP function: exactly an httpTrigger in
// and an http out, the bindings the host forwards as the raw request,
// which the app serves when its registrations declare a function of this
// name with the same route and methods. It returns false, reporting
// nothing, when the folder's function.json is not an HTTP function.
func (c *checker) httpFunction(rel, name string) bool {
	b, err := os.ReadFile(filepath.Join(c.dir, filepath.FromSlash(rel), "function.json"))
	if err != nil {
		return false
	}
	var doc map[string]any
	if decodeHostJSON(b, &doc) != nil {
		return false
	}
	bs, ok := bindingList(doc)
	if !ok || len(bs) != 2 {
		return false
	}
	in, out := bs[0], bs[1]
	if t, _ := lookup(out, "type"); t == "httpTrigger" {
		in, out = out, in
	}
	if !bindingIs(in, "httpTrigger", "in") || !bindingIs(out, "http", "out") {
		return false
	}
	file := path.Join(rel, "function.json")
	if c.describe == nil {
		return true
	}
	d, err := c.described()
	if err != nil {
		c.addf(file, "is an HTTP function, and whether the app registers it could not be learned: %s", truncate(err.Error(), 300))
		return true
	}
	i := slices.IndexFunc(d.HTTPFunctions, func(f DescribedHTTP) bool { return strings.EqualFold(f.Name, name) })
	if i < 0 {
		c.addf(file, "is an HTTP function the app does not register (no HandleHTTP with Name %q); the app would answer the host's forwarded request 404", truncate(name, 80))
		return true
	}
	reg := d.HTTPFunctions[i]
	route := name // the host's route when function.json names none
	if v, ok := lookup(in, "route"); ok {
		route, _ = v.(string)
	}
	if !strings.EqualFold(strings.Trim(route, "/"), strings.Trim(reg.Route, "/")) {
		c.addf(file, "route is %s, but the app serves %s at route %q; the host would forward requests the app answers 404", show(route), truncate(reg.Name, 80), truncate(reg.Route, 80))
	}
	var methods []string
	if v, ok := lookup(in, "methods"); ok {
		list, _ := v.([]any)
		for _, m := range list {
			if ms, ok := m.(string); ok {
				methods = append(methods, strings.ToUpper(ms))
			}
		}
	}
	for _, m := range methods {
		if len(reg.Methods) > 0 && !slices.ContainsFunc(reg.Methods, func(r string) bool { return strings.EqualFold(r, m) }) {
			c.addf(file, "methods lists %s, which the app's %s does not accept (it accepts %s); the app would answer 405", truncate(m, 20), truncate(reg.Name, 80), truncate(strings.Join(reg.Methods, ", "), 80))
		}
	}
	if len(methods) == 0 && len(reg.Methods) > 0 {
		c.addf(file, "methods is missing, so the host forwards every method, but the app's %s accepts only %s: list them", truncate(reg.Name, 80), truncate(strings.Join(reg.Methods, ", "), 80))
	}
	return true
}

// bindingIs reports whether a binding has the type and direction.
func bindingIs(b map[string]any, typ, dir string) bool {
	t, _ := lookup(b, "type")
	d, _ := lookup(b, "direction")
	ts, _ := t.(string)
	ds, _ := d.(string)
	return strings.EqualFold(ts, typ) && strings.EqualFold(ds, dir)
}

// httpRegistrations reports the HTTP functions the app registers that have
// no function folder (the host would never forward their requests), and
// host.json not forwarding HTTP requests while the app has HTTP functions.
func (c *checker) httpRegistrations(dirRel string, folders []string) {
	var regs []DescribedHTTP
	if c.describe != nil {
		if d, err := c.described(); err == nil {
			regs = d.HTTPFunctions
		}
	}
	for _, r := range regs {
		if !slices.ContainsFunc(folders, func(f string) bool { return strings.EqualFold(f, r.Name) }) {
			c.addf(path.Join(dirRel, r.Name, "function.json"), "is missing: the app registers the HTTP function %s (route %q), which the host never calls without it; 'nimbus-func init --http %s' writes it",
				truncate(r.Name, 80), truncate(r.Route, 80), truncate(r.Name, 80))
		}
	}
	if len(folders) == 0 && len(regs) == 0 {
		return
	}
	if c.host != nil {
		if v, _ := lookup(c.host, "customHandler.enableForwardingHttpRequest"); !isTrue(v) {
			c.addf("host.json", "customHandler.enableForwardingHttpRequest is %s, want true: the app has HTTP functions, which the host forwards as they came only then", show(v))
		}
	}
}

// bindingList returns the bindings of a decoded function.json; false when
// they are not a list of objects.
func bindingList(doc map[string]any) ([]map[string]any, bool) {
	v, ok := get(doc, "bindings")
	if !ok {
		return nil, true
	}
	list, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]map[string]any, 0, len(list))
	for _, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			return nil, false
		}
		out = append(out, m)
	}
	return out, true
}

// isTrue reports whether a JSON value or app setting value reads as true.
func isTrue(v any) bool {
	switch x := v.(type) {
	case bool:
		return x
	case string:
		return strings.EqualFold(strings.TrimSpace(x), "true")
	}
	return false
}

// bindings compares the bindings of a function.json with the template's:
// every property the template sets must have the template's value
// (cardinality may be left to its default, one).
func (c *checker) bindings(rel string, got, want []map[string]any) {
	for i, w := range want {
		if i >= len(got) {
			c.addf(rel, "bindings[%d] is missing, want a %s binding named %s", i, show(w["type"]), show(w["name"]))
			continue
		}
		g := got[i]
		for _, k := range sortedKeys(w) {
			key := "bindings[" + strconv.Itoa(i) + "]." + k
			gv, ok := get(g, k)
			switch {
			case !ok && k == "cardinality" && w[k] == "one":
			case !ok:
				c.addf(rel, "%s is missing, want %s", key, show(w[k]))
			case !sameValue(k, gv, w[k]):
				c.addf(rel, "%s is %s, want %s%s", key, show(gv), show(w[k]), expressionHint(gv))
			}
		}
		if v, ok := get(g, "autoCompleteMessages"); ok && !sameValue("autoCompleteMessages", v, true) {
			c.addf(rel, "bindings[%d].autoCompleteMessages is %s, want it left out: a custom handler cannot settle messages itself", i, show(v))
		}
	}
	// A function has exactly one trigger: the host does not load one with
	// more.
	triggers := 0
	for i, g := range got {
		t, _ := get(g, "type")
		ts, _ := t.(string)
		if !strings.HasSuffix(strings.ToLower(ts), "trigger") {
			continue
		}
		if triggers++; triggers > 1 {
			c.addf(rel, "bindings[%d] is a second trigger (%s): a function has exactly one trigger, and the host would not load this one", i, show(t))
		}
	}
}

// bindingExprRE matches the %AppSetting% expressions of binding properties.
var bindingExprRE = regexp.MustCompile(`%([^%]+)%`)

// expressionHint explains a binding expression written with "__": the host
// resolves %A:B% to the app setting A__B, and %A__B% to nothing.
func expressionHint(v any) string {
	s, _ := v.(string)
	for _, m := range bindingExprRE.FindAllStringSubmatch(s, -1) {
		if strings.Contains(m[1], "__") {
			return " (the host resolves %A:B% to the app setting A__B; %A__B% never resolves)"
		}
	}
	return ""
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// settingsFiles are the local settings files an app root may hold: the one
// Core Tools reads and the sample init writes.
var settingsFiles = []string{"local.settings.json", "local.settings.sample.json"}

// settings checks the app's local settings files.
func (c *checker) settings(root string, need bool, bindings []usedBinding) {
	found := false
	for _, name := range settingsFiles {
		rel := path.Join(root, name)
		if _, err := os.Stat(filepath.Join(c.dir, filepath.FromSlash(rel))); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		found = true
		var s struct {
			Values map[string]any `json:"Values"`
		}
		if !c.readJSON(rel, &s, false) {
			continue
		}
		if s.Values == nil {
			c.addf(rel, "Values is missing")
			continue
		}
		c.settingValues(rel, root, s.Values, bindings)
	}
	if need && !found {
		c.addf(path.Join(root, settingsFiles[1]), "is missing (and there is no %s): 'nimbus-func init' writes one", settingsFiles[0])
	}
}

func (c *checker) settingValues(rel, root string, values map[string]any, bindings []usedBinding) {
	if rt, ok := values["FUNCTIONS_WORKER_RUNTIME"]; !ok {
		c.addf(rel, "Values.FUNCTIONS_WORKER_RUNTIME is missing, want \"custom\"")
	} else if v, _ := rt.(string); !strings.EqualFold(v, "custom") {
		c.addf(rel, "Values.FUNCTIONS_WORKER_RUNTIME is %s, want \"custom\"", show(rt))
	}
	for _, k := range sortedKeys(values) {
		if _, ok := values[k].(string); !ok {
			c.addf(rel, "Values.%s is %s, want a string", truncate(k, 80), show(values[k]))
		}
		if !strings.HasPrefix(strings.ToLower(k), "nimbus__") || knownSetting(k) {
			continue
		}
		if ok, err := c.declaredSetting(k); ok {
			continue
		} else if err != nil {
			c.addf(rel, "Values.%s is not a setting this version of the library reads, and the app's own settings could not be learned: %s", truncate(k, 80), truncate(err.Error(), 300))
			continue
		}
		hint := ""
		if s, ok := knownSettingFold(k); ok {
			hint = " (app setting names are case-sensitive: " + s + ")"
		}
		declare := ""
		if c.describe != nil {
			declare = ", nor one the app's registrations declare"
		}
		c.addf(rel, "Values.%s is not a setting this version of the library reads%s%s", truncate(k, 80), declare, hint)
	}
	if root == "" {
		c.inboxNeeded(rel, values)
	}
	c.disabledFunctions(rel, root, values)
	c.hostOverrides(rel, values)
	reported := map[string]bool{}
	for _, u := range bindings {
		for _, k := range sortedKeys(u.binding) {
			s, _ := u.binding[k].(string)
			if strings.EqualFold(k, "connection") && s != "" && !hasConnection(values, s) {
				c.addf(rel, "Values has neither %s nor %s__fullyQualifiedNamespace, which %s's connection names", truncate(s, 80), truncate(s, 80), u.file)
			}
			for _, m := range bindingExprRE.FindAllStringSubmatch(s, -1) {
				if strings.Contains(m[1], "__") {
					continue // reported with the binding
				}
				setting := strings.ReplaceAll(m[1], ":", "__")
				if _, ok := values[setting]; !ok && !reported[u.file+" "+setting] {
					reported[u.file+" "+setting] = true
					c.addf(rel, "Values.%s is missing; %s uses %s", truncate(setting, 80), u.file, truncate(m[0], 80))
				}
			}
		}
	}
}

// disabledFunctions reports the app settings that disable a function the
// app needs (AzureWebJobs.<Name>.Disabled, which the host reads), and the
// CloudEvents ingress function disabled while CloudEvents are enabled.
func (c *checker) disabledFunctions(rel, root string, values map[string]any) {
	disabled := map[string]string{} // function name, lower case → setting name
	for _, k := range sortedKeys(values) {
		lk := strings.ToLower(k)
		if name, ok := strings.CutPrefix(lk, "azurewebjobs."); ok && strings.HasSuffix(name, ".disabled") && isTrue(values[k]) {
			disabled[strings.TrimSuffix(name, ".disabled")] = k
		}
	}
	for _, name := range functionNames(c.templates, root) {
		k, off := disabled[strings.ToLower(name)]
		if !off {
			continue
		}
		if role, required := requiredFunctions[name]; required {
			c.addf(rel, "Values.%s is %s: the host would not run %s, and %s", truncate(k, 80), show(values[k]), name, role)
		}
		if name == cloudEventsFunction && isTrue(values[config.KeyCloudEventsEnabled]) {
			c.addf(rel, "Values.%s is %s while %s is true: no CloudEvent would be consumed", truncate(k, 80), show(values[k]), config.KeyCloudEventsEnabled)
		}
	}
}

// hostNeeds are the host.json values the app needs, as hostJSON checks
// them; an app setting AzureFunctionsJobHost__<path with __> overrides
// them.
var hostNeeds = []struct {
	key  string
	want any
}{
	{"extensions.serviceBus.autoCompleteMessages", true},
	{"extensions.serviceBus.maxConcurrentCallsPerSession", float64(1)},
}

// hostOverrides reports the app settings that override a host.json value
// the app needs with another one (the host reads
// AzureFunctionsJobHost__a__b as host.json's a.b, case-insensitively).
func (c *checker) hostOverrides(rel string, values map[string]any) {
	for _, k := range sortedKeys(values) {
		rest, ok := cutPrefixFold(k, "AzureFunctionsJobHost__")
		if !ok {
			continue
		}
		for _, n := range hostNeeds {
			if strings.EqualFold(strings.ReplaceAll(rest, "__", "."), n.key) && !sameValue(n.key, values[k], n.want) {
				c.addf(rel, "Values.%s is %s: it overrides host.json's %s, want %s", truncate(k, 120), show(values[k]), n.key, show(n.want))
			}
		}
	}
}

// cutPrefixFold is strings.CutPrefix with the prefix in any case.
func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return s, false
	}
	return s[len(prefix):], true
}

// cloudEventsFunction receives the CloudEvents ingress subscription; it
// may be disabled while CloudEvents are.
const cloudEventsFunction = "CloudEventsIngress"

// described returns the app's description, asking the app once.
func (c *checker) described() (AppDescription, error) {
	if !c.asked {
		c.asked = true
		c.desc, c.descErr = c.describe()
	}
	return c.desc, c.descErr
}

// declaredSetting reports whether the app's registrations declare the
// setting name.
func (c *checker) declaredSetting(name string) (bool, error) {
	if c.describe == nil {
		return false, nil
	}
	d, err := c.described()
	return slices.Contains(d.Settings, name), err
}

// inboxNeeded reports the inbox turned off (NimBus__Inbox__Enabled not
// true, its default false) in the settings of an endpoint app whose
// registrations include transactional handlers: their writes commit with
// the inbox's markers, and the app refuses to start without it.
func (c *checker) inboxNeeded(rel string, values map[string]any) {
	if c.describe == nil {
		return
	}
	if app, _ := values[config.KeyApp].(string); strings.EqualFold(strings.TrimSpace(app), string(config.AppResolver)) {
		return
	}
	raw, set := values[config.KeyInboxEnabled].(string)
	if on, err := strconv.ParseBool(strings.TrimSpace(raw)); (err == nil && on) || (err != nil && strings.TrimSpace(raw) != "") {
		return // on, or not a boolean (start-up names that)
	}
	d, err := c.described()
	state := fmt.Sprintf("is %s", show(raw))
	if !set {
		state = "is missing (the default is false)"
	}
	switch {
	case err != nil:
		c.addf(rel, "Values.%s %s, and whether the app's registrations need the inbox could not be learned: %s", config.KeyInboxEnabled, state, truncate(err.Error(), 300))
	case len(d.Transactional) > 0:
		c.addf(rel, "Values.%s %s, but the app's transactional handlers (%s) commit with inbox markers and the app refuses to start without the inbox: set it to \"true\", with %s %s (or %s for local runs)",
			config.KeyInboxEnabled, state, truncate(strings.Join(d.Transactional, ", "), 200), config.KeyInboxStore, config.StoreCosmos, config.StoreInMemory)
	}
}

// hasConnection reports whether the settings define the Service Bus
// connection name: as a connection string or as identity settings.
func hasConnection(values map[string]any, name string) bool {
	if _, ok := values[name]; ok {
		return true
	}
	_, ok := values[name+"__fullyQualifiedNamespace"]
	return ok
}

// knownSetting reports whether name is an app setting the library reads
// (config.Settings, with the indexed settings' placeholder standing for
// any index).
func knownSetting(name string) bool {
	for _, s := range config.Settings {
		if s.Name == name || (s.Indexed && indexedRE(s.Name).MatchString(name)) {
			return true
		}
	}
	return false
}

// knownSettingFold returns the known setting name differs from only in case.
func knownSettingFold(name string) (string, bool) {
	for _, s := range config.Settings {
		if !s.Indexed && strings.EqualFold(s.Name, name) {
			return s.Name, true
		}
	}
	return "", false
}

func indexedRE(pattern string) *regexp.Regexp {
	parts := strings.Split(pattern, config.IndexPlaceholder)
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, "[0-9]+") + "$")
}
