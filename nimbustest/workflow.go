package nimbustest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/nimbus-go/functions-subscriber/internal/app"
	"github.com/nimbus-go/functions-subscriber/internal/compose"
	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testlog"
	"github.com/nimbus-go/functions-subscriber/internal/devhost"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/session"
	"github.com/nimbus-go/functions-subscriber/internal/tracking"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
	"github.com/nimbus-go/functions-subscriber/nimbus"
)

// Workflow runs several endpoint apps and one NimBus Resolver in the test
// process, on the real pipeline, with NimBus's Service Bus topology between
// them in memory. Each endpoint app is the *nimbus.App its main builds,
// composed as Run composes it, with an in-memory inbox, session state, unit
// of work (the transactional handlers' containers and front doors) and
// endpoint topic; the Resolver is the Resolver app (NimBus__App=Resolver)
// on an in-memory tracking store.
//
// Every message an endpoint sends goes to its topic, whose subscriptions
// are NimBus's: the endpoint's own (To = the endpoint; To = Retry and To =
// Continuation rewritten to it, From = Retry or Continuation), the Resolver
// fan-out (To = Resolver with From set to the endpoint, and an audit copy of
// everything addressed to the endpoint), Deferred (the parked copies, which
// the DeferredProcessor replays), DeferredProcessor (the replay requests),
// and one forwarding subscription per consuming endpoint, with one rule per
// event type as [Endpoint.Publishes] declares them: filter
// EventTypeId = '<type>' AND From IS NULL, action SET From = '<producer>',
// EventId = newid(), To = '<consumer>' (the MessageId is kept).
//
// [Workflow.Run] delivers what is due, one message at a time, as the
// Functions host does: a session's messages in order, one in flight per
// session; a message the app does not complete (a non-2xx answer) is
// redelivered with DeliveryCount+1 up to the endpoint's
// NimBus__Session__MaxDeliveryCount (default 10), then dead-lettered, the
// app having reported the last delivery to the Resolver. Scheduled messages
// (RetryRequests, the Resolver's re-sends) are enqueued when the harness's
// clock, which only [Workflow.Advance] moves, reaches their time; the
// pipeline's pauses take no time.
//
// A test asserts on what the team's users would see: each delivery's
// outcome as the pipeline logged it ([Workflow.Deliveries]), every message
// of each topic with its NimBus properties ([Workflow.Topic]), the status
// NimBus's Manager shows for each event ([Workflow.Status],
// [Workflow.Events]), dead-lettered messages ([Workflow.DeadLetters]) and
// the documents of each container ([Workflow.Documents]). It acts as an
// operator with [Workflow.Resubmit], [Workflow.Skip] and [Workflow.Retry], calls HTTP
// functions with [Workflow.Call] and timer functions with
// [Workflow.Timer], and injects store outages and refused sends with
// [Workflow.Inject].
//
// A Workflow is not safe for concurrent use: drive it from the test's
// goroutine.
type Workflow struct {
	t        testing.TB
	maxSteps int

	mu         sync.Mutex // guards the fields below, which the apps' ports reach
	now        time.Time
	seq        int64
	ids        int64
	endpoints  map[string]*endpoint
	order      []string
	resolver   *resolverNode
	topics     map[string][]*Message
	subs       []*subscription
	scheduled  []*scheduledMessage
	faults     []*faultState
	deliveries []Delivery
	paused     time.Duration
}

// Endpoint is one endpoint app of a workflow.
type Endpoint struct {
	// Name is the endpoint id (NimBus__Endpoint): its topic's name.
	Name string
	// App is the app as its main builds it, its handlers and HTTP
	// functions registered; it must not have run or been composed before.
	App *nimbus.App
	// Settings are further app settings as "key=value" pairs (container
	// ids, retry policies, NimBus__Session__MaxDeliveryCount, ...). The
	// harness sets the endpoint name, the in-memory stores and sink and the
	// log level info (it reads the outcome of each invocation from the
	// app's log lines), and NimBus__Inbox__Enabled=true unless given here.
	Settings []string
	// Publishes declares the forwarding subscriptions of the endpoint's
	// topic as the Bicep's publishedEvents does: each event type id mapped
	// to the endpoints that consume it. A consumer equal to the endpoint
	// itself is left out, as NimBus's topology does.
	Publishes map[string][]string
}

// Options configure a [Workflow].
type Options struct {
	// Endpoints are the apps of the workflow. At least one.
	Endpoints []Endpoint
	// Start is the harness clock's first time; zero means
	// 2026-01-01T09:00:00Z.
	Start time.Time
	// MaxSteps bounds the deliveries of one Run; zero means 1000.
	MaxSteps int
}

