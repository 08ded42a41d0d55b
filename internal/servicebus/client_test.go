package servicebus

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testctx"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

func TestRetryPauseBound(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		o    azservicebus.RetryOptions
		want time.Duration
	}{
		{"DefaultRetry (the figure in its Go doc)", DefaultRetry, 29300 * time.Millisecond},
		{"SDK defaults", azservicebus.RetryOptions{}, 57200 * time.Millisecond},
		{"no retries", azservicebus.RetryOptions{MaxRetries: -1}, 0},
		{"no pause", azservicebus.RetryOptions{MaxRetries: 5, RetryDelay: -1}, 0},
		{"capped", azservicebus.RetryOptions{MaxRetries: 3, RetryDelay: time.Second, MaxRetryDelay: 2 * time.Second}, 1300*time.Millisecond + 4*time.Second},
		{"no cap", azservicebus.RetryOptions{MaxRetries: 2, RetryDelay: time.Second, MaxRetryDelay: -1}, 5200 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := RetryPauseBound(tc.o); got != tc.want {
				t.Errorf("RetryPauseBound(%+v) = %v, want %v", tc.o, got, tc.want)
			}
		})
	}
	if got := retryPauses(DefaultRetry, minJitter); got != 20800*time.Millisecond {
		t.Errorf("shortest DefaultRetry pauses = %v, want 20.8s", got)
	}
}

// TestRetryPausesMatchTheSDK checks RetryPauseBound against the SDK itself:
// a send to a port that refuses connections fails only after the retries,
// within the computed range of pauses.
func TestRetryPausesMatchTheSDK(t *testing.T) {
	t.Parallel()
	conn := testenv.ConnectionString(refusingPort(t))
	retry := azservicebus.RetryOptions{MaxRetries: 3, RetryDelay: 40 * time.Millisecond, MaxRetryDelay: 120 * time.Millisecond}
	c, err := New(Options{ConnectionString: conn, Retry: retry})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	lo, hi := retryPauses(retry, minJitter), RetryPauseBound(retry)
	start := time.Now()
	err = c.Send(testctx.Timeout(t, 20*time.Second), "q", &Message{Body: []byte("x")})
	took := time.Since(start)
	if err == nil {
		t.Fatal("send to a refusing port succeeded")
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("send ran into the test's deadline: %v", err)
	}
	t.Logf("failed after %v (pauses %v–%v): %v", took, lo, hi, err)
	if took < lo {
		t.Errorf("failed after %v, before the shortest possible retry pauses (%v): the SDK did not retry as documented", took, lo)
	}
	if took > hi+2*time.Second {
		t.Errorf("failed after %v, far beyond the longest retry pauses (%v)", took, hi)
	}
}

// refusingPort returns a loopback port that nothing listens on.
func refusingPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}

