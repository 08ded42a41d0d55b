package subscriber

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/session"
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
	p, err := New(Options{EndpointID: "billing", Inbox: store, Publisher: &resolver.Memory{}, Handlers: reg,
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

// Session-state work has its own child spans: the read beside the inbox
// check, and each change (block, park, unblock) named by an attribute; a
// failing store marks its span with the safe error only.
func TestSessionStateSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	mem, _ := inbox.NewMemoryStore(inbox.MemoryOptions{})
	sessions := session.NewMemory(session.MemoryOptions{})
	fail := true
	reg := NewRegistry()
	reg.Handle("OrderPlaced", func(ctx context.Context, ev *Event) (Result, error) {
		if fail {
			return Result{}, errors.New("handler broke")
		}
		return Completed(), nil
	})
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	p, err := New(Options{EndpointID: "billing", Inbox: mem, Sessions: sessions, Publisher: &resolver.Memory{}, Handlers: reg,
		Tracer: tp.Tracer("test")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, root := tp.Tracer("test").Start(context.Background(), "delivery")
	p.Process(ctx, delivery(str("m-1")))                                                                     // fails: block
	p.Process(ctx, delivery(str("m-2"), func(pr map[string]any, d *Delivery) { pr["EventId"] = "event-2" })) // parked
	sessions.FailWith(func(string) error { return errors.New("503 at acct.documents.azure.com AccountKey=secret") })
	p.Process(ctx, delivery(str("m-3"), func(pr map[string]any, d *Delivery) { pr["EventId"] = "event-3" }))
	root.End()

	var reads, failedReads int
	changes := map[string]int{}
	for _, s := range rec.Ended() {
		if s.Name() != spanSessionRead && s.Name() != spanSessionWrite {
			continue
		}
		if s.Parent().SpanID() != root.SpanContext().SpanID() {
			t.Errorf("%s is not a child of the delivery's span", s.Name())
		}
		if strings.Contains(s.Status().Description, "AccountKey") {
			t.Errorf("%s status leaks the provider's text: %q", s.Name(), s.Status().Description)
		}
		switch s.Name() {
		case spanSessionRead:
			reads++
			if s.Status().Code == codes.Error {
				failedReads++
			}
		case spanSessionWrite:
			for _, a := range s.Attributes() {
				if a.Key == "nimbus.session.change" {
					changes[a.Value.AsString()]++
				}
			}
		}
	}
	if reads != 3 || failedReads != 1 || changes["block"] != 1 || changes["park"] != 1 {
		t.Fatalf("reads %d (failed %d), changes %v", reads, failedReads, changes)
	}
}