// New composes the apps of o and returns the workflow; t's cleanup closes
// them. A composition that fails (a settings problem) fails the test.
func New(t testing.TB, o Options) *Workflow {
	t.Helper()
	w, err := newWorkflow(t, o)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func newWorkflow(t testing.TB, o Options) (*Workflow, error) {
	if len(o.Endpoints) == 0 {
		return nil, errors.New("nimbustest: a workflow needs at least one endpoint")
	}
	w := &Workflow{t: t, maxSteps: o.MaxSteps, now: o.Start.UTC(),
		endpoints: map[string]*endpoint{}, topics: map[string][]*Message{}}
	if w.maxSteps <= 0 {
		w.maxSteps = 1000
	}
	if o.Start.IsZero() {
		w.now = time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	}
	for _, e := range o.Endpoints {
		switch {
		case e.Name == "" || e.Name == message.ResolverID:
			return nil, fmt.Errorf("nimbustest: endpoint name %q is empty or NimBus's Resolver", e.Name)
		case e.App == nil:
			return nil, fmt.Errorf("nimbustest: endpoint %s has no app", e.Name)
		case w.endpoints[e.Name] != nil:
			return nil, fmt.Errorf("nimbustest: endpoint %s is given twice", e.Name)
		}
		w.endpoints[e.Name] = &endpoint{w: w, name: e.Name, publishes: e.Publishes, settings: e.Settings}
		w.order = append(w.order, e.Name)
	}
	for _, e := range o.Endpoints {
		for typ, consumers := range e.Publishes {
			for _, c := range consumers {
				if w.endpoints[c] == nil {
					return nil, fmt.Errorf("nimbustest: %s's %s goes to %s, which is not an endpoint of the workflow (Service Bus refuses a forward to a missing topic)", e.Name, typ, c)
				}
			}
		}
	}
	if err := w.composeResolver(); err != nil {
		return nil, err
	}
	for _, e := range o.Endpoints {
		if err := w.composeEndpoint(w.endpoints[e.Name], e.App); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// endpoint is one composed endpoint app and its topic's state.
type endpoint struct {
	w         *Workflow
	name      string
	publishes map[string][]string
	settings  []string
	svc       *app.App
	logs      *logBuffer
	txn       *txn.Memory
	main      *subscription
	processor *subscription
	parked    []*parkedCopy
	locked    map[string]bool
	maxDel    int
}

// resolverNode is the composed Resolver app.
type resolverNode struct {
	svc      *app.App
	logs     *logBuffer
	tracking *tracking.Memory
	sub      *subscription
}

// baseSettings are the settings the harness gives every endpoint app
// before the test's own: the first of repeated names wins.
func baseSettings(name string) []string {
	return []string{
		"NimBus__Endpoint=" + name,
		"NimBus__App=Endpoint",
		"NimBus__Inbox__Store=InMemory",
		"NimBus__Session__Store=InMemory",
		"NimBus__Resolver__Sink=InMemory",
		"NimBus__LogLevel=info",
	}
}

func (w *Workflow) deps() app.Deps {
	return app.Deps{
		Now:            w.Now,
		Pause:          w.pause,
		Rand:           func() float64 { return 0.5 },
		TracerProvider: noop.NewTracerProvider(),
	}
}

func (w *Workflow) composeEndpoint(e *endpoint, a *nimbus.App) error {
	environ := append(baseSettings(e.name), e.settings...)
	environ = append(environ, "NimBus__Inbox__Enabled=true")
	e.maxDel = 10
	if v := config.EnvironValue(environ, "NimBus__Session__MaxDeliveryCount"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("nimbustest: %s: NimBus__Session__MaxDeliveryCount is not a count of 1 or more", e.name)
		}
		e.maxDel = n
	}
	store, err := inbox.NewMemoryStore(inbox.MemoryOptions{Now: w.Now})
	if err != nil {
		return err
	}
	e.txn = txn.NewMemory(w.Now)
	e.locked = map[string]bool{}
	e.logs = &logBuffer{}
	d := w.deps()
	d.Store = faultyInbox{Store: store, w: w, endpoint: e.name}
	d.Sessions = faultySessions{Store: session.NewMemory(session.MemoryOptions{Now: w.Now}), w: w, endpoint: e.name}
	d.Txn = faultyTxn{Memory: e.txn, w: w, endpoint: e.name}
	d.Publisher = &topicPublisher{w: w, endpoint: e.name}
	d.Deferred = deferredPort{e: e}
	svc, err := compose.App(a, compose.Options{Environ: environ, Stdout: e.logs, Deps: d})
	if err != nil {
		return fmt.Errorf("nimbustest: endpoint %s: %w", e.name, err)
	}
	e.svc = svc
	w.t.Cleanup(func() { _ = svc.Close(context.Background()) })
	e.main = w.addSubscription(e.name, e.name, app.FuncSubscriber, true, e.maxDel)
	e.processor = w.addSubscription(e.name, message.DeferredProcessorAddress, app.FuncDeferredProcessor, false, 10)
	return nil
}

func (w *Workflow) composeResolver() error {
	r := &resolverNode{tracking: &tracking.Memory{}, logs: &logBuffer{}}
	d := w.deps()
	d.Resolver = app.ResolverDeps{Tracking: faultyTracking{Writer: r.tracking, w: w}, Scheduler: resolverScheduler{w: w}}
	environ := []string{
		"NimBus__App=Resolver", "NimBus__Resolver__Store=InMemory", "NimBus__LogLevel=info",
		// Never dialled: the Resolver's re-sends go through the harness.
		"ServiceBusConnection=Endpoint=sb://nimbustest.invalid/;SharedAccessKeyName=k;SharedAccessKey=v",
	}
	svc, err := compose.App(nimbus.New(), compose.Options{Environ: environ, Stdout: r.logs, Deps: d})
	if err != nil {
		return fmt.Errorf("nimbustest: the Resolver: %w", err)
	}
	r.svc = svc
	w.t.Cleanup(func() { _ = svc.Close(context.Background()) })
	r.sub = w.addSubscription(message.ResolverID, message.ResolverID, app.FuncResolver, true, 10)
	w.resolver = r
	return nil
}

// Now returns the harness's clock, the apps' clock.
func (w *Workflow) Now() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.now
}

// pause is the apps' wait before a transient failure is answered and the
// Resolver's between quick retries: it takes no time, only counts.
func (w *Workflow) pause(_ context.Context, d time.Duration) {
	w.mu.Lock()
	w.paused += d
	w.mu.Unlock()
}

// Paused returns the sum of the waits the apps asked for (before answering
// a transient failure, between the Resolver's quick retries), none of
// which took time: the clock moves only with [Workflow.Advance].
func (w *Workflow) Paused() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.paused
}