// recvQueue reads n messages from a non-session queue, deleting them.
func recvQueue(t *testing.T, sb *testenv.ServiceBus, queue string, n int) []*azservicebus.ReceivedMessage {
	t.Helper()
	r, err := sb.Client(t).NewReceiverForQueue(queue, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testctx.Timeout(t, 20*time.Second)
	var got []*azservicebus.ReceivedMessage
	for len(got) < n {
		ms, err := r.ReceiveMessages(ctx, n-len(got), nil)
		if err != nil {
			t.Fatalf("received %d of %d from %s: %v", len(got), n, queue, err)
		}
		got = append(got, ms...)
	}
	return got
}

func TestSendSetsEveryField(t *testing.T) {
	t.Parallel()
	sb := testenv.StartServiceBus(t, testenv.Topology{Queues: []testenv.Queue{{Name: "q"}, {Name: "other"}}})
	c := newClient(t, sb.ConnectionString)
	empty := ""
	full := &Message{
		Body:                  []byte(`{"a":1}`),
		ApplicationProperties: map[string]any{"S": "x", "I": int32(-7), "L": int64(1) << 40, "N": nil},
		SessionID:             "s-1",
		CorrelationID:         &empty,
		MessageID:             "m-1",
		Subject:               "subj",
		To:                    "Somewhere",
	}
	if err := c.Send(testctx.Timeout(t, 10*time.Second), "q", full); err != nil {
		t.Fatal(err)
	}
	if err := c.Send(testctx.Timeout(t, 10*time.Second), "q", &Message{Body: []byte("bare")}); err != nil {
		t.Fatal(err)
	}
	got := recvQueue(t, sb, "q", 2)
	m := got[0]
	for k, want := range full.ApplicationProperties {
		if v, ok := m.ApplicationProperties[k]; !ok || v != want || fmt.Sprintf("%T", v) != fmt.Sprintf("%T", want) {
			t.Errorf("%s = %#v (%T, present %v), want %#v (%T)", k, v, v, ok, want, want)
		}
	}
	if string(m.Body) != `{"a":1}` || m.MessageID != "m-1" || m.SessionID == nil || *m.SessionID != "s-1" ||
		m.CorrelationID == nil || *m.CorrelationID != "" || m.Subject == nil || *m.Subject != "subj" || m.To == nil || *m.To != "Somewhere" {
		t.Errorf("full message arrived as body %q id %q session %v correlation %v subject %v to %v",
			m.Body, m.MessageID, m.SessionID, m.CorrelationID, m.Subject, m.To)
	}
	b := got[1]
	if string(b.Body) != "bare" || b.MessageID == "" || b.SessionID != nil || b.CorrelationID != nil || b.Subject != nil || b.To != nil || len(b.ApplicationProperties) != 0 {
		t.Errorf("bare message arrived as body %q id %q session %v correlation %v subject %v to %v props %v",
			b.Body, b.MessageID, b.SessionID, b.CorrelationID, b.Subject, b.To, b.ApplicationProperties)
	}
}

func TestSendersPerEntityCreatedOnceAndReused(t *testing.T) {
	t.Parallel()
	sb := testenv.StartServiceBus(t, testenv.Topology{Queues: []testenv.Queue{{Name: "a"}, {Name: "b"}}})
	c := newClient(t, sb.ConnectionString)
	const each = 16
	var wg sync.WaitGroup
	errs := make(chan error, 2*each)
	for i := range 2 * each {
		wg.Add(1)
		go func() {
			defer wg.Done()
			entity := []string{"a", "b"}[i%2]
			if err := c.Send(testctx.Timeout(t, 20*time.Second), entity, &Message{Body: []byte(entity)}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := c.sendersCreated.Load(); n != 2 {
		t.Errorf("%d senders created for 2 entities, want 2", n)
	}
	m := *c.senders.Load()
	if len(m) != 2 || m["a"] == nil || m["b"] == nil || m["a"] == m["b"] {
		t.Fatalf("senders = %v, want one each for a and b", m)
	}
	sa := m["a"]
	if err := c.Send(testctx.Timeout(t, 10*time.Second), "a", &Message{Body: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	if (*c.senders.Load())["a"] != sa || c.sendersCreated.Load() != 2 {
		t.Error("the sender for a was replaced on a later send")
	}
	for _, q := range []string{"a", "b"} {
		for _, got := range recvQueue(t, sb, q, map[string]int{"a": each + 1, "b": each}[q]) {
			if string(got.Body) != q {
				t.Errorf("queue %s received %q", q, got.Body)
			}
		}
	}
	if err := c.Send(testctx.Timeout(t, 5*time.Second), " ", &Message{}); err == nil {
		t.Error("send to a blank entity succeeded")
	}
}

func TestScheduleEnqueuesAtTheTime(t *testing.T) {
	t.Parallel()
	sb := testenv.StartServiceBus(t, testenv.Topology{Queues: []testenv.Queue{{Name: "q", RequiresSession: true}}})
	c := newClient(t, sb.ConnectionString)
	ctx := testctx.Timeout(t, 20*time.Second)

	// A message scheduled far ahead stays out of the queue...
	later, err := c.Schedule(ctx, "q", &Message{Body: []byte("later"), SessionID: "s"}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// Whole milliseconds: the AMQP timestamp carries no finer time.
	at := time.Now().Add(400 * time.Millisecond).Truncate(time.Millisecond)
	soon, err := c.Schedule(ctx, "q", &Message{Body: []byte("soon"), SessionID: "s", ApplicationProperties: map[string]any{"RetryCount": int32(1)}}, at)
	if err != nil {
		t.Fatal(err)
	}
	if later <= 0 || soon <= 0 || later == soon {
		t.Errorf("sequence numbers %d and %d, want two distinct positive ones", later, soon)
	}
	// ...while one scheduled shortly arrives, not before its time.
	r, err := sb.Client(t).AcceptSessionForQueue(ctx, "q", "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := r.ReceiveMessages(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if arrived := time.Now(); arrived.Before(at) {
		t.Errorf("scheduled message arrived %v before its time", at.Sub(arrived))
	}
	if string(ms[0].Body) != "soon" || ms[0].ApplicationProperties["RetryCount"] != int32(1) {
		t.Errorf("received %q with %v, want the message scheduled soon", ms[0].Body, ms[0].ApplicationProperties)
	}
	if err := r.CompleteMessage(ctx, ms[0], nil); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if ms, err := r.ReceiveMessages(short, 1, nil); len(ms) != 0 {
		t.Errorf("the message scheduled an hour ahead arrived: %q (%v)", ms[0].Body, err)
	}
}

// parked builds a copy as parking sends it: To=Deferred with the original
// session, which the topology routes to the Deferred session subscription.
func parked(session string, i int) *Message {
	return &Message{
		Body:      []byte(fmt.Sprintf("parked-%d", i)),
		SessionID: session,
		ApplicationProperties: map[string]any{
			"To": testenv.DeferredSubscription, "OriginalSessionId": session, "DeferralSequence": int32(i),
		},
	}
}

func TestSessionReceive(t *testing.T) {
	t.Parallel()
	sb := testenv.StartServiceBus(t, testenv.NimBusTopology(endpoint))
	c := newClient(t, sb.ConnectionString)
	ctx := testctx.Timeout(t, 30*time.Second)
	for i := 1; i <= 3; i++ {
		if err := c.Send(ctx, endpoint, parked("s-1", i)); err != nil {
			t.Fatal(err)
		}
	}

	r, err := c.AcceptSession(ctx, endpoint, testenv.DeferredSubscription, "s-1")
	if err != nil {
		t.Fatal(err)
	}
	if r.SessionID() != "s-1" {
		t.Errorf("SessionID = %q", r.SessionID())
	}
	if _, err := c.AcceptSession(ctx, endpoint, testenv.DeferredSubscription, "s-1"); err == nil {
		t.Error("a second receiver locked the same session")
	}

	first, err := r.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(first.Body) != "parked-1" || first.DeliveryCount != 1 || first.SessionID != "s-1" || first.SequenceNumber <= 0 ||
		first.ApplicationProperties["DeferralSequence"] != int32(1) || first.EnqueuedTime.IsZero() {
		t.Fatalf("first = %+v", first)
	}
	if err := r.Abandon(ctx, first); err != nil {
		t.Fatal(err)
	}
	again, err := r.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(again.Body) != "parked-1" || again.DeliveryCount != 2 || again.SequenceNumber != first.SequenceNumber {
		t.Fatalf("after abandon got %q delivery %d seq %d, want parked-1 again, delivery 2, seq %d", again.Body, again.DeliveryCount, again.SequenceNumber, first.SequenceNumber)
	}
	for i := 1; i <= 3; i++ {
		m := again
		if i > 1 {
			if m, err = r.Receive(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if want := fmt.Sprintf("parked-%d", i); string(m.Body) != want {
			t.Errorf("message %d = %q, want %s (session order)", i, m.Body, want)
		}
		if err := r.Complete(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	drained, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if m, err := r.Receive(drained); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("receive from a drained session: %+v, %v; want DeadlineExceeded", m, err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// With no session waiting, AcceptNextSession gives up at the deadline.
	none, cancel2 := context.WithTimeout(ctx, time.Second)
	defer cancel2()
	if _, err := c.AcceptNextSession(none, endpoint, testenv.DeferredSubscription); !errors.Is(err, ErrNoSession) {
		t.Errorf("accept next with nothing waiting: %v, want ErrNoSession", err)
	}

	// A session with messages is the next one; closing its receiver without
	// settling returns the message without counting a delivery.
	if err := c.Send(ctx, endpoint, parked("s-2", 1)); err != nil {
		t.Fatal(err)
	}
	next, err := c.AcceptNextSession(ctx, endpoint, testenv.DeferredSubscription)
	if err != nil {
		t.Fatal(err)
	}
	if next.SessionID() != "s-2" {
		t.Errorf("next session = %q, want s-2", next.SessionID())
	}
	if _, err := next.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if err := next.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got := testenv.ReceiveSession(t, sb.Client(t), endpoint, testenv.DeferredSubscription, "s-2", 1, 10*time.Second)[0]
	if string(got.Body) != "parked-1" || got.DeliveryCount != 1 {
		t.Errorf("after close got %q delivery %d, want parked-1 delivery 1", got.Body, got.DeliveryCount)
	}
}

func TestCloseEndsEveryOperation(t *testing.T) {
	t.Parallel()
	sb := testenv.StartServiceBus(t, testenv.NimBusTopology(endpoint))
	c := newClient(t, sb.ConnectionString)
	ctx := testctx.Timeout(t, 20*time.Second)
	for _, e := range []string{endpoint, testenv.ResolverTopic} {
		if err := c.Send(ctx, e, parked("s", 1)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := c.AcceptSession(ctx, endpoint, testenv.DeferredSubscription, "s")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if c.senders.Load() != nil || c.client != nil {
		t.Error("Close kept senders or the client")
	}
	if err := c.Send(ctx, endpoint, parked("s", 2)); !errors.Is(err, ErrClosed) {
		t.Errorf("send after Close: %v, want ErrClosed", err)
	}
	if _, err := c.Schedule(ctx, endpoint, parked("s", 2), time.Now()); !errors.Is(err, ErrClosed) {
		t.Errorf("schedule after Close: %v, want ErrClosed", err)
	}
	if _, err := c.AcceptSession(ctx, endpoint, testenv.DeferredSubscription, "s"); !errors.Is(err, ErrClosed) {
		t.Errorf("accept after Close: %v, want ErrClosed", err)
	}
	if _, err := c.AcceptNextSession(ctx, endpoint, testenv.DeferredSubscription); !errors.Is(err, ErrClosed) {
		t.Errorf("accept next after Close: %v, want ErrClosed", err)
	}
	if _, err := r.Receive(ctx); err == nil {
		t.Error("a session receiver still received after the client closed")
	}
}
