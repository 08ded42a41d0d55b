package subscriber

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
)

// A failed step's span is marked failed with the safe store error (never
// the provider's text); a failing handler's span carries its error.
func TestStepSpansReportFailures(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	mem, _ := inbox.NewMemoryStore(inbox.MemoryOptions{})
	store := &spyStore{inner: mem, tr: &trace{}}
	reg := NewRegistry()
	reg.Handle("OrderPlaced", func(ctx context.Context, ev *Event) (Result, error) {
		return Result{}, errors.New("handler broke")
	})
	p, err := New(Options{EndpointID: "billing", Inbox: store, Publisher: &resolver.Memory{}, Handlers: reg, Log: zerolog.Nop(),
		Tracer: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")})
	if err != nil {
		t.Fatal(err)
	}
	store.failCheck = errors.New("dial tcp acct.documents.azure.com: AccountKey=secret")
	p.Process(context.Background(), delivery(str("m-1")))
	store.failCheck = nil
	p.Process(context.Background(), delivery(str("m-2")))
	got := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		if _, seen := got[s.Name()]; !seen || s.Status().Code == codes.Error {
			got[s.Name()] = s
		}
	}
	check := got[spanInboxCheck]
	if check == nil || check.Status().Code != codes.Error || !strings.Contains(check.Status().Description, "check failed") ||
		strings.Contains(check.Status().Description, "AccountKey") {
		t.Fatalf("check span %v", check)
	}
	h := got[spanHandler]
	if h == nil || h.Status().Code != codes.Error || h.Status().Description != "handler broke" {
		t.Fatalf("handler span %v", h)
	}
}