// Advance moves the clock on by d, enqueuing the scheduled messages whose
// time has come; [Workflow.Run] then delivers them.
func (w *Workflow) Advance(d time.Duration) {
	if d < 0 {
		w.t.Fatalf("nimbustest: Advance(%v): the clock does not go back", d)
	}
	w.mu.Lock()
	w.now = w.now.Add(d)
	w.mu.Unlock()
}

// Scheduled returns the messages scheduled for a later time (on any topic)
// and not yet enqueued, in the order they are due.
func (w *Workflow) Scheduled() []ScheduledMessage {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]ScheduledMessage, 0, len(w.scheduled))
	for _, s := range w.scheduled {
		out = append(out, ScheduledMessage{Message: *s.msg, At: s.at})
	}
	return out
}

// ScheduledMessage is a message to be enqueued at At.
type ScheduledMessage struct {
	Message
	At time.Time
}

// Delivery is one invocation the harness made, with the outcome the app
// logged for it (a replay logs one outcome for the request and one per
// replayed copy: Replays).
type Delivery struct {
	// Endpoint is the app invoked ("Resolver" for the Resolver app).
	Endpoint string
	// Function is the function invoked: Subscriber, DeferredProcessor,
	// Resolver, or a timer function.
	Function string
	// MessageID, SessionID, MessageType and EventTypeID are the delivered
	// message's; DeliveryCount the broker's count (1 on the first).
	MessageID, SessionID, MessageType, EventTypeID string
	DeliveryCount                                  int
	// Status is the HTTP status the app answered: 2xx completes the
	// message, anything else abandons it.
	Status int
	// Outcome is the outcome the invocation's log line names
	// ("completed", "failed", "parked", "transient_failure", ...); "" when
	// the app logged none.
	Outcome string
	// Replays are the outcomes of the parked copies a DeferredProcessor
	// invocation replayed, in order.
	Replays []Replay
	// DeadLettered is set when this delivery was the last the broker makes:
	// the message went to the subscription's dead-letter queue.
	DeadLettered bool
	// Line is the invocation's log line as the app wrote it (JSON).
	Line string
}

// Replay is one parked copy replayed by a DeferredProcessor invocation.
type Replay struct {
	MessageID, EventTypeID, Outcome string
}

