package txntest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// runOutbox runs the outbox part of the suite: published events stored in
// the delivery's marker with the handler's writes, the marker's state, the
// dispatched mark and the sweep's query.
func runOutbox(t *testing.T, h Harness) {
	t.Run("OutboxStoredInOrderWithoutTTL", func(t *testing.T) { testOutboxCommit(t, h) })
	t.Run("OutboxMarkerWithoutEventsUnchanged", func(t *testing.T) { testOutboxNoEvents(t, h) })
	t.Run("OutboxNothingStoredWhenTheBatchFails", func(t *testing.T) { testOutboxAtomic(t, h) })
	t.Run("OutboxDuplicateKeepsTheFirst", func(t *testing.T) { testOutboxDuplicate(t, h) })
	t.Run("OutboxPublishChecks", func(t *testing.T) { testOutboxChecks(t, h) })
	t.Run("OutboxLimits", func(t *testing.T) { testOutboxLimits(t, h) })
	t.Run("OutboxMarkDispatched", func(t *testing.T) { testMarkDispatched(t, h) })
	t.Run("OutboxMarkGoneOrStale", func(t *testing.T) { testMarkGone(t, h) })
	t.Run("OutboxFindPending", func(t *testing.T) { testFindPending(t, h) })
	t.Run("OutboxFindPendingOddMarkers", func(t *testing.T) { testFindPendingOdd(t, h) })
	t.Run("OutboxPartitionKeyValues", func(t *testing.T) { testOutboxPartitionKeys(t, h) })
}

// event returns the stored form of a published event with AMQP-typed
// properties and a body with characters JSON escapes.
func event(id string, n int) message.Stored {
	corr := "corr-1"
	return message.Stored{
		MessageID:     id,
		SessionID:     "session-1",
		CorrelationID: &corr,
		ApplicationProperties: map[string]any{
			"To": "PaymentRecorded", "EventTypeId": "PaymentRecorded", "MessageType": "EventRequest",
			"EventId": nil, "RetryCount": int32(0), "QueueTimeMs": int64(1) << 60,
		},
		Body: []byte(fmt.Sprintf(`{"EventContent":{"EventTypeId":"PaymentRecorded","EventJson":"{\"n\":%d,\"s\":\"<a & b> \u2028 é 🙂\"}"},"ErrorContent":null}`, n)),
	}
}

// response returns the stored form of a ResolutionResponse; its body is
// not UTF-8, so it is kept in base64.
func response(id string) *message.Stored {
	return &message.Stored{
		MessageID:             "resp-" + id,
		SessionID:             "session-1",
		ApplicationProperties: map[string]any{"To": "Resolver", "MessageType": "ResolutionResponse"},
		Body:                  []byte{0xff, 0x00, 'x'},
	}
}

func outboxMarker(msg string, resp *message.Stored) txn.Marker {
	m := marker(msg)
	m.Outbox, m.Response = true, resp
	return m
}

// publishAll publishes events on u.
func publishAll(t *testing.T, u *txn.Unit, events ...message.Stored) {
	t.Helper()
	for _, e := range events {
		if err := u.Publish(e); err != nil {
			t.Fatalf("Publish %s: %v", e.MessageID, err)
		}
	}
}

// readMarker reads the marker state of msg, failing t on an error.
func readMarker(t *testing.T, s txn.Store, tg txn.Target, pk, msg string) txn.MarkerState {
	t.Helper()
	st, err := txn.ReadMarker(context.Background(), s, tg, pk, endpoint, msg)
	if err != nil {
		t.Fatalf("ReadMarker %s: %v", msg, err)
	}
	return st
}

// markerDoc reads the marker document of msg.
func markerDoc(t *testing.T, s txn.Store, tg txn.Target, pk, msg string) map[string]any {
	t.Helper()
	body, _, found, err := s.Read(context.Background(), tg, pk, txn.MarkerID(endpoint, msg))
	if err != nil || !found {
		t.Fatalf("reading the marker of %s: found=%v err=%v", msg, found, err)
	}
	return decode(t, body)
}

