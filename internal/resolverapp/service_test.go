package resolverapp

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/tracking"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

type env struct {
	store  *fakeStore
	sched  *fakeScheduler
	svc    *Service
	now    time.Time
	pauses []time.Duration
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{store: newFakeStore(), sched: &fakeScheduler{}, now: t0}
	svc, err := NewService(Options{Store: e.store, Scheduler: e.sched, Now: func() time.Time { return e.now },
		Pause: func(_ context.Context, d time.Duration) { e.pauses = append(e.pauses, d) }})
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	return e
}

// delivery builds a Resolver message as the fan-out delivers it: a request
// copy (To = the endpoint, From = the producer) or a response (From
// stamped with the endpoint, To = Resolver).
func delivery(typ message.Type, messageID string, props map[string]any, body string) *Delivery {
	p := map[string]any{
		message.PropMessageType: typ.String(),
		message.PropEventID:     "ev-1",
		message.PropEventTypeID: "OrderPlaced",
	}
	if isRequest(typ) {
		p[message.PropTo] = "Billing"
		p[message.PropFrom] = "Shop"
	} else {
		p[message.PropTo] = message.ResolverID
		p[message.PropFrom] = "Billing"
		p[message.PropParentMessageID] = "req-1"
	}
	for k, v := range props {
		if v == nil {
			delete(p, k)
			continue
		}
		p[k] = v
	}
	if body == "" {
		body = `{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"id\":1}"},"ErrorContent":null}`
	}
	return &Delivery{
		Broker: message.Broker{
			MessageID: message.Ptr(messageID), SessionID: message.Ptr("order-7"),
			CorrelationID: message.Ptr("req-1"), EnqueuedTime: t0, DeliveryCount: 1,
		},
		ContentType: "application/json",
		Properties:  p,
		Body:        []byte(body),
	}
}

func (e *env) handle(t *testing.T, d *Delivery) Report {
	t.Helper()
	return e.svc.Handle(context.Background(), d)
}

func TestRequestCopyIsPendingUnderTo(t *testing.T) {
	e := newEnv(t)
	d := delivery(message.EventRequest, "req-1", map[string]any{message.PropFrom: nil, message.PropOriginatingFrom: "Shop", message.PropRetryCount: json.Number("0")}, "")
	rep := e.handle(t, d)
	if rep.Outcome != OutcomeWritten || rep.EndpointID != "Billing" || rep.Status != "Pending" {
		t.Fatalf("report %+v", rep)
	}
	row, ok := e.store.row("Billing", "ev-1", "order-7")
	if !ok {
		t.Fatal("no row")
	}
	if row.ResolutionStatus != tracking.Pending || *row.LastMessageID != "req-1" || *row.To != "Billing" ||
		*row.From != "Shop" || *row.ParentMessageID != "self" || row.RetryCount != nil || row.RetryLimit != nil ||
		row.Reason != nil || row.PendingSubStatus != nil || row.EndpointRole != tracking.Subscriber || !row.UpdatedAt.Equal(t0) {
		t.Fatalf("row %+v", row)
	}
	if len(e.store.history) != 1 || *e.store.history[0].From != "Shop" || e.store.history[0].EndpointID != "Billing" {
		t.Fatalf("history %+v", e.store.history)
	}
	// A hand-resubmitted request without From or OriginatingFrom is still
	// recorded, from "self".
	d = delivery(message.ResubmissionRequest, "rs-1", map[string]any{message.PropFrom: nil}, "")
	if rep := e.handle(t, d); rep.Outcome != OutcomeWritten {
		t.Fatalf("report %+v", rep)
	}
	if h := e.store.history[1]; *h.From != "self" || h.OriginatingFrom != nil {
		t.Fatalf("history %+v", h)
	}
}

