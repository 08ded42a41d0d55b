package servicebus

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testctx"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
	"github.com/nimbus-go/functions-subscriber/internal/message"
)

const endpoint = "Erp"

// fastRetry keeps failure tests short: DefaultRetry pauses up to 29.3 s.
var fastRetry = azservicebus.RetryOptions{
	MaxRetries: 1, RetryDelay: 20 * time.Millisecond, MaxRetryDelay: 50 * time.Millisecond,
}

// newClient returns a client for conn with fastRetry, closed in Cleanup.
func newClient(tb testing.TB, conn string) *Client {
	tb.Helper()
	c, err := New(Options{ConnectionString: conn, Retry: fastRetry})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// publisher is a ResolverPublisher on the endpoint topic with its client.
type publisher struct {
	*ResolverPublisher
	c *Client
}

func (p publisher) Close(ctx context.Context) error { return p.c.Close(ctx) }

func newPublisher(tb testing.TB, conn string) publisher {
	tb.Helper()
	c := newClient(tb, conn)
	p, err := NewResolverPublisher(c, endpoint)
	if err != nil {
		tb.Fatal(err)
	}
	return publisher{p, c}
}

// inbound builds a delivered NimBus event as the subscriber would read it.
func inbound(tb testing.TB, messageID *string, sessionID string, eventID any) *message.Inbound {
	tb.Helper()
	props := map[string]any{
		message.PropMessageType:          "EventRequest",
		message.PropTo:                   endpoint,
		message.PropFrom:                 "Crm",
		message.PropEventID:              eventID,
		message.PropEventTypeID:          "OrderPlaced",
		message.PropOriginatingMessageID: "self",
		message.PropRetryCount:           int32(2),
	}
	body := []byte(`{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-1\",\"Note\":\"é \\u2028\"}"},"ErrorContent":null}`)
	in, err := message.Read(message.Broker{MessageID: messageID, SessionID: &sessionID,
		EnqueuedTime: time.Now().Add(-time.Second), DeliveryCount: 1}, props, body)
	if err != nil {
		tb.Fatal(err)
	}
	return in
}

// receiveResolver reads n messages of one session from the Resolver topic,
// where the endpoint topic's Resolver subscription forwards responses.
func receiveResolver(tb testing.TB, c *azservicebus.Client, session string, n int) []*azservicebus.ReceivedMessage {
	tb.Helper()
	return testenv.ReceiveSession(tb, c, testenv.ResolverTopic, testenv.ResolverSubscription, session, n, 20*time.Second)
}

func TestServiceBusPublisherRoundTrip(t *testing.T) {
	t.Parallel()
	sb := testenv.StartServiceBus(t, testenv.NimBusTopology(endpoint))
	p := newPublisher(t, sb.ConnectionString)
	c := sb.Client(t)

	tests := []struct {
		name      string
		messageID *string
		eventID   any
		kind      message.ResponseKind
		timings   message.Timings
	}{
		{"resolution", message.Ptr("in-1"), "ev-1", message.Resolution, message.Timings{QueueTimeMs: 12, ProcessingTimeMs: 34}},
		{"null EventId and no queue time", message.Ptr("in-2"), nil, message.Duplicate, message.Timings{QueueTimeMs: -1, ProcessingTimeMs: 0}},
		{"no inbound MessageId", nil, "ev-3", message.Unsupported, message.Timings{QueueTimeMs: 1 << 40, ProcessingTimeMs: 5}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			session := fmt.Sprintf("s-%d", i)
			out := message.NewResponse(inbound(t, tc.messageID, session, tc.eventID), tc.kind, tc.timings, nil)
			if err := p.Publish(testctx.Timeout(t, 10*time.Second), out); err != nil {
				t.Fatal(err)
			}
			got := receiveResolver(t, c, session, 1)[0]

			// Every property the subscriber wrote arrives with the same value and Go type.
			for k, want := range out.ApplicationProperties {
				v, ok := got.ApplicationProperties[k]
				if !ok || v != want || fmt.Sprintf("%T", v) != fmt.Sprintf("%T", want) {
					t.Errorf("%s = %#v (%T, present %v), want %#v (%T)", k, v, v, ok, want, want)
				}
			}
			// The only addition is From, stamped by the topology's from-Erp rule.
			if len(got.ApplicationProperties) != len(out.ApplicationProperties)+1 || got.ApplicationProperties["From"] != endpoint {
				t.Errorf("properties %v: want the published ones plus From=%s", got.ApplicationProperties, endpoint)
			}
			if _, ok := got.ApplicationProperties["RetryCount"].(int32); !ok {
				t.Errorf("RetryCount is %T, want int32", got.ApplicationProperties["RetryCount"])
			}
			if _, ok := got.ApplicationProperties["ProcessingTimeMs"].(int64); !ok {
				t.Errorf("ProcessingTimeMs is %T, want int64", got.ApplicationProperties["ProcessingTimeMs"])
			}
			if q, ok := got.ApplicationProperties["QueueTimeMs"]; tc.timings.QueueTimeMs >= 0 {
				if _, is64 := q.(int64); !is64 {
					t.Errorf("QueueTimeMs is %T, want int64", q)
				}
			} else if ok {
				t.Errorf("QueueTimeMs present (%v) for an unknown queue time", q)
			}
			if v, ok := got.ApplicationProperties["EventId"]; !ok || (tc.eventID == nil) != (v == nil) {
				t.Errorf("EventId = %#v (present %v), want %#v", v, ok, tc.eventID)
			}
			if got.SessionID == nil || *got.SessionID != session {
				t.Errorf("SessionID = %v, want %s", got.SessionID, session)
			}
			switch {
			case tc.messageID == nil && got.CorrelationID != nil:
				t.Errorf("CorrelationID = %q, want none", *got.CorrelationID)
			case tc.messageID != nil && (got.CorrelationID == nil || *got.CorrelationID != *tc.messageID):
				t.Errorf("CorrelationID = %v, want %s", got.CorrelationID, *tc.messageID)
			}
			if got.MessageID == "" || (tc.messageID != nil && got.MessageID == *tc.messageID) {
				t.Errorf("MessageID = %q, want a broker-assigned id", got.MessageID)
			}
			if string(got.Body) != string(out.Body) {
				t.Errorf("body\n got %s\nwant %s", got.Body, out.Body)
			}
		})
	}
}

