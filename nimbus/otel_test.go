package nimbus_test

import (
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testctx"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv/handlerproc"
)

// otlpReceiver keeps the span names (with trace and parent ids) and metric
// names the binary exports over OTLP/HTTP.
type otlpReceiver struct {
	mu      sync.Mutex
	spans   []string // "name trace parent"
	metrics map[string]bool
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch req.URL.Path {
	case "/v1/traces":
		m := &coltracepb.ExportTraceServiceRequest{}
		if proto.Unmarshal(body, m) == nil {
			for _, rs := range m.ResourceSpans {
				for _, ss := range rs.ScopeSpans {
					for _, s := range ss.Spans {
						r.spans = append(r.spans, s.Name+" "+hex.EncodeToString(s.TraceId)+" "+hex.EncodeToString(s.ParentSpanId))
					}
				}
			}
		}
	case "/v1/metrics":
		m := &colmetricpb.ExportMetricsServiceRequest{}
		if proto.Unmarshal(body, m) == nil {
			for _, rm := range m.ResourceMetrics {
				for _, sm := range rm.ScopeMetrics {
					for _, md := range sm.Metrics {
						r.metrics[md.Name] = true
					}
				}
			}
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

// With OTEL_EXPORTER_OTLP_ENDPOINT set, the binary exports the invocation's
// spans (continuing the message's traceparent) and its metrics, flushing
// them at shutdown.
func TestBinaryExportsOverOTLPWhenTheEndpointIsSet(t *testing.T) {
	rcv := &otlpReceiver{metrics: map[string]bool{}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	p := startApp(t, handlerproc.Options{Settings: memorySettings("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)})
	if err := p.WaitReady(testctx.Timeout(t, 20*time.Second)); err != nil {
		_, _ = p.Stop(testctx.Timeout(t, 20*time.Second))
		t.Fatalf("not ready: %v", err)
	}
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	env := orderEnvelope(1, `{"OrderId":"O-1","Amount":10}`, fmt.Sprintf(`,"traceparent":"00-%s-%s-01"`, traceID, parentID))
	resp, err := http.Post(p.BaseURL()+"/Subscriber", "application/json", strings.NewReader(env))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST /Subscriber: %v %v", resp, err)
	}
	resp.Body.Close()
	if code, err := p.Stop(testctx.Timeout(t, 20*time.Second)); err != nil || code != 0 {
		t.Fatalf("stop: code %d, %v; output:\n%s", code, err, p.Output(20))
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	want := "process BillingEndpoint " + traceID + " " + parentID
	found := false
	for _, s := range rcv.spans {
		found = found || s == want
	}
	if !found {
		t.Errorf("spans exported %q, want %q among them", rcv.spans, want)
	}
	for _, m := range []string{"nimbus.invocations", "nimbus.message.process.duration"} {
		if !rcv.metrics[m] {
			t.Errorf("metric %s not exported (got %v)", m, rcv.metrics)
		}
	}
}

// Asking for OTLP over gRPC, which is not built in, fails start-up and says so.
func TestStartupRefusesOTLPOverGRPC(t *testing.T) {
	p := startApp(t, handlerproc.Options{
		NoPort: true,
		Settings: map[string]string{"NimBus__Endpoint": "BillingEndpoint", "NimBus__Resolver__Sink": "InMemory",
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
	})
	code, err := p.Wait(testctx.Timeout(t, 20*time.Second))
	if err != nil || code != 2 || !strings.Contains(p.Stderr(), "OTEL_EXPORTER_OTLP_PROTOCOL") {
		t.Fatalf("code %d, %v; stderr %q", code, err, p.Stderr())
	}
}
