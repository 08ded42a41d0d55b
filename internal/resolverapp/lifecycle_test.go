package resolverapp

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/tracking"
)

// nbMsg is one message as NimBus puts it on the bus, reduced to what the
// Resolver reads. The builders below follow NimBus's writers: the consumer
// forwarder's EventRequest copy, ResponseService.CreateResponse,
// ManagerClient.Resubmit and .Skip, the subscriber's RetryRequest after the
// endpoint subscription's retry rule, and the DeferredMessageProcessor's
// replay. NimBus leaves the MessageId of responses and control messages to
// the broker; here the test names each one.
type nbMsg struct {
	typ       message.Type
	id        string
	session   string
	corr      string
	eventID   string
	to, from  string // from "" = absent
	orig      string
	parent    string
	origFrom  string
	retry     int
	errorText string // ErrorContent.ErrorText; "" = no ErrorContent
	errorType string
	noEvent   bool // EventContent null
	extra     map[string]any
}

const (
	lcEndpoint = "Ledger"
	lcProducer = "Shop"
	lcSession  = "customer-7"
)

func lcEvent(id, eventID string) *nbMsg {
	return &nbMsg{typ: message.EventRequest, id: id, session: lcSession, corr: "corr-" + id, eventID: eventID,
		to: lcEndpoint, from: lcProducer, orig: message.Self, parent: message.Self, origFrom: message.Self}
}

// lcResponse is CreateResponse answering in, as the Resolver receives it:
// To=Resolver, From stamped by the fan-out with the endpoint.
func lcResponse(typ message.Type, id string, in *nbMsg) *nbMsg {
	orig := in.orig
	if orig == message.Self {
		orig = in.id
	}
	return &nbMsg{typ: typ, id: id, session: in.session, corr: in.id, eventID: in.eventID, to: message.ResolverID,
		from: lcEndpoint, orig: orig, parent: in.id, origFrom: in.from, retry: in.retry,
		extra: map[string]any{message.PropQueueTimeMs: json.Number("3"), message.PropProcessingTimeMs: json.Number("41")}}
}

// lcResubmit is ManagerClient.Resubmit of the ErrorResponse er.
func lcResubmit(id string, er *nbMsg) *nbMsg {
	return &nbMsg{typ: message.ResubmissionRequest, id: id, session: er.session, corr: er.corr, eventID: er.eventID,
		to: lcEndpoint, from: "Manager", orig: er.orig, parent: er.id, origFrom: message.Self}
}

// lcSkip is ManagerClient.Skip of the ErrorResponse er (empty content).
func lcSkip(id string, er *nbMsg) *nbMsg {
	return &nbMsg{typ: message.SkipRequest, id: id, session: er.session, corr: er.id, eventID: er.eventID,
		to: lcEndpoint, from: "Manager", orig: er.orig, parent: er.id, origFrom: message.Self, noEvent: true}
}

// lcRetry is the subscriber's scheduled RetryRequest for in after the
// endpoint subscription's retry rule (To=endpoint, From=Retry), as a
// namespace that forwards it to the Resolver delivers it.
func lcRetry(id string, in *nbMsg) *nbMsg {
	orig := in.orig
	if orig == message.Self {
		orig = in.id
	}
	return &nbMsg{typ: message.RetryRequest, id: id, session: in.session, corr: in.id, eventID: in.eventID,
		to: lcEndpoint, from: "Retry", orig: orig, parent: in.id, origFrom: in.from, retry: in.retry + 1}
}

// lcReplay is the DeferredMessageProcessor's republish of the parked copy
// of in: the parked copy's properties (ParentMessageId = in's MessageId)
// under a new MessageId, To = the endpoint.
func lcReplay(id string, in *nbMsg) *nbMsg {
	r := *in
	r.id, r.parent = id, in.id
	return &r
}

func (m *nbMsg) with(f func(*nbMsg)) *nbMsg {
	c := *m
	f(&c)
	return &c
}

func (m *nbMsg) body() string {
	ev := `{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-` + m.eventID + `\"}"}`
	if m.noEvent {
		ev = "null"
	}
	errc := "null"
	if m.errorText != "" {
		typ := "null"
		if m.errorType != "" {
			typ = `"` + m.errorType + `"`
		}
		errc = `{"ErrorText":"` + m.errorText + `","ErrorType":` + typ + `,"ExceptionStackTrace":null,"ExceptionSource":null}`
	}
	return `{"EventContent":` + ev + `,"ErrorContent":` + errc + `}`
}