// samePending checks that p holds events and resp, as given.
func samePending(t *testing.T, what string, p *txn.Pending, tg txn.Target, pk, msg string, events []message.Stored, resp *message.Stored) {
	t.Helper()
	if p == nil {
		t.Fatalf("%s: no pending outbox", what)
	}
	if p.Target != tg || p.PartitionKey != pk || p.EndpointID != endpoint || p.MessageID != msg {
		t.Errorf("%s: pending marker at %v/%q for %s/%s, want %v/%q for %s/%s", what, p.Target, p.PartitionKey, p.EndpointID, p.MessageID, tg, pk, endpoint, msg)
	}
	if p.ETag == "" {
		t.Errorf("%s: pending marker without an ETag", what)
	}
	if !reflect.DeepEqual(p.Events, events) {
		t.Errorf("%s: events\n%+v\nwant\n%+v", what, p.Events, events)
	}
	if !reflect.DeepEqual(p.Response, resp) {
		t.Errorf("%s: response %+v, want %+v", what, p.Response, resp)
	}
	msgs := p.Messages()
	want := len(events)
	if resp != nil {
		want++
	}
	if len(msgs) != want {
		t.Fatalf("%s: Messages() holds %d messages, want %d", what, len(msgs), want)
	}
	for i, e := range events {
		if msgs[i].MessageID != e.MessageID || string(msgs[i].Body) != string(e.Body) {
			t.Errorf("%s: message %d is %s, want %s", what, i, msgs[i].MessageID, e.MessageID)
		}
	}
	if resp != nil && string(msgs[len(msgs)-1].Body) != string(resp.Body) {
		t.Errorf("%s: the last message is not the response", what)
	}
}

// testOutboxCommit: a commit stores the published events in publish order,
// with the response, in the marker that holds the outbox, which has no
// ttl; a stand-in's other marker stays plain; the receipt and ReadMarker
// describe the same outbox.
func testOutboxCommit(t *testing.T, h Harness) {
	s, tg := h.New(t, "/tenant")
	created := time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.UTC)
	tx := txn.Begin(s, tg, "t1", func() time.Time { return created })
	u := tx.Unit()
	must(t, u.Create(account{ID: "a", Tenant: "t1", Balance: 5}))
	events := []message.Stored{event("ev-3", 3), event("ev-1", 1), event("ev-2", 2)}
	publishAll(t, u, events...)
	// The unit copied what it was given.
	events[0].ApplicationProperties["To"] = "changed after publishing"
	events[0] = event("ev-3", 3)
	resp := response("own")
	rc, err := tx.Commit(context.Background(), marker("source"), outboxMarker("own", resp))
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if got := tx.Events(); !reflect.DeepEqual(got, events) {
		t.Errorf("Events() = %+v", got)
	}
	samePending(t, "receipt", rc.Pending, tg, "t1", "own", events, resp)
	if !rc.Pending.CreatedAt.Equal(created.Truncate(100 * time.Nanosecond)) {
		t.Errorf("receipt CreatedAt %v", rc.Pending.CreatedAt)
	}

	doc := markerDoc(t, s, tg, "t1", "own")
	if _, ok := doc["ttl"]; ok {
		t.Errorf("a marker with undispatched events has ttl %v", doc["ttl"])
	}
	if v, ok := doc["dispatchedAtUtc"]; !ok || v != nil {
		t.Errorf("dispatchedAtUtc = %v (present %v), want null", v, ok)
	}
	outbox, _ := doc["outbox"].([]any)
	if len(outbox) != len(events) {
		t.Fatalf("outbox = %v, want %d entries", doc["outbox"], len(events))
	}
	for i, e := range outbox {
		entry, _ := e.(map[string]any)
		if entry["messageId"] != events[i].MessageID {
			t.Errorf("outbox entry %d messageId = %v, want %s", i, entry["messageId"], events[i].MessageID)
		}
		if _, ok := entry["message"].(map[string]any); !ok {
			t.Errorf("outbox entry %d has no stored message", i)
		}
	}
	if _, ok := doc["response"].(map[string]any); !ok {
		t.Errorf("response = %v, want the stored response", doc["response"])
	}
	if doc["createdAtUtc"] != "2030-01-02T03:04:05.1234567Z" || doc["type"] != txn.MarkerType {
		t.Errorf("marker createdAtUtc %v type %v", doc["createdAtUtc"], doc["type"])
	}

	src := markerDoc(t, s, tg, "t1", "source")
	if src["ttl"] != float64(retention/time.Second) {
		t.Errorf("the plain marker's ttl = %v", src["ttl"])
	}
	for _, f := range []string{"outbox", "dispatchedAtUtc", "response"} {
		if _, ok := src[f]; ok {
			t.Errorf("the plain marker has %s", f)
		}
	}

	st := readMarker(t, s, tg, "t1", "own")
	if !st.Found || st.Dispatched || !reflect.DeepEqual(st.OutboxIDs, []string{"ev-3", "ev-1", "ev-2"}) {
		t.Fatalf("ReadMarker = %+v", st)
	}
	samePending(t, "ReadMarker", st.Pending, tg, "t1", "own", events, resp)
	if st.Pending.ETag != rc.Pending.ETag && rc.Pending.ETag != "" {
		t.Errorf("read ETag %q, committed %q", st.Pending.ETag, rc.Pending.ETag)
	}
	if plain := readMarker(t, s, tg, "t1", "source"); !plain.Found || plain.Pending != nil || plain.OutboxIDs != nil || plain.Dispatched {
		t.Errorf("plain marker state %+v", plain)
	}
	if !hasMarker(t, s, tg, "t1", "own") {
		t.Error("HasMarker does not see the outbox marker")
	}
	if a, _, _ := read(t, s, tg, "t1", "a"); a.Balance != 5 {
		t.Errorf("the handler's write: %+v", a)
	}
}