// countingListener accepts TCP connections on 127.0.0.1 and counts them.
func countingListener(t *testing.T) (port int, accepted *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = new(atomic.Int32)
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().(*net.TCPAddr).Port, accepted
}

func TestServiceBusPublisherConnectsOnlyOnFirstPublish(t *testing.T) {
	t.Parallel()
	port, accepted := countingListener(t)
	p := newPublisher(t, testenv.ConnectionString(port))
	// New creates no SDK client and starts nothing in the background, so
	// nothing can connect before the first publish.
	p.c.mu.Lock()
	created := p.c.client != nil
	p.c.mu.Unlock()
	if created || accepted.Load() != 0 {
		t.Fatalf("client created %v, %d connections before the first publish", created, accepted.Load())
	}
	// The peer accepts TCP but never speaks AMQP: the publish must fail, not hang.
	out := message.NewResponse(inbound(t, message.Ptr("m"), "s", "e"), message.Resolution, message.Timings{}, nil)
	err := p.Publish(testctx.Timeout(t, 2*time.Second), out)
	if err == nil {
		t.Fatal("publish to a silent peer succeeded")
	}
	if !strings.Contains(err.Error(), `topic "Erp"`) {
		t.Errorf("error does not name the topic: %v", err)
	}
	if accepted.Load() == 0 {
		t.Error("publish did not connect")
	}
}

func TestServiceBusPublisherFailedSendReturnsError(t *testing.T) {
	t.Parallel()
	sb := testenv.StartServiceBus(t, testenv.NimBusTopology(endpoint))
	p := newPublisher(t, sb.ConnectionString)
	out := message.NewResponse(inbound(t, message.Ptr("m"), "s", "e"), message.Resolution, message.Timings{}, nil)
	if err := p.Publish(testctx.Timeout(t, 10*time.Second), out); err != nil {
		t.Fatal(err)
	}
	sb.Stop()
	start := time.Now()
	if err := p.Publish(testctx.Timeout(t, 10*time.Second), out); err == nil {
		t.Fatal("publish with the broker gone succeeded")
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("failure took %v", d)
	}
}

