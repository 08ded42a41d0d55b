package nimbus

import (
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/nimbus-go/functions-subscriber/internal/app"
	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
)

// HTTPFunction is an HTTP-triggered function of the app: the Functions
// host forwards each request on its route to Handler as it came
// (host.json's enableForwardingHttpRequest), and answers the client with
// what Handler writes. Its functions/<Name>/function.json declares an
// httpTrigger with the same route and methods and an http output
// ($return); `nimbus-func init --http` writes it.
type HTTPFunction struct {
	// Name is the function's name, its folder under functions/: a letter,
	// then letters, digits, '_' or '-', at most 128 characters, unique
	// among the app's functions (case-insensitively, as the host treats
	// names).
	Name string
	// Route is the path the function is served at, under /api/: "orders"
	// is served at /api/orders. Segments of letters, digits and "-._~"
	// separated by single slashes, without a leading or trailing slash,
	// "." or ".." segments, or route parameters; matched
	// case-insensitively, as the host matches routes.
	Route string
	// Methods are the HTTP methods it accepts (GET, POST, PUT, PATCH,
	// DELETE, HEAD, OPTIONS), at least one; any other is answered 405 with
	// an Allow header.
	Methods []string
	// Handler answers the requests. Its request's context carries the
	// request's server span, which continues the caller's traceparent:
	// Publish and FrontDoor calls made with r.Context() continue that
	// trace. A panic is answered 500 and logged.
	Handler http.Handler
}

// httpMethods are the methods an HTTPFunction may accept.
var httpMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodHead, http.MethodOptions}

// HandleHTTP registers the HTTP function f, served at /api/<f.Route>
// beside the app's other functions, on the same port: under the
// Functions host, and in a plain `go run .`, where a client calls it as
// the host would forward the call. Every request gets one log line (the
// function, method, route, status and duration; no header value or body),
// a server span and the nimbus.http.* metrics.
//
// HandleHTTP panics on a name, route or method that breaks the rules of
// HTTPFunction, a nil handler, a name or route registered before (or the
// name of one of the app's own functions), or a call after Main or Run
// started: those are programming errors, found at start-up.
func (a *App) HandleHTTP(f HTTPFunction) {
	if f.Handler == nil {
		panic("nimbus: HandleHTTP with a nil handler for " + strconv.Quote(logsafe.BoundTo(f.Name, 128)))
	}
	if err := checkFunctionName(f.Name); err != "" {
		panic("nimbus: HandleHTTP: function name " + err)
	}
	if err := checkRoute(f.Route); err != "" {
		panic("nimbus: HandleHTTP " + f.Name + ": route " + err)
	}
	methods, err := checkMethods(f.Methods)
	if err != "" {
		panic("nimbus: HandleHTTP " + f.Name + ": " + err)
	}
	for _, own := range app.EndpointFunctions {
		if strings.EqualFold(own, f.Name) {
			panic("nimbus: HandleHTTP: " + f.Name + " is the name of one of the app's own functions")
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started {
		panic("nimbus: HandleHTTP for " + f.Name + " after the app started")
	}
	for _, g := range a.httpFunctions {
		switch {
		case strings.EqualFold(g.Name, f.Name):
			panic("nimbus: an HTTP function named " + g.Name + " is already registered")
		case strings.EqualFold(g.Route, f.Route):
			panic("nimbus: HandleHTTP " + f.Name + ": route " + f.Route + " is already served by " + g.Name)
		}
	}
	a.httpFunctions = append(a.httpFunctions, app.HTTPFunction{Name: f.Name, Route: f.Route, Methods: methods, Handler: f.Handler})
}

// checkFunctionName says what is wrong with a function name, "" when
// nothing: the host's rule for function names.
func checkFunctionName(name string) string {
	if name == "" {
		return "is empty"
	}
	if len(name) > 128 {
		return "is longer than 128 characters"
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		switch {
		case i == 0 && !letter:
			return "must start with a letter"
		case !letter && !(c >= '0' && c <= '9') && c != '_' && c != '-':
			return "may hold only letters, digits, '_' and '-'"
		}
	}
	return ""
}

// checkRoute says what is wrong with a route, "" when nothing.
func checkRoute(route string) string {
	if route == "" {
		return "is empty"
	}
	if len(route) > 512 {
		return "is longer than 512 characters"
	}
	for seg := range strings.SplitSeq(route, "/") {
		switch seg {
		case "":
			return "has an empty segment (a leading, trailing or double slash): write it as \"orders\" or \"orders/new\""
		case ".", "..":
			return "has a \".\" or \"..\" segment"
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~", c) >= 0) {
				return "may hold only letters, digits, \"-._~\" and \"/\" between segments (no route parameters)"
			}
		}
	}
	return ""
}

// checkMethods returns methods upper-cased, each once, or what is wrong.
func checkMethods(methods []string) ([]string, string) {
	if len(methods) == 0 {
		return nil, "no method: name the methods it accepts (for example POST)"
	}
	var out []string
	for _, m := range methods {
		u := strings.ToUpper(m)
		if !slices.Contains(httpMethods, u) {
			return nil, "method " + strconv.Quote(logsafe.BoundTo(m, 32)) + " is not one of " + strings.Join(httpMethods, ", ")
		}
		if !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return out, ""
}

// httpFunctionsList returns the registered HTTP functions.
func (a *App) httpFunctionsList() []app.HTTPFunction {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.httpFunctions)
}

// httpFunctionNames names fs.
func httpFunctionNames(fs []app.HTTPFunction) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Name
	}
	return out
}