func TestResponsesProjectTheirStatus(t *testing.T) {
	cases := []struct {
		typ    message.Type
		props  map[string]any
		body   string
		status tracking.ResolutionStatus
		reason *string
	}{
		{message.ResolutionResponse, map[string]any{message.PropQueueTimeMs: json.Number("12"), message.PropProcessingTimeMs: json.Number("34")}, "", tracking.Completed, nil},
		{message.SkipResponse, nil, `{"EventContent":null,"ErrorContent":{"ErrorText":"DuplicateDetected","ErrorType":null,"ExceptionStackTrace":null,"ExceptionSource":null}}`, tracking.Skipped, message.Ptr("DuplicateDetected")},
		{message.UnsupportedResponse, nil, "", tracking.Unsupported, nil},
		{message.ErrorResponse, nil, `{"EventContent":null,"ErrorContent":{"ErrorText":"boom","ErrorType":null,"ExceptionStackTrace":null,"ExceptionSource":null}}`, tracking.Failed, nil},
		{message.DeferralResponse, nil, "", tracking.Deferred, nil},
		// Any type carrying DeadLetterErrorDescription is DeadLettered; an
		// empty description counts.
		{message.ErrorResponse, map[string]any{message.PropDeadLetterErrorDesc: "", message.PropDeadLetterReason: "Permanent"}, "", tracking.DeadLettered, message.Ptr("")},
		{message.ResolutionResponse, map[string]any{message.PropDeadLetterErrorDesc: "gave up"}, "", tracking.DeadLettered, message.Ptr("gave up")},
	}
	for _, c := range cases {
		t.Run(c.typ.String()+"/"+c.status.String(), func(t *testing.T) {
			e := newEnv(t)
			rep := e.handle(t, delivery(c.typ, "rsp-1", c.props, c.body))
			if rep.Outcome != OutcomeWritten || rep.EndpointID != "Billing" || rep.Status != c.status.String() {
				t.Fatalf("report %+v", rep)
			}
			row, ok := e.store.row("Billing", "ev-1", "order-7")
			if !ok || row.ResolutionStatus != c.status {
				t.Fatalf("row %+v", row)
			}
			if (row.Reason == nil) != (c.reason == nil) || (row.Reason != nil && *row.Reason != *c.reason) {
				t.Fatalf("Reason %v, want %v", row.Reason, c.reason)
			}
			if *row.From != "Billing" || *row.To != "Resolver" || *row.ParentMessageID != "req-1" || *row.CorrelationID != "req-1" {
				t.Fatalf("row %+v", row)
			}
			if c.props[message.PropQueueTimeMs] != nil && (*row.QueueTimeMs != 12 || *row.ProcessingTimeMs != 34) {
				t.Fatalf("timings %v %v", row.QueueTimeMs, row.ProcessingTimeMs)
			}
		})
	}
}

