package nimbus_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testlog"
	"github.com/nimbus-go/functions-subscriber/internal/devhost"
	"github.com/nimbus-go/functions-subscriber/nimbus"
)

var localSettings = map[string]string{
	"NimBus__Endpoint": "SalesEndpoint", "NimBus__Inbox__Enabled": "true", "NimBus__Inbox__Store": "InMemory",
	"NimBus__Resolver__Sink": "InMemory",
}

// post sends body to url with headers (name, value pairs) and returns the
// status, the answer's body and its Allow header.
func post(t *testing.T, method, url, body string, headers ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// An HTTP function is served at /api/<route> by Run, beside the envelope
// functions: its request's context carries a server span that continues
// the caller's traceparent, so the event its front door publishes
// continues the caller's trace; every request gets one log line with the
// function, status and duration and no value of the request.
func TestRunServesHTTPFunctionsAndContinuesTheTrace(t *testing.T) {
	app := nimbus.New()
	door := app.FrontDoor(nimbus.Container{DatabaseID: "Sales", ContainerID: "orders", PartitionKeyPath: "/customerId"})
	app.HandleHTTP(nimbus.HTTPFunction{Name: "PlaceOrder", Route: "orders/new", Methods: []string{"post"},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if bytes.Contains(body, []byte("panic")) {
				panic("secret-panic-value " + string(body))
			}
			tx := door.Begin(r.Context(), nimbus.Request{PartitionKey: "C-1", Key: "O-1", Fingerprint: body})
			if err := tx.Publish(nimbus.Publication{EventTypeID: "OrderPlaced", MessageID: "OrderPlaced-O-1", SessionID: "O-1", Payload: json.RawMessage(body)}); err != nil {
				t.Error(err)
			}
			res, err := door.Commit(r.Context(), tx, nil)
			if err != nil {
				http.Error(w, "store", http.StatusServiceUnavailable)
				return
			}
			if res.Replayed {
				w.WriteHeader(http.StatusOK)
				return
			}
			w.WriteHeader(http.StatusCreated)
		})})
	var stdout, stderr testlog.Buffer
	base, stop := runApp(t, app, localSettings, &stdout, &stderr)

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	status, _, _ := post(t, http.MethodPost, base+"/api/Orders/New", `{"OrderId":"O-1","Note":"secret-body-value"}`,
		"traceparent", "00-"+traceID+"-00f067aa0ba902b7-01", "Authorization", "secret-header-value", "X-Azure-Functions-InvocationId", "inv-1")
	if status != http.StatusCreated {
		t.Fatalf("POST = %d, want 201", status)
	}
	if status, _, _ := post(t, http.MethodPost, base+"/api/orders/new", `{"OrderId":"O-1","Note":"secret-body-value"}`); status != http.StatusOK {
		t.Fatalf("retry = %d, want 200", status)
	}
	status, _, h := post(t, http.MethodGet, base+"/api/orders/new", "")
	if status != http.StatusMethodNotAllowed || h.Get("Allow") != "POST" {
		t.Fatalf("GET = %d Allow %q, want 405 Allow POST", status, h.Get("Allow"))
	}
	if status, _, _ := post(t, http.MethodPost, base+"/api/orders", "{}"); status != http.StatusNotFound {
		t.Fatalf("unknown route = %d, want 404", status)
	}
	if status, body, _ := post(t, http.MethodPost, base+"/api/orders/new", "panic"); status != http.StatusInternalServerError || strings.Contains(body, "secret") {
		t.Fatalf("panic = %d %q, want 500 without the value", status, body)
	}

	c := &devhost.Client{BaseURL: base}
	sent, err := c.Sent(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(sent) != 1 || sent[0].MessageID != "OrderPlaced-O-1" {
		t.Fatalf("sent = %+v, want the one OrderPlaced", sent)
	}
	tp, _ := sent[0].Properties["traceparent"].Value.(string)
	if !strings.HasPrefix(tp, "00-"+traceID+"-") || strings.Contains(tp, "00f067aa0ba902b7") {
		t.Fatalf("traceparent %q does not continue trace %s under the request's own span", tp, traceID)
	}
	metrics := get(t, base+"/_nimbus/metrics")
	for _, want := range []string{`"nimbus.http.requests{nimbus.outcome=http_2xx}":2`, `"nimbus.http.requests{nimbus.outcome=panicked}":1`,
		`"nimbus.http.request.duration.count{nimbus.outcome=http_2xx}":2`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s: %s", want, metrics)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	out := stdout.String() + stderr.String()
	if strings.Contains(out, "secret") {
		t.Fatalf("a value of a request was logged:\n%s", out)
	}
	var lines []map[string]any
	for _, l := range stdout.Lines(t) {
		if l["message"] == "HTTP request answered" {
			lines = append(lines, l)
		}
	}
	// The 405 is answered by the router before the function runs; the
	// 404 is no function's.
	if len(lines) != 3 {
		t.Fatalf("%d request lines, want 3 (201, 200, 500):\n%s", len(lines), stdout.String())
	}
	first := lines[0]
	if first["function"] != "PlaceOrder" || first["status"] != float64(201) || first["invocationId"] != "inv-1" ||
		first["route"] != "/api/orders/new" || first["hasParentTrace"] != true || first["durationMs"] == nil {
		t.Fatalf("first line = %v", first)
	}
	if lines[2]["status"] != float64(500) || lines[2]["outcome"] != "panicked" || lines[2]["level"] != "error" {
		t.Fatalf("panic line = %v", lines[2])
	}
	if !strings.Contains(stdout.String(), "HTTP function panicked") || !strings.Contains(stderr.String(), "error: PlaceOrder request answered 500") {
		t.Fatalf("the panic is not logged:\n%s\n%s", stdout.String(), stderr.String())
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	_, body, _ := post(t, http.MethodGet, url, "")
	return body
}

// A registration that breaks a rule panics with a message that says which.
func TestHandleHTTPRefusesBadRegistrations(t *testing.T) {
	h := http.NotFoundHandler()
	ok := nimbus.HTTPFunction{Name: "PlaceOrder", Route: "orders", Methods: []string{"POST"}, Handler: h}
	with := func(change func(*nimbus.HTTPFunction)) nimbus.HTTPFunction {
		f := ok
		change(&f)
		return f
	}
	cases := []struct {
		name string
		f    nimbus.HTTPFunction
		want string
	}{
		{"empty name", with(func(f *nimbus.HTTPFunction) { f.Name = "" }), "function name is empty"},
		{"name not starting with a letter", with(func(f *nimbus.HTTPFunction) { f.Name = "1Order" }), "must start with a letter"},
		{"name with a dot", with(func(f *nimbus.HTTPFunction) { f.Name = "Place.Order" }), "only letters, digits"},
		{"name too long", with(func(f *nimbus.HTTPFunction) { f.Name = "P" + strings.Repeat("x", 128) }), "longer than 128"},
		{"the app's own function", with(func(f *nimbus.HTTPFunction) { f.Name = "outboxsweep" }), "the app's own functions"},
		{"nil handler", with(func(f *nimbus.HTTPFunction) { f.Handler = nil }), "nil handler"},
		{"empty route", with(func(f *nimbus.HTTPFunction) { f.Route = "" }), "route is empty"},
		{"leading slash", with(func(f *nimbus.HTTPFunction) { f.Route = "/orders" }), "empty segment"},
		{"trailing slash", with(func(f *nimbus.HTTPFunction) { f.Route = "orders/" }), "empty segment"},
		{"double slash", with(func(f *nimbus.HTTPFunction) { f.Route = "a//b" }), "empty segment"},
		{"dot dot", with(func(f *nimbus.HTTPFunction) { f.Route = "a/../b" }), `".."`},
		{"route parameter", with(func(f *nimbus.HTTPFunction) { f.Route = "orders/{id}" }), "no route parameters"},
		{"query", with(func(f *nimbus.HTTPFunction) { f.Route = "orders?x" }), "no route parameters"},
		{"no method", with(func(f *nimbus.HTTPFunction) { f.Methods = nil }), "no method"},
		{"unknown method", with(func(f *nimbus.HTTPFunction) { f.Methods = []string{"FETCH"} }), `"FETCH" is not one of`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := panicOf(func() { nimbus.New().HandleHTTP(c.f) }); !strings.Contains(got, c.want) {
				t.Fatalf("panic %q, want one containing %q", got, c.want)
			}
		})
	}
	app := nimbus.New()
	app.HandleHTTP(ok)
	if got := panicOf(func() {
		app.HandleHTTP(with(func(f *nimbus.HTTPFunction) { f.Name = "placeorder"; f.Route = "other" }))
	}); !strings.Contains(got, "already registered") {
		t.Fatalf("duplicate name: %q", got)
	}
	if got := panicOf(func() { app.HandleHTTP(with(func(f *nimbus.HTTPFunction) { f.Name = "Other"; f.Route = "ORDERS" })) }); !strings.Contains(got, "already served by PlaceOrder") {
		t.Fatalf("duplicate route: %q", got)
	}
}

// panicOf returns what f panics with, "" when it returns.
func panicOf(f func()) (msg string) {
	defer func() {
		if p := recover(); p != nil {
			msg = fmt.Sprint(p)
		}
	}()
	f()
	return ""
}
