package minihost

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testctx"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/funchosttest"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
)

const endpoint = "Erp"

var guidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// invocation is what a test handler sees of one request.
type invocation struct {
	r         *http.Request
	raw       []byte
	body      []byte // Data.message decoded
	metadata  map[string]json.RawMessage
	messageID string
	sessionID string
	delivery  string
	props     map[string]any
}

func decodeInvocation(t *testing.T, r *http.Request) *invocation {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		t.Errorf("reading request: %v", err)
		return nil
	}
	var env struct {
		Data     map[string]string
		Metadata map[string]json.RawMessage
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Errorf("request is not JSON: %v", err)
		return nil
	}
	inv := &invocation{r: r, raw: raw, metadata: env.Metadata}
	if inv.body, err = base64.StdEncoding.DecodeString(env.Data["message"]); err != nil {
		t.Errorf("Data.message is not base64: %v", err)
	}
	inv.messageID = funchosttest.DecodeTwice(t, env.Metadata["MessageId"])
	inv.sessionID = funchosttest.DecodeTwice(t, env.Metadata["SessionId"])
	if err := json.Unmarshal(env.Metadata["DeliveryCount"], &inv.delivery); err != nil {
		t.Errorf("DeliveryCount: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(env.Metadata["ApplicationProperties"])))
	dec.UseNumber()
	if err := dec.Decode(&inv.props); err != nil {
		t.Errorf("ApplicationProperties: %v", err)
	}
	return inv
}

func ok(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"Outputs":{},"Logs":[],"ReturnValue":null}`)
}

type hostFixture struct {
	host   *Host
	client *azservicebus.Client
}

// start runs the Service Bus stand-in with topo, a handler server and a Host
// consuming Erp/Erp.
func start(t *testing.T, topo testenv.Topology, handler func(http.ResponseWriter, *invocation), mutate func(*Config)) *hostFixture {
	t.Helper()
	return startHost(t, topo, handler, Config{Topic: endpoint, Subscription: endpoint, Function: "Subscriber",
		SessionIdleTimeout: 200 * time.Millisecond, AcceptTimeout: 500 * time.Millisecond}, mutate)
}

// startHost runs the Service Bus stand-in with topo, a handler server and a
// Host with cfg, its Client and Invoker filled in, then changed by mutate.
func startHost(t *testing.T, topo testenv.Topology, handler func(http.ResponseWriter, *invocation), cfg Config, mutate func(*Config)) *hostFixture {
	t.Helper()
	sb := testenv.StartServiceBus(t, topo)
	client := sb.Client(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inv := decodeInvocation(t, r)
		if inv == nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		handler(w, inv)
	}))
	t.Cleanup(srv.Close)
	cfg.Client, cfg.Invoker = client, &Invoker{BaseURL: srv.URL}
	if mutate != nil {
		mutate(&cfg)
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return &hostFixture{host: h, client: client}
}

func (f *hostFixture) send(t *testing.T, msgs ...*azservicebus.Message) {
	t.Helper()
	s, err := f.client.NewSender(endpoint, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	for _, m := range msgs {
		if err := s.SendMessage(testctx.Timeout(t, 10*time.Second), m, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func event(session, id string, props map[string]any) *azservicebus.Message {
	p := map[string]any{"To": endpoint, "MessageType": "EventRequest"}
	for k, v := range props {
		p[k] = v
	}
	return &azservicebus.Message{MessageID: &id, SessionID: &session, Body: []byte(`{"id":"` + id + `"}`), ApplicationProperties: p}
}

// assertDrained checks no session of the subscription has messages left.
func (f *hostFixture) assertDrained(t *testing.T) {
	t.Helper()
	_, err := f.client.AcceptNextSessionForSubscription(testctx.Timeout(t, 700*time.Millisecond), endpoint, endpoint, nil)
	if err == nil {
		t.Fatal("a session still has messages")
	}
}

func TestHostInvokesLikeTheFunctionsHostAndCompletes(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]*invocation{}
	f := start(t, testenv.NimBusTopology(endpoint), func(w http.ResponseWriter, inv *invocation) {
		mu.Lock()
		seen[inv.messageID] = inv
		mu.Unlock()
		ok(w)
	}, nil)
	f.send(t,
		event("a", "m-1", map[string]any{"RetryCount": int32(2), "EventId": nil, "QueueTimeMs": int64(5)}),
		event("b", "m-2", nil),
		event("a", "m-3", nil),
	)
	if err := f.host.WaitFor(testctx.Timeout(t, 15*time.Second), func(s Stats) bool { return s.Completes == 3 }); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	inv := seen["m-1"]
	if inv == nil {
		t.Fatalf("m-1 not invoked; saw %v", seen)
	}
	r := inv.r
	if r.Method != http.MethodPost || r.URL.Path != "/Subscriber" {
		t.Errorf("request %s %s", r.Method, r.URL.Path)
	}
	if ua := r.Header.Get("User-Agent"); ua != "Azure-Functions-Host/"+DefaultHostVersion || r.Header.Get("X-Azure-Functions-HostVersion") != DefaultHostVersion {
		t.Errorf("host headers: %q %q", ua, r.Header.Get("X-Azure-Functions-HostVersion"))
	}
	if !guidRE.MatchString(r.Header.Get("X-Azure-Functions-InvocationId")) {
		t.Errorf("invocation id %q", r.Header.Get("X-Azure-Functions-InvocationId"))
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	if len(r.TransferEncoding) != 1 || r.TransferEncoding[0] != "chunked" {
		t.Errorf("body framing %v, want chunked", r.TransferEncoding)
	}
	if string(inv.body) != `{"id":"m-1"}` || inv.sessionID != "a" || inv.delivery != "1" {
		t.Errorf("body %q session %q delivery %q", inv.body, inv.sessionID, inv.delivery)
	}
	if inv.props["RetryCount"] != json.Number("2") || inv.props["QueueTimeMs"] != json.Number("5") || inv.props["To"] != endpoint {
		t.Errorf("ApplicationProperties %v", inv.props)
	}
	if v, present := inv.props["EventId"]; !present || v != nil {
		t.Errorf("EventId = %v (present %v), want null", v, present)
	}
	wantKeys := "MessageReceiver,MessageSession,MessageActions,SessionActions,ReceiveActions,Client,DeliveryCount," +
		"LockToken,ExpiresAtUtc,ExpiresAt,EnqueuedTimeUtc,EnqueuedTime,MessageId,SequenceNumber," +
		"ApplicationProperties,UserProperties,SessionId,sys"
	if keys := strings.Join(funchosttest.MetadataKeys(t, inv.raw), ","); keys != wantKeys {
		t.Errorf("Metadata keys\n got %s\nwant %s", keys, wantKeys)
	}
	var actions struct{ SessionLockedUntil string }
	if err := json.Unmarshal(inv.metadata["SessionActions"], &actions); err != nil {
		t.Fatal(err)
	}
	if lu, err := time.Parse("2006-01-02T15:04:05.9999999-07:00", actions.SessionLockedUntil); err != nil || !lu.After(time.Now()) {
		t.Errorf("SessionLockedUntil %q: %v", actions.SessionLockedUntil, err)
	}
	var enq string
	_ = json.Unmarshal(inv.metadata["EnqueuedTimeUtc"], &enq)
	if e, err := time.Parse("2006-01-02T15:04:05", enq); err != nil || time.Since(e) > time.Minute {
		t.Errorf("EnqueuedTimeUtc %q: %v", enq, err)
	}
	if !guidRE.MatchString(funchosttest.DecodeTwice(t, inv.metadata["LockToken"])) {
		t.Errorf("LockToken %s", inv.metadata["LockToken"])
	}
	var sys struct{ MethodName, RandGuid string }
	if err := json.Unmarshal(inv.metadata["sys"], &sys); err != nil || sys.MethodName != "Subscriber" || !guidRE.MatchString(sys.RandGuid) {
		t.Errorf("sys %s: %v", inv.metadata["sys"], err)
	}
	if s := f.host.Stats(); s != (Stats{Invocations: 3, Completes: 3}) {
		t.Errorf("stats %+v", s)
	}
	f.assertDrained(t)
}

func TestHostAbandonsFailedInvocationsAndTheBrokerRedelivers(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	deliveries := map[string][]string{}
	f := start(t, testenv.NimBusTopology(endpoint), func(w http.ResponseWriter, inv *invocation) {
		mu.Lock()
		deliveries[inv.messageID] = append(deliveries[inv.messageID], inv.delivery)
		first := len(deliveries[inv.messageID]) == 1
		mu.Unlock()
		if !first {
			ok(w)
			return
		}
		switch inv.messageID {
		case "status-500":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, `{"Logs":["boom"]}`)
		case "text-plain":
			_, _ = io.WriteString(w, `{"Outputs":{}}`) // Go sniffs text/plain: the host rejects it
		case "empty-200":
			w.Header().Set("Content-Type", "application/json")
		case "hang-up":
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		}
	}, nil)
	ids := []string{"status-500", "text-plain", "empty-200", "hang-up"}
	for i, id := range ids {
		f.send(t, event(fmt.Sprintf("s-%d", i), id, nil))
	}
	if err := f.host.WaitFor(testctx.Timeout(t, 20*time.Second), func(s Stats) bool { return s.Completes == 4 }); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if got := strings.Join(deliveries[id], ","); got != "1,2" {
			t.Errorf("%s: DeliveryCount per invocation = %s, want 1,2", id, got)
		}
	}
	if s := f.host.Stats(); s != (Stats{Invocations: 8, Completes: 4, Abandons: 4, Failures: 4}) {
		t.Errorf("stats %+v", s)
	}
	f.assertDrained(t)
}

func TestHostFailuresEndInTheDeadLetterQueue(t *testing.T) {
	t.Parallel()
	topo := testenv.Topology{Topics: []testenv.Topic{{Name: endpoint, Subscriptions: []testenv.Subscription{
		{Name: endpoint, RequiresSession: true, MaxDeliveryCount: 3},
	}}}}
	var mu sync.Mutex
	var counts []string
	f := start(t, topo, func(w http.ResponseWriter, inv *invocation) {
		mu.Lock()
		counts = append(counts, inv.delivery)
		mu.Unlock()
		w.WriteHeader(http.StatusInternalServerError)
	}, nil)
	f.send(t, event("s", "poison", nil))
	if err := f.host.WaitFor(testctx.Timeout(t, 15*time.Second), func(s Stats) bool { return s.Abandons == 3 }); err != nil {
		t.Fatal(err)
	}
	// The third abandon dead-lettered the message: once it is in the
	// dead-letter queue the broker cannot deliver it a fourth time, so the
	// counts below are final.
	dlq, err := f.client.NewReceiverForSubscription(endpoint, endpoint, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := dlq.ReceiveMessages(testctx.Timeout(t, 10*time.Second), 1, nil)
	if err != nil || len(ms) != 1 {
		t.Fatalf("dead-letter queue: %v %v", ms, err)
	}
	if m := ms[0]; m.MessageID != "poison" || m.DeadLetterReason == nil || *m.DeadLetterReason != "MaxDeliveryCountExceeded" {
		t.Fatalf("dead-lettered %q reason %v", m.MessageID, m.DeadLetterReason)
	}
	if s := f.host.Stats(); s.Invocations != 3 || s.Completes != 0 {
		t.Errorf("stats %+v", s)
	}
	mu.Lock()
	if got := strings.Join(counts, ","); got != "1,2,3" {
		t.Errorf("DeliveryCount per invocation = %s", got)
	}
	mu.Unlock()
	// And the subscription itself holds nothing more to deliver.
	f.assertDrained(t)
}

func TestHostRunsSessionsConcurrentlyButEachInOrderOneAtATime(t *testing.T) {
	t.Parallel()
	const sessions, perSession, workers = 6, 8, 4
	var mu sync.Mutex
	order := map[string][]string{}
	inFlight := map[string]int{}
	var running, maxRunning atomic.Int32
	// The first invocation holds until a second one runs beside it: proof
	// that sessions run concurrently, and a window in which the host must
	// not invoke the first one's session again.
	var firstTaken atomic.Bool
	overlap := make(chan struct{})
	var overlapOnce sync.Once
	f := start(t, testenv.NimBusTopology(endpoint), func(w http.ResponseWriter, inv *invocation) {
		n := running.Add(1)
		for {
			m := maxRunning.Load()
			if n <= m || maxRunning.CompareAndSwap(m, n) {
				break
			}
		}
		if n >= 2 {
			overlapOnce.Do(func() { close(overlap) })
		}
		mu.Lock()
		inFlight[inv.sessionID]++
		if inFlight[inv.sessionID] > 1 {
			t.Errorf("session %s has %d invocations in flight", inv.sessionID, inFlight[inv.sessionID])
		}
		order[inv.sessionID] = append(order[inv.sessionID], inv.messageID)
		mu.Unlock()
		if firstTaken.CompareAndSwap(false, true) {
			select {
			case <-overlap:
			case <-time.After(10 * time.Second):
				t.Errorf("no second invocation ran while the first one waited 10s")
			}
		}
		mu.Lock()
		inFlight[inv.sessionID]--
		mu.Unlock()
		running.Add(-1)
		ok(w)
	}, func(c *Config) { c.MaxConcurrentSessions = workers })

	var msgs []*azservicebus.Message
	for i := range perSession {
		for s := range sessions {
			msgs = append(msgs, event(fmt.Sprintf("s-%d", s), fmt.Sprintf("s-%d/%d", s, i), nil))
		}
	}
	f.send(t, msgs...)
	if err := f.host.WaitFor(testctx.Timeout(t, 30*time.Second), func(s Stats) bool { return s.Completes == sessions*perSession }); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for s := range sessions {
		sid := fmt.Sprintf("s-%d", s)
		var want []string
		for i := range perSession {
			want = append(want, fmt.Sprintf("%s/%d", sid, i))
		}
		if got := strings.Join(order[sid], " "); got != strings.Join(want, " ") {
			t.Errorf("session %s order:\n got %s\nwant %s", sid, got, strings.Join(want, " "))
		}
	}
	if m := maxRunning.Load(); m < 2 || m > workers {
		t.Errorf("max concurrent invocations %d, want between 2 and %d", m, workers)
	}
	if s := f.host.Stats(); s.Invocations != sessions*perSession || s.Abandons != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestHostStopLetsTheInFlightInvocationSettle(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{})
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	f := start(t, testenv.NimBusTopology(endpoint), func(w http.ResponseWriter, inv *invocation) {
		close(entered)
		<-release
		ok(w)
	}, nil)
	// On an early failure the handler must not hold the test server open.
	t.Cleanup(releaseAll)
	if err := f.host.Start(); err == nil {
		t.Error("second Start succeeded")
	}
	f.send(t, event("s", "m", nil))
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no invocation")
	}
	type stopResult struct {
		err   error
		stats Stats // when Stop returned
	}
	stopped := make(chan stopResult, 1)
	go func() {
		err := f.host.Stop(testctx.Timeout(t, 10*time.Second))
		stopped <- stopResult{err, f.host.Stats()}
	}()
	// Release the invocation only once Stop has cancelled the workers: from
	// then on Stop may return only after the invocation has settled.
	testenv.WaitUntil(t, 10*time.Second, func() bool {
		f.host.mu.Lock()
		defer f.host.mu.Unlock()
		return f.host.cancel == nil
	}, func() string { return "Stop to cancel the workers" })
	select {
	case r := <-stopped:
		t.Fatalf("Stop returned before the invocation finished: %v (stats %+v)", r.err, r.stats)
	default:
	}
	releaseAll()
	r := <-stopped
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.stats != (Stats{Invocations: 1, Completes: 1}) {
		t.Errorf("stats when Stop returned %+v, want the invocation completed", r.stats)
	}
	if err := f.host.Stop(context.Background()); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	f.assertDrained(t)
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	good := Config{Client: &azservicebus.Client{}, Topic: "t", Subscription: "s", Function: "F", Invoker: &Invoker{BaseURL: "http://127.0.0.1:1"}}
	for name, mutate := range map[string]func(*Config){
		"client": func(c *Config) { c.Client = nil }, "topic": func(c *Config) { c.Topic = "" },
		"function": func(c *Config) { c.Function = "" }, "invoker": func(c *Config) { c.Invoker = nil },
	} {
		c := good
		mutate(&c)
		if _, err := New(c); err == nil {
			t.Errorf("missing %s accepted", name)
		}
	}
	if _, err := New(good); err != nil {
		t.Fatal(err)
	}
}

func TestInvokerVerdicts(t *testing.T) {
	t.Parallel()
	var got *http.Request
	var gotBody []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		gotBody, _ = io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/json":
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			_, _ = io.WriteString(w, `{"Outputs":{},"Logs":[],"ReturnValue":null}`)
		case "/textjson":
			w.Header().Set("Content-Type", "text/json")
			_, _ = io.WriteString(w, `{}`)
		case "/plain":
			_, _ = io.WriteString(w, `{}`)
		case "/empty":
			w.Header().Set("Content-Type", "application/json")
		case "/invalid":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"Outputs":`)
		case "/error":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{}`)
		}
	}))
	defer srv.Close()
	iv := &Invoker{BaseURL: srv.URL + "/", HostVersion: "4.0.1"}
	for path, want := range map[string]bool{"json": true, "textjson": true, "plain": false, "empty": false, "invalid": false, "error": false} {
		res, err := iv.Invoke(testctx.Timeout(t, 5*time.Second), path, []byte(`{"Data":{},"Metadata":{}}`))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if res.Succeeded != want {
			t.Errorf("%s: Succeeded = %v (status %d)", path, res.Succeeded, res.StatusCode)
		}
	}

	timer := hostwire.BuildTimer(hostwire.Timer{FunctionName: "InboxCleanup", Next: time.Now(), UtcNow: time.Now(), RandGUID: NewGUID()})
	res, err := iv.Invoke(testctx.Timeout(t, 5*time.Second), "json", timer)
	if err != nil || !res.Succeeded {
		t.Fatalf("timer invocation: %v %v", res, err)
	}
	if string(gotBody) != string(timer) || got.Header.Get("User-Agent") != "Azure-Functions-Host/4.0.1" ||
		got.Header.Get("X-Azure-Functions-InvocationId") != res.InvocationID {
		t.Errorf("request: %s %v", gotBody, got.Header)
	}

	srv.Close()
	if _, err := iv.Invoke(testctx.Timeout(t, 5*time.Second), "json", timer); err == nil {
		t.Error("invoking a closed server succeeded")
	}
}
