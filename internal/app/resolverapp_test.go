package app

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testlog"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/resolverapp"
	"github.com/nimbus-go/functions-subscriber/internal/tracking"
)

// captureScheduler keeps scheduled re-sends.
type captureScheduler struct {
	mu   sync.Mutex
	sent []*resolverapp.Redelivery
}

func (c *captureScheduler) ScheduleRedelivery(_ context.Context, r *resolverapp.Redelivery, _ time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent = append(c.sent, r)
	return nil
}

// failingWriter fails every tracking call while down is set.
type failingWriter struct {
	tracking.Writer
	down bool
}

func (f *failingWriter) StoreMessage(ctx context.Context, m tracking.MessageEntity) error {
	if f.down {
		return &tracking.StoreError{Op: "StoreMessage", Kind: tracking.FailureThrottled, RetryAfter: time.Second, Err: errors.New("429")}
	}
	return f.Writer.StoreMessage(ctx, m)
}

type resolverFixture struct {
	*App
	logs  *testlog.Buffer
	sched *captureScheduler
}

func newResolverTestApp(t *testing.T, store tracking.Writer) *resolverFixture {
	t.Helper()
	cfg, err := config.Load(config.FromMap(map[string]string{
		config.KeyApp:            "Resolver",
		config.KeyTrackingStore:  "InMemory",
		config.KeyServiceBus:     "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=v",
		config.KeyRetryBaseDelay: "0",
	}))
	if err != nil {
		t.Fatal(err)
	}
	ra := &resolverFixture{logs: &testlog.Buffer{}, sched: &captureScheduler{}}
	a, err := New(cfg, Deps{Log: zerolog.New(ra.logs), Resolver: ResolverDeps{Tracking: store, Scheduler: ra.sched}})
	if err != nil {
		t.Fatal(err)
	}
	ra.App = a
	return ra
}

// asResolverEnvelope turns a response the endpoint sent into the
// invocation the Resolver app receives: the fan-out subscription stamps
// From with the endpoint and the broker assigns a MessageId.
func asResolverEnvelope(o *message.Outgoing, messageID, endpoint string) []byte {
	var props []hostwire.Property
	for k, v := range o.ApplicationProperties {
		props = append(props, hostwire.Property{Name: k, Value: v})
	}
	props = append(props, hostwire.Property{Name: message.PropFrom, Value: endpoint})
	sid := o.SessionID
	return hostwire.ServiceBus(hostwire.ServiceBusMessage{
		FunctionName: FuncResolver, Body: o.Body, MessageID: messageID, SessionID: &sid, CorrelationID: o.CorrelationID,
		DeliveryCount: 1, SequenceNumber: 9, EnqueuedTime: time.Now().Add(-time.Second), Properties: props,
		SessionLockedUntil: time.Now().Add(time.Minute), Namespace: "sb.test", UtcNow: time.Now(), RandGUID: "00000000-0000-0000-0000-000000000000",
	})
}

func (ra *resolverFixture) post(t *testing.T, body []byte) int {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/"+FuncResolver, strings.NewReader(string(body)))
	ra.Handler().ServeHTTP(rec, req)
	return rec.Code
}

func (ra *resolverFixture) row(t *testing.T, endpoint, event string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	ra.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/_nimbus/tracking?endpoint="+endpoint+"&event="+event, nil))
	var m map[string]any
	if rec.Code == 200 {
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
	}
	return rec.Code, m
}