// testOutboxNoEvents: a marker without events is the marker of old, even
// with Outbox set and a response given.
func testOutboxNoEvents(t *testing.T, h Harness) {
	s, tg := h.New(t, "/tenant")
	tx := txn.Begin(s, tg, "t", nil)
	must(t, tx.Unit().Create(account{ID: "a", Tenant: "t"}))
	rc, err := tx.Commit(context.Background(), outboxMarker("m", response("m")))
	if err != nil {
		t.Fatal(err)
	}
	if rc.Pending != nil {
		t.Errorf("a commit without events has a pending outbox %+v", rc.Pending)
	}
	var keys []string
	for k := range markerDoc(t, s, tg, "t", "m") {
		if !strings.HasPrefix(k, "_") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if got := strings.Join(keys, ","); got != "createdAtUtc,endpointId,id,messageId,tenant,ttl,type" {
		t.Errorf("marker properties %s", got)
	}
	if st := readMarker(t, s, tg, "t", "m"); !st.Found || st.Pending != nil || st.Dispatched || st.OutboxIDs != nil {
		t.Errorf("state %+v", st)
	}
}

// testOutboxAtomic: a batch that fails stores no event and no marker.
func testOutboxAtomic(t *testing.T, h Harness) {
	s, tg := h.New(t, "/tenant")
	seed(t, s, tg, "t", account{ID: "x", Tenant: "t"})
	tx := txn.Begin(s, tg, "t", nil)
	publishAll(t, tx.Unit(), event("e1", 1))
	must(t, tx.Unit().Create(account{ID: "x", Tenant: "t"})) // 409
	_, err := tx.Commit(context.Background(), outboxMarker("m", response("m")))
	if txn.Classify(err) != txn.Conflict {
		t.Fatalf("Commit: %v, want a conflict", err)
	}
	if st := readMarker(t, s, tg, "t", "m"); st.Found {
		t.Fatalf("a failed batch left a marker: %+v", st)
	}
	if pf, ok := s.(txn.PendingFinder); ok {
		page, err := pf.FindPending(context.Background(), tg, txn.PendingQuery{EndpointID: endpoint, OlderThan: time.Now().Add(time.Hour), PageSize: 10})
		if err != nil || len(page.Pending) != 0 {
			t.Fatalf("FindPending after a failed batch: %+v %v", page, err)
		}
	}
}

// testOutboxDuplicate: a second copy that publishes other events is a
// duplicate, and the first copy's outbox stays as it was.
func testOutboxDuplicate(t *testing.T, h Harness) {
	s, tg := h.New(t, "/tenant")
	first := txn.Begin(s, tg, "t", nil)
	publishAll(t, first.Unit(), event("e1", 1))
	if _, err := first.Commit(context.Background(), outboxMarker("m", nil)); err != nil {
		t.Fatal(err)
	}
	second := txn.Begin(s, tg, "t", nil)
	publishAll(t, second.Unit(), event("e2", 2), event("e3", 3))
	_, err := second.Commit(context.Background(), outboxMarker("m", response("m")))
	if txn.Classify(err) != txn.Duplicate {
		t.Fatalf("second copy: %v, want a duplicate", err)
	}
	st := readMarker(t, s, tg, "t", "m")
	samePending(t, "after the duplicate", st.Pending, tg, "t", "m", []message.Stored{event("e1", 1)}, nil)
}

// limit fails t unless err is a permanent *txn.LimitError naming want.
func limit(t *testing.T, err error, want string) {
	t.Helper()
	var le *txn.LimitError
	if !errors.As(err, &le) || le.Limit != want || txn.Classify(err) != txn.Permanent {
		t.Fatalf("got %v, want limit %s (permanent)", err, want)
	}
}

// testOutboxChecks: an empty or repeated message id, and a commit whose
// events no marker holds (or two markers claim), are refused before any
// request, and the refusal fails the commit.
func testOutboxChecks(t *testing.T, h Harness) {
	s, tg := h.New(t, "/tenant")
	ctx := context.Background()
	for name, ids := range map[string][]string{
		"empty":    {""},
		"blank":    {"ok", " \t"},
		"repeated": {"a", "b", "a"},
	} {
		t.Run(name, func(t *testing.T) {
			tx := txn.Begin(s, tg, "t", nil)
			var err error
			for i, id := range ids {
				if err = tx.Unit().Publish(event(id, i)); err != nil {
					break
				}
			}
			limit(t, err, txn.LimitMessageID)
			if err := tx.Unit().Create(account{ID: "after", Tenant: "t"}); err == nil {
				t.Error("queuing after a refused publish succeeded")
			}
			_, cerr := tx.Commit(ctx, outboxMarker("check-"+name, nil))
			limit(t, cerr, txn.LimitMessageID)
			if hasMarker(t, s, tg, "t", "check-"+name) {
				t.Error("a refused commit was sent")
			}
		})
	}
	t.Run("no marker holds the events", func(t *testing.T) {
		tx := txn.Begin(s, tg, "t", nil)
		publishAll(t, tx.Unit(), event("e", 0))
		_, err := tx.Commit(ctx, marker("nobody"))
		if !errors.Is(err, txn.ErrInvalid) || txn.Classify(err) != txn.Permanent {
			t.Fatalf("Commit: %v, want a permanent ErrInvalid", err)
		}
		if hasMarker(t, s, tg, "t", "nobody") {
			t.Error("a refused commit was sent")
		}
	})
	t.Run("two markers hold them", func(t *testing.T) {
		tx := txn.Begin(s, tg, "t", nil)
		publishAll(t, tx.Unit(), event("e", 0))
		_, err := tx.Commit(ctx, outboxMarker("one", nil), outboxMarker("two", nil))
		if !errors.Is(err, txn.ErrInvalid) {
			t.Fatalf("Commit: %v, want ErrInvalid", err)
		}
	})
	t.Run("after the handler returned", func(t *testing.T) {
		tx := txn.Begin(s, tg, "t", nil)
		tx.Seal()
		if err := tx.Unit().Publish(event("late", 0)); !errors.Is(err, txn.ErrDone) {
			t.Fatalf("Publish after Seal: %v, want ErrDone", err)
		}
	})
}

// bigEvent is an event whose body has about size bytes of one letter.
func bigEvent(id string, size int) message.Stored {
	e := event(id, 0)
	e.Body = []byte(`{"EventContent":{"EventTypeId":"Big","EventJson":"` + strings.Repeat("q", size) + `"},"ErrorContent":null}`)
	return e
}

// testOutboxLimits: the events count toward the marker's item size and
// the batch's request size, when published and again at the commit with
// the response; a refusal never quotes the event.
func testOutboxLimits(t *testing.T, h Harness) {
	s, tg := h.New(t, "/tenant")
	ctx := context.Background()
	noPayload := func(t *testing.T, err error) {
		t.Helper()
		if strings.Contains(err.Error(), "qqqq") || strings.Contains(err.Error(), "wwww") {
			t.Fatalf("the error quotes the payload: %.200s", err)
		}
	}
	t.Run("one event over the item size", func(t *testing.T) {
		tx := txn.Begin(s, tg, "t", nil)
		err := tx.Unit().Publish(bigEvent("big", txn.MaxItemBytes))
		limit(t, err, txn.LimitDocumentBytes)
		noPayload(t, err)
	})
	t.Run("events over the item size together", func(t *testing.T) {
		tx := txn.Begin(s, tg, "t", nil)
		publishAll(t, tx.Unit(), bigEvent("e1", 700<<10), bigEvent("e2", 700<<10))
		err := tx.Unit().Publish(bigEvent("e3", 700<<10))
		limit(t, err, txn.LimitDocumentBytes)
		_, err = tx.Commit(ctx, outboxMarker("together", nil))
		limit(t, err, txn.LimitDocumentBytes)
	})
	t.Run("writes and events over the request", func(t *testing.T) {
		tx := txn.Begin(s, tg, "t", nil)
		must(t, tx.Unit().Create(map[string]any{"id": "w", "tenant": "t", "blob": strings.Repeat("w", 1200<<10)}))
		err := tx.Unit().Publish(bigEvent("e", 900<<10))
		limit(t, err, txn.LimitRequestBytes)
		noPayload(t, err)
		if _, _, found := read(t, s, tg, "t", "w"); found {
			t.Error("a refused batch was sent")
		}
	})
	t.Run("writes queued after the events", func(t *testing.T) {
		tx := txn.Begin(s, tg, "t", nil)
		publishAll(t, tx.Unit(), bigEvent("e", 900<<10))
		must(t, tx.Unit().Create(map[string]any{"id": "w2", "tenant": "t", "blob": strings.Repeat("w", 1200<<10)}))
		_, err := tx.Commit(ctx, outboxMarker("late-writes", nil))
		limit(t, err, txn.LimitRequestBytes)
		noPayload(t, err)
		if hasMarker(t, s, tg, "t", "late-writes") {
			t.Error("a refused batch was sent")
		}
	})
	t.Run("the response tips the marker over", func(t *testing.T) {
		tx := txn.Begin(s, tg, "t", nil)
		publishAll(t, tx.Unit(), bigEvent("e", 1900<<10))
		resp := response("r")
		resp.Body = []byte(strings.Repeat("q", 300<<10))
		_, err := tx.Commit(ctx, outboxMarker("tipped", resp))
		limit(t, err, txn.LimitDocumentBytes)
		noPayload(t, err)
		if hasMarker(t, s, tg, "t", "tipped") {
			t.Error("a refused batch was sent")
		}
	})
	t.Run("a large outbox commits and reads back", func(t *testing.T) {
		tx := txn.Begin(s, tg, "t", nil)
		events := []message.Stored{bigEvent("l1", 600<<10), bigEvent("l2", 600<<10), bigEvent("l3", 600<<10)}
		publishAll(t, tx.Unit(), events...)
		if _, err := tx.Commit(ctx, outboxMarker("large", response("large"))); err != nil {
			t.Fatalf("Commit: %v", err)
		}
		st := readMarker(t, s, tg, "t", "large")
		samePending(t, "large", st.Pending, tg, "t", "large", events, response("large"))
	})
}

// testMarkDispatched: the mark sets dispatchedAtUtc and the retention ttl,
// keeps the ids and drops the payloads and the response; a second mark
// changes nothing.
func testMarkDispatched(t *testing.T, h Harness) {
	s, tg := h.New(t, "/tenant")
	ctx := context.Background()
	tx := txn.Begin(s, tg, "t", nil)
	publishAll(t, tx.Unit(), event("e1", 1), event("e2", 2))
	rc, err := tx.Commit(ctx, outboxMarker("m", response("m")))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2030, 5, 6, 7, 8, 9, 987654321, time.UTC)
	marked, err := txn.MarkDispatched(ctx, s, rc.Pending, 2*time.Hour+time.Millisecond, at)
	if err != nil || marked != txn.Marked {
		t.Fatalf("MarkDispatched = %v, %v; want marked", marked, err)
	}
	doc := markerDoc(t, s, tg, "t", "m")
	if doc["dispatchedAtUtc"] != "2030-05-06T07:08:09.9876543Z" {
		t.Errorf("dispatchedAtUtc = %v", doc["dispatchedAtUtc"])
	}
	if doc["ttl"] != float64(7201) {
		t.Errorf("ttl = %v, want 7201 (the retention rounded up)", doc["ttl"])
	}
	if _, ok := doc["response"]; ok {
		t.Error("the response is still stored")
	}
	outbox, _ := doc["outbox"].([]any)
	if len(outbox) != 2 {
		t.Fatalf("outbox = %v", doc["outbox"])
	}
	for i, e := range outbox {
		entry, _ := e.(map[string]any)
		if len(entry) != 1 || entry["messageId"] != fmt.Sprintf("e%d", i+1) {
			t.Errorf("outbox entry %d = %v, want only its messageId", i, entry)
		}
	}
	st := readMarker(t, s, tg, "t", "m")
	if !st.Found || !st.Dispatched || !st.DispatchedAt.Equal(at.Truncate(100*time.Nanosecond)) || st.Pending != nil || !reflect.DeepEqual(st.OutboxIDs, []string{"e1", "e2"}) {
		t.Fatalf("state after the mark %+v", st)
	}

	// Marking again (a concurrent copy, the sweep) changes nothing.
	marked, err = txn.MarkDispatched(ctx, s, rc.Pending, time.Hour, at.Add(time.Minute))
	if err != nil || marked != txn.AlreadyMarked {
		t.Fatalf("second MarkDispatched = %v, %v; want already marked and no error", marked, err)
	}
	without := *rc.Pending
	without.ETag = ""
	marked, err = txn.MarkDispatched(ctx, s, &without, time.Hour, at.Add(time.Minute))
	if err != nil || marked != txn.AlreadyMarked {
		t.Fatalf("MarkDispatched without an ETag = %v, %v; want already marked", marked, err)
	}
	if doc := markerDoc(t, s, tg, "t", "m"); doc["dispatchedAtUtc"] != "2030-05-06T07:08:09.9876543Z" || doc["ttl"] != float64(7201) {
		t.Errorf("a second mark changed the marker: %v %v", doc["dispatchedAtUtc"], doc["ttl"])
	}

	// Without an ETag a pending marker is read, then marked.
	tx = txn.Begin(s, tg, "t", nil)
	publishAll(t, tx.Unit(), event("f1", 1))
	rc, err = tx.Commit(ctx, outboxMarker("n", nil))
	if err != nil {
		t.Fatal(err)
	}
	p := *rc.Pending
	p.ETag = ""
	if marked, err := txn.MarkDispatched(ctx, s, &p, time.Hour, at); err != nil || marked != txn.Marked {
		t.Fatalf("MarkDispatched without an ETag = %v, %v; want marked", marked, err)
	}
	if st := readMarker(t, s, tg, "t", "n"); !st.Dispatched {
		t.Fatalf("state %+v", st)
	}
	if _, err := txn.MarkDispatched(ctx, s, nil, time.Hour, at); !errors.Is(err, txn.ErrInvalid) {
		t.Errorf("MarkDispatched(nil): %v", err)
	}
	if _, err := txn.MarkDispatched(ctx, s, &p, 0, at); !errors.Is(err, txn.ErrInvalid) {
		t.Errorf("MarkDispatched without a retention: %v", err)
	}
}

