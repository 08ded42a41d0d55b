package e2e

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

// traceReceiver is an OTLP/HTTP trace endpoint that keeps the spans it is
// sent (metrics are accepted and dropped).
type traceReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	bad   []string
}

func (r *traceReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err != nil:
		r.bad = append(r.bad, err.Error())
	case req.URL.Path == "/v1/traces":
		m := &coltracepb.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(body, m); err != nil {
			r.bad = append(r.bad, err.Error())
		}
		for _, rs := range m.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

// inTrace returns the received spans of trace id (hex).
func (r *traceReceiver) inTrace(id string) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		if hex.EncodeToString(s.TraceId) == id {
			out = append(out, s)
		}
	}
	return out
}

func attr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value.GetStringValue()
		}
	}
	return ""
}

// TestTraceContinuesThroughTheResolver publishes an EventRequest carrying a
// W3C traceparent through the local Service Bus to the endpoint; the
// Resolver process, exporting over OTLP/HTTP to an in-test receiver,
// records the request copy and the endpoint's response under invocation
// spans of the same trace, with their tracking writes as child spans.
func TestTraceContinuesThroughTheResolver(t *testing.T) {
	t.Parallel()
	rcv := &traceReceiver{}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	s := startResolverStack(t, resolverStackConfig{resolverEnv: map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL,
		"OTEL_BSP_SCHEDULE_DELAY":     "100",
		"OTEL_SERVICE_NAME":           "",
	}})
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	e := order("OrderPlaced-rtrace-1", "customer-rtrace", 10, 0)
	m := e.message()
	m.ApplicationProperties["traceparent"] = "00-" + traceID + "-" + parentID + "-01"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := s.sender.SendMessage(ctx, m, nil)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	s.waitRow(e, 60*time.Second, "to be Completed", func(r *trackedRow) bool { return r.Status == "Completed" })

	var invocations map[string]*tracepb.Span
	testenv.WaitUntil(t, 30*time.Second, func() bool {
		invocations = map[string]*tracepb.Span{}
		spans := rcv.inTrace(traceID)
		for _, sp := range spans {
			if sp.Name == "process Resolver" {
				invocations[hex.EncodeToString(sp.SpanId)] = sp
			}
		}
		children := 0
		for _, sp := range spans {
			if _, ok := invocations[hex.EncodeToString(sp.ParentSpanId)]; ok && (sp.Name == "nimbus.tracking.history" || sp.Name == "nimbus.tracking.upload") {
				children++
			}
		}
		// The request copy and the response: two invocations, each with a
		// history write and an upload.
		return len(invocations) >= 2 && children >= 4
	}, func() string {
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		return fmt.Sprintf("Resolver spans of trace %s: %d invocations among %d received spans (bad: %v)", traceID, len(invocations), len(rcv.spans), rcv.bad)
	})
	var request *tracepb.Span
	for _, sp := range invocations {
		if attr(sp, "messaging.message.id") == e.MessageID {
			request = sp
		}
		if sp.Kind != tracepb.Span_SPAN_KIND_CONSUMER {
			t.Errorf("invocation span kind %v", sp.Kind)
		}
	}
	// The request copy's span is a child of the publisher's span.
	if request == nil || hex.EncodeToString(request.ParentSpanId) != parentID || attr(request, "nimbus.outcome") != "written" {
		t.Fatalf("the request copy's Resolver span %v", request)
	}
}