func TestHandoffAndWallClockOverride(t *testing.T) {
	e := newEnv(t)
	// Two EventRequest copies (a broker redelivery enqueued later): the
	// override measures from the earliest.
	first := delivery(message.EventRequest, "req-1", nil, "")
	first.Broker.EnqueuedTime = t0.Add(-10 * time.Minute)
	later := delivery(message.EventRequest, "req-1b", nil, "")
	later.Broker.EnqueuedTime = t0.Add(-5 * time.Minute)
	for _, d := range []*Delivery{first, later} {
		if rep := e.handle(t, d); rep.Outcome != OutcomeWritten {
			t.Fatalf("%+v", rep)
		}
	}
	park := delivery(message.PendingHandoffResponse, "rsp-h", map[string]any{
		message.PropHandoffReason: "ManualApproval", message.PropExternalJobID: "job-9",
		message.PropExpectedBy: "2026-12-01T12:00:00.0000000Z", message.PropProcessingTimeMs: json.Number("40"),
	}, "")
	if rep := e.handle(t, park); rep.Outcome != OutcomeWritten || rep.WallClockOverride {
		t.Fatalf("%+v", rep)
	}
	row, _ := e.store.row("Billing", "ev-1", "order-7")
	if row.ResolutionStatus != tracking.Pending || *row.PendingSubStatus != "Handoff" || *row.HandoffReason != "ManualApproval" ||
		*row.ExternalJobID != "job-9" || !row.ExpectedBy.Equal(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)) {
		t.Fatalf("handoff row %+v", row)
	}
	// A late request copy does not undo the park (the same message again:
	// its history document is the same).
	again := delivery(message.EventRequest, "req-1", nil, "")
	again.Broker.EnqueuedTime = first.Broker.EnqueuedTime
	if rep := e.handle(t, again); rep.Outcome != OutcomeStale {
		t.Fatalf("late copy over a park: %+v", rep)
	}

	e.now = t0.Add(2 * time.Hour)
	done := delivery(message.ResolutionResponse, "rsp-done", map[string]any{message.PropProcessingTimeMs: json.Number("55")}, "")
	rep := e.handle(t, done)
	if rep.Outcome != OutcomeWritten || !rep.WallClockOverride {
		t.Fatalf("%+v", rep)
	}
	row, _ = e.store.row("Billing", "ev-1", "order-7")
	want := (2*time.Hour + 10*time.Minute).Milliseconds()
	if row.ResolutionStatus != tracking.Completed || *row.ProcessingTimeMs != want {
		t.Fatalf("completed row: status %s ProcessingTimeMs %d, want %d", row.ResolutionStatus, *row.ProcessingTimeMs, want)
	}
	// The history keeps the handler's own figure.
	for _, h := range e.store.history {
		if h.MessageID == "rsp-done" && *h.ProcessingTimeMs != 55 {
			t.Fatalf("history ProcessingTimeMs %d", *h.ProcessingTimeMs)
		}
	}
}

func TestTerminalWithoutHandoffKeepsHandlerTime(t *testing.T) {
	e := newEnv(t)
	e.handle(t, delivery(message.EventRequest, "req-1", nil, ""))
	rep := e.handle(t, delivery(message.ResolutionResponse, "rsp-1", map[string]any{message.PropProcessingTimeMs: json.Number("7")}, ""))
	row, _ := e.store.row("Billing", "ev-1", "order-7")
	if rep.WallClockOverride || *row.ProcessingTimeMs != 7 {
		t.Fatalf("%+v %d", rep, *row.ProcessingTimeMs)
	}
}

// The incident order: the response arrives before the request copy. The
// late copy is refused, kept in the history, audited, and completed.
func TestLateRequestCopyIsStale(t *testing.T) {
	e := newEnv(t)
	if rep := e.handle(t, delivery(message.ResolutionResponse, "rsp-1", nil, "")); rep.Outcome != OutcomeWritten {
		t.Fatal(rep)
	}
	rep := e.handle(t, delivery(message.EventRequest, "req-1", nil, ""))
	if rep.Outcome != OutcomeStale || !rep.Outcome.Completes() || rep.AuditErr != nil {
		t.Fatalf("%+v", rep)
	}
	row, _ := e.store.row("Billing", "ev-1", "order-7")
	if row.ResolutionStatus != tracking.Completed || *row.LastMessageID != "rsp-1" {
		t.Fatalf("row %+v", row)
	}
	if len(e.store.history) != 2 {
		t.Fatalf("history has %d entries, want both copies", len(e.store.history))
	}
	if len(e.store.audits) != 1 {
		t.Fatalf("audits %+v", e.store.audits)
	}
	a := e.store.audits[0]
	if a.EventID != "ev-1" || a.EndpointID != "Billing" || a.EventTypeID != "OrderPlaced" || *a.Audit.AuditorName != "Resolver" ||
		a.Audit.AuditType != tracking.AuditComment || *a.Audit.EventID != "ev-1" || *a.Audit.EndpointID != "Billing" ||
		*a.Audit.Data != "Ignored stale EventRequest req-1: the audit row already holds a later outcome." {
		t.Fatalf("audit %+v", a)
	}
}