// testMarkGone: marking a marker that is gone is no error, is told apart
// from one marked first (MarkerGone), and creates nothing.
func testMarkGone(t *testing.T, h Harness) {
	s, tg := h.New(t, "/tenant")
	ctx := context.Background()
	tx := txn.Begin(s, tg, "t", nil)
	publishAll(t, tx.Unit(), event("e1", 1))
	rc, err := tx.Commit(ctx, outboxMarker("gone", nil))
	if err != nil {
		t.Fatal(err)
	}
	del := txn.Begin(s, tg, "t", nil)
	must(t, del.Unit().Delete(txn.MarkerID(endpoint, "gone"), ""))
	if _, err := del.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for _, etag := range []string{rc.Pending.ETag, ""} {
		p := *rc.Pending
		p.ETag = etag
		marked, err := txn.MarkDispatched(ctx, s, &p, time.Hour, time.Now())
		if err != nil || marked != txn.MarkerGone {
			t.Fatalf("marking a removed marker (ETag %q) = %v, %v; want the marker gone and no error", etag, marked, err)
		}
	}
	if hasMarker(t, s, tg, "t", "gone") {
		t.Fatal("marking recreated the marker")
	}
}

// findAll walks every page of FindPending with pageSize, calling each on
// every page before asking for the next, and returns the markers found by
// partition key value and MessageId ("pk|msg").
func findAll(t *testing.T, s txn.Store, tg txn.Target, olderThan time.Time, pageSize int, each func(page []txn.Pending)) (map[string]txn.Pending, int) {
	t.Helper()
	pf, ok := s.(txn.PendingFinder)
	if !ok {
		t.Fatalf("%T is not a txn.PendingFinder", s)
	}
	found := map[string]txn.Pending{}
	pages := 0
	q := txn.PendingQuery{EndpointID: endpoint, OlderThan: olderThan, PageSize: pageSize}
	for {
		page, err := pf.FindPending(context.Background(), tg, q)
		if err != nil {
			t.Fatalf("FindPending page %d: %v", pages+1, err)
		}
		pages++
		if len(page.Pending) > pageSize {
			t.Fatalf("page %d holds %d markers, over its size %d", pages, len(page.Pending), pageSize)
		}
		for _, p := range page.Pending {
			k := p.PartitionKey + "|" + p.MessageID
			if _, dup := found[k]; dup {
				t.Errorf("%s found twice", k)
			}
			found[k] = p
		}
		if each != nil {
			each(page.Pending)
		}
		if page.Next == "" {
			return found, pages
		}
		if pages > 100 {
			t.Fatal("FindPending does not end")
		}
		q.Cursor = page.Next
	}
}

