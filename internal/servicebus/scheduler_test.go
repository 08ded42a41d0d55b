package servicebus

import (
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testctx"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
	"github.com/nimbus-go/functions-subscriber/internal/resolverapp"
)

// A store failure's re-send reaches the Resolver subscription after its
// delay with the original MessageId, session, correlation id, content type,
// subject and typed properties.
func TestResolverSchedulerResendsOnTheResolverTopic(t *testing.T) {
	t.Parallel()
	sb := testenv.StartServiceBus(t, testenv.NimBusTopology(endpoint))
	c := newClient(t, sb.ConnectionString)
	s, err := NewResolverScheduler(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	corr := "req-1"
	r := &resolverapp.Redelivery{
		Body: []byte(`{"EventContent":null,"ErrorContent":null}`), MessageID: "rsp-1", SessionID: "order-7",
		CorrelationID: &corr, ContentType: "application/json", Subject: "subj",
		Properties: map[string]any{"MessageType": "ResolutionResponse", "From": endpoint, resolverapp.PropThrottleRetryCount: int32(3), "QueueTimeMs": int64(5)},
	}
	ctx := testctx.Timeout(t, 20*time.Second)
	at := time.Now().Add(300 * time.Millisecond).Truncate(time.Millisecond)
	if err := s.ScheduleRedelivery(ctx, r, at); err != nil {
		t.Fatal(err)
	}
	rc, err := sb.Client(t).AcceptSessionForSubscription(ctx, testenv.ResolverTopic, testenv.ResolverSubscription, "order-7", nil)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := rc.ReceiveMessages(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if time.Now().Before(at) {
		t.Error("the re-send arrived before its time")
	}
	m := ms[0]
	if m.MessageID != "rsp-1" || m.CorrelationID == nil || *m.CorrelationID != "req-1" || m.ContentType == nil || *m.ContentType != "application/json" ||
		m.Subject == nil || *m.Subject != "subj" || string(m.Body) != string(r.Body) {
		t.Errorf("re-send arrived as %+v", m)
	}
	for k, want := range r.Properties {
		if m.ApplicationProperties[k] != want {
			t.Errorf("%s = %#v, want %#v", k, m.ApplicationProperties[k], want)
		}
	}
	if _, err := NewResolverScheduler(nil, nil); err == nil {
		t.Error("a scheduler without a client was accepted")
	}
}
