package telemetry

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"sync"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func TestInstrumentsFeedTheViewAndEveryReader(t *testing.T) {
	exported := sdkmetric.NewManualReader()
	m := NewMetrics(MetricsOptions{Readers: []sdkmetric.Reader{exported}})
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.Inc(DuplicateDetected, "", "")
			m.Add(InboxOperationFailed, TagStoreOperation, "check", 2)
			m.Record(RequestCharge, TagOutcome, "completed", 2.5)
		}()
	}
	wg.Wait()
	m.Inc("not.an.instrument", "", "") // ignored
	if m.Get(DuplicateDetected, "") != 50 || m.Get(InboxOperationFailed, TagStoreOperation+"=check") != 100 ||
		m.Get(InboxOperationFailed, TagStoreOperation+"=record") != 0 ||
		m.Get(RequestCharge+".count", TagOutcome+"=completed") != 50 || m.Get(RequestCharge+".sum", TagOutcome+"=completed") != 125 {
		t.Fatalf("snapshot = %v", m.Snapshot())
	}
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest("GET", "/_nimbus/metrics", nil))
	var got map[string]float64
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got["nimbus.inbox.operation.failed{nimbus.store.operation=check}"] != 100 {
		t.Fatalf("served %s (%v)", rec.Body.String(), err)
	}
	if keys := m.Keys(); len(keys) != 4 || keys[0] > keys[1] {
		t.Fatalf("keys = %v", keys)
	}

	// The exporting reader sees the same instruments, on NimBus's meters.
	var rm metricdata.ResourceMetrics
	if err := exported.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	scopes := map[string]string{}
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			scopes[md.Name] = sm.Scope.Name
		}
	}
	if scopes[DuplicateDetected] != ConsumerMeter || scopes[InboxOperationFailed] != ConsumerMeter || scopes[RequestCharge] != StoreMeter {
		t.Fatalf("exported instruments by meter: %v", scopes)
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	var zero Metrics // the zero value works
	zero.Inc(Purged, "", "")
	if zero.Get(Purged, "") != 1 {
		t.Fatal("zero Metrics did not count")
	}
	var nilMetrics *Metrics
	nilMetrics.Inc(Purged, "", "") // a nil set discards
	nilMetrics.Record(ProcessDuration, "", "", 1)
}

func TestEveryInstrumentHasASpec(t *testing.T) {
	for _, n := range Names() {
		s := instrumentSpecs[n]
		if s.meter == "" || s.unit == "" || s.description == "" || (s.kind == histogram) != (len(s.buckets) > 0) {
			t.Errorf("%s: incomplete spec %+v", n, s)
		}
	}
}