// Deliveries returns every invocation of endpoint ("" for all endpoints and
// the Resolver; "Resolver" for the Resolver), in order.
func (w *Workflow) Deliveries(endpoint string) []Delivery {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Delivery
	for _, d := range w.deliveries {
		if endpoint == "" || d.Endpoint == endpoint {
			out = append(out, d)
		}
	}
	return out
}

// Outcomes returns the outcomes of endpoint's Subscriber deliveries and of
// the copies its replays replayed, in order, each as
// "<EventTypeID or MessageType> <outcome>": a compact line to compare.
func (w *Workflow) Outcomes(endpoint string) []string {
	var out []string
	for _, d := range w.Deliveries(endpoint) {
		switch d.Function {
		case app.FuncSubscriber:
			out = append(out, label(d.EventTypeID, d.MessageType)+" "+d.Outcome)
		case app.FuncDeferredProcessor:
			for _, r := range d.Replays {
				out = append(out, label(r.EventTypeID, "")+" "+r.Outcome)
			}
		}
	}
	return out
}

func label(eventType, messageType string) string {
	if eventType != "" {
		return eventType
	}
	return messageType
}

// Run delivers every due message, and what their handling sends, until
// nothing due is left (scheduled messages wait for [Workflow.Advance]). It
// returns an error when the step limit is reached (a loop: a message
// redelivered forever, events that never stop) or an invocation could not
// be made.
func (w *Workflow) Run() error {
	for step := 0; ; step++ {
		w.enqueueDue()
		e, sub := w.next()
		if e == nil {
			return nil
		}
		if step >= w.maxSteps {
			return fmt.Errorf("nimbustest: Run stopped after %d deliveries with messages still due (next: %s %s on %s): a message redelivered or events published without end; raise Options.MaxSteps if the workflow is that long", w.maxSteps, e.msg.Type(), e.msg.MessageID, sub.name)
		}
		if err := w.deliver(sub, e); err != nil {
			return err
		}
	}
}

// MustRun is Run, failing the test on an error.
func (w *Workflow) MustRun() {
	w.t.Helper()
	if err := w.Run(); err != nil {
		w.t.Fatal(err)
	}
}

// deliver invokes sub's function with e and settles it on the answer.
func (w *Workflow) deliver(sub *subscription, e *queued) error {
	e.deliveries++
	w.mu.Lock()
	w.seq++
	seq := w.seq
	now := w.now
	w.mu.Unlock()
	nm := e.msg.wire()
	sb := nm.Delivery(sub.function, e.msg.MessageID, e.deliveries, e.msg.EnqueuedAt)
	if !sub.sessions {
		sb.SessionLockedUntil = time.Time{}
	}
	devhost.HostFields(&sb, seq, now)
	env, err := hostwire.Build(sb)
	if err != nil {
		return fmt.Errorf("nimbustest: the envelope of %s on %s: %w", e.msg.MessageID, sub.name, err)
	}
	svc, logs := w.target(sub)
	invID := fmt.Sprintf("nimbustest-%d", seq)
	status, lines := invoke(svc, logs, sub.function, invID, env)
	d := Delivery{Endpoint: sub.receiver, Function: sub.function, MessageID: e.msg.MessageID, SessionID: e.msg.SessionID,
		MessageType: e.msg.Type(), EventTypeID: e.msg.EventTypeID(), DeliveryCount: e.deliveries, Status: status}
	d.fill(lines)
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case status/100 == 2:
		sub.remove(e)
	case e.deliveries >= sub.maxDelivery:
		sub.remove(e)
		d.DeadLettered = true
		sub.dead = append(sub.dead, e.msg)
	}
	w.deliveries = append(w.deliveries, d)
	return nil
}

// fill reads the invocation's outcome lines into d: a replay logs one
// line per replayed copy, then the invocation's own.
func (d *Delivery) fill(lines []logLine) {
	if len(lines) == 0 {
		return
	}
	own := lines[len(lines)-1]
	d.Outcome, d.Line = own.Outcome, own.raw
	for _, l := range lines[:len(lines)-1] {
		d.Replays = append(d.Replays, Replay{MessageID: l.MessageID, EventTypeID: l.EventTypeID, Outcome: l.Outcome})
	}
}

func (w *Workflow) target(sub *subscription) (*app.App, *logBuffer) {
	if sub.receiver == message.ResolverID {
		return w.resolver.svc, w.resolver.logs
	}
	e := w.endpoints[sub.receiver]
	return e.svc, e.logs
}