func TestStaleAuditFailureStillCompletes(t *testing.T) {
	e := newEnv(t)
	e.handle(t, delivery(message.ResolutionResponse, "rsp-1", nil, ""))
	e.store.fail = func(op string) error {
		if op == "StoreMessageAudit" {
			return &tracking.StoreError{Op: op, Kind: tracking.FailureTransient, Err: errors.New("down")}
		}
		return nil
	}
	rep := e.handle(t, delivery(message.EventRequest, "req-1", nil, ""))
	if rep.Outcome != OutcomeStale || rep.AuditErr == nil || len(e.sched.sent) != 0 {
		t.Fatalf("%+v", rep)
	}
}

// A rescheduled copy of a control request arriving after its own answer is
// refused by the ancestor check: re-sends keep their MessageId.
func TestRescheduledControlRequestAfterItsAnswer(t *testing.T) {
	e := newEnv(t)
	e.handle(t, delivery(message.ResubmissionRequest, "rs-1", nil, ""))
	e.handle(t, delivery(message.ResolutionResponse, "rsp-2", map[string]any{message.PropParentMessageID: "rs-1"}, ""))
	rep := e.handle(t, delivery(message.ResubmissionRequest, "rs-1", map[string]any{PropThrottleRetryCount: json.Number("1")}, ""))
	if rep.Outcome != OutcomeStale || rep.ThrottleRetryCount != 1 || rep.Attempt != 2 {
		t.Fatalf("%+v", rep)
	}
}

func TestRetryRequestAudit(t *testing.T) {
	e := newEnv(t)
	rep := e.handle(t, delivery(message.RetryRequest, "rt-1", nil, ""))
	if rep.Outcome != OutcomeWritten {
		t.Fatal(rep)
	}
	if got := strings.Join(e.store.calls, ","); got != "StoreMessage,UploadPendingMessage,StoreMessageAudit" {
		t.Fatalf("calls %s: the audit comes after the event writes", got)
	}
	a := e.store.audits[0]
	if *a.Audit.AuditorName != "Manager" || a.Audit.AuditType != tracking.AuditRetry || a.EndpointID != "" || a.EventTypeID != "" || !a.Audit.AuditTimestamp.Equal(t0) {
		t.Fatalf("audit %+v", a)
	}
}

func TestHeartbeatIsDivertedFirst(t *testing.T) {
	for _, d := range []*Delivery{
		delivery(message.EventRequest, "hb-1", map[string]any{message.PropEventTypeID: "nimbus.platform.HEARTBEAT"}, ""),
		// From the body, and with properties a tracked message must have
		// missing.
		delivery(message.ResolutionResponse, "hb-2", map[string]any{message.PropEventTypeID: nil, message.PropFrom: nil, message.PropEventID: nil},
			`{"EventContent":{"EventTypeId":"NimBus.Platform.Heartbeat","EventJson":"{}"},"ErrorContent":null}`),
	} {
		e := newEnv(t)
		if rep := e.handle(t, d); rep.Outcome != OutcomeHeartbeat || !rep.Outcome.Completes() {
			t.Fatalf("%+v", rep)
		}
		if len(e.store.calls) != 0 {
			t.Fatalf("store calls %v", e.store.calls)
		}
	}
}

