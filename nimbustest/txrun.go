package nimbustest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/nimbus-go/functions-subscriber/internal/app"
	"github.com/nimbus-go/functions-subscriber/internal/compose"
	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testlog"
	"github.com/nimbus-go/functions-subscriber/internal/devhost"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/message/nimbusmsg"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/nimbus"
)

// txEndpoint is the endpoint RunTx's app runs as by default.
const txEndpoint = "TestEndpoint"

// txDeliveries numbers RunTx's deliveries (lock tokens, invocation ids).
var txDeliveries atomic.Int64

// runTxOn composes a, whose one transactional handler records its runs in
// rec, over c and delivers ev to it.
func runTxOn(ctx context.Context, a *nimbus.App, c *Container, ev *nimbus.Event, rec *txRecorder, o txOptions) (*TxRun, error) {
	if ev == nil || ev.EventTypeID == "" {
		return nil, errors.New("nimbustest: RunTx needs an event with an EventTypeID (see NewEvent)")
	}
	store := &txStore{c: c, changes: o.changes}
	sink := &resolver.Memory{}
	var stdout, stderr testlog.Buffer
	env := txSettings([]string{"NimBus__Endpoint=" + txEndpoint, "NimBus__Inbox__Enabled=true", "NimBus__Inbox__Store=InMemory",
		"NimBus__Resolver__Sink=InMemory", "NimBus__LogLevel=debug"}, o.settings)
	svc, err := compose.App(a, compose.Options{Environ: env, Stdout: &stdout, Stderr: &stderr, Version: "nimbustest",
		Deps: app.Deps{Txn: store, Publisher: sink, TracerProvider: sdktrace.NewTracerProvider(),
			Pause: func(context.Context, time.Duration) {}, Rand: func() float64 { return 0 }}})
	if err != nil {
		return nil, err
	}
	defer func() { _ = svc.Close(context.Background()) }()

	seq := txDeliveries.Add(1)
	endpoint := config.EnvironValue(env, config.KeyEndpoint)
	m := nimbusmsg.EventRequest(nimbusmsg.Event{Publisher: ev.From, Endpoint: endpoint, EventTypeID: ev.EventTypeID, EventJSON: ev.JSON,
		SessionID: ev.SessionID, MessageID: ev.MessageID, CorrelationID: ev.CorrelationID, EventID: ev.EventID})
	enqueued := ev.EnqueuedTime
	if enqueued.IsZero() {
		enqueued = time.Now().Add(-time.Second)
	}
	sb := m.Delivery("Subscriber", "", max(ev.DeliveryCount, 1), enqueued.UTC())
	devhost.HostFields(&sb, seq, time.Now())
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/Subscriber", bytes.NewReader(hostwire.ServiceBus(sb)))
	req.Header.Set("X-Azure-Functions-InvocationId", "nimbustest-"+strconv.FormatInt(seq, 10))
	answer := httptest.NewRecorder()
	svc.Handler().ServeHTTP(answer, req)

	run := &TxRun{Completes: answer.Code/100 == 2, Logs: handlerRecords(stdout.String())}
	rec.mu.Lock()
	run.Runs, run.Result, run.Err = rec.runs, rec.res, rec.err
	rec.mu.Unlock()
	run.Kind = nimbus.KindOf(run.Err)
	if lineErr := run.readLines(stdout.String()); lineErr != nil {
		return nil, fmt.Errorf("nimbustest: the delivery answered %d and logged no outcome: %w (stderr: %s)", answer.Code, lineErr, stderr.String())
	}
	for _, sent := range sink.Sent() {
		run.readSent(sent)
	}
	store.mu.Lock()
	run.Writes, err = append([]Write(nil), store.writes...), store.err
	store.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("nimbustest: a ChangeAfterRead change failed: %w", err)
	}
	return run, nil
}

// txSettings is defaults with each setting of given added, or replacing
// the default of the same name.
func txSettings(defaults, given []string) []string {
	out := make([]string, 0, len(defaults)+len(given))
	for _, d := range defaults {
		name, _, _ := strings.Cut(d, "=")
		if !slices.ContainsFunc(given, func(kv string) bool { return strings.HasPrefix(kv, name+"=") }) {
			out = append(out, d)
		}
	}
	return append(out, given...)
}

// readLines takes the outcome and error of the delivery from the
// pipeline's invocation line.
func (r *TxRun) readLines(out string) error {
	type line struct {
		Outcome string `json:"outcome"`
		Error   string `json:"error"`
		Source  string `json:"source"`
	}
	lines := testlog.DecodeText(out, func(l line) bool { return l.Outcome != "" && l.Source == "" })
	if len(lines) == 0 {
		return errors.New("no invocation line")
	}
	last := lines[len(lines)-1]
	r.Outcome, r.ErrorText = last.Outcome, last.Error
	return nil
}

// readSent files one message the delivery sent: an event it published,
// or the Resolver's response.
func (r *TxRun) readSent(m *message.Outgoing) {
	content, err := message.ParseContent(m.Body)
	if err != nil {
		return
	}
	if m.Type() == message.EventRequest.String() && content.EventContent != nil && content.EventContent.EventJSON != nil {
		p := nimbus.Publication{MessageID: m.MessageID, SessionID: m.SessionID, Payload: json.RawMessage(*content.EventContent.EventJSON)}
		p.EventTypeID, _ = m.ApplicationProperties[message.PropEventTypeID].(string)
		if m.CorrelationID != nil {
			p.CorrelationID = *m.CorrelationID
		}
		r.Published = append(r.Published, p)
		return
	}
	if r.Response == "" {
		r.Response = m.Type()
		if content.ErrorContent != nil && content.ErrorContent.ErrorText != nil {
			r.ErrorText = *content.ErrorContent.ErrorText
		}
	}
}
