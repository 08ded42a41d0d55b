package testenv_test

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testctx"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

// These tests drive the Service Bus stand-in with the real azservicebus SDK;
// they are the specification of what scripts/testenv/sbfake.js does.

func send(t *testing.T, c *azservicebus.Client, entity string, msgs ...*azservicebus.Message) {
	t.Helper()
	s, err := c.NewSender(entity, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	for _, m := range msgs {
		if err := s.SendMessage(testctx.Timeout(t, 10*time.Second), m, nil); err != nil {
			t.Fatalf("send to %s: %v", entity, err)
		}
	}
}

type receiver interface {
	ReceiveMessages(ctx context.Context, n int, o *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
}

// receive gets exactly n messages or fails.
func receive(t *testing.T, r receiver, n int) []*azservicebus.ReceivedMessage {
	t.Helper()
	var got []*azservicebus.ReceivedMessage
	ctx := testctx.Timeout(t, 10*time.Second)
	for len(got) < n {
		ms, err := r.ReceiveMessages(ctx, n-len(got), nil)
		if err != nil {
			t.Fatalf("receive (have %d of %d): %v", len(got), n, err)
		}
		got = append(got, ms...)
	}
	return got
}

// receiveNone asserts nothing arrives within d.
func receiveNone(t *testing.T, r receiver, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	ms, err := r.ReceiveMessages(ctx, 1, nil)
	if len(ms) != 0 {
		t.Fatalf("expected no message, got %d (first: %v)", len(ms), ms[0].ApplicationProperties)
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("receive: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

func TestQueueRoundTripKeepsAMQPTypesAndAssignsMessageID(t *testing.T) {
	t.Parallel()
	sb := testenv.StartServiceBus(t, testenv.Topology{Queues: []testenv.Queue{{Name: "q1"}}})
	c := sb.Client(t)
	props := map[string]any{"s": "x", "i32": int32(7), "i64": int64(1) << 40, "small64": int64(3), "nil": nil, "b": true, "f": 1.5}
	send(t, c, "q1",
		&azservicebus.Message{Body: []byte("one"), ApplicationProperties: props, SessionID: ptr("s1"),
			CorrelationID: ptr("corr"), ContentType: ptr("application/json"), Subject: ptr("subj")},
		&azservicebus.Message{Body: []byte("two"), MessageID: ptr("mine")},
	)
	r, err := c.NewReceiverForQueue("q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := receive(t, r, 2)
	m := got[0]
	if string(m.Body) != "one" || string(got[1].Body) != "two" {
		t.Fatalf("bodies out of order: %q %q", m.Body, got[1].Body)
	}
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(m.MessageID) {
		t.Errorf("broker-assigned MessageID = %q, want 32 hex digits", m.MessageID)
	}
	if got[1].MessageID != "mine" {
		t.Errorf("sender MessageID not kept: %q", got[1].MessageID)
	}
	for k, want := range props {
		v, ok := m.ApplicationProperties[k]
		if !ok || v != want {
			t.Errorf("property %s = %#v (%T), want %#v (%T)", k, v, v, want, want)
		}
	}
	if m.SessionID == nil || *m.SessionID != "s1" || *m.CorrelationID != "corr" || *m.ContentType != "application/json" || *m.Subject != "subj" {
		t.Errorf("broker properties not kept: %+v", m)
	}
	if m.DeliveryCount != 1 || m.SequenceNumber == nil || m.EnqueuedTime == nil || m.LockedUntil == nil {
		t.Errorf("system properties: dc=%d seq=%v enq=%v locked=%v", m.DeliveryCount, m.SequenceNumber, m.EnqueuedTime, m.LockedUntil)
	}
	if *got[1].SequenceNumber <= *m.SequenceNumber {
		t.Errorf("sequence numbers not increasing: %d then %d", *m.SequenceNumber, *got[1].SequenceNumber)
	}
	for _, x := range got {
		if err := r.CompleteMessage(testctx.Timeout(t, 5*time.Second), x, nil); err != nil {
			t.Fatal(err)
		}
	}
	peeked, err := r.PeekMessages(testctx.Timeout(t, 5*time.Second), 10, nil)
	if err != nil || len(peeked) != 0 {
		t.Fatalf("after complete: peek = %d messages, err %v", len(peeked), err)
	}
}

func TestTopicRoutesToDeclaredSubscriptionsBeforeAnyReceiver(t *testing.T) {
	t.Parallel()
	sb := testenv.StartServiceBus(t, testenv.NimBusTopology("Erp"))
	c := sb.Client(t)
	send(t, c, "Erp",
		&azservicebus.Message{Body: []byte("event"), SessionID: ptr("s1"), ApplicationProperties: map[string]any{"To": "Erp", "MessageType": "EventRequest"}},
		&azservicebus.Message{Body: []byte("response"), SessionID: ptr("s1"), ApplicationProperties: map[string]any{"To": "Resolver", "MessageType": "ResolutionResponse"}},
		&azservicebus.Message{Body: []byte("retry"), SessionID: ptr("s1"), ApplicationProperties: map[string]any{"To": "Retry"}},
		&azservicebus.Message{Body: []byte("parked-no-origin"), SessionID: ptr("s1"), ApplicationProperties: map[string]any{"To": "Deferred"}},
		&azservicebus.Message{Body: []byte("parked"), SessionID: ptr("s1"), ApplicationProperties: map[string]any{"To": "Deferred", "OriginalSessionId": "s1"}},
		&azservicebus.Message{Body: []byte("other"), SessionID: ptr("s1"), ApplicationProperties: map[string]any{"To": "Someone"}},
	)

	// The endpoint subscription: To=Erp, and Retry rewritten to Erp with From stamped.
	er, err := c.AcceptSessionForSubscription(testctx.Timeout(t, 5*time.Second), "Erp", "Erp", "s1", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := receive(t, er, 2)
	if string(got[0].Body) != "event" || string(got[1].Body) != "retry" {
		t.Fatalf("endpoint subscription got %q, %q", got[0].Body, got[1].Body)
	}
	if got[1].ApplicationProperties["To"] != "Erp" || got[1].ApplicationProperties["From"] != "Retry" {
		t.Errorf("retry rule action not applied: %v", got[1].ApplicationProperties)
	}
	if _, ok := got[0].ApplicationProperties["From"]; ok {
		t.Errorf("no action on to-Erp, but From is %v", got[0].ApplicationProperties["From"])
	}
	receiveNone(t, er, 300*time.Millisecond)

	// The Resolver topic: the forwarded response (From stamped) and the audit copy of To=Erp.
	rr, err := c.AcceptSessionForSubscription(testctx.Timeout(t, 5*time.Second), "Resolver", "Resolver", "s1", nil)
	if err != nil {
		t.Fatal(err)
	}
	got = receive(t, rr, 2)
	if string(got[0].Body) != "event" || string(got[1].Body) != "response" {
		t.Fatalf("resolver got %q, %q", got[0].Body, got[1].Body)
	}
	if got[1].ApplicationProperties["From"] != "Erp" {
		t.Errorf("from-Erp action not applied: %v", got[1].ApplicationProperties)
	}
	if got[1].MessageID == "" {
		t.Errorf("broker MessageID missing on the forwarded response")
	}
	receiveNone(t, rr, 300*time.Millisecond)

	// Deferred needs OriginalSessionId.
	dr, err := c.AcceptSessionForSubscription(testctx.Timeout(t, 5*time.Second), "Erp", "Deferred", "s1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := receive(t, dr, 1); string(got[0].Body) != "parked" {
		t.Fatalf("deferred got %q", got[0].Body)
	}
	receiveNone(t, dr, 300*time.Millisecond)
}

func TestFanOutCopiesShareTheBrokerMessageID(t *testing.T) {
	t.Parallel()
	sb := testenv.StartServiceBus(t, testenv.NimBusTopology("Erp"))
	c := sb.Client(t)
	send(t, c, "Erp", &azservicebus.Message{Body: []byte("e"), SessionID: ptr("s"), ApplicationProperties: map[string]any{"To": "Erp"}})
	a, err := c.AcceptSessionForSubscription(testctx.Timeout(t, 5*time.Second), "Erp", "Erp", "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.AcceptSessionForSubscription(testctx.Timeout(t, 5*time.Second), "Resolver", "Resolver", "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	x, y := receive(t, a, 1)[0], receive(t, b, 1)[0]
	if x.MessageID == "" || x.MessageID != y.MessageID {
		t.Fatalf("copies have MessageIDs %q and %q", x.MessageID, y.MessageID)
	}
}

func TestForwarderStampsFromToAndFreshEventID(t *testing.T) {
	t.Parallel()
	topo := testenv.NimBusTopology("Pub", "Sub").WithForwarder("Pub", "Sub", "OrderPlaced")
	sb := testenv.StartServiceBus(t, topo)
	c := sb.Client(t)
	ev := func() *azservicebus.Message {
		return &azservicebus.Message{Body: []byte("{}"), SessionID: ptr("o-1"),
			ApplicationProperties: map[string]any{"To": "OrderPlaced", "EventTypeId": "OrderPlaced", "EventId": nil}}
	}
	send(t, c, "Pub", ev(), ev(), &azservicebus.Message{Body: []byte("x"), SessionID: ptr("o-1"),
		ApplicationProperties: map[string]any{"To": "OrderPlaced", "EventTypeId": "OrderPlaced", "From": "Elsewhere"}})
	r, err := c.AcceptSessionForSubscription(testctx.Timeout(t, 5*time.Second), "Sub", "Sub", "o-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := receive(t, r, 2)
	ids := map[any]bool{}
	for _, m := range got {
		p := m.ApplicationProperties
		if p["From"] != "Pub" || p["To"] != "Sub" {
			t.Errorf("forwarded copy properties: %v", p)
		}
		id, _ := p["EventId"].(string)
		if !regexp.MustCompile(`^[0-9a-f-]{36}$`).MatchString(id) {
			t.Errorf("EventId = %#v, want a fresh GUID", p["EventId"])
		}
		ids[id] = true
	}
	if len(ids) != 2 {
		t.Errorf("EventIds not fresh per copy: %v", ids)
	}
	receiveNone(t, r, 300*time.Millisecond) // From already set: not forwarded
}

func TestAbandonRedeliversThenDeadLettersAtMaxDeliveryCount(t *testing.T) {
	t.Parallel()
	sb := testenv.StartServiceBus(t, testenv.Topology{Queues: []testenv.Queue{{Name: "q", MaxDeliveryCount: 3}}})
	c := sb.Client(t)
	send(t, c, "q", &azservicebus.Message{Body: []byte("poison")})
	r, err := c.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	for want := uint32(1); want <= 3; want++ {
		m := receive(t, r, 1)[0]
		if m.DeliveryCount != want {
			t.Fatalf("delivery %d: DeliveryCount = %d", want, m.DeliveryCount)
		}
		if err := r.AbandonMessage(testctx.Timeout(t, 5*time.Second), m, nil); err != nil {
			t.Fatal(err)
		}
	}
	receiveNone(t, r, 300*time.Millisecond)
	dlq, err := c.NewReceiverForQueue("q", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		t.Fatal(err)
	}
	m := receive(t, dlq, 1)[0]
	if string(m.Body) != "poison" || m.DeadLetterReason == nil || *m.DeadLetterReason != "MaxDeliveryCountExceeded" {
		t.Fatalf("dead-lettered: body %q reason %v", m.Body, m.DeadLetterReason)
	}
	if m.DeadLetterSource == nil || *m.DeadLetterSource != "q" {
		t.Errorf("DeadLetterSource = %v", m.DeadLetterSource)
	}
}

func TestDeadLetterMessageKeepsReasonAndDescription(t *testing.T) {
	t.Parallel()
	sb := testenv.StartServiceBus(t, testenv.Topology{Topics: []testenv.Topic{{Name: "t", Subscriptions: []testenv.Subscription{{Name: "s"}}}}})
	c := sb.Client(t)
	send(t, c, "t", &azservicebus.Message{Body: []byte("bad")})
	r, err := c.NewReceiverForSubscription("t", "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	m := receive(t, r, 1)[0]
	if err := r.DeadLetterMessage(testctx.Timeout(t, 5*time.Second), m, &azservicebus.DeadLetterOptions{Reason: ptr("Bad"), ErrorDescription: ptr("it was bad")}); err != nil {
		t.Fatal(err)
	}
	dlq, err := c.NewReceiverForSubscription("t", "s", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		t.Fatal(err)
	}
	d := receive(t, dlq, 1)[0]
	if *d.DeadLetterReason != "Bad" || *d.DeadLetterErrorDescription != "it was bad" {
		t.Fatalf("reason %q description %q", *d.DeadLetterReason, *d.DeadLetterErrorDescription)
	}
}

func TestExpiredLockIsLostAndCountsAsADelivery(t *testing.T) {
	t.Parallel()
	sb := testenv.StartServiceBus(t, testenv.Topology{LockMs: 1000, Queues: []testenv.Queue{{Name: "q"}}})
	c := sb.Client(t)
	send(t, c, "q", &azservicebus.Message{Body: []byte("slow")})
	r, err := c.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	m := receive(t, r, 1)[0]
	if err := r.RenewMessageLock(testctx.Timeout(t, 5*time.Second), m, nil); err != nil {
		t.Fatalf("renew: %v", err)
	}
	// The stand-in expires the 1s lock by itself; the complete below must
	// then fail with CodeLockLost, which it would not if this wait were too
	// short.
	time.Sleep(1600 * time.Millisecond)
	err = r.CompleteMessage(testctx.Timeout(t, 5*time.Second), m, nil)
	var sbErr *azservicebus.Error
	if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeLockLost {
		t.Fatalf("complete after expiry: %v, want CodeLockLost", err)
	}
	again := receive(t, r, 1)[0]
	if again.DeliveryCount != 2 || string(again.Body) != "slow" {
		t.Fatalf("redelivery: dc=%d body=%q", again.DeliveryCount, again.Body)
	}
	if err := r.CompleteMessage(testctx.Timeout(t, 5*time.Second), again, nil); err != nil {
		t.Fatal(err)
	}
}

func TestSessions(t *testing.T) {
	t.Parallel()
	// With DEBUG_FAKE=1 the stand-in logs when an AcceptNextSession waits.
	sb := testenv.StartServiceBusWithEnv(t, testenv.Topology{Queues: []testenv.Queue{{Name: "sq", RequiresSession: true}}}, "DEBUG_FAKE=1")
	c := sb.Client(t)
	send(t, c, "sq",
		&azservicebus.Message{Body: []byte("a1"), SessionID: ptr("a")},
		&azservicebus.Message{Body: []byte("b1"), SessionID: ptr("b")},
		&azservicebus.Message{Body: []byte("a2"), SessionID: ptr("a")},
	)

	// A message without a SessionId is refused by a session queue.
	s, err := c.NewSender("sq", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMessage(testctx.Timeout(t, 5*time.Second), &azservicebus.Message{Body: []byte("x")}, nil); err == nil {
		t.Error("send without SessionId to a session queue succeeded")
	}
	_ = s.Close(context.Background())

	// A plain receiver is refused on a session entity.
	plain, err := c.NewReceiverForQueue("sq", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.ReceiveMessages(testctx.Timeout(t, 3*time.Second), 1, nil); err == nil {
		t.Error("non-session receiver on a session queue was accepted")
	}

	a, err := c.AcceptSessionForQueue(testctx.Timeout(t, 5*time.Second), "sq", "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.LockedUntil().Before(time.Now()) {
		t.Errorf("LockedUntil = %v", a.LockedUntil())
	}
	if _, err := c.AcceptSessionForQueue(testctx.Timeout(t, 5*time.Second), "sq", "a", nil); err == nil {
		t.Error("second accept of a locked session succeeded")
	}
	got := receive(t, a, 2)
	if string(got[0].Body) != "a1" || string(got[1].Body) != "a2" {
		t.Fatalf("session a got %q %q", got[0].Body, got[1].Body)
	}
	if err := a.SetSessionState(testctx.Timeout(t, 5*time.Second), []byte("state-1"), nil); err != nil {
		t.Fatal(err)
	}
	st, err := a.GetSessionState(testctx.Timeout(t, 5*time.Second), nil)
	if err != nil || string(st) != "state-1" {
		t.Fatalf("session state = %q, %v", st, err)
	}
	if err := a.RenewSessionLock(testctx.Timeout(t, 5*time.Second), nil); err != nil {
		t.Fatal(err)
	}

	// Next session: b is the only free one with messages.
	b, err := c.AcceptNextSessionForQueue(testctx.Timeout(t, 5*time.Second), "sq", nil)
	if err != nil {
		t.Fatal(err)
	}
	if b.SessionID() != "b" {
		t.Fatalf("next session = %q, want b", b.SessionID())
	}

	// No free session: AcceptNext waits for its deadline, then fails with a timeout.
	start := time.Now()
	_, err = c.AcceptNextSessionForQueue(testctx.Timeout(t, 600*time.Millisecond), "sq", nil)
	var sbErr *azservicebus.Error
	if err == nil || !(errors.As(err, &sbErr) && sbErr.Code == azservicebus.CodeTimeout || errors.Is(err, context.DeadlineExceeded)) {
		t.Fatalf("accept next with no free session: %v", err)
	}
	if waited := time.Since(start); waited < 400*time.Millisecond {
		t.Errorf("accept next returned after %v; it should wait for a session", waited)
	}

	// A waiting AcceptNext gets a session that appears while it waits: the
	// message is sent once the stand-in reports the accept waiting.
	waiting := func() int { return strings.Count(sb.Logs(), "waiting for a session") }
	waitersBefore := waiting()
	var wg sync.WaitGroup
	var waited *azservicebus.SessionReceiver
	var waitErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		waited, waitErr = c.AcceptNextSessionForQueue(testctx.Timeout(t, 5*time.Second), "sq", nil)
	}()
	testenv.WaitUntil(t, 5*time.Second, func() bool { return waiting() > waitersBefore },
		func() string { return "the stand-in to hold the AcceptNextSession waiting" })
	send(t, c, "sq", &azservicebus.Message{Body: []byte("c1"), SessionID: ptr("c")})
	wg.Wait()
	if waitErr != nil || waited.SessionID() != "c" {
		t.Fatalf("waiting accept: %v", waitErr)
	}

	// Closing a session receiver frees the session; unsettled messages come back
	// without a delivery-count increase.
	if err := a.Close(testctx.Timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	a2, err := c.AcceptSessionForQueue(testctx.Timeout(t, 5*time.Second), "sq", "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	got = receive(t, a2, 2)
	if got[0].DeliveryCount != 1 || string(got[0].Body) != "a1" {
		t.Errorf("after close: %q dc=%d", got[0].Body, got[0].DeliveryCount)
	}
	st, err = a2.GetSessionState(testctx.Timeout(t, 5*time.Second), nil)
	if err != nil || string(st) != "state-1" {
		t.Fatalf("session state after re-accept = %q, %v", st, err)
	}
}

func TestScheduledAndDeferredMessages(t *testing.T) {
	t.Parallel()
	sb := testenv.StartServiceBus(t, testenv.Topology{Queues: []testenv.Queue{{Name: "q"}}})
	c := sb.Client(t)
	s, err := c.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	at := time.Now().Add(1500 * time.Millisecond)
	seqs, err := s.ScheduleMessages(testctx.Timeout(t, 5*time.Second), []*azservicebus.Message{{Body: []byte("later")}, {Body: []byte("cancelled")}}, at, nil)
	if err != nil || len(seqs) != 2 {
		t.Fatalf("schedule: %v %v", seqs, err)
	}
	if err := s.CancelScheduledMessages(testctx.Timeout(t, 5*time.Second), seqs[1:], nil); err != nil {
		t.Fatal(err)
	}
	r, err := c.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	receiveNone(t, r, 300*time.Millisecond)
	m := receive(t, r, 1)[0]
	if string(m.Body) != "later" || time.Now().Before(at) {
		t.Fatalf("scheduled message %q arrived at %v (due %v)", m.Body, time.Now(), at)
	}
	receiveNone(t, r, 500*time.Millisecond)

	if err := r.DeferMessage(testctx.Timeout(t, 5*time.Second), m, nil); err != nil {
		t.Fatal(err)
	}
	receiveNone(t, r, 300*time.Millisecond)
	d, err := r.ReceiveDeferredMessages(testctx.Timeout(t, 5*time.Second), []int64{*m.SequenceNumber}, nil)
	if err != nil || len(d) != 1 || d[0].State != azservicebus.MessageStateDeferred {
		t.Fatalf("receive deferred: %v %v", d, err)
	}
	if err := r.CompleteMessage(testctx.Timeout(t, 5*time.Second), d[0], nil); err != nil {
		t.Fatalf("complete deferred: %v", err)
	}
	if _, err := r.ReceiveDeferredMessages(testctx.Timeout(t, 5*time.Second), []int64{*m.SequenceNumber}, nil); err == nil {
		t.Fatal("completed deferred message still receivable")
	}
}

func TestBatchSend(t *testing.T) {
	t.Parallel()
	sb := testenv.StartServiceBus(t, testenv.Topology{Queues: []testenv.Queue{{Name: "q"}}})
	c := sb.Client(t)
	s, err := c.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	b, err := s.NewMessageBatch(testctx.Timeout(t, 5*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"1", "2", "3"} {
		if err := b.AddMessage(&azservicebus.Message{Body: []byte(body), ApplicationProperties: map[string]any{"n": int32(len(body))}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SendMessageBatch(testctx.Timeout(t, 5*time.Second), b, nil); err != nil {
		t.Fatal(err)
	}
	r, err := c.NewReceiverForQueue("q", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	got := receive(t, r, 3)
	for i, m := range got {
		if string(m.Body) != []string{"1", "2", "3"}[i] || m.ApplicationProperties["n"] != int32(1) {
			t.Errorf("batch message %d: %q %v", i, m.Body, m.ApplicationProperties)
		}
	}
	receiveNone(t, r, 300*time.Millisecond)
}

func TestUndeclaredSubscriptionIsNotFound(t *testing.T) {
	t.Parallel()
	sb := testenv.StartServiceBus(t, testenv.NimBusTopology("Erp"))
	c := sb.Client(t)
	r, err := c.NewReceiverForSubscription("Erp", "Nope", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReceiveMessages(testctx.Timeout(t, 3*time.Second), 1, nil); err == nil {
		t.Fatal("receiving from an undeclared subscription succeeded")
	}
}

// go-amqp abandons a session whose begin is not answered before the
// caller's deadline and, on the next NewSession, writes an end for its
// channel. When the deadline had passed before the begin was written, the
// begin never left the client and the end names a channel with no session.
// The stand-in must ignore that end: dropping the connection instead frees
// every session and message lock the client holds and fails its sends in
// flight.
func TestEndOnAChannelWithoutASessionKeepsTheConnection(t *testing.T) {
	t.Parallel()
	sb := testenv.StartServiceBus(t, testenv.Topology{Queues: []testenv.Queue{{Name: "q"}}})
	ctx := testctx.Timeout(t, 10*time.Second)
	conn, err := amqp.Dial(ctx, "amqp://127.0.0.1:"+strconv.Itoa(sb.Port), &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A session whose link stays attached across the stray end.
	held, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	heldSender, err := held.NewSender(ctx, "q", nil)
	if err != nil {
		t.Fatal(err)
	}

	expired, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := conn.NewSession(expired, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("session with an expired deadline: %v, want context.Canceled", err)
	}
	// This session's begin follows the end for the abandoned channel.
	s, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatalf("session after the abandoned one: %v", err)
	}
	snd, err := s.NewSender(ctx, "q", nil)
	if err != nil {
		t.Fatalf("sender after the abandoned session: %v", err)
	}
	if err := snd.Send(ctx, amqp.NewMessage([]byte("after")), nil); err != nil {
		t.Fatalf("send after the abandoned session: %v", err)
	}
	if err := heldSender.Send(ctx, amqp.NewMessage([]byte("held")), nil); err != nil {
		t.Fatalf("send on the session opened before: %v", err)
	}
	if logs := sb.Logs(); !strings.Contains(logs, "ignored end on channel") || strings.Contains(logs, "ProtocolError") {
		t.Errorf("stand-in output:\n%s", logs)
	}
	r, err := sb.Client(t).NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for _, m := range receive(t, r, 2) {
		bodies = append(bodies, string(m.Body))
	}
	if got := strings.Join(bodies, ","); got != "after,held" {
		t.Errorf("queue holds %q, want after,held", got)
	}
}

// The stand-ins of a package are brokers of one Node process, yet apart:
// each has its own port and entities, and stopping one cuts its clients
// and leaves the others working.
func TestStandInsOfAPackageShareAProcessButNothingElse(t *testing.T) {
	t.Parallel()
	topo := testenv.Topology{Queues: []testenv.Queue{{Name: "q"}}}
	a, b := testenv.StartServiceBus(t, topo), testenv.StartServiceBus(t, topo)
	if a.Port == b.Port {
		t.Fatalf("both stand-ins listen on %d", a.Port)
	}
	if pa, pb := testenv.HostPID(a), testenv.HostPID(b); pa == 0 || pa != pb {
		t.Fatalf("host processes %d and %d, want one", pa, pb)
	}
	ca, cb := a.Client(t), b.Client(t)
	send(t, ca, "q", &azservicebus.Message{Body: []byte("to a")})
	rb, err := cb.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	receiveNone(t, rb, 300*time.Millisecond)
	ra, err := ca.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := receive(t, ra, 1)[0]; string(m.Body) != "to a" {
		t.Fatalf("a received %q", m.Body)
	}

	a.Stop()
	s, err := ca.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMessage(testctx.Timeout(t, 10*time.Second), &azservicebus.Message{Body: []byte("after stop")}, nil); err == nil {
		t.Fatal("a send to a stopped stand-in succeeded")
	}
	send(t, cb, "q", &azservicebus.Message{Body: []byte("to b")})
	if m := receive(t, rb, 1)[0]; string(m.Body) != "to b" {
		t.Fatalf("b received %q", m.Body)
	}
}