func TestInvalidMessages(t *testing.T) {
	cases := map[string]*Delivery{
		"no MessageType":     delivery(message.EventRequest, "m", map[string]any{message.PropMessageType: nil}, ""),
		"bad MessageType":    delivery(message.EventRequest, "m", map[string]any{message.PropMessageType: "eventrequest"}, ""),
		"no EventId":         delivery(message.EventRequest, "m", map[string]any{message.PropEventID: nil}, ""),
		"request without To": delivery(message.EventRequest, "m", map[string]any{message.PropTo: nil}, ""),
		"response w/o From":  delivery(message.ResolutionResponse, "m", map[string]any{message.PropFrom: nil}, ""),
		"body not content":   delivery(message.ResolutionResponse, "m", nil, "[1]"),
		"no MessageId":       delivery(message.ResolutionResponse, "", nil, ""),
	}
	nosession := delivery(message.ResolutionResponse, "m", nil, "")
	nosession.Broker.SessionID = nil
	cases["no SessionId"] = nosession
	for name, d := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			rep := e.handle(t, d)
			if rep.Outcome != OutcomeInvalidMessage || !errors.Is(rep.Err, ErrInvalid) || rep.Outcome.Spec().Status != 422 || rep.Outcome.Spec().Pause {
				t.Fatalf("%+v", rep)
			}
			if len(e.store.calls) != 0 {
				t.Fatalf("store calls %v", e.store.calls)
			}
		})
	}
}

func TestTypesWithoutAProjection(t *testing.T) {
	for _, typ := range []string{"Unknown", "ProcessDeferredRequest", "99"} {
		e := newEnv(t)
		rep := e.handle(t, delivery(message.ResolutionResponse, "m", map[string]any{message.PropMessageType: typ}, ""))
		if rep.Outcome != OutcomeNoProjection || rep.Outcome.Completes() {
			t.Fatalf("%s: %+v", typ, rep)
		}
		// The history is written first, as NimBus does.
		if strings.Join(e.store.calls, ",") != "StoreMessage" {
			t.Fatalf("%s: calls %v", typ, e.store.calls)
		}
	}
}

func TestStoreFailureSchedulesASameIDCopy(t *testing.T) {
	cases := []struct {
		name       string
		throttle   string
		delivery   int
		err        error
		wantDelay  time.Duration
		wantReason string
		wantRA     bool
	}{
		{"first attempt", "", 1, &tracking.StoreError{Op: "x", Kind: tracking.FailureTransient, Err: errors.New("503")}, 5 * time.Second, "transient", false},
		{"third attempt by redelivery", "", 3, &tracking.StoreError{Op: "x", Kind: tracking.FailureTransient, Err: errors.New("503")}, 20 * time.Second, "transient", false},
		{"after two re-sends", "2", 1, tracking.ErrConcurrentUpdate, 20 * time.Second, "transient", false},
		{"capped", "7", 2, errors.New("unclassified"), 300 * time.Second, "transient", false},
		{"longer retry-after wins", "", 1, &tracking.StoreError{Op: "x", Kind: tracking.FailureThrottled, RetryAfter: 30 * time.Second, Err: errors.New("429")}, 30 * time.Second, "throttled", true},
		{"shorter retry-after loses", "3", 1, &tracking.StoreError{Op: "x", Kind: tracking.FailureThrottled, RetryAfter: time.Second, Err: errors.New("429")}, 40 * time.Second, "throttled", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.store.fail = func(op string) error {
				if op == "UploadCompletedMessage" {
					return c.err
				}
				return nil
			}
			d := delivery(message.ResolutionResponse, "rsp-1", map[string]any{message.PropRetryCount: json.Number("2"), message.PropQueueTimeMs: json.Number("5"), "Custom": true}, "")
			if c.throttle != "" {
				d.Properties[PropThrottleRetryCount] = c.throttle
			}
			d.Broker.DeliveryCount = c.delivery
			d.Subject = "subj"
			rep := e.handle(t, d)
			if rep.Outcome != OutcomeRescheduled || !rep.Outcome.Completes() || rep.RetryIn != c.wantDelay || rep.StoreReason != c.wantReason ||
				rep.RetryAfterUsed != c.wantRA || rep.StoreOp != "UploadCompletedMessage" {
				t.Fatalf("%+v", rep)
			}
			if len(e.sched.sent) != 1 {
				t.Fatalf("%d re-sends", len(e.sched.sent))
			}
			// Retried twice within the invocation first.
			if rep.QuickRetries != 2 || len(e.pauses) != 2 || e.pauses[0] != 100*time.Millisecond || e.pauses[1] != 400*time.Millisecond {
				t.Fatalf("quick retries %d, pauses %v", rep.QuickRetries, e.pauses)
			}
			s := e.sched.sent[0]
			if !s.At.Equal(t0.Add(c.wantDelay)) || s.R.MessageID != "rsp-1" || s.R.SessionID != "order-7" || *s.R.CorrelationID != "req-1" ||
				string(s.R.Body) != string(d.Body) || s.R.ContentType != "application/json" || s.R.Subject != "subj" {
				t.Fatalf("re-send %+v at %v", s.R, s.At)
			}
			p := s.R.Properties
			if p[PropThrottleRetryCount] != int32(rep.Attempt) || p[message.PropRetryCount] != int32(2) || p[message.PropQueueTimeMs] != int64(5) ||
				p["Custom"] != "True" || p[message.PropMessageType] != "ResolutionResponse" || p[message.PropFrom] != "Billing" {
				t.Fatalf("re-send properties %#v", p)
			}
		})
	}
}

