package export

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"

	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

func TestFromEnvTurnsExportOnOnlyWithAnEndpoint(t *testing.T) {
	for _, c := range []struct {
		name            string
		env             map[string]string
		traces, metrics bool
		wantErr         bool
	}{
		{"nothing set", nil, false, false, false},
		{"blank endpoint", map[string]string{EnvEndpoint: " "}, false, false, false},
		{"endpoint", map[string]string{EnvEndpoint: "http://collector:4318"}, true, true, false},
		{"traces only", map[string]string{EnvTracesEndpoint: "http://c:4318/v1/traces"}, true, false, false},
		{"metrics only", map[string]string{EnvMetricsEndpoint: "http://c:4318/v1/metrics"}, false, true, false},
		{"disabled", map[string]string{EnvEndpoint: "http://c:4318", EnvSDKDisabled: "true"}, false, false, false},
		{"http/protobuf", map[string]string{EnvEndpoint: "http://c:4318", EnvProtocol: "http/protobuf"}, true, true, false},
		{"grpc refused", map[string]string{EnvEndpoint: "http://c:4317", EnvProtocol: "grpc"}, true, true, true},
	} {
		got, err := FromEnv(func(k string) (string, bool) { v, ok := c.env[k]; return v, ok })
		if (err != nil) != c.wantErr || got.Traces != c.traces || got.Metrics != c.metrics {
			t.Errorf("%s: %+v, %v", c.name, got, err)
		}
	}
}

func TestSetupWithoutExportBuildsNoPipeline(t *testing.T) {
	tel, err := Setup(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tel.TracerProvider.Tracer("t").Start(context.Background(), "x")
	if tel.Exporting() || len(tel.MetricReaders) != 0 || span.IsRecording() || !span.SpanContext().IsValid() {
		t.Fatalf("export off: exporting=%v readers=%d recording=%v", tel.Exporting(), len(tel.MetricReaders), span.IsRecording())
	}
}

// receiver is an OTLP/HTTP endpoint that keeps what it is sent.
type receiver struct {
	mu      sync.Mutex
	traces  []*coltracepb.ExportTraceServiceRequest
	metrics []*colmetricpb.ExportMetricsServiceRequest
	bad     []string
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil || req.Header.Get("Content-Type") != "application/x-protobuf" {
		r.bad = append(r.bad, req.URL.Path+" "+req.Header.Get("Content-Type"))
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	switch req.URL.Path {
	case "/v1/traces":
		m := &coltracepb.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(body, m); err != nil {
			r.bad = append(r.bad, err.Error())
		}
		r.traces = append(r.traces, m)
	case "/v1/metrics":
		m := &colmetricpb.ExportMetricsServiceRequest{}
		if err := proto.Unmarshal(body, m); err != nil {
			r.bad = append(r.bad, err.Error())
		}
		r.metrics = append(r.metrics, m)
	default:
		r.bad = append(r.bad, "path "+req.URL.Path)
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

// TestOTLPExportReachesAReceiver sets the standard variable to a local
// OTLP/HTTP receiver and checks that a span continuing an inbound trace and
// a counter arrive there, with the service name.
func TestOTLPExportReachesAReceiver(t *testing.T) {
	rcv := &receiver{}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	t.Setenv(EnvEndpoint, srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
	cfg, err := FromEnv(os.LookupEnv)
	if err != nil || !cfg.Traces || !cfg.Metrics {
		t.Fatalf("FromEnv: %+v %v", cfg, err)
	}
	cfg.ServiceName, cfg.ServiceVersion = "BillingEndpoint", "test"
	ctx := context.Background()
	tel, err := Setup(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := telemetry.NewMetrics(telemetry.MetricsOptions{Readers: tel.MetricReaders, Resource: tel.Resource})

	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	in := telemetry.Extract(ctx, map[string]any{telemetry.PropTraceParent: "00-" + traceID + "-" + parentID + "-01"})
	_, span := tel.TracerProvider.Tracer(telemetry.TracerName).Start(in, "process BillingEndpoint")
	span.End()
	m.Inc(telemetry.DuplicateDetected, "", "")
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.bad) > 0 {
		t.Fatalf("bad requests: %v", rcv.bad)
	}
	var found bool
	for _, req := range rcv.traces {
		for _, rs := range req.ResourceSpans {
			if name := serviceName(rs.GetResource().GetAttributes()); name != "BillingEndpoint" {
				t.Errorf("service.name %q", name)
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					found = found || (s.Name == "process BillingEndpoint" && hex.EncodeToString(s.TraceId) == traceID &&
						hex.EncodeToString(s.ParentSpanId) == parentID)
				}
			}
		}
	}
	if !found {
		t.Errorf("the span did not reach the receiver (%d trace requests)", len(rcv.traces))
	}
	found = false
	for _, req := range rcv.metrics {
		for _, rm := range req.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				for _, md := range sm.Metrics {
					if md.Name == telemetry.DuplicateDetected && sm.GetScope().GetName() == telemetry.ConsumerMeter {
						dps := md.GetSum().GetDataPoints()
						found = len(dps) == 1 && dps[0].GetAsInt() == 1
					}
				}
			}
		}
	}
	if !found {
		t.Errorf("the counter did not reach the receiver (%d metric requests)", len(rcv.metrics))
	}
}

func serviceName(attrs []*commonpb.KeyValue) string {
	for _, kv := range attrs {
		if kv.Key == "service.name" {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}
