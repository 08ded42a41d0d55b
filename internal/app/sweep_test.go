package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testlog"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
	"github.com/nimbus-go/functions-subscriber/internal/txn/txntest"
)

var sweepLedger = txn.Target{DatabaseID: "Billing", ContainerID: "ledger", PartitionKeyPath: "/customerId"}

func sweepEnvelope() []byte {
	now := time.Now()
	return hostwire.BuildTimer(hostwire.Timer{FunctionName: FuncOutboxSweep, Last: now.Add(-5 * time.Minute), Next: now, LastUpdated: now, UtcNow: now, RandGUID: "g"})
}

// sweepApp is an endpoint app with a transactional handler on the ledger,
// its containers in memory on clk, and the in-memory Resolver sink.
type sweepApp struct {
	*testApp
	store  *txn.Memory
	pub    *resolver.Memory
	stderr *bytes.Buffer
	clk    *clock
}

func newSweepApp(t *testing.T, transactional bool, settings map[string]string) *sweepApp {
	t.Helper()
	return newSweepAppOn(t, transactional, settings, nil)
}

// newSweepAppOn is newSweepApp with the app's store wrapped by wrap (nil:
// the memory store itself).
func newSweepAppOn(t *testing.T, transactional bool, settings map[string]string, wrap func(*txn.Memory) txn.Store) *sweepApp {
	t.Helper()
	m := map[string]string{
		config.KeyEndpoint: "BillingEndpoint", config.KeyInboxEnabled: "true", config.KeyInboxStore: "InMemory",
		config.KeyResolverSink: "InMemory", config.KeyRetryBaseDelay: "0", config.KeyOutboxMinimumAge: "00:10:00",
	}
	for k, v := range settings {
		m[k] = v
	}
	cfg, err := config.Load(config.FromMap(m))
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{now: time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)}
	reg := subscriber.NewRegistry()
	if transactional {
		reg.HandleTx("PaymentReceived", subscriber.TxBinding{
			Target:       sweepLedger,
			PartitionKey: func(*subscriber.Event) (string, error) { return "c-1", nil },
		}, func(context.Context, *subscriber.Event, *txn.Unit) (subscriber.Result, error) {
			return subscriber.Completed(), nil
		})
	}
	store := txn.NewMemory(clk.Now)
	pub := &resolver.Memory{}
	logs := &testlog.Buffer{}
	stderr := &bytes.Buffer{}
	var deps txn.Store = store
	if wrap != nil {
		deps = wrap(store)
	}
	a, err := New(cfg, Deps{Handlers: reg, Log: zerolog.New(logs), Now: clk.Now, Txn: deps, Publisher: pub, Stderr: stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	return &sweepApp{testApp: &testApp{App: a, logs: logs}, store: store, pub: pub, stderr: stderr, clk: clk}
}

// commit stores a delivery's outbox as the pipeline would, at time at.
func (s *sweepApp) commit(t *testing.T, pk, msg string, at time.Time, events ...string) {
	t.Helper()
	tx := txn.Begin(s.store, sweepLedger, pk, func() time.Time { return at })
	if err := tx.Unit().Create(map[string]any{"id": "payment-" + msg, "customerId": pk}); err != nil {
		t.Fatal(err)
	}
	for _, id := range events {
		e := message.Stored{MessageID: id, SessionID: pk, ApplicationProperties: map[string]any{"To": "PaymentRecorded", "EventTypeId": "PaymentRecorded"},
			Body: []byte(`{"EventContent":{"EventTypeId":"PaymentRecorded","EventJson":"{\"Card\":\"` + secretPayload + `\"}"},"ErrorContent":null}`)}
		if err := tx.Unit().Publish(e); err != nil {
			t.Fatal(err)
		}
	}
	resp := &message.Stored{SessionID: pk, ApplicationProperties: map[string]any{"To": "Resolver", "MessageType": "ResolutionResponse"}, Body: []byte(`{}`)}
	if _, err := tx.Commit(context.Background(), txn.Marker{EndpointID: "BillingEndpoint", MessageID: msg, Retention: time.Hour, Outbox: true, Response: resp}); err != nil {
		t.Fatal(err)
	}
}

func (s *sweepApp) pending(t *testing.T, pk, msg string) bool {
	t.Helper()
	st, err := txn.ReadMarker(context.Background(), s.store, sweepLedger, pk, "BillingEndpoint", msg)
	if err != nil || !st.Found {
		t.Fatalf("marker %s: %+v %v", msg, st, err)
	}
	return st.Pending != nil
}

// The OutboxSweep timer sends the old markers' events and responses, marks
// them, leaves the young ones, answers 200 with a summary, and logs one
// line of counts without any payload.
func TestOutboxSweepRoute(t *testing.T) {
	s := newSweepApp(t, true, nil)
	s.commit(t, "c-1", "m-1", s.clk.now.Add(-time.Hour), "PaymentRecorded-1", "InvoiceRequested-1")
	s.commit(t, "c-2", "m-2", s.clk.now.Add(-11*time.Minute), "PaymentRecorded-2")
	s.commit(t, "c-3", "young", s.clk.now.Add(-9*time.Minute), "PaymentRecorded-3")

	status, body := s.post(t, FuncOutboxSweep, sweepEnvelope())
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	for _, want := range []string{"outcome=swept", "found=2", "dispatched=2", "events=3", "left=0", "drained=true"} {
		if !strings.Contains(body, want) {
			t.Errorf("the answer's logs lack %q: %s", want, body)
		}
	}
	var ids []string
	for _, m := range s.pub.Sent() {
		ids = append(ids, m.MessageID+"/"+m.ApplicationProperties["To"].(string))
	}
	got := strings.Join(ids, " ")
	for _, want := range []string{"PaymentRecorded-1/PaymentRecorded InvoiceRequested-1/PaymentRecorded /Resolver", "PaymentRecorded-2/PaymentRecorded /Resolver"} {
		if !strings.Contains(got, want) {
			t.Errorf("sent %q, want %q in order", got, want)
		}
	}
	if len(s.pub.Sent()) != 5 {
		t.Errorf("%d messages sent, want 5", len(s.pub.Sent()))
	}
	if s.pending(t, "c-1", "m-1") || s.pending(t, "c-2", "m-2") || !s.pending(t, "c-3", "young") {
		t.Error("the old markers must be dispatched and the young one left")
	}
	lines := s.logs.Lines(t)
	if len(lines) != 1 {
		t.Fatalf("%d log lines: %v", len(lines), lines)
	}
	l := lines[0]
	for k, v := range map[string]any{"function": FuncOutboxSweep, "outcome": "swept", "found": float64(2), "dispatched": float64(2), "events": float64(3),
		"responses": float64(2), "left": float64(0), "containers": float64(1), "drained": true, "level": "info"} {
		if l[k] != v {
			t.Errorf("log %s = %v, want %v", k, l[k], v)
		}
	}
	if m := s.Metrics(); m.Get(telemetry.OutboxSwept, "") != 3 || m.Get(telemetry.OutboxLeft, "") != 0 {
		t.Errorf("metrics %v, want 3 events swept", m.Snapshot())
	}
	if raw := s.logs.String() + body; strings.Contains(raw, secretPayload) || strings.Contains(raw, "PaymentRecorded-1") {
		t.Errorf("the log or the answer holds a payload or an event id: %s", raw)
	}
}

// A send that fails leaves the marker pending and fails the invocation,
// with a line the host logs as an error.
func TestOutboxSweepSendFailure(t *testing.T) {
	s := newSweepApp(t, true, nil)
	s.commit(t, "c-1", "m-1", s.clk.now.Add(-time.Hour), "PaymentRecorded-1")
	s.pub.Fail = func(*message.Outgoing) error { return errors.New("amqp: link detached at sb://secret-namespace") }
	status, _ := s.post(t, FuncOutboxSweep, sweepEnvelope())
	if status == 200 {
		t.Fatal("a sweep that left a marker answered 200")
	}
	if !s.pending(t, "c-1", "m-1") {
		t.Fatal("the marker whose send failed is not pending")
	}
	if m := s.Metrics(); m.Get(telemetry.OutboxSwept, "") != 0 || m.Get(telemetry.OutboxLeft, "") != 1 {
		t.Errorf("metrics %v, want 1 marker left", m.Snapshot())
	}
	l := s.logs.Lines(t)
	if len(l) != 1 || l[0]["outcome"] != "sweep_failed" || l[0]["sendFailed"] != float64(1) || l[0]["left"] != float64(1) || l[0]["oldestLeftSeconds"] != float64(3600) {
		t.Fatalf("log = %v", l)
	}
	if raw := s.logs.String() + s.stderr.String(); strings.Contains(raw, "secret-namespace") || !strings.Contains(s.stderr.String(), "error: OutboxSweep invocation failed") {
		t.Fatalf("log %s\nstderr %s", s.logs.String(), s.stderr.String())
	}

	// The next tick sends it.
	s.pub.Fail = nil
	s.logs.Reset()
	if status, body := s.post(t, FuncOutboxSweep, sweepEnvelope()); status != 200 || !strings.Contains(body, "dispatched=1") {
		t.Fatalf("next tick: %d %s", status, body)
	}
	if s.pending(t, "c-1", "m-1") {
		t.Fatal("still pending after the next tick")
	}
}

// Without transactional handlers the sweep does nothing and answers 200.
func TestOutboxSweepWithoutTransactionalHandlers(t *testing.T) {
	s := newSweepApp(t, false, nil)
	status, body := s.post(t, FuncOutboxSweep, sweepEnvelope())
	if status != 200 || !strings.Contains(body, "outcome=no_outbox") {
		t.Fatalf("%d %s", status, body)
	}
	if l := s.logs.Lines(t); len(l) != 1 || l[0]["outcome"] != "no_outbox" {
		t.Fatalf("log = %v", l)
	}
	if len(s.pub.Sent()) != 0 {
		t.Fatal("sent something")
	}
}

// A timer envelope that does not decode is refused.
func TestOutboxSweepMalformedInvocation(t *testing.T) {
	s := newSweepApp(t, true, nil)
	if status, _ := s.post(t, FuncOutboxSweep, []byte(`{"Data":`)); status != 400 {
		t.Fatalf("status %d, want 400", status)
	}
}

// corrupt rewrites a marker's document with edit applied.
func (s *sweepApp) corrupt(t *testing.T, pk, msg string, edit func(doc map[string]any)) string {
	t.Helper()
	id := txn.MarkerID("BillingEndpoint", msg)
	doc := txntest.Document(t, s.store, sweepLedger, pk, id)
	edit(doc)
	txntest.Write(t, s.store, sweepLedger, pk, txn.OpReplace, doc)
	return id
}

// A run that leaves an unreadable marker says so, naming the marker's
// document id in its log line, its error and the host's line, and does
// not call it a store failure to be retried.
func TestOutboxSweepNamesUnreadableMarkers(t *testing.T) {
	s := newSweepApp(t, true, nil)
	s.commit(t, "c-1", "m-1", s.clk.now.Add(-time.Hour), "PaymentRecorded-1")
	s.commit(t, "c-2", "m-2", s.clk.now.Add(-time.Hour), "PaymentRecorded-2")
	id := s.corrupt(t, "c-1", "m-1", func(doc map[string]any) { doc["createdAtUtc"] = "yesterday" })
	if status, _ := s.post(t, FuncOutboxSweep, sweepEnvelope()); status == 200 {
		t.Fatal("a run that left an unreadable marker answered 200")
	}
	l := s.logs.Lines(t)
	if len(l) != 1 {
		t.Fatalf("%d log lines: %v", len(l), l)
	}
	first, _ := l[0]["firstUnreadable"].(string)
	errText, _ := l[0]["error"].(string)
	if l[0]["outcome"] != "unreadable_left" || l[0]["unreadable"] != float64(1) || l[0]["dispatched"] != float64(1) || !strings.Contains(first, id) || !strings.Contains(errText, id) {
		t.Errorf("log = %v; want outcome unreadable_left naming %s", l[0], id)
	}
	if strings.Contains(errText, "will be retried") || strings.Contains(errText, "inbox store operation") {
		t.Errorf("the error reads as a store failure: %s", errText)
	}
	if !strings.Contains(s.stderr.String(), id) || strings.Contains(s.logs.String()+s.stderr.String(), secretPayload) {
		t.Errorf("host line %s", s.stderr.String())
	}
}

// notFoundMarks answers every mark 404 while the marker stays.
type notFoundMarks struct{ *txn.Memory }

func (n notFoundMarks) Execute(ctx context.Context, t txn.Target, pk string, ops []txn.Op) (txn.Result, error) {
	if len(ops) == 1 && ops[0].Kind == txn.OpPatch {
		return txn.Result{Status: txn.StatusMultiStatus, Ops: []txn.OpResult{{Status: 404}}}, nil
	}
	return n.Memory.Execute(ctx, t, pk, ops)
}

// The app keeps its sweeper across invocations: a marker whose mark found
// no marker is reported gone with its id on the first tick and is not
// sent again on the next ones.
func TestOutboxSweepRemembersAcrossTicks(t *testing.T) {
	s := newSweepAppOn(t, true, nil, func(m *txn.Memory) txn.Store { return notFoundMarks{m} })
	s.commit(t, "c-1", "m-1", s.clk.now.Add(-time.Hour), "PaymentRecorded-1")
	id := txn.MarkerID("BillingEndpoint", "m-1")
	if status, _ := s.post(t, FuncOutboxSweep, sweepEnvelope()); status == 200 {
		t.Fatal("a run whose mark found nothing answered 200")
	}
	if l := s.logs.Lines(t); len(l) != 1 || l[0]["outcome"] != "marker_gone" || l[0]["gone"] != float64(1) || l[0]["firstGone"] != id || l[0]["alreadyDone"] != float64(0) {
		t.Fatalf("first tick log = %v", l)
	}
	for tick := 2; tick <= 3; tick++ {
		s.logs.Reset()
		s.post(t, FuncOutboxSweep, sweepEnvelope())
		if l := s.logs.Lines(t); len(l) != 1 || l[0]["outcome"] != "unreadable_left" || !strings.Contains(fmt.Sprint(l[0]["firstUnreadable"]), id) {
			t.Errorf("tick %d log = %v", tick, l)
		}
	}
	if n := len(s.pub.Sent()); n != 2 {
		t.Errorf("%d messages sent over three ticks, want the event and the response once", n)
	}
}