// The logical attempt cannot wrap: a ThrottleRetryCount or DeliveryCount
// at the top of the integer range is past the budget, refused (422) before
// the store is touched.
func TestAttemptCounterDoesNotWrap(t *testing.T) {
	cases := []struct {
		throttle      string
		deliveryCount int
		attempt       int
		spent         bool
	}{
		{"0", 1, 1, false},
		{"9", 0, 10, false},
		{"8", 2, 10, false},
		{"9", 2, 11, true},
		{"10", 1, 11, true},
		{"2147483647", 1, 11, true},
		{"9223372036854775800", 1, 11, true},
		{"9223372036854775806", 1, 11, true},
		{"9223372036854775807", 1, 11, true},
		{"9223372036854775807", math.MaxInt, 11, true},
		{"1", math.MaxInt, 11, true},
		{"-9223372036854775808", 1, 1, false},
	}
	for _, c := range cases {
		t.Run(c.throttle+"+"+strconv.Itoa(c.deliveryCount), func(t *testing.T) {
			e := newEnv(t)
			d := delivery(message.ResolutionResponse, "rsp-1", map[string]any{PropThrottleRetryCount: c.throttle}, "")
			d.Broker.DeliveryCount = c.deliveryCount
			rep := e.handle(t, d)
			if rep.Attempt != c.attempt {
				t.Fatalf("attempt %d, want %d", rep.Attempt, c.attempt)
			}
			if spent := rep.Outcome == OutcomeBudgetSpent; spent != c.spent {
				t.Fatalf("outcome %s (budget spent %v, want %v)", rep.Outcome, spent, c.spent)
			}
			if c.spent && (len(e.store.calls) != 0 || rep.Outcome.Spec().Status != 422) {
				t.Fatalf("store calls %v, status %d", e.store.calls, rep.Outcome.Spec().Status)
			}
		})
	}
}

func TestStoreBudget(t *testing.T) {
	down := func(string) error {
		return &tracking.StoreError{Op: "x", Kind: tracking.FailureTransient, Err: errors.New("down")}
	}
	// The tenth logical attempt fails toward the dead-letter queue.
	e := newEnv(t)
	e.store.fail = down
	d := delivery(message.ResolutionResponse, "rsp-1", map[string]any{PropThrottleRetryCount: "9"}, "")
	rep := e.handle(t, d)
	if rep.Outcome != OutcomeBudgetSpent || rep.Attempt != 10 || len(e.sched.sent) != 0 || rep.Outcome.Spec().Pause || rep.Outcome.Completes() {
		t.Fatalf("%+v", rep)
	}
	// Its redeliveries do not touch the store again.
	e.store.calls = nil
	d.Broker.DeliveryCount = 2
	if rep := e.handle(t, d); rep.Outcome != OutcomeBudgetSpent || len(e.store.calls) != 0 {
		t.Fatalf("%+v, calls %v", rep, e.store.calls)
	}
	// Backoff: 5, 10, 20, 40, 80, 160, 300, 300, 300 s.
	want := []time.Duration{5, 10, 20, 40, 80, 160, 300, 300, 300}
	for i, w := range want {
		if got := Backoff(i + 1); got != w*time.Second {
			t.Errorf("Backoff(%d) = %v, want %v", i+1, got, w*time.Second)
		}
	}
}

