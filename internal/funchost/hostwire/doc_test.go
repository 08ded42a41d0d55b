package hostwire_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nimbus-go/functions-subscriber/internal/funchost"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/message/nimbusmsg"
)

// docPath is the user doc whose examples these tests check.
const docPath = "../../../docs/host-envelopes.md"

// exampleBlock matches an example of the doc: a marker comment naming it,
// then a fenced block.
var exampleBlock = regexp.MustCompile("(?s)<!-- example: ([a-z-]+) -->\n```[a-z]*\n(.*?)\n```")

// docExamples returns the doc's examples by name.
func docExamples(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range exampleBlock.FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = m[2]
	}
	return out
}

// indented is envelope as the doc shows it: indented by two spaces,
// nothing else changed.
func indented(t *testing.T, envelope []byte) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Indent(&b, envelope, "", "  "); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// compareExample fails when the doc's example name is not want.
func compareExample(t *testing.T, examples map[string]string, name, want string) string {
	t.Helper()
	got, ok := examples[name]
	if !ok {
		t.Fatalf("%s has no example %q", docPath, name)
	}
	if got != want {
		t.Errorf("%s: example %q is not what the builders make; it should read:\n%s", docPath, name, want)
	}
	return got
}

var (
	enqueued = time.Date(2026, 11, 30, 9, 15, 2, 250_000_000, time.UTC)
	utcNow   = time.Date(2026, 11, 30, 9, 15, 2, 617_283_900, time.UTC)
)

// The Subscriber example is an EventRequest further down a workflow, as
// NimBus's publisher and forwarder put it on the endpoint subscription,
// in the envelope the host builds for a session trigger with dataType
// binary; the pipeline's decoder reads it back.
func TestDocServiceBusExample(t *testing.T) {
	published := nimbusmsg.PublishedFromContext(
		nimbusmsg.Event{Publisher: "Orders", EventTypeID: "OrderAccepted", EventJSON: `{"OrderId":"O-1"}`, MessageID: "OrderAccepted-O-1"},
		nimbusmsg.HandlerContext{MessageID: "OrderPlaced-O-1", SessionID: "customer-1", CorrelationID: "9b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d",
			TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
	m := nimbusmsg.Forwarded(published, "Orders", "Billing", "7f9c2b6e-1d4a-4c8e-9b1f-3a2d5e6f7a8b")
	sb := m.Delivery("Subscriber", "", 1, enqueued)
	sb.LockToken = "5e3d6a39-8f6c-4f55-9c0e-0d2a1f4b7c11"
	sb.SequenceNumber = 1042
	sb.ContentType = hostwire.S("application/json")
	sb.Namespace = "sb-nimbus.servicebus.windows.net"
	sb.ClientID = "sb-nimbus.servicebus.windows.net-4e773554-f6b7-4ea2-b07d-4c5fd5aba741"
	sb.UtcNow = utcNow
	sb.RandGUID = "0f8fad5b-d9cb-469f-a165-70867728950e"
	doc := compareExample(t, docExamples(t), "service-bus", indented(t, hostwire.ServiceBus(sb)))

	got, err := funchost.DecodeServiceBus([]byte(doc), "message")
	if err != nil {
		t.Fatal(err)
	}
	in, err := message.Read(message.Broker{MessageID: got.MessageID, SessionID: got.SessionID, CorrelationID: got.CorrelationID},
		got.ApplicationProperties, got.Body)
	if err != nil {
		t.Fatal(err)
	}
	if *in.MessageID != "OrderAccepted-O-1" || *in.SessionID != "customer-1" || in.From != "Orders" || in.To != "Billing" ||
		in.ParentMessageID != "OrderPlaced-O-1" || in.OriginatingMessageID != "OrderPlaced-O-1" || got.DeliveryCount != 1 ||
		!got.EnqueuedTime.Equal(enqueued.Truncate(time.Second)) || *in.Content.EventContent.EventJSON != `{"OrderId":"O-1"}` {
		t.Errorf("the example reads as %+v", in)
	}
}

// The timer example is what the host sends InboxCleanup and OutboxSweep.
func TestDocTimerExample(t *testing.T) {
	env := hostwire.BuildTimer(hostwire.Timer{FunctionName: "OutboxSweep",
		Last: time.Date(2026, 11, 30, 9, 10, 0, 4_123_400, time.UTC), Next: time.Date(2026, 11, 30, 9, 15, 0, 0, time.UTC),
		LastUpdated: time.Date(2026, 11, 30, 9, 10, 0, 4_123_400, time.UTC), UtcNow: utcNow, RandGUID: "b3c2a1d4-5e6f-4a7b-8c9d-0e1f2a3b4c5d"})
	doc := compareExample(t, docExamples(t), "timer", indented(t, env))
	info, err := funchost.DecodeTimer([]byte(doc), "timer")
	if err != nil {
		t.Fatal(err)
	}
	if info.IsPastDue || !info.Next.Equal(time.Date(2026, 11, 30, 9, 15, 0, 0, time.UTC)) || !info.UtcNow.Equal(utcNow) {
		t.Errorf("the example reads as %+v", info)
	}
}

// The answers in the doc are the bytes the app's server writes: with the
// invocation's log lines on 2xx, the empty result otherwise.
func TestDocAnswerExamples(t *testing.T) {
	s := funchost.NewServer(zerolog.Nop(), funchost.Options{})
	s.Handle("Subscriber", func(_ context.Context, inv *funchost.Invocation) error {
		inv.Log("invocation completed: outcome=completed inbox=new messageId=OrderAccepted-O-1 sessionId=customer-1")
		return nil
	})
	s.Handle("Failing", func(_ context.Context, inv *funchost.Invocation) error {
		inv.Log("not sent: the host ignores a failed answer's body")
		return transient{}
	})
	srv := httptest.NewServer(s)
	defer srv.Close()
	examples := docExamples(t)
	for _, c := range []struct{ function, example string }{{"Subscriber", "answer"}, {"Failing", "failed-answer"}} {
		resp, err := http.Post(srv.URL+"/"+c.function, "application/json", strings.NewReader(`{"Data":{},"Metadata":{}}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		head := resp.Proto + " " + resp.Status + "\nContent-Type: " + resp.Header.Get("Content-Type") + "\n\n"
		compareExample(t, examples, c.example, head+string(body))
	}
}

// transient is a failure the server answers 503.
type transient struct{}

func (transient) Error() string { return "the store did not answer" }