func TestServiceBusPublisherSharesOneSenderAcrossGoroutines(t *testing.T) {
	t.Parallel()
	topo := testenv.Topology{Topics: []testenv.Topic{{Name: endpoint, Subscriptions: []testenv.Subscription{{Name: "all"}}}}}
	sb := testenv.StartServiceBus(t, topo)
	p := newPublisher(t, sb.ConnectionString)
	var created atomic.Int32
	release := make(chan struct{})
	p.c.newClient = func(o Options) (*azservicebus.Client, error) {
		created.Add(1)
		<-release // held until every goroutine waits for this one creation
		return newSDKClient(o)
	}
	const goroutines, each = 32, 8
	waited := make(chan bool, 1)
	go func() {
		// Release the creation once every goroutine's first publish is
		// blocked in sender: one creating, the rest waiting for it.
		waited <- testenv.Poll(20*time.Second, func() bool { return testenv.GoroutinesIn("servicebus.(*Client).sender(") >= goroutines })
		close(release)
	}()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*each)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				out := message.NewResponse(inbound(t, message.Ptr(fmt.Sprintf("m-%d-%d", g, i)), fmt.Sprintf("s-%d", g), "e"),
					message.Resolution, message.Timings{}, nil)
				if err := p.Publish(testctx.Timeout(t, 20*time.Second), out); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	if !<-waited {
		t.Fatal("the goroutines never all waited for the first creation")
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := created.Load(); n != 1 {
		t.Fatalf("client created %d times, want 1", n)
	}
	r, err := sb.Client(t).NewReceiverForSubscription(endpoint, "all", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	ctx := testctx.Timeout(t, 20*time.Second)
	for len(seen) < goroutines*each {
		ms, err := r.ReceiveMessages(ctx, 100, nil)
		if err != nil {
			t.Fatalf("received %d: %v", len(seen), err)
		}
		for _, m := range ms {
			seen[*m.CorrelationID] = true
		}
	}
}

func TestServiceBusPublisherRetriesFailedCreation(t *testing.T) {
	t.Parallel()
	sb := testenv.StartServiceBus(t, testenv.NimBusTopology(endpoint))
	p := newPublisher(t, sb.ConnectionString)
	var calls atomic.Int32
	boom := errors.New("identity endpoint unavailable")
	p.c.newClient = func(o Options) (*azservicebus.Client, error) {
		if calls.Add(1) == 1 {
			return nil, boom
		}
		return newSDKClient(o)
	}
	out := message.NewResponse(inbound(t, message.Ptr("m"), "s", "e"), message.Resolution, message.Timings{}, nil)
	if err := p.Publish(testctx.Timeout(t, 10*time.Second), out); !errors.Is(err, boom) {
		t.Fatalf("first publish: %v, want the creation error", err)
	}
	if err := p.Publish(testctx.Timeout(t, 10*time.Second), out); err != nil {
		t.Fatalf("second publish: %v", err)
	}
	if calls.Load() != 2 {
		t.Fatalf("creation attempts = %d, want 2", calls.Load())
	}
	receiveResolver(t, sb.Client(t), "s", 1)
}

func TestServiceBusPublisherClose(t *testing.T) {
	t.Parallel()
	sb := testenv.StartServiceBus(t, testenv.NimBusTopology(endpoint))
	unused := newPublisher(t, sb.ConnectionString)
	if err := unused.Close(testctx.Timeout(t, 5*time.Second)); err != nil {
		t.Fatalf("closing an unused publisher: %v", err)
	}
	p := newPublisher(t, sb.ConnectionString)
	out := message.NewResponse(inbound(t, message.Ptr("m"), "s", "e"), message.Resolution, message.Timings{}, nil)
	if err := p.Publish(testctx.Timeout(t, 10*time.Second), out); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(testctx.Timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(testctx.Timeout(t, 5*time.Second)); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := p.Publish(testctx.Timeout(t, 5*time.Second), out); !errors.Is(err, ErrClosed) {
		t.Fatalf("publish after Close: %v, want ErrClosed", err)
	}
}

func TestServiceBusPublisherRejectsUnsupportedPropertyTypes(t *testing.T) {
	t.Parallel()
	p := newPublisher(t, testenv.ConnectionString(1))
	for _, v := range []any{int(1), true, 1.5, uint32(1)} {
		out := &message.Outgoing{ApplicationProperties: map[string]any{"RetryCount": v}}
		if err := p.Publish(context.Background(), out); !errors.Is(err, ErrUnsupportedProperty) {
			t.Errorf("%T: %v, want ErrUnsupportedProperty", v, err)
		}
		if _, err := p.c.Schedule(context.Background(), endpoint, &Message{ApplicationProperties: out.ApplicationProperties}, time.Now()); !errors.Is(err, ErrUnsupportedProperty) {
			t.Errorf("schedule %T: %v, want ErrUnsupportedProperty", v, err)
		}
	}
	if p.c.senders.Load() != nil || p.c.client != nil {
		t.Error("a rejected message created the client")
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	const secret = "c2VjcmV0LWtleQ=="
	tests := []struct {
		name    string
		opts    Options
		wantErr []string
	}{
		{"connection string", Options{ConnectionString: "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=" + secret, Retry: DefaultRetry}, nil},
		{"SAS connection string", Options{ConnectionString: "Endpoint=sb://x/;SharedAccessSignature=SharedAccessSignature sr=a&sig=" + secret, Retry: DefaultRetry}, nil},
		{"namespace", Options{FullyQualifiedNamespace: "x.servicebus.windows.net", Retry: DefaultRetry}, nil},
		{"namespace and client id", Options{FullyQualifiedNamespace: "x.servicebus.windows.net", ManagedIdentityClientID: "00000000-0000-0000-0000-000000000001", Retry: DefaultRetry}, nil},
		{"nothing", Options{Retry: DefaultRetry}, []string{"Options.ConnectionString", "Options.FullyQualifiedNamespace"}},
		{"no retry", Options{FullyQualifiedNamespace: "x.servicebus.windows.net"}, []string{"Options.Retry", "DefaultRetry"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.opts)
			if len(tc.wantErr) == 0 {
				if err != nil || c == nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if c.client != nil {
					t.Error("New created the SDK client")
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "ServiceBusConnection") {
				t.Errorf("error names an app setting: %q", err)
			}
		})
	}

	if _, err := NewResolverPublisher(newClient(t, testenv.ConnectionString(1)), " "); err == nil || !strings.Contains(err.Error(), "topic") {
		t.Errorf("publisher without a topic: %v, want an error about the topic", err)
	}
	if _, err := NewResolverPublisher(nil, endpoint); err == nil {
		t.Error("publisher without a client: no error")
	}
}

// A connection string the SDK cannot parse fails the first use (not New),
// naming the option and never the key; a later use tries again.
func TestUnparsableConnectionStringFailsFirstUse(t *testing.T) {
	t.Parallel()
	const secret = "c2VjcmV0LWtleQ=="
	for _, conn := range []string{
		"SharedAccessKeyName=k;SharedAccessKey=" + secret,
		"Endpoint=sb://x/;SharedAccessKeyName=k",
		"Endpoint=;;;SharedAccessKey=" + secret,
	} {
		c := newClient(t, conn)
		msg := &Message{Body: []byte("x")}
		for attempt := range 2 {
			err := c.Send(testctx.Timeout(t, 5*time.Second), endpoint, msg)
			if err == nil {
				t.Fatalf("%d: send with an unparsable connection string succeeded", attempt)
			}
			if !strings.Contains(err.Error(), "Options.ConnectionString") || strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "ServiceBusConnection") {
				t.Errorf("%d: error %q: want it to name Options.ConnectionString, without the key or a setting name", attempt, err)
			}
		}
	}
}

// The benchmarks measure the full send path against the stand-in: encode,
// AMQP transfer over loopback, and the broker's accepted disposition.

func BenchmarkServiceBusPublish(b *testing.B) {
	sb := testenv.StartServiceBus(b, testenv.NimBusTopology(endpoint))
	p := newPublisher(b, sb.ConnectionString)
	out := message.NewResponse(inbound(b, message.Ptr("m"), "s", "e"), message.Resolution, message.Timings{QueueTimeMs: 3, ProcessingTimeMs: 4}, nil)
	ctx := context.Background()
	if err := p.Publish(ctx, out); err != nil { // connect outside the timed loop
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if err := p.Publish(ctx, out); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "publishes/s")
}

func BenchmarkServiceBusPublishParallel(b *testing.B) {
	sb := testenv.StartServiceBus(b, testenv.NimBusTopology(endpoint))
	p := newPublisher(b, sb.ConnectionString)
	out := message.NewResponse(inbound(b, message.Ptr("m"), "s", "e"), message.Resolution, message.Timings{QueueTimeMs: 3, ProcessingTimeMs: 4}, nil)
	if err := p.Publish(context.Background(), out); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetParallelism(4)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := p.Publish(context.Background(), out); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "publishes/s")
}