func TestRescheduleFailureIsRedelivered(t *testing.T) {
	e := newEnv(t)
	e.store.fail = func(op string) error {
		return &tracking.StoreError{Op: op, Kind: tracking.FailureThrottled, Err: errors.New("429")}
	}
	e.sched.fail = errors.New("service bus down")
	rep := e.handle(t, delivery(message.ResolutionResponse, "rsp-1", nil, ""))
	if rep.Outcome != OutcomeRescheduleFailed || rep.Outcome.Completes() || !rep.Outcome.Spec().Pause || !errors.Is(rep.Err, e.sched.fail) {
		t.Fatalf("%+v", rep)
	}
}

func TestPermanentStoreRefusal(t *testing.T) {
	e := newEnv(t)
	// A reserved endpoint id is refused by the store before any write.
	rep := e.handle(t, delivery(message.ResolutionResponse, "rsp-1", map[string]any{message.PropFrom: "audits"}, ""))
	if rep.Outcome != OutcomeStoreRejected || !errors.Is(rep.Err, tracking.ErrReservedEndpointID) || len(e.sched.sent) != 0 {
		t.Fatalf("%+v", rep)
	}
}

func TestCancellationAnswersAtOnce(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	e.store.fail = func(string) error { cancel(); return context.Canceled }
	rep := e.svc.Handle(ctx, delivery(message.ResolutionResponse, "rsp-1", nil, ""))
	if rep.Outcome != OutcomeCanceled || len(e.sched.sent) != 0 {
		t.Fatalf("%+v", rep)
	}
}

// A store call that runs out of the settle timeout is a store failure: the
// copy is still scheduled, on a context of its own.
func TestSettleTimeoutStillSchedules(t *testing.T) {
	e := newEnv(t)
	e.store.fail = func(string) error { return context.DeadlineExceeded }
	rep := e.handle(t, delivery(message.ResolutionResponse, "rsp-1", nil, ""))
	if rep.Outcome != OutcomeRescheduled || !e.sched.ctxOK {
		t.Fatalf("%+v", rep)
	}
}

// A blip is retried within the invocation: no re-send, the row written.
func TestStoreBlipIsRetriedInTheInvocation(t *testing.T) {
	e := newEnv(t)
	failed := false
	e.store.fail = func(op string) error {
		if op == "UploadCompletedMessage" && !failed {
			failed = true
			return &tracking.StoreError{Op: op, Kind: tracking.FailureTransient, Err: errors.New("503")}
		}
		return nil
	}
	rep := e.handle(t, delivery(message.ResolutionResponse, "rsp-1", nil, ""))
	if rep.Outcome != OutcomeWritten || rep.QuickRetries != 1 || len(e.sched.sent) != 0 {
		t.Fatalf("%+v", rep)
	}
	if got := strings.Join(e.store.calls, ","); got != "StoreMessage,GetEventHistory,UploadCompletedMessage,StoreMessage,GetEventHistory,UploadCompletedMessage" {
		t.Fatalf("calls %s", got)
	}
	if row, _ := e.store.row("Billing", "ev-1", "order-7"); row.ResolutionStatus != tracking.Completed {
		t.Fatalf("row %+v", row)
	}
}