// delivery is m as the Resolver's trigger decodes it (strings and
// json.Numbers), enqueued at at.
func (m *nbMsg) delivery(at time.Time) *Delivery {
	p := map[string]any{
		message.PropTo:                   m.to,
		message.PropMessageType:          m.typ.String(),
		message.PropEventID:              m.eventID,
		message.PropOriginatingMessageID: m.orig,
		message.PropParentMessageID:      m.parent,
		message.PropRetryCount:           json.Number(fmt.Sprint(m.retry)),
		message.PropOriginatingFrom:      m.origFrom,
		message.PropEventTypeID:          "OrderPlaced",
	}
	if m.from != "" {
		p[message.PropFrom] = m.from
	}
	for k, v := range m.extra {
		p[k] = v
	}
	return &Delivery{
		Broker: message.Broker{MessageID: message.Ptr(m.id), SessionID: message.Ptr(m.session),
			CorrelationID: message.Ptr(m.corr), EnqueuedTime: at, DeliveryCount: 1},
		ContentType: "application/json",
		Properties:  p,
		Body:        []byte(m.body()),
	}
}

// TestLifecycleFailedDeferredCompletedOnTheMemoryStore runs, through the
// Resolver and the in-memory store, the messages a NimBus endpoint and the
// NimBus Manager produce when event E1 fails and blocks its session, E2 on
// the same session is deferred, a retry fails again, the operator
// resubmits E1, and E2 is replayed after the unblock; then the late
// copies. Each step checks the outcome and the row it leaves.
func TestLifecycleFailedDeferredCompletedOnTheMemoryStore(t *testing.T) {
	store := &tracking.Memory{}
	now := t0
	svc, err := NewService(Options{Store: store, Scheduler: &fakeScheduler{}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	e1 := lcEvent("m-e1", "ev-1")
	er1 := lcResponse(message.ErrorResponse, "er-1", e1).with(func(m *nbMsg) {
		m.errorText, m.errorType = "Ledger is closed for the night", "InvalidOperationException"
	})
	rt1 := lcRetry("rt-1", e1)
	er2 := lcResponse(message.ErrorResponse, "er-2", rt1).with(func(m *nbMsg) {
		m.errorText, m.errorType = "Ledger is still closed", "InvalidOperationException"
	})
	e2 := lcEvent("m-e2", "ev-2")
	df2 := lcResponse(message.DeferralResponse, "df-2", e2).with(func(m *nbMsg) {
		m.errorText, m.errorType = "Session customer-7 is blocked by ev-1", "SessionBlockedException"
	})
	rs1 := lcResubmit("rs-1", er2)
	rr1 := lcResponse(message.ResolutionResponse, "rr-1", rs1)
	e2r := lcReplay("m-e2-replay", e2)
	rr2 := lcResponse(message.ResolutionResponse, "rr-2", e2r)
	// A same-MessageId re-send of the resubmission (the store-failure
	// path) delivered after its answer.
	rs1Again := rs1.with(func(m *nbMsg) { m.extra = map[string]any{PropThrottleRetryCount: "1"} })
	// E3 fails, is dead-lettered, and the operator skips it.
	e3 := lcEvent("m-e3", "ev-3")
	er3 := lcResponse(message.ErrorResponse, "er-3", e3).with(func(m *nbMsg) { m.errorText = "bad ledger account" })
	dl3 := lcResponse(message.ErrorResponse, "dl-3", e3).with(func(m *nbMsg) {
		m.errorText = "bad ledger account"
		m.extra[message.PropDeadLetterReason] = "Permanent failure: FormatException: bad ledger account"
		m.extra[message.PropDeadLetterErrorDesc] = "System.FormatException: bad ledger account"
	})
	sk3 := lcSkip("sk-3", dl3)
	sr3 := lcResponse(message.SkipResponse, "sr-3", sk3).with(func(m *nbMsg) { m.noEvent = true })

	steps := []struct {
		name    string
		m       *nbMsg
		outcome Outcome
		status  tracking.ResolutionStatus // the row afterwards
		rowType message.Type              // what last wrote the row
	}{
		{"E1 request copy", e1, OutcomeWritten, tracking.Pending, message.EventRequest},
		{"E1 fails", er1, OutcomeWritten, tracking.Failed, message.ErrorResponse},
		{"E1 retry copy reopens", rt1, OutcomeWritten, tracking.Pending, message.RetryRequest},
		{"E1 retry fails", er2, OutcomeWritten, tracking.Failed, message.ErrorResponse},
		{"E2 request copy", e2, OutcomeWritten, tracking.Pending, message.EventRequest},
		{"E2 deferred", df2, OutcomeWritten, tracking.Deferred, message.DeferralResponse},
		{"Manager resubmits E1", rs1, OutcomeWritten, tracking.Pending, message.ResubmissionRequest},
		{"E1 resubmission completes", rr1, OutcomeWritten, tracking.Completed, message.ResolutionResponse},
		{"E2 replayed", e2r, OutcomeWritten, tracking.Pending, message.EventRequest},
		{"E2 completes", rr2, OutcomeWritten, tracking.Completed, message.ResolutionResponse},
		{"late E1 request copy", e1, OutcomeStale, tracking.Completed, message.ResolutionResponse},
		{"late E1 resubmission re-send", rs1Again, OutcomeStale, tracking.Completed, message.ResolutionResponse},
		{"late E2 deferral", df2, OutcomeStale, tracking.Completed, message.ResolutionResponse},
		{"late E2 replay copy", e2r, OutcomeStale, tracking.Completed, message.ResolutionResponse},
		{"E3 request copy", e3, OutcomeWritten, tracking.Pending, message.EventRequest},
		{"E3 fails", er3, OutcomeWritten, tracking.Failed, message.ErrorResponse},
		{"E3 dead-lettered", dl3, OutcomeWritten, tracking.DeadLettered, message.ErrorResponse},
		{"Manager skips E3", sk3, OutcomeWritten, tracking.Pending, message.SkipRequest},
		{"E3 skipped", sr3, OutcomeWritten, tracking.Skipped, message.SkipResponse},
		// Terminal over terminal is last-writer-wins (the spec's rule, as
		// NimBus): a late ErrorResponse copy is not stale.
		{"late E1 ErrorResponse", er2, OutcomeWritten, tracking.Failed, message.ErrorResponse},
	}
	for i, st := range steps {
		now = t0.Add(time.Duration(i+1) * time.Second)
		rep := svc.Handle(ctx, st.m.delivery(now.Add(-100*time.Millisecond)))
		if rep.Outcome != st.outcome || rep.EndpointID != lcEndpoint || rep.Err != nil {
			t.Fatalf("%s: report %+v, want outcome %s", st.name, rep, st.outcome)
		}
		row, err := store.GetEventByID(ctx, lcEndpoint, st.m.eventID+"_"+lcSession)
		if err != nil || row == nil {
			t.Fatalf("%s: row %v, %v", st.name, row, err)
		}
		if row.ResolutionStatus != st.status || row.MessageType != st.rowType {
			t.Fatalf("%s: row %s written by %s, want %s by %s", st.name, row.ResolutionStatus, row.MessageType, st.status, st.rowType)
		}
		if st.outcome == OutcomeWritten && (*row.LastMessageID != st.m.id || !row.UpdatedAt.Equal(now)) {
			t.Fatalf("%s: LastMessageId %s UpdatedAt %s, want %s at %s", st.name, *row.LastMessageID, row.UpdatedAt, st.m.id, now)
		}
		// What each row holds at the points the lifecycle is read.
		switch st.name {
		case "E1 fails":
			if ec := row.MessageContent.ErrorContent; ec == nil || *ec.ErrorText != "Ledger is closed for the night" ||
				*ec.ErrorType != "InvalidOperationException" || row.Reason != nil || *row.From != lcEndpoint || *row.ParentMessageID != "m-e1" {
				t.Fatalf("Failed row %+v", row)
			}
		case "E2 deferred":
			if ec := row.MessageContent.ErrorContent; ec == nil || *ec.ErrorType != "SessionBlockedException" {
				t.Fatalf("Deferred row %+v", row)
			}
		case "Manager resubmits E1":
			if *row.From != "Manager" || *row.ParentMessageID != "er-2" || *row.OriginatingMessageID != "m-e1" || row.MessageContent.ErrorContent != nil {
				t.Fatalf("resubmission row %+v", row)
			}
		case "E1 resubmission completes":
			if *row.ParentMessageID != "rs-1" || *row.OriginatingFrom != "Manager" || *row.ProcessingTimeMs != 41 {
				t.Fatalf("Completed row %+v", row)
			}
		case "E3 dead-lettered":
			if row.Reason == nil || *row.Reason != "System.FormatException: bad ledger account" ||
				*row.DeadLetterReason != "Permanent failure: FormatException: bad ledger account" {
				t.Fatalf("DeadLettered row %+v", row)
			}
		case "E3 skipped":
			if row.Reason != nil || *row.ParentMessageID != "sk-3" {
				t.Fatalf("Skipped row %+v", row)
			}
		}
		// Failed, Deferred, DeadLettered rows are what the lookups by
		// status return; Completed and Skipped rows are not.
		var got *tracking.UnresolvedEvent
		switch st.status {
		case tracking.Failed:
			got, err = store.GetFailedEvent(ctx, tracking.Key{EndpointID: lcEndpoint, EventID: st.m.eventID, SessionID: lcSession})
		case tracking.Deferred:
			got, err = store.GetDeferredEvent(ctx, tracking.Key{EndpointID: lcEndpoint, EventID: st.m.eventID, SessionID: lcSession})
		case tracking.DeadLettered:
			got, err = store.GetDeadletteredEvent(ctx, tracking.Key{EndpointID: lcEndpoint, EventID: st.m.eventID, SessionID: lcSession})
		case tracking.Completed, tracking.Skipped:
			got, err = store.GetPendingEvent(ctx, tracking.Key{EndpointID: lcEndpoint, EventID: st.m.eventID, SessionID: lcSession})
			if got != nil || err != nil {
				t.Fatalf("%s: a %s row is returned as Pending (%v)", st.name, st.status, err)
			}
			continue
		default:
			continue
		}
		if err != nil || got == nil {
			t.Fatalf("%s: lookup by status %s: %v, %v", st.name, st.status, got, err)
		}
	}

	// History: one document per MessageId, stale copies included; the
	// same-MessageId re-send does not add one.
	wantHistory := map[string][]string{
		"ev-1": {"m-e1", "er-1", "rt-1", "er-2", "rs-1", "rr-1"},
		"ev-2": {"m-e2", "df-2", "m-e2-replay", "rr-2"},
		"ev-3": {"m-e3", "er-3", "dl-3", "sk-3", "sr-3"},
	}
	for ev, ids := range wantHistory {
		h, err := store.GetEventHistory(ctx, ev)
		if err != nil || len(h) != len(ids) {
			t.Fatalf("history of %s: %d documents (%v), want %d", ev, len(h), err, len(ids))
		}
		for _, id := range ids {
			m, err := store.GetMessage(ctx, ev, id)
			if err != nil || m == nil || m.EndpointID != lcEndpoint || m.SessionID == nil || *m.SessionID != lcSession {
				t.Fatalf("history of %s: message %s = %+v, %v", ev, id, m, err)
			}
		}
	}
	if m, _ := store.GetFailedMessage(ctx, tracking.EventKey{EndpointID: lcEndpoint, EventID: "ev-1"}); m == nil || m.MessageID != "er-2" {
		t.Fatalf("GetFailedMessage(ev-1) = %+v, want er-2", m)
	}

	// Audits: the Retry audit of the RetryRequest (Manager, no endpoint),
	// and one Comment per stale copy.
	audits := func(ev string) []tracking.MessageAudit {
		a, err := store.GetMessageAudits(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a1 := audits("ev-1") // newest first
	if len(a1) != 3 || a1[2].AuditType != tracking.AuditRetry || *a1[2].AuditorName != "Manager" || a1[2].EndpointID != nil ||
		a1[1].AuditType != tracking.AuditComment || *a1[1].Data != "Ignored stale EventRequest m-e1: the audit row already holds a later outcome." ||
		a1[0].AuditType != tracking.AuditComment || *a1[0].Data != "Ignored stale ResubmissionRequest rs-1: the audit row already holds a later outcome." ||
		*a1[0].AuditorName != "Resolver" || *a1[0].EndpointID != lcEndpoint {
		t.Fatalf("audits of ev-1: %s", jsonOf(a1))
	}
	if a2 := audits("ev-2"); len(a2) != 2 || a2[0].AuditType != tracking.AuditComment || a2[1].AuditType != tracking.AuditComment ||
		*a2[1].Data != "Ignored stale DeferralResponse df-2: the audit row already holds a later outcome." {
		t.Fatalf("audits of ev-2: %s", jsonOf(a2))
	}
	if a3 := audits("ev-3"); len(a3) != 0 {
		t.Fatalf("audits of ev-3: %s", jsonOf(a3))
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