// invoke POSTs env to function as the host does and returns the status
// and the log lines of the invocation that name an outcome.
func invoke(svc *app.App, logs *logBuffer, function, invID string, env []byte) (int, []logLine) {
	req := httptest.NewRequest(http.MethodPost, "/"+function, bytes.NewReader(env))
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("X-Azure-Functions-InvocationId", invID)
	rec := httptest.NewRecorder()
	svc.Handler().ServeHTTP(rec, req)
	return rec.Code, logs.outcomes(invID)
}

// Timer invokes endpoint's timer function (InboxCleanup, OutboxSweep) as
// the host does on a tick and returns the delivery; what the run sends is
// delivered by the next [Workflow.Run].
func (w *Workflow) Timer(endpoint, function string) Delivery {
	w.t.Helper()
	e := w.endpoint(endpoint)
	w.mu.Lock()
	w.seq++
	seq, now := w.seq, w.now
	w.mu.Unlock()
	env := hostwire.BuildTimer(hostwire.Timer{FunctionName: function, Last: now.Add(-5 * time.Minute), Next: now.Add(5 * time.Minute),
		LastUpdated: now.Add(-5 * time.Minute), UtcNow: now, RandGUID: fmt.Sprintf("0f8fad5b-d9cb-469f-a165-%012d", seq)})
	invID := fmt.Sprintf("nimbustest-%d", seq)
	status, lines := invoke(e.svc, e.logs, function, invID, env)
	d := Delivery{Endpoint: endpoint, Function: function, Status: status}
	d.fill(lines)
	w.mu.Lock()
	w.deliveries = append(w.deliveries, d)
	w.mu.Unlock()
	return d
}

// Call serves r by endpoint's app as the Functions host forwards an HTTP
// function's request (enableForwardingHttpRequest): r's path is the
// function's, such as /api/orders. What the function publishes is
// delivered by the next [Workflow.Run].
func (w *Workflow) Call(endpoint string, r *http.Request) *http.Response {
	w.t.Helper()
	e := w.endpoint(endpoint)
	rec := httptest.NewRecorder()
	e.svc.Handler().ServeHTTP(rec, r)
	return rec.Result()
}

func (w *Workflow) endpoint(name string) *endpoint {
	w.t.Helper()
	e := w.endpoints[name]
	if e == nil {
		w.t.Fatalf("nimbustest: %s is not an endpoint of the workflow (endpoints: %s)", name, strings.Join(w.order, ", "))
	}
	return e
}

// Documents returns the live documents of endpoint's container c (a
// transactional handler's or a front door's, its ids read from the
// endpoint's settings as the app reads them), the inbox markers included,
// ordered by partition key value and id.
func (w *Workflow) Documents(endpoint string, c nimbus.Container) []json.RawMessage {
	w.t.Helper()
	e := w.endpoint(endpoint)
	environ := append(baseSettings(e.name), e.settings...)
	t := txn.Target{DatabaseID: c.DatabaseID, ContainerID: c.ContainerID, PartitionKeyPath: c.PartitionKeyPath}
	if v := config.EnvironValue(environ, c.DatabaseSetting); c.DatabaseSetting != "" && v != "" {
		t.DatabaseID = v
	}
	if v := config.EnvironValue(environ, c.ContainerSetting); c.ContainerSetting != "" && v != "" {
		t.ContainerID = v
	}
	docs, err := e.txn.Documents(t)
	if err != nil {
		w.t.Fatalf("nimbustest: the documents of %s on %s: %v", t, endpoint, err)
	}
	return docs
}

// logBuffer keeps an app's JSON log lines; read is the offset up to which
// outcomes has read them (only the test's goroutine reads).
type logBuffer struct {
	testlog.Buffer
	read int
}

// logLine is the part of an invocation's log line the harness reads.
type logLine struct {
	InvocationID string `json:"invocationId"`
	Outcome      string `json:"outcome"`
	MessageID    string `json:"messageId"`
	EventTypeID  string `json:"eventTypeId"`
	raw          string
}

// outcomes returns the lines of invocation invID that name an outcome,
// among those written since the last call (invocations run one at a time).
func (b *logBuffer) outcomes(invID string) []logLine {
	var text string
	text, b.read = b.Since(b.read)
	var out []logLine
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var l logLine
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.InvocationID != invID || l.Outcome == "" {
			continue
		}
		l.raw = sc.Text()
		out = append(out, l)
	}
	return out
}

// LogLines returns the JSON log lines endpoint's app wrote ("Resolver" for the
// Resolver app), one per element.
func (w *Workflow) LogLines(endpoint string) []string {
	w.t.Helper()
	var b *logBuffer
	if endpoint == message.ResolverID {
		b = w.resolver.logs
	} else {
		b = w.endpoint(endpoint).logs
	}
	return strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
}