// testFindPending: the query finds exactly the old markers with
// undispatched events of the endpoint, across partitions and pages, also
// when markers are dispatched between pages.
func testFindPending(t *testing.T, h Harness) {
	s, tg := h.New(t, "/tenant")
	ctx := context.Background()
	base := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	cutoff := base.Add(time.Hour)
	commit := func(pk, msg, ep string, at time.Time, events int) *txn.Pending {
		t.Helper()
		tx := txn.Begin(s, tg, pk, func() time.Time { return at })
		for i := 0; i < events; i++ {
			must(t, tx.Unit().Publish(event(fmt.Sprintf("%s-ev%d", msg, i), i)))
		}
		m := txn.Marker{EndpointID: ep, MessageID: msg, Retention: retention, Outbox: true, Response: response(msg)}
		rc, err := tx.Commit(ctx, m)
		if err != nil {
			t.Fatalf("commit %s: %v", msg, err)
		}
		return rc.Pending
	}
	want := map[string]bool{}
	for i := 0; i < 7; i++ {
		pk := fmt.Sprintf("p%d", i%3)
		msg := fmt.Sprintf("old%d", i)
		commit(pk, msg, endpoint, base.Add(time.Duration(i)*time.Minute), 1+i%2)
		want[pk+"|"+msg] = true
	}
	commit("p0", "just-before", endpoint, cutoff.Add(-100*time.Nanosecond), 1)
	want["p0|just-before"] = true
	commit("p1", "at-cutoff", endpoint, cutoff, 1)            // not older than the cutoff
	commit("p1", "young", endpoint, cutoff.Add(time.Hour), 1) // too young
	commit("p2", "other-endpoint", "shipping", base, 1)       // another endpoint's
	commit("p2", "no-events", endpoint, base, 0)              // a plain marker
	done := commit("p0", "dispatched", endpoint, base, 2)     // dispatched
	if ok, err := txn.MarkDispatched(ctx, s, done, time.Hour, base); err != nil || ok != txn.Marked {
		t.Fatalf("marking: %v %v", ok, err)
	}
	// A business document that looks pending but is no marker.
	seed(t, s, tg, "p1", map[string]any{"id": "lookalike", "tenant": "p1", "type": "order", "endpointId": endpoint,
		"outbox": []any{}, "dispatchedAtUtc": nil, "createdAtUtc": "2000-01-01T00:00:00.0000000Z"})

	found, pages := findAll(t, s, tg, cutoff, 3, nil)
	if len(found) != len(want) {
		t.Errorf("found %d markers, want %d", len(found), len(want))
	}
	for k := range want {
		if _, ok := found[k]; !ok {
			t.Errorf("%s not found", k)
		}
	}
	for k, p := range found {
		if !want[k] {
			t.Errorf("%s found", k)
			continue
		}
		if len(p.Events) == 0 || p.Response == nil || p.ETag == "" || p.CreatedAt.IsZero() || !p.CreatedAt.Before(cutoff) {
			t.Errorf("%s: pending %+v", k, p)
		}
		if !reflect.DeepEqual(p.Response, response(p.MessageID)) || p.Events[0].MessageID != p.MessageID+"-ev0" {
			t.Errorf("%s: the found outbox is not the committed one", k)
		}
	}
	if pages < 3 {
		t.Errorf("%d markers in %d pages of 3", len(found), pages)
	}

	// Dispatching each page's markers before reading the next one skips
	// nothing, and afterwards nothing is left.
	marked := 0
	found, _ = findAll(t, s, tg, cutoff, 2, func(page []txn.Pending) {
		for i := range page {
			ok, err := txn.MarkDispatched(ctx, s, &page[i], time.Hour, cutoff)
			if err != nil || ok != txn.Marked {
				t.Fatalf("marking %s: %v %v", page[i].MessageID, ok, err)
			}
			marked++
		}
	})
	if len(found) != len(want) || marked != len(want) {
		t.Errorf("dispatching while paging: found %d, marked %d, want %d", len(found), marked, len(want))
	}
	if left, _ := findAll(t, s, tg, cutoff, 5, nil); len(left) != 0 {
		t.Errorf("%d pending markers left after dispatching them all", len(left))
	}
	if left, _ := findAll(t, s, tg, cutoff.Add(2*time.Hour), 5, nil); len(left) != 2 {
		t.Errorf("a later cutoff finds %d markers, want the 2 younger ones", len(left))
	}

	pf := s.(txn.PendingFinder)
	for name, q := range map[string]txn.PendingQuery{
		"page size 0":    {EndpointID: endpoint, OlderThan: cutoff},
		"page too large": {EndpointID: endpoint, OlderThan: cutoff, PageSize: txn.MaxPendingPageSize + 1},
		"no endpoint":    {OlderThan: cutoff, PageSize: 1},
		"no cutoff":      {EndpointID: endpoint, PageSize: 1},
	} {
		if _, err := pf.FindPending(ctx, tg, q); !errors.Is(err, txn.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// testFindPendingOdd: markers with an outbox whose dispatchedAtUtc is
// missing or not a string (a redelivery's read takes them as pending), or
// whose createdAtUtc is not a timestamp of the form a commit writes, are
// found whatever their createdAtUtc says: a sendable one as pending, one
// that cannot be read counted unreadable and named by its document id. A
// timestamp of another form is placed by its time.
func testFindPendingOdd(t *testing.T, h Harness) {
	ctx := context.Background()
	base := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	cutoff := base.Add(time.Hour)
	for _, c := range []struct {
		name                string
		edit                func(doc map[string]any)
		pending, unreadable bool
	}{
		{"no dispatchedAtUtc", func(d map[string]any) { delete(d, "dispatchedAtUtc") }, true, false},
		{"dispatchedAtUtc a number", func(d map[string]any) { d["dispatchedAtUtc"] = 5 }, false, true},
		{"createdAtUtc not a timestamp", func(d map[string]any) { d["createdAtUtc"] = "yesterday" }, false, true},
		{"createdAtUtc missing", func(d map[string]any) { delete(d, "createdAtUtc") }, false, true},
		{"createdAtUtc a number", func(d map[string]any) { d["createdAtUtc"] = 20300101 }, false, true},
		{"createdAtUtc a date no calendar has", func(d map[string]any) { d["createdAtUtc"] = "2030-01-01T11:61:00.0000000Z" }, false, true},
		{"createdAtUtc in another form, old", func(d map[string]any) { d["createdAtUtc"] = "2030-01-01T12:30:00+00:00" }, true, false},
		{"createdAtUtc in another form, young", func(d map[string]any) { d["createdAtUtc"] = "2030-01-01T15:00:00Z" }, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, tg := h.New(t, "/tenant")
			for _, msg := range []string{"ok", "odd"} {
				tx := txn.Begin(s, tg, "t", func() time.Time { return base })
				publishAll(t, tx.Unit(), event(msg+"-e1", 1))
				if _, err := tx.Commit(ctx, outboxMarker(msg, response(msg))); err != nil {
					t.Fatal(err)
				}
			}
			id := txn.MarkerID(endpoint, "odd")
			doc := Document(t, s, tg, "t", id)
			c.edit(doc)
			Write(t, s, tg, "t", txn.OpReplace, doc)
			pf := s.(txn.PendingFinder)
			q := txn.PendingQuery{EndpointID: endpoint, OlderThan: cutoff, PageSize: 10}
			var pending []string
			unreadable := 0
			var first error
			for pages := 0; ; pages++ {
				page, err := pf.FindPending(ctx, tg, q)
				if err != nil {
					t.Fatalf("FindPending: %v", err)
				}
				for _, p := range page.Pending {
					pending = append(pending, p.MessageID)
				}
				unreadable += page.Unreadable
				if first == nil {
					first = page.FirstUnreadable
				}
				if page.Next == "" || pages > 10 {
					break
				}
				q.Cursor = page.Next
			}
			sort.Strings(pending)
			want := []string{"ok"}
			if c.pending {
				want = []string{"odd", "ok"}
			}
			if !reflect.DeepEqual(pending, want) {
				t.Errorf("pending %v, want %v", pending, want)
			}
			switch {
			case c.unreadable && (unreadable != 1 || !errors.Is(first, txn.ErrUnreadableOutbox) || !strings.Contains(first.Error(), id)):
				t.Errorf("unreadable %d, first %v; want the marker counted and named by its id %s", unreadable, first, id)
			case !c.unreadable && unreadable != 0:
				t.Errorf("unreadable %d (%v), want none", unreadable, first)
			}
		})
	}
}

// testOutboxPartitionKeys: in partitions whose key values go beyond ASCII
// (PartitionKeyValues), an outbox commits, reads back, is found by the
// query with its partition key value and is marked.
func testOutboxPartitionKeys(t *testing.T, h Harness) {
	s, tg := h.New(t, "/tenant")
	ctx := context.Background()
	old := time.Now().Add(-time.Hour)
	keys := PartitionKeyValues()
	for name, pk := range keys {
		tx := txn.Begin(s, tg, pk, func() time.Time { return old })
		must(t, tx.Unit().Create(account{ID: "a", Tenant: pk}))
		publishAll(t, tx.Unit(), event("e-"+name, 1))
		if _, err := tx.Commit(ctx, outboxMarker(name, response(name))); err != nil {
			t.Fatalf("%s: Commit: %v", name, err)
		}
		st := readMarker(t, s, tg, pk, name)
		samePending(t, name, st.Pending, tg, pk, name, []message.Stored{event("e-"+name, 1)}, response(name))
	}
	found, _ := findAll(t, s, tg, time.Now(), 7, nil)
	if len(found) != len(keys) {
		t.Errorf("found %d pending markers, want %d", len(found), len(keys))
	}
	for name, pk := range keys {
		p, ok := found[pk+"|"+name]
		if !ok {
			t.Errorf("%s: not found with its partition key value", name)
			continue
		}
		if marked, err := txn.MarkDispatched(ctx, s, &p, time.Hour, time.Now()); err != nil || marked != txn.Marked {
			t.Errorf("%s: MarkDispatched = %v, %v", name, marked, err)
		}
		if st := readMarker(t, s, tg, pk, name); !st.Dispatched {
			t.Errorf("%s: not dispatched: %+v", name, st)
		}
	}
}