// The endpoint app's real responses, handed to the Resolver app as the
// fan-out delivers them, land as tracking rows.
func TestResolverAppRecordsTheEndpointsResponses(t *testing.T) {
	ep := newTestApp(t, nil, nil)
	ra := newResolverTestApp(t, nil)
	if fns := ra.Functions(); len(fns) != 1 || fns[0] != FuncResolver {
		t.Fatalf("Resolver app functions %v", fns)
	}

	if status, _ := ep.post(t, FuncSubscriber, envelope(msg{id: "m-1"})); status != 200 {
		t.Fatal(status)
	}
	if status, _ := ep.post(t, FuncSubscriber, envelope(msg{id: "m-1", deliveryCount: 2})); status != 200 {
		t.Fatal(status)
	}
	sent := ep.pub.Sent()
	if len(sent) != 2 {
		t.Fatalf("%d responses", len(sent))
	}
	if status := ra.post(t, asResolverEnvelope(sent[0], "rsp-1", "BillingEndpoint")); status != 200 {
		t.Fatalf("ResolutionResponse: %d", status)
	}
	code, row := ra.row(t, "BillingEndpoint", "evt-1")
	if code != 200 || row["ResolutionStatus"] != "Completed" || row["LastMessageId"] != "rsp-1" || row["From"] != "BillingEndpoint" || row["ParentMessageId"] != "m-1" {
		t.Fatalf("row %d %v", code, row)
	}
	// The duplicate's SkipResponse replaces it (terminal over terminal) with
	// the DuplicateDetected reason.
	if status := ra.post(t, asResolverEnvelope(sent[1], "rsp-2", "BillingEndpoint")); status != 200 {
		t.Fatalf("SkipResponse: %d", status)
	}
	if _, row = ra.row(t, "BillingEndpoint", "evt-1"); row["ResolutionStatus"] != "Skipped" || row["Reason"] != "DuplicateDetected" {
		t.Fatalf("row %v", row)
	}
	// The request copy arriving late is stale: completed, row unchanged.
	ra.logs.Reset()
	if status := ra.post(t, envelopeAs(FuncResolver, "m-1")); status != 200 {
		t.Fatalf("late request copy: %d", status)
	}
	if _, row = ra.row(t, "BillingEndpoint", "evt-1"); row["ResolutionStatus"] != "Skipped" {
		t.Fatalf("row %v", row)
	}
	lines := ra.logs.Lines(t)
	if len(lines) != 1 || lines[0]["outcome"] != "stale" || lines[0]["level"] != "warn" || lines[0]["messageType"] != "EventRequest" {
		t.Fatalf("log %v", lines)
	}
	for _, l := range ra.logs.Lines(t) {
		b, _ := json.Marshal(l)
		if strings.Contains(string(b), secretPayload) {
			t.Fatalf("a log line carries the payload: %s", b)
		}
	}
	if code, _ := ra.row(t, "BillingEndpoint", "no-such-event"); code != 404 {
		t.Fatalf("missing row: %d", code)
	}
}

// envelopeAs is the endpoint test envelope sent to another function.
func envelopeAs(fn, id string) []byte {
	return []byte(strings.Replace(string(envelope(msg{id: id})), `"Subscriber"`, `"`+fn+`"`, 1))
}

func TestResolverAppFailures(t *testing.T) {
	store := &failingWriter{Writer: &tracking.Memory{}}
	ra := newResolverTestApp(t, store)
	bad := hostwire.ServiceBus(hostwire.ServiceBusMessage{
		FunctionName: FuncResolver, Body: []byte(`{}`), MessageID: "x", SessionID: hostwire.S("s"), DeliveryCount: 1,
		EnqueuedTime: time.Now(), Properties: hostwire.Props("MessageType", "ResolutionResponse", "EventId", "e"),
		UtcNow: time.Now(), RandGUID: "00000000-0000-0000-0000-000000000000",
	})
	for _, c := range []struct {
		name    string
		body    []byte
		down    bool
		status  int
		outcome string
	}{
		{"response without From", bad, false, 422, "invalid_message"},
		{"malformed envelope", []byte(`{"Data":{"message":"not base64!"},"Metadata":{}}`), false, 400, "malformed_invocation"},
		{"throttled store", envelopeAs(FuncResolver, "m-9"), true, 200, "rescheduled"},
	} {
		ra.logs.Reset()
		store.down = c.down
		if status := ra.post(t, c.body); status != c.status {
			t.Fatalf("%s: status %d, want %d", c.name, status, c.status)
		}
		if l := ra.logs.Lines(t); len(l) != 1 || l[0]["outcome"] != c.outcome {
			t.Fatalf("%s: log %v", c.name, l)
		}
	}
	if len(ra.sched.sent) != 1 || ra.sched.sent[0].MessageID != "m-9" || ra.sched.sent[0].Properties[resolverapp.PropThrottleRetryCount] != int32(1) {
		t.Fatalf("re-sends %+v", ra.sched.sent)
	}
}

// The Resolver app's function folders match its routes.
func TestResolverFunctionFoldersMatchRoutes(t *testing.T) {
	entries, err := os.ReadDir(filepath.Join("..", "..", "apps", "resolver", "functions"))
	if err != nil {
		t.Fatal(err)
	}
	ra := newResolverTestApp(t, nil)
	var folders []string
	for _, e := range entries {
		folders = append(folders, e.Name())
	}
	if strings.Join(folders, ",") != strings.Join(ra.Functions(), ",") {
		t.Fatalf("folders %v, routes %v", folders, ra.Functions())
	}
}
