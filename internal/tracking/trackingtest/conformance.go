// Package trackingtest is the conformance suite every tracking.Store passes.
// Its cases port NimBus's MessageTrackingStoreConformanceTests for the
// surface the Go store has (the Resolver's writes, the conditional
// completion, the lookups the specification names), under the same names
// in Go form.
package trackingtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/tracking"
)

// Factory returns the store under test. Every call may return the same
// store: cases use ids unique to the run.
type Factory func(t *testing.T) tracking.Store

// Run runs every case against stores from newStore.
func Run(t *testing.T, newStore Factory) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := &harness{T: t, s: newStore(t), scope: "ct-" + randomHex(6)}
			c.run(h)
		})
	}
}

// harness carries the store and helpers of one case.
type harness struct {
	*testing.T
	s     tracking.Store
	scope string
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// id returns v made unique to the case.
func (h *harness) id(v string) string { return h.scope + "-" + v }

func (h *harness) ctx() context.Context { return context.Background() }

// sample is NimBus's SampleEvent.
func sample(endpointID, eventID, sessionID string) tracking.UnresolvedEvent {
	now := time.Now().UTC()
	return tracking.UnresolvedEvent{
		EventID:              eventID,
		SessionID:            sessionID,
		EndpointID:           endpointID,
		EnqueuedTimeUtc:      now.Add(-time.Second),
		UpdatedAt:            now,
		CorrelationID:        tracking.Str("corr-1"),
		EndpointRole:         tracking.Subscriber,
		MessageType:          message.EventRequest,
		EventTypeID:          tracking.Str("OrderPlaced"),
		To:                   tracking.Str(endpointID),
		From:                 tracking.Str("publisher"),
		LastMessageID:        tracking.Str("last-message"),
		OriginatingMessageID: tracking.Str("origin-message"),
		MessageContent:       &message.Content{},
	}
}

// guarded is NimBus's GuardedEvent: a sample carrying the fields the guard
// reads. An empty parent is nil.
func guarded(endpointID, eventID, sessionID string, t message.Type, lastID, parent string) tracking.UnresolvedEvent {
	e := sample(endpointID, eventID, sessionID)
	e.MessageType = t
	e.LastMessageID = tracking.Str(lastID)
	if parent != "" {
		e.ParentMessageID = tracking.Str(parent)
	}
	return e
}

func (h *harness) upload(key tracking.Key, status tracking.ResolutionStatus, row tracking.UnresolvedEvent) bool {
	h.Helper()
	ok, err := h.s.Upload(h.ctx(), key, status, row)
	if err != nil {
		h.Fatalf("Upload %s %s: %v", status, key.EventID, err)
	}
	return ok
}

func (h *harness) mustApply(key tracking.Key, status tracking.ResolutionStatus, row tracking.UnresolvedEvent) {
	h.Helper()
	if !h.upload(key, status, row) {
		h.Fatalf("%s write of %s (%s) was refused", status, key.EventID, row.MessageType)
	}
}

func (h *harness) mustRefuse(key tracking.Key, status tracking.ResolutionStatus, row tracking.UnresolvedEvent) {
	h.Helper()
	if h.upload(key, status, row) {
		h.Fatalf("%s write of %s (%s) was applied, want refused", status, key.EventID, row.MessageType)
	}
}

func (h *harness) get(status tracking.ResolutionStatus, key tracking.Key) *tracking.UnresolvedEvent {
	h.Helper()
	var (
		e   *tracking.UnresolvedEvent
		err error
	)
	switch status {
	case tracking.Pending:
		e, err = h.s.GetPendingEvent(h.ctx(), key)
	case tracking.Failed:
		e, err = h.s.GetFailedEvent(h.ctx(), key)
	case tracking.Deferred:
		e, err = h.s.GetDeferredEvent(h.ctx(), key)
	case tracking.DeadLettered:
		e, err = h.s.GetDeadletteredEvent(h.ctx(), key)
	case tracking.Unsupported:
		e, err = h.s.GetUnsupportedEvent(h.ctx(), key)
	default:
		h.Fatalf("no getter for %s", status)
	}
	if err != nil {
		h.Fatalf("Get%sEvent: %v", status, err)
	}
	return e
}

func (h *harness) event(event tracking.EventKey) *tracking.UnresolvedEvent {
	h.Helper()
	e, err := h.s.GetEvent(h.ctx(), event)
	if err != nil {
		h.Fatalf("GetEvent: %v", err)
	}
	return e
}

func (h *harness) mustEventStatus(event tracking.EventKey, want tracking.ResolutionStatus) {
	h.Helper()
	e := h.event(event)
	if e == nil {
		h.Fatalf("GetEvent %s: nil, want a %s row", event.EventID, want)
	}
	if e.ResolutionStatus != want {
		h.Fatalf("GetEvent %s: status %s, want %s", event.EventID, e.ResolutionStatus, want)
	}
}

func (h *harness) counts(endpointID string) tracking.EndpointStateCount {
	h.Helper()
	c, err := h.s.DownloadEndpointStateCount(h.ctx(), endpointID)
	if err != nil {
		h.Fatalf("DownloadEndpointStateCount: %v", err)
	}
	return c
}

func (h *harness) tryComplete(key tracking.Key, expected *string, content tracking.UnresolvedEvent) bool {
	h.Helper()
	ok, err := h.s.TryCompletePendingMessage(h.ctx(), key, expected, content)
	if err != nil {
		h.Fatalf("TryCompletePendingMessage: %v", err)
	}
	return ok
}

func (h *harness) storeMessage(m tracking.MessageEntity) {
	h.Helper()
	if err := h.s.StoreMessage(h.ctx(), m); err != nil {
		h.Fatalf("StoreMessage: %v", err)
	}
}

func (h *harness) message(eventID, messageID string) *tracking.MessageEntity {
	h.Helper()
	m, err := h.s.GetMessage(h.ctx(), eventID, messageID)
	if err != nil {
		h.Fatalf("GetMessage: %v", err)
	}
	return m
}

func (h *harness) history(eventID string) []tracking.MessageEntity {
	h.Helper()
	m, err := h.s.GetEventHistory(h.ctx(), eventID)
	if err != nil {
		h.Fatalf("GetEventHistory: %v", err)
	}
	return m
}

func str(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%q", *p)
}

func eqStr(a, b *string) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

type testCase struct {
	name string
	run  func(h *harness)
}

var terminalStatuses = []tracking.ResolutionStatus{tracking.Completed, tracking.Skipped, tracking.Failed, tracking.DeadLettered, tracking.Unsupported}

var cases = []testCase{
	{"UploadPending_then_GetPending_returns_event", func(h *harness) {
		ep, ev := h.id("ep1"), h.id("e1")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Pending, sample(ep, ev, "s1"))
		got := h.get(tracking.Pending, tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"})
		if got == nil || got.EventID != ev || got.ResolutionStatus != tracking.Pending {
			h.Fatalf("got %+v", got)
		}
	}},
	{"GetPendingHandoffByExternalJobId_returns_the_pending_row", func(h *harness) {
		ep, ev, job := h.id("ep-handoff"), h.id("e-handoff"), h.id("ext-job")
		c := sample(ep, ev, "s-handoff")
		c.PendingSubStatus = tracking.Str(tracking.PendingSubStatusHandoff)
		c.HandoffReason = tracking.Str("Awaiting external work")
		c.ExternalJobID = tracking.Str(job)
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s-handoff"}, tracking.Pending, c)
		got, err := h.s.GetPendingHandoffByExternalJobID(h.ctx(), ep, job)
		if err != nil || got == nil {
			h.Fatalf("got %v, %v", got, err)
		}
		if got.EventID != ev || str(got.PendingSubStatus) != `"Handoff"` || !eqStr(got.ExternalJobID, &job) {
			h.Fatalf("got %+v", got)
		}
	}},
	{"GetPendingHandoffByExternalJobId_returns_null_when_no_match", func(h *harness) {
		got, err := h.s.GetPendingHandoffByExternalJobID(h.ctx(), h.id("ep-handoff-miss"), h.id("never-registered"))
		if err != nil || got != nil {
			h.Fatalf("got %v, %v; want nil, nil", got, err)
		}
	}},
	{"GetNextPendingHandoffEvent_returns_only_the_handoff_row", func(h *harness) {
		ep := h.id("ep-next")
		plain := sample(ep, h.id("e-plain"), "s1")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: plain.EventID, SessionID: "s1"}, tracking.Pending, plain)
		failed := sample(ep, h.id("e-failed"), "s2")
		failed.PendingSubStatus = tracking.Str("Handoff")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: failed.EventID, SessionID: "s2"}, tracking.Failed, failed)
		ho := sample(ep, h.id("e-handoff"), "s3")
		ho.PendingSubStatus = tracking.Str("Handoff")
		ho.ExternalJobID = tracking.Str(h.id("job"))
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ho.EventID, SessionID: "s3"}, tracking.Pending, ho)
		got, err := h.s.GetNextPendingHandoffEvent(h.ctx(), ep, nil)
		if err != nil || got == nil || got.EventID != ho.EventID || str(got.PendingSubStatus) != `"Handoff"` {
			h.Fatalf("got %+v, %v", got, err)
		}
	}},
	{"GetNextPendingHandoffEvent_returns_null_when_no_handoff", func(h *harness) {
		ep := h.id("ep-next-miss")
		plain := sample(ep, h.id("e-plain"), "s1")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: plain.EventID, SessionID: "s1"}, tracking.Pending, plain)
		got, err := h.s.GetNextPendingHandoffEvent(h.ctx(), ep, nil)
		if err != nil || got != nil {
			h.Fatalf("got %+v, %v", got, err)
		}
	}},
	{"GetNextPendingHandoffEvent_respects_eventTypeIds_filter", func(h *harness) {
		ep := h.id("ep-next-filter")
		ho := sample(ep, h.id("e-handoff"), "s1")
		ho.PendingSubStatus = tracking.Str("Handoff")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ho.EventID, SessionID: "s1"}, tracking.Pending, ho)
		if got, err := h.s.GetNextPendingHandoffEvent(h.ctx(), ep, []string{"SomethingElse"}); err != nil || got != nil {
			h.Fatalf("non-matching filter: %+v, %v", got, err)
		}
		got, err := h.s.GetNextPendingHandoffEvent(h.ctx(), ep, []string{"OrderPlaced", "AnotherType"})
		if err != nil || got == nil || got.EventID != ho.EventID {
			h.Fatalf("matching filter: %+v, %v", got, err)
		}
	}},
	{"UploadStatus_is_idempotent_under_repeated_writes", func(h *harness) {
		ep, ev := h.id("ep1"), h.id("e2")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Failed, sample(ep, ev, "s1"))
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Failed, sample(ep, ev, "s1"))
		if c := h.counts(ep); c.FailedCount != 1 {
			h.Fatalf("FailedCount %d, want 1", c.FailedCount)
		}
	}},
	{"Status_transition_replaces_previous_status", func(h *harness) {
		ep, ev := h.id("ep1"), h.id("e3")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Pending, sample(ep, ev, "s1"))
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Completed, sample(ep, ev, "s1"))
		if c := h.counts(ep); c.PendingCount != 0 {
			h.Fatalf("PendingCount %d, want 0", c.PendingCount)
		}
	}},
	{"TryCompletePendingMessage_replaces_matching_pending_row_and_guard_refuses_late_copy", func(h *harness) {
		ep, ev := h.id("ep-reconcile"), h.id("repair-1")
		p := sample(ep, ev, "s1")
		p.LastMessageID = tracking.Str("stale-message")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Pending, p)
		done := sample(ep, ev, "s1")
		done.MessageType = message.ResolutionResponse
		done.LastMessageID = tracking.Str("response-message")
		if !h.tryComplete(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Str("stale-message"), done) {
			h.Fatal("matching Pending row not completed")
		}
		h.mustEventStatus(tracking.EventKey{EndpointID: ep, EventID: ev}, tracking.Completed)
		if c := h.counts(ep); c.PendingCount != 0 {
			h.Fatalf("PendingCount %d", c.PendingCount)
		}
		h.mustRefuse(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Pending, guarded(ep, ev, "s1", message.EventRequest, "stale-message", ""))
		h.mustEventStatus(tracking.EventKey{EndpointID: ep, EventID: ev}, tracking.Completed)
	}},
	{"TryCompletePendingMessage_refuses_mismatch_terminal_and_missing_rows", func(h *harness) {
		ep := h.id("ep-reconcile-refuse")
		mm := h.id("mismatch")
		row := sample(ep, mm, "s1")
		row.LastMessageID = tracking.Str("actual")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: mm, SessionID: "s1"}, tracking.Pending, row)
		if h.tryComplete(tracking.Key{EndpointID: ep, EventID: mm, SessionID: "s1"}, tracking.Str("expected"), sample(ep, mm, "s1")) {
			h.Fatal("mismatched id completed")
		}
		if g := h.get(tracking.Pending, tracking.Key{EndpointID: ep, EventID: mm, SessionID: "s1"}); g == nil {
			h.Fatal("mismatched row no longer Pending")
		}
		term := h.id("terminal")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: term, SessionID: "s1"}, tracking.Completed, sample(ep, term, "s1"))
		if h.tryComplete(tracking.Key{EndpointID: ep, EventID: term, SessionID: "s1"}, tracking.Str("last-message"), sample(ep, term, "s1")) {
			h.Fatal("terminal row completed again")
		}
		if h.tryComplete(tracking.Key{EndpointID: ep, EventID: h.id("missing"), SessionID: "s1"}, nil, sample(ep, h.id("missing"), "s1")) {
			h.Fatal("missing row completed")
		}
		if e := h.event(tracking.EventKey{EndpointID: ep, EventID: h.id("missing")}); e != nil {
			h.Fatal("TryCompletePendingMessage created a row")
		}
	}},
	{"TryCompletePendingMessage_null_expected_id_matches_only_null", func(h *harness) {
		ep, ev := h.id("ep-reconcile-null"), h.id("null-id")
		p := sample(ep, ev, "s1")
		p.LastMessageID = nil
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Pending, p)
		if !h.tryComplete(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, nil, sample(ep, ev, "s1")) {
			h.Fatal("nil expectation did not complete a nil-id row")
		}
		with := h.id("null-id-negative")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: with, SessionID: "s1"}, tracking.Pending, sample(ep, with, "s1"))
		if h.tryComplete(tracking.Key{EndpointID: ep, EventID: with, SessionID: "s1"}, nil, sample(ep, with, "s1")) {
			h.Fatal("nil expectation completed a row with an id")
		}
		empty := h.id("empty-id")
		e := sample(ep, empty, "s1")
		e.LastMessageID = tracking.Str("")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: empty, SessionID: "s1"}, tracking.Pending, e)
		if h.tryComplete(tracking.Key{EndpointID: ep, EventID: empty, SessionID: "s1"}, nil, sample(ep, empty, "s1")) {
			h.Fatal(`nil expectation completed a row whose id is ""`)
		}
		if g := h.get(tracking.Pending, tracking.Key{EndpointID: ep, EventID: with, SessionID: "s1"}); g == nil {
			h.Fatal("refused row changed")
		}
	}},
	{"TryCompletePendingMessage_refuses_a_removed_row", func(h *harness) {
		ep, ev := h.id("ep-reconcile-removed"), h.id("removed")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Pending, sample(ep, ev, "s1"))
		if ok, err := h.s.RemoveMessage(h.ctx(), tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}); err != nil || !ok {
			h.Fatalf("RemoveMessage: %v, %v", ok, err)
		}
		if h.tryComplete(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Str("last-message"), sample(ep, ev, "s1")) {
			h.Fatal("soft-deleted Pending row completed")
		}
	}},
	{"Stale_request_copy_does_not_regress_settled_rows", func(h *harness) {
		ep := h.id("ep-stale-request")
		for _, term := range terminalStatuses {
			req := h.id("sr-req-" + term.String())
			h.mustApply(tracking.Key{EndpointID: ep, EventID: req, SessionID: "s1"}, tracking.Pending, guarded(ep, req, "s1", message.EventRequest, "req-1", ""))
			h.mustApply(tracking.Key{EndpointID: ep, EventID: req, SessionID: "s1"}, term, guarded(ep, req, "s1", message.ResolutionResponse, "rsp-1", "req-1"))
			h.mustRefuse(tracking.Key{EndpointID: ep, EventID: req, SessionID: "s1"}, tracking.Pending, guarded(ep, req, "s1", message.EventRequest, "req-late", ""))
			h.mustEventStatus(tracking.EventKey{EndpointID: ep, EventID: req}, term)

			def := h.id("sr-def-" + term.String())
			h.mustApply(tracking.Key{EndpointID: ep, EventID: def, SessionID: "s1"}, tracking.Pending, guarded(ep, def, "s1", message.EventRequest, "req-2", ""))
			h.mustApply(tracking.Key{EndpointID: ep, EventID: def, SessionID: "s1"}, term, guarded(ep, def, "s1", message.ResolutionResponse, "rsp-2", "req-2"))
			h.mustRefuse(tracking.Key{EndpointID: ep, EventID: def, SessionID: "s1"}, tracking.Deferred, guarded(ep, def, "s1", message.DeferralResponse, "def-late", ""))
			h.mustEventStatus(tracking.EventKey{EndpointID: ep, EventID: def}, term)
		}
		if c := h.counts(ep); c.PendingCount != 0 || c.DeferredCount != 0 {
			h.Fatalf("counts %+v: a settled row was reopened", c)
		}
	}},
	{"Request_copy_refreshes_request_stage_rows", func(h *harness) {
		ep := h.id("ep-refresh")
		rep := h.id("rf-repeat")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: rep, SessionID: "s1"}, tracking.Pending, guarded(ep, rep, "s1", message.EventRequest, "m1", ""))
		h.mustApply(tracking.Key{EndpointID: ep, EventID: rep, SessionID: "s1"}, tracking.Pending, guarded(ep, rep, "s1", message.EventRequest, "m2", ""))
		if g := h.get(tracking.Pending, tracking.Key{EndpointID: ep, EventID: rep, SessionID: "s1"}); g == nil || str(g.LastMessageID) != `"m2"` {
			h.Fatalf("after refresh: %+v", g)
		}
		dr := h.id("rf-drain")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: dr, SessionID: "s1"}, tracking.Deferred, guarded(ep, dr, "s1", message.DeferralResponse, "d1", ""))
		h.mustApply(tracking.Key{EndpointID: ep, EventID: dr, SessionID: "s1"}, tracking.Pending, guarded(ep, dr, "s1", message.EventRequest, "d2", ""))
		if g := h.get(tracking.Pending, tracking.Key{EndpointID: ep, EventID: dr, SessionID: "s1"}); g == nil {
			h.Fatal("drained row not Pending")
		}
		de := h.id("rf-defer")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: de, SessionID: "s1"}, tracking.Pending, guarded(ep, de, "s1", message.EventRequest, "p1", ""))
		h.mustApply(tracking.Key{EndpointID: ep, EventID: de, SessionID: "s1"}, tracking.Deferred, guarded(ep, de, "s1", message.DeferralResponse, "p2", ""))
		if g := h.get(tracking.Deferred, tracking.Key{EndpointID: ep, EventID: de, SessionID: "s1"}); g == nil {
			h.Fatal("re-deferred row not Deferred")
		}
	}},
	{"Request_copy_does_not_replace_control_or_handoff_rows", func(h *harness) {
		ep := h.id("ep-control-row")
		rs := h.id("cr-resubmit")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: rs, SessionID: "s1"}, tracking.Pending, guarded(ep, rs, "s1", message.ResubmissionRequest, "rs-1", ""))
		h.mustRefuse(tracking.Key{EndpointID: ep, EventID: rs, SessionID: "s1"}, tracking.Pending, guarded(ep, rs, "s1", message.EventRequest, "req-late", ""))
		if g := h.get(tracking.Pending, tracking.Key{EndpointID: ep, EventID: rs, SessionID: "s1"}); g == nil || g.MessageType != message.ResubmissionRequest {
			h.Fatalf("resubmission row: %+v", g)
		}
		parked, job := h.id("cr-park"), h.id("cr-job")
		park := guarded(ep, parked, "s2", message.PendingHandoffResponse, "ho-1", "")
		park.PendingSubStatus = tracking.Str("Handoff")
		park.ExternalJobID = tracking.Str(job)
		h.mustApply(tracking.Key{EndpointID: ep, EventID: parked, SessionID: "s2"}, tracking.Pending, park)
		h.mustRefuse(tracking.Key{EndpointID: ep, EventID: parked, SessionID: "s2"}, tracking.Pending, guarded(ep, parked, "s2", message.EventRequest, "req-late", ""))
		if g, err := h.s.GetPendingHandoffByExternalJobID(h.ctx(), ep, job); err != nil || g == nil {
			h.Fatalf("handoff lost: %v, %v", g, err)
		}
		st := h.id("cr-settled")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: st, SessionID: "s3"}, tracking.Pending, guarded(ep, st, "s3", message.HandoffCompletedRequest, "hc-1", ""))
		h.mustRefuse(tracking.Key{EndpointID: ep, EventID: st, SessionID: "s3"}, tracking.Pending, guarded(ep, st, "s3", message.EventRequest, "req-late", ""))
		if g := h.get(tracking.Pending, tracking.Key{EndpointID: ep, EventID: st, SessionID: "s3"}); g == nil || g.MessageType != message.HandoffCompletedRequest {
			h.Fatalf("settlement row: %+v", g)
		}
	}},
	{"Handoff_park_is_refused_over_completed_and_skipped_only", func(h *harness) {
		ep := h.id("ep-park")
		for _, settled := range []tracking.ResolutionStatus{tracking.Completed, tracking.Skipped} {
			ev := h.id("hp-closed-" + settled.String())
			h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, settled, guarded(ep, ev, "s1", message.ResolutionResponse, "rsp-1", ""))
			park := guarded(ep, ev, "s1", message.PendingHandoffResponse, "ho-late", "")
			park.PendingSubStatus = tracking.Str("Handoff")
			h.mustRefuse(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Pending, park)
			h.mustEventStatus(tracking.EventKey{EndpointID: ep, EventID: ev}, settled)
		}
		for _, open := range []tracking.ResolutionStatus{tracking.Failed, tracking.DeadLettered, tracking.Unsupported} {
			ev := h.id("hp-open-" + open.String())
			h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, open, guarded(ep, ev, "s1", message.ErrorResponse, "err-1", ""))
			park := guarded(ep, ev, "s1", message.PendingHandoffResponse, "ho-1", "")
			park.PendingSubStatus = tracking.Str("Handoff")
			h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Pending, park)
			if g := h.get(tracking.Pending, tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}); g == nil || str(g.PendingSubStatus) != `"Handoff"` {
				h.Fatalf("park over %s: %+v", open, g)
			}
		}
		de := h.id("hp-open-deferred")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: de, SessionID: "s1"}, tracking.Deferred, guarded(ep, de, "s1", message.DeferralResponse, "def-1", ""))
		dp := guarded(ep, de, "s1", message.PendingHandoffResponse, "ho-2", "")
		dp.PendingSubStatus = tracking.Str("Handoff")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: de, SessionID: "s1"}, tracking.Pending, dp)
		rs := h.id("hp-open-resubmission")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: rs, SessionID: "s1"}, tracking.Pending, guarded(ep, rs, "s1", message.ResubmissionRequest, "rs-1", ""))
		rp := guarded(ep, rs, "s1", message.PendingHandoffResponse, "ho-3", "")
		rp.PendingSubStatus = tracking.Str("Handoff")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: rs, SessionID: "s1"}, tracking.Pending, rp)
		if g := h.get(tracking.Pending, tracking.Key{EndpointID: ep, EventID: rs, SessionID: "s1"}); g == nil || str(g.PendingSubStatus) != `"Handoff"` {
			h.Fatalf("park over resubmission: %+v", g)
		}
	}},
	{"Handoff_settlement_clears_substatus", func(h *harness) {
		ep, ev, job := h.id("ep-settle"), h.id("hs-1"), h.id("hs-job")
		park := guarded(ep, ev, "s1", message.PendingHandoffResponse, "ho-1", "")
		park.PendingSubStatus = tracking.Str("Handoff")
		park.ExternalJobID = tracking.Str(job)
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Pending, park)
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Pending, guarded(ep, ev, "s1", message.HandoffCompletedRequest, randomHex(8), ""))
		if g, err := h.s.GetPendingHandoffByExternalJobID(h.ctx(), ep, job); err != nil || g != nil {
			h.Fatalf("settled handoff still found: %+v, %v", g, err)
		}
	}},
	{"Control_request_reopens_settled_rows", func(h *harness) {
		ep := h.id("ep-reopen")
		cs := []struct {
			settled tracking.ResolutionStatus
			control message.Type
		}{
			{tracking.Failed, message.ResubmissionRequest},
			{tracking.DeadLettered, message.SkipRequest},
			{tracking.Completed, message.ResubmissionRequest},
			{tracking.Unsupported, message.ResubmissionRequest},
		}
		for _, c := range cs {
			ev := h.id("co-" + c.settled.String() + "-" + c.control.String())
			h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, c.settled, guarded(ep, ev, "s1", message.ErrorResponse, "err-1", "req-1"))
			h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Pending, guarded(ep, ev, "s1", c.control, randomHex(8), "err-1"))
			if g := h.get(tracking.Pending, tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}); g == nil {
				h.Fatalf("%s did not reopen %s", c.control, c.settled)
			}
		}
		if c := h.counts(ep); c.PendingCount != len(cs) {
			h.Fatalf("PendingCount %d, want %d", c.PendingCount, len(cs))
		}
	}},
	{"Write_answered_by_row_is_refused", func(h *harness) {
		ep, ev := h.id("ep-ancestor"), h.id("an-1")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Pending, guarded(ep, ev, "s1", message.ResubmissionRequest, "rs-1", ""))
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Completed, guarded(ep, ev, "s1", message.ResolutionResponse, "rsp-1", "rs-1"))
		h.mustRefuse(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Pending, guarded(ep, ev, "s1", message.ResubmissionRequest, "rs-1", ""))
		h.mustEventStatus(tracking.EventKey{EndpointID: ep, EventID: ev}, tracking.Completed)
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Pending, guarded(ep, ev, "s1", message.ResubmissionRequest, "rs-2", ""))
		if g := h.get(tracking.Pending, tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}); g == nil {
			h.Fatal("new resubmission did not reopen")
		}
	}},
	{"Pending_write_after_ArchiveFailedEvent_revives_row", func(h *harness) {
		ep, ev := h.id("ep-archive-revive"), h.id("ar-1")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Failed, guarded(ep, ev, "s1", message.ErrorResponse, "err-1", ""))
		if err := h.s.ArchiveFailedEvent(h.ctx(), tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}); err != nil {
			h.Fatal(err)
		}
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Pending, guarded(ep, ev, "s1", message.ResubmissionRequest, "rs-1", ""))
		if g := h.get(tracking.Pending, tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}); g == nil {
			h.Fatal("archived row not revived")
		}
	}},
	{"First_write_of_every_status_reports_applied", func(h *harness) {
		ep := h.id("ep-first-write")
		for _, s := range []tracking.ResolutionStatus{tracking.Pending, tracking.Deferred, tracking.Failed, tracking.DeadLettered, tracking.Unsupported, tracking.Skipped, tracking.Completed} {
			ev := h.id("fw-" + s.String())
			h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, s, guarded(ep, ev, "s1", message.EventRequest, "m-"+s.String(), ""))
		}
	}},
	{"All_lookup_resolution_statuses_round_trip", func(h *harness) {
		ep := h.id("ep-all")
		for _, s := range []tracking.ResolutionStatus{tracking.Pending, tracking.Deferred, tracking.Failed, tracking.DeadLettered, tracking.Unsupported} {
			ev := h.id("rt-" + s.String())
			h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, s, sample(ep, ev, "s1"))
			g := h.get(s, tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"})
			if g == nil || g.ResolutionStatus != s {
				h.Fatalf("round trip of %s: %+v", s, g)
			}
		}
	}},
	{"Skipped_status_keeps_its_error_content", func(h *harness) {
		ep, ev := h.id("ep-sk"), h.id("sk1")
		e := sample(ep, ev, "s1")
		e.MessageContent = &message.Content{ErrorContent: &message.ErrorContent{
			ErrorText: tracking.Str("InvalidOperationException: discarded by PartnerFailureDispositionClassifier"),
			ErrorType: tracking.Str("InvalidOperationException"),
		}}
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Skipped, e)
		g := h.event(tracking.EventKey{EndpointID: ep, EventID: ev})
		if g == nil || g.ResolutionStatus != tracking.Skipped || g.MessageContent == nil || g.MessageContent.ErrorContent == nil ||
			str(g.MessageContent.ErrorContent.ErrorType) != `"InvalidOperationException"` {
			h.Fatalf("skipped row: %+v", g)
		}
	}},
	{"StoreMessage_then_GetMessage_round_trips", func(h *harness) {
		ev, mid := h.id("evt-x"), h.id("msg-x")
		h.storeMessage(tracking.MessageEntity{
			EventID: ev, MessageID: mid, EndpointID: h.id("ep1"), SessionID: tracking.Str("s1"),
			CorrelationID: tracking.Str("c1"), EventTypeID: tracking.Str("OrderPlaced"),
			CloudEventID: tracking.Str("ce-message-1"), CloudEventSource: tracking.Str("urn:nimbus:conformance"),
			CloudEventType: tracking.Str("com.nimbus.order-placed.v1"), CloudEventSubject: tracking.Str("orders/42"),
			EnqueuedTimeUtc: time.Now().UTC(), MessageContent: &message.Content{},
		})
		g := h.message(ev, mid)
		if g == nil || g.EventID != ev || g.MessageID != mid || str(g.CloudEventID) != `"ce-message-1"` ||
			str(g.CloudEventSource) != `"urn:nimbus:conformance"` || str(g.CloudEventType) != `"com.nimbus.order-placed.v1"` ||
			str(g.CloudEventSubject) != `"orders/42"` {
			h.Fatalf("got %+v", g)
		}
	}},
	{"CloudEvent_identity_round_trips_on_tracked_event", func(h *harness) {
		ep, ev := h.id("ep-ce"), h.id("event-ce")
		e := sample(ep, ev, "session-ce")
		e.CloudEventID, e.CloudEventSource = tracking.Str("ce-event-1"), tracking.Str("urn:nimbus:conformance")
		e.CloudEventType, e.CloudEventSubject = tracking.Str("com.nimbus.order-placed.v1"), tracking.Str("orders/42")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "session-ce"}, tracking.Failed, e)
		g := h.get(tracking.Failed, tracking.Key{EndpointID: ep, EventID: ev, SessionID: "session-ce"})
		if g == nil || str(g.CloudEventID) != `"ce-event-1"` || str(g.CloudEventSource) != `"urn:nimbus:conformance"` ||
			str(g.CloudEventType) != `"com.nimbus.order-placed.v1"` || str(g.CloudEventSubject) != `"orders/42"` {
			h.Fatalf("got %+v", g)
		}
	}},
	{"Native_message_and_event_keep_CloudEvent_identity_null", func(h *harness) {
		ep, ev, mid := h.id("ep-native"), h.id("event-native"), h.id("message-native")
		h.storeMessage(tracking.MessageEntity{EventID: ev, MessageID: mid, EndpointID: ep, EnqueuedTimeUtc: time.Now().UTC(), MessageContent: &message.Content{}})
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "session-native"}, tracking.Pending, sample(ep, ev, "session-native"))
		m := h.message(ev, mid)
		e := h.get(tracking.Pending, tracking.Key{EndpointID: ep, EventID: ev, SessionID: "session-native"})
		if m == nil || e == nil {
			h.Fatalf("missing: %v %v", m, e)
		}
		for _, p := range []*string{m.CloudEventID, m.CloudEventSource, m.CloudEventType, m.CloudEventSubject, e.CloudEventID, e.CloudEventSource, e.CloudEventType, e.CloudEventSubject} {
			if p != nil {
				h.Fatalf("a CloudEvent field is %q, want nil", *p)
			}
		}
	}},
	{"GetLatestEventRequestMessage_returns_newest_request_with_payload", func(h *harness) {
		ev, ep := h.id("evt-lr"), h.id("ep1")
		now := time.Now().UTC()
		body := func(v string) *message.Content {
			return &message.Content{EventContent: &message.EventContent{EventJSON: tracking.Str(v)}}
		}
		h.storeMessage(tracking.MessageEntity{EventID: ev, MessageID: h.id("m1"), EndpointID: ep, MessageType: message.EventRequest, EnqueuedTimeUtc: now.Add(-10 * time.Minute), MessageContent: body(`{"v":1}`)})
		h.storeMessage(tracking.MessageEntity{EventID: ev, MessageID: h.id("m2"), EndpointID: ep, MessageType: message.ResubmissionRequest, EnqueuedTimeUtc: now.Add(-2 * time.Minute), MessageContent: body(`{"v":2}`)})
		h.storeMessage(tracking.MessageEntity{EventID: ev, MessageID: h.id("m3"), EndpointID: ep, MessageType: message.PendingHandoffResponse, EnqueuedTimeUtc: now, MessageContent: body(`{"v":3}`)})
		g, err := h.s.GetLatestEventRequestMessage(h.ctx(), ev)
		if err != nil || g == nil || g.MessageContent == nil || g.MessageContent.EventContent == nil || str(g.MessageContent.EventContent.EventJSON) != `"{\"v\":2}"` {
			h.Fatalf("got %+v, %v", g, err)
		}
	}},
	{"GetLatestEventRequestMessage_returns_null_when_no_request_carries_payload", func(h *harness) {
		ev := h.id("evt-lr-none")
		h.storeMessage(tracking.MessageEntity{EventID: ev, MessageID: h.id("m1"), EndpointID: h.id("ep1"), MessageType: message.PendingHandoffResponse, EnqueuedTimeUtc: time.Now().UTC(), MessageContent: &message.Content{}})
		h.storeMessage(tracking.MessageEntity{EventID: ev, MessageID: h.id("m2"), EndpointID: h.id("ep1"), MessageType: message.EventRequest, EnqueuedTimeUtc: time.Now().UTC(),
			MessageContent: &message.Content{EventContent: &message.EventContent{EventJSON: tracking.Str("")}}})
		if g, err := h.s.GetLatestEventRequestMessage(h.ctx(), ev); err != nil || g != nil {
			h.Fatalf("got %+v, %v", g, err)
		}
	}},
	{"StoreMessageAudit_appends_to_history", func(h *harness) {
		ev := h.id("evt-aud")
		for _, a := range []tracking.MessageAudit{
			{AuditorName: tracking.Str(h.id("alice")), AuditTimestamp: time.Now().UTC(), AuditType: tracking.AuditResubmit},
			{AuditorName: tracking.Str(h.id("bob")), AuditTimestamp: time.Now().UTC(), AuditType: tracking.AuditSkip},
		} {
			if err := h.s.StoreMessageAudit(h.ctx(), tracking.EventKey{EndpointID: "", EventID: ev}, a, ""); err != nil {
				h.Fatal(err)
			}
		}
		got, err := h.s.GetMessageAudits(h.ctx(), ev)
		if err != nil || len(got) != 2 {
			h.Fatalf("got %d audits, %v; want 2", len(got), err)
		}
		// A repeat is a second entry (plain insert).
		if err := h.s.StoreMessageAudit(h.ctx(), tracking.EventKey{EndpointID: "", EventID: ev}, got[0], ""); err != nil {
			h.Fatal(err)
		}
		if got, _ = h.s.GetMessageAudits(h.ctx(), ev); len(got) != 3 {
			h.Fatalf("after a repeat: %d audits, want 3", len(got))
		}
	}},
	{"StoreMessageAudit_roundtrips_AccessDenied_and_Data_fields", func(h *harness) {
		ev, ep := h.id("evt-aud-new"), h.id("ep-aud-new")
		data := `{"filter":"OrderPlaced","endpointId":"` + ep + `"}`
		ts := time.Date(2026, 5, 1, 8, 0, 0, 1234567*100, time.UTC)
		in := tracking.MessageAudit{
			AuditorName: tracking.Str(h.id("alice")), AuditTimestamp: ts, AuditType: tracking.AuditSearchEvents,
			AccessDenied: true, Data: tracking.Str(data), EventID: tracking.Str(ev), EndpointID: tracking.Str(ep),
			CloudEventID: tracking.Str("ce-audit-1"), CloudEventSource: tracking.Str("urn:nimbus:audit"),
			CloudEventType: tracking.Str("com.nimbus.audit.v1"), CloudEventSubject: tracking.Str("audits/42"),
		}
		if err := h.s.StoreMessageAudit(h.ctx(), tracking.EventKey{EndpointID: ep, EventID: ev}, in, "OrderPlaced"); err != nil {
			h.Fatal(err)
		}
		got, err := h.s.GetMessageAudits(h.ctx(), ev)
		if err != nil || len(got) != 1 {
			h.Fatalf("got %d, %v", len(got), err)
		}
		a := got[0]
		if !a.AccessDenied || str(a.Data) != fmt.Sprintf("%q", data) || str(a.EventID) != fmt.Sprintf("%q", ev) || str(a.EndpointID) != fmt.Sprintf("%q", ep) ||
			str(a.CloudEventID) != `"ce-audit-1"` || str(a.CloudEventSource) != `"urn:nimbus:audit"` || str(a.CloudEventType) != `"com.nimbus.audit.v1"` ||
			str(a.CloudEventSubject) != `"audits/42"` || a.AuditType != tracking.AuditSearchEvents || !a.AuditTimestamp.Equal(ts) {
			h.Fatalf("got %+v", a)
		}
	}},
	{"StoreMessageAudit_legacy_row_defaults_AccessDenied_false_and_Data_null", func(h *harness) {
		ev := h.id("evt-aud-legacy")
		if err := h.s.StoreMessageAudit(h.ctx(), tracking.EventKey{EndpointID: "", EventID: ev}, tracking.MessageAudit{AuditorName: tracking.Str("legacy"), AuditTimestamp: time.Now().UTC(), AuditType: tracking.AuditResubmit}, ""); err != nil {
			h.Fatal(err)
		}
		got, err := h.s.GetMessageAudits(h.ctx(), ev)
		if err != nil || len(got) != 1 {
			h.Fatalf("got %d, %v", len(got), err)
		}
		a := got[0]
		if a.AccessDenied || a.Data != nil || a.CloudEventID != nil || a.CloudEventSource != nil || a.CloudEventType != nil || a.CloudEventSubject != nil {
			h.Fatalf("got %+v", a)
		}
	}},
	{"DownloadEndpointStateCount_groups_by_status", func(h *harness) {
		ep := h.id("ep-cnt")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: h.id("p1"), SessionID: "s1"}, tracking.Pending, sample(ep, h.id("p1"), "s1"))
		h.mustApply(tracking.Key{EndpointID: ep, EventID: h.id("p2"), SessionID: "s2"}, tracking.Pending, sample(ep, h.id("p2"), "s2"))
		h.mustApply(tracking.Key{EndpointID: ep, EventID: h.id("f1"), SessionID: "s1"}, tracking.Failed, sample(ep, h.id("f1"), "s1"))
		c := h.counts(ep)
		if c.PendingCount != 2 || c.FailedCount != 1 || c.DeadletteredCount != 0 {
			h.Fatalf("counts %+v", c)
		}
	}},
	{"Endpoint_counts_preserve_all_unfinished_statuses_and_exclude_terminal_history", func(h *harness) {
		ep := h.id("ep-active-counts")
		for _, s := range []tracking.ResolutionStatus{tracking.Pending, tracking.Deferred, tracking.Failed, tracking.DeadLettered, tracking.Unsupported, tracking.Completed, tracking.Skipped} {
			ev := h.id(randomHex(8))
			h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "session"}, s, sample(ep, ev, "session"))
		}
		ho := sample(ep, h.id("handoff-count"), "session")
		ho.PendingSubStatus = tracking.Str("Handoff")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ho.EventID, SessionID: "session"}, tracking.Pending, ho)
		other := h.id("other-endpoint")
		h.mustApply(tracking.Key{EndpointID: other, EventID: h.id("other-event"), SessionID: "session"}, tracking.Failed, sample(other, h.id("other-event"), "session"))
		c := h.counts(ep)
		if c.PendingCount != 2 || c.DeferredCount != 1 || c.FailedCount != 1 || c.DeadletteredCount != 1 || c.UnsupportedCount != 1 || c.EndpointID != ep {
			h.Fatalf("counts %+v", c)
		}
		if c.OldestFailureAt == nil {
			h.Fatal("OldestFailureAt nil with Failed rows present")
		}
		e := h.counts(h.id("empty-endpoint"))
		if e.PendingCount+e.DeferredCount+e.FailedCount+e.DeadletteredCount+e.UnsupportedCount != 0 || e.OldestFailureAt != nil {
			h.Fatalf("empty endpoint counts %+v", e)
		}
	}},
	{"DownloadEndpointStateCount_reports_oldest_open_failure", func(h *harness) {
		ep := h.id("ep-oldest")
		base := time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond)
		at := func(ev string, s tracking.ResolutionStatus, age time.Duration) {
			e := sample(ep, h.id(ev), "s1")
			e.UpdatedAt = base.Add(-age)
			h.mustApply(tracking.Key{EndpointID: ep, EventID: h.id(ev), SessionID: "s1"}, s, e)
		}
		at("pending-older", tracking.Pending, 3*time.Hour) // not a failure
		at("failed-new", tracking.Failed, 0)
		at("dlq-old", tracking.DeadLettered, 2*time.Hour)
		at("removed-oldest", tracking.Failed, 5*time.Hour)
		if _, err := h.s.RemoveMessage(h.ctx(), tracking.Key{EndpointID: ep, EventID: h.id("removed-oldest"), SessionID: "s1"}); err != nil {
			h.Fatal(err)
		}
		c := h.counts(ep)
		if c.OldestFailureAt == nil || !c.OldestFailureAt.Equal(base.Add(-2*time.Hour)) || c.OldestFailureAt.Location() != time.UTC {
			h.Fatalf("OldestFailureAt %v, want %v (UTC)", c.OldestFailureAt, base.Add(-2*time.Hour))
		}
		dlqOnly := h.id("ep-oldest-dlq")
		e := sample(dlqOnly, h.id("d"), "s1")
		e.UpdatedAt = base
		h.mustApply(tracking.Key{EndpointID: dlqOnly, EventID: h.id("d"), SessionID: "s1"}, tracking.DeadLettered, e)
		if c := h.counts(dlqOnly); c.OldestFailureAt == nil || !c.OldestFailureAt.Equal(base) {
			h.Fatalf("dead-letter only: %v", c.OldestFailureAt)
		}
		pendingOnly := h.id("ep-oldest-pending")
		h.mustApply(tracking.Key{EndpointID: pendingOnly, EventID: h.id("p"), SessionID: "s1"}, tracking.Pending, sample(pendingOnly, h.id("p"), "s1"))
		if c := h.counts(pendingOnly); c.OldestFailureAt != nil {
			h.Fatalf("pending only: %v", c.OldestFailureAt)
		}
	}},
	{"RemoveMessage_drops_from_state_count", func(h *harness) {
		ep, ev := h.id("ep-rm"), h.id("rm1")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Failed, sample(ep, ev, "s1"))
		ok, err := h.s.RemoveMessage(h.ctx(), tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"})
		if err != nil || !ok {
			h.Fatalf("RemoveMessage: %v, %v", ok, err)
		}
		if c := h.counts(ep); c.FailedCount != 0 {
			h.Fatalf("FailedCount %d", c.FailedCount)
		}
		if ok, err := h.s.RemoveMessage(h.ctx(), tracking.Key{EndpointID: ep, EventID: h.id("never"), SessionID: "s1"}); err != nil || ok {
			h.Fatalf("RemoveMessage of a missing row: %v, %v; want false, nil", ok, err)
		}
	}},
	{"PendingHandoff_fields_round_trip", func(h *harness) {
		ep, ev, sess := h.id("ep-handoff"), h.id("handoff-1"), "session-handoff"
		by := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
		e := sample(ep, ev, sess)
		e.MessageType = message.PendingHandoffResponse
		e.PendingSubStatus = tracking.Str("Handoff")
		e.HandoffReason = tracking.Str("DMF import in progress")
		e.ExternalJobID = tracking.Str("DMF-JOB-42")
		e.ExpectedBy = &by
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: sess}, tracking.Pending, e)
		g := h.get(tracking.Pending, tracking.Key{EndpointID: ep, EventID: ev, SessionID: sess})
		if g == nil || str(g.PendingSubStatus) != `"Handoff"` || str(g.HandoffReason) != `"DMF import in progress"` ||
			str(g.ExternalJobID) != `"DMF-JOB-42"` || g.ExpectedBy == nil || !g.ExpectedBy.Equal(by) {
			h.Fatalf("got %+v", g)
		}
	}},
	{"Every_event_field_round_trips", func(h *harness) {
		ep, ev, sess := h.id("ep-drift"), h.id("drift-1"), "session-drift"
		in := fullySetEvent(ep, ev, sess)
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: sess}, tracking.Failed, in)
		g := h.get(tracking.Failed, tracking.Key{EndpointID: ep, EventID: ev, SessionID: sess})
		if g == nil {
			h.Fatal("row missing")
		}
		in.ResolutionStatus = tracking.Failed
		if diff := diffJSON(in, *g); diff != "" {
			h.Fatalf("row did not round-trip: %s", diff)
		}
	}},
	{"Single_row_event_getters_return_null_for_missing_rows", func(h *harness) {
		ep, present, missing := h.id("ep-miss"), h.id("present"), h.id("missing")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: present, SessionID: "s1"}, tracking.Pending, sample(ep, present, "s1"))
		for _, s := range []tracking.ResolutionStatus{tracking.Pending, tracking.Failed, tracking.Deferred, tracking.DeadLettered, tracking.Unsupported} {
			if g := h.get(s, tracking.Key{EndpointID: ep, EventID: missing, SessionID: "s1"}); g != nil {
				h.Fatalf("Get%sEvent of a missing row: %+v", s, g)
			}
		}
		if g := h.event(tracking.EventKey{EndpointID: ep, EventID: missing}); g != nil {
			h.Fatal("GetEvent of a missing row not nil")
		}
		if g, err := h.s.GetEventByID(h.ctx(), ep, tracking.StoredID(missing, "s1")); err != nil || g != nil {
			h.Fatalf("GetEventByID: %v, %v", g, err)
		}
		if g, err := h.s.GetPendingHandoffByExternalJobID(h.ctx(), ep, h.id("no-such-job")); err != nil || g != nil {
			h.Fatalf("GetPendingHandoffByExternalJobID: %v, %v", g, err)
		}
		if g, err := h.s.GetPendingHandoffByExternalJobID(h.ctx(), ep, ""); err != nil || g != nil {
			h.Fatalf("GetPendingHandoffByExternalJobID(\"\"): %v, %v", g, err)
		}
	}},
	{"Status_getters_return_null_when_the_row_has_another_status_or_session", func(h *harness) {
		ep, ev := h.id("ep-other-status"), h.id("pending-only")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Pending, sample(ep, ev, "s1"))
		for _, s := range []tracking.ResolutionStatus{tracking.Failed, tracking.Deferred, tracking.DeadLettered, tracking.Unsupported} {
			if g := h.get(s, tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}); g != nil {
				h.Fatalf("Get%sEvent of a Pending row: %+v", s, g)
			}
		}
		if g := h.get(tracking.Pending, tracking.Key{EndpointID: ep, EventID: ev, SessionID: "other-session"}); g != nil {
			h.Fatal("another session's row returned")
		}
		if g := h.get(tracking.Pending, tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}); g == nil {
			h.Fatal("the row itself is missing")
		}
	}},
	{"Single_row_message_getters_return_null_for_missing_messages", func(h *harness) {
		ep, missing := h.id("ep-miss-msg"), h.id("missing-evt")
		if g := h.message(missing, h.id("missing-msg")); g != nil {
			h.Fatal("GetMessage not nil")
		}
		for name, f := range map[string]func() (*tracking.MessageEntity, error){
			"GetFailedMessage": func() (*tracking.MessageEntity, error) {
				return h.s.GetFailedMessage(h.ctx(), tracking.EventKey{EndpointID: ep, EventID: missing})
			},
			"GetDeadletteredMessage": func() (*tracking.MessageEntity, error) {
				return h.s.GetDeadletteredMessage(h.ctx(), tracking.EventKey{EndpointID: ep, EventID: missing})
			},
			"GetLatestEventRequestMessage": func() (*tracking.MessageEntity, error) { return h.s.GetLatestEventRequestMessage(h.ctx(), missing) },
		} {
			if g, err := f(); err != nil || g != nil {
				h.Fatalf("%s: %v, %v", name, g, err)
			}
		}
		if hist := h.history(missing); len(hist) != 0 {
			h.Fatalf("history of a missing event: %d entries", len(hist))
		}
	}},
	{"Removed_and_archived_rows_are_not_found", func(h *harness) {
		ep, removed, archived := h.id("ep-soft-delete"), h.id("removed"), h.id("archived")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: removed, SessionID: "s1"}, tracking.Pending, sample(ep, removed, "s1"))
		h.mustApply(tracking.Key{EndpointID: ep, EventID: archived, SessionID: "s1"}, tracking.Failed, sample(ep, archived, "s1"))
		if _, err := h.s.RemoveMessage(h.ctx(), tracking.Key{EndpointID: ep, EventID: removed, SessionID: "s1"}); err != nil {
			h.Fatal(err)
		}
		if err := h.s.ArchiveFailedEvent(h.ctx(), tracking.Key{EndpointID: ep, EventID: archived, SessionID: "s1"}); err != nil {
			h.Fatal(err)
		}
		if h.get(tracking.Pending, tracking.Key{EndpointID: ep, EventID: removed, SessionID: "s1"}) != nil || h.event(tracking.EventKey{EndpointID: ep, EventID: removed}) != nil {
			h.Fatal("removed row found")
		}
		if h.get(tracking.Failed, tracking.Key{EndpointID: ep, EventID: archived, SessionID: "s1"}) != nil || h.event(tracking.EventKey{EndpointID: ep, EventID: archived}) != nil {
			h.Fatal("archived row found")
		}
		for _, id := range []string{tracking.StoredID(removed, "s1"), tracking.StoredID(archived, "s1")} {
			if g, err := h.s.GetEventByID(h.ctx(), ep, id); err != nil || g != nil {
				h.Fatalf("GetEventByID(%s): %v, %v", id, g, err)
			}
		}
		if err := h.s.ArchiveFailedEvent(h.ctx(), tracking.Key{EndpointID: ep, EventID: h.id("never"), SessionID: "s1"}); err != nil {
			h.Fatalf("ArchiveFailedEvent of a missing row: %v", err)
		}
	}},
	{"GetEvent_returns_the_most_recently_updated_session_row", func(h *harness) {
		ep, ev := h.id("ep-latest"), h.id("multi-session")
		older := sample(ep, ev, "s-old")
		older.UpdatedAt = time.Now().UTC().Add(-10 * time.Minute)
		newer := sample(ep, ev, "s-new")
		newer.UpdatedAt = time.Now().UTC()
		// Written newest first, so write order cannot decide.
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s-new"}, tracking.Pending, newer)
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s-old"}, tracking.Failed, older)
		g := h.event(tracking.EventKey{EndpointID: ep, EventID: ev})
		if g == nil || g.SessionID != "s-new" {
			h.Fatalf("got %+v", g)
		}
	}},
	{"GetEvent_sees_completed_rows", func(h *harness) {
		ep, ev := h.id("ep-latest-done"), h.id("done")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Completed, sample(ep, ev, "s1"))
		h.mustEventStatus(tracking.EventKey{EndpointID: ep, EventID: ev}, tracking.Completed)
		if g, err := h.s.GetEventByID(h.ctx(), ep, tracking.StoredID(ev, "s1")); err != nil || g == nil || g.ResolutionStatus != tracking.Completed {
			h.Fatalf("GetEventByID: %+v, %v", g, err)
		}
	}},
	{"GetEventById_looks_up_by_stored_id", func(h *harness) {
		ep, ev := h.id("ep-by-id"), h.id("by-id")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Failed, sample(ep, ev, "s1"))
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s2"}, tracking.Pending, sample(ep, ev, "s2"))
		first, err1 := h.s.GetEventByID(h.ctx(), ep, tracking.StoredID(ev, "s1"))
		second, err2 := h.s.GetEventByID(h.ctx(), ep, tracking.StoredID(ev, "s2"))
		if err1 != nil || err2 != nil || first == nil || second == nil {
			h.Fatalf("got %v %v %v %v", first, second, err1, err2)
		}
		if first.SessionID != "s1" || first.ResolutionStatus != tracking.Failed || second.SessionID != "s2" || second.ResolutionStatus != tracking.Pending {
			h.Fatalf("first %+v second %+v", first, second)
		}
	}},
	{"GetFailedMessage_returns_the_latest_message_carrying_error_content", func(h *harness) {
		ep, ev := h.id("ep-failed-msg"), h.id("failed-msg")
		start := time.Now().UTC().Add(-5 * time.Minute)
		msg := func(id string, minute int, t message.Type, withError bool) tracking.MessageEntity {
			c := &message.Content{}
			if withError {
				c.ErrorContent = &message.ErrorContent{ErrorText: tracking.Str(id), ErrorType: tracking.Str("System.InvalidOperationException")}
			}
			return tracking.MessageEntity{EventID: ev, MessageID: h.id(id), EndpointID: ep, SessionID: tracking.Str("s1"), EventTypeID: tracking.Str("OrderPlaced"),
				MessageType: t, EnqueuedTimeUtc: start.Add(time.Duration(minute) * time.Minute), MessageContent: c}
		}
		// Stored out of time order, so storage order cannot decide.
		h.storeMessage(msg("error-2", 2, message.ErrorResponse, true))
		h.storeMessage(msg("request", 0, message.EventRequest, false))
		h.storeMessage(msg("resubmit", 3, message.ResubmissionRequest, false))
		h.storeMessage(msg("error-1", 1, message.ErrorResponse, true))
		other := msg("other-endpoint", 4, message.ErrorResponse, true)
		other.EndpointID = h.id("ep-elsewhere")
		h.storeMessage(other)
		failed, err := h.s.GetFailedMessage(h.ctx(), tracking.EventKey{EndpointID: ep, EventID: ev})
		if err != nil || failed == nil || failed.MessageID != h.id("error-2") {
			h.Fatalf("GetFailedMessage: %+v, %v", failed, err)
		}
		latest, err := h.s.GetDeadletteredMessage(h.ctx(), tracking.EventKey{EndpointID: ep, EventID: ev})
		if err != nil || latest == nil || latest.MessageID != h.id("resubmit") {
			h.Fatalf("GetDeadletteredMessage: %+v, %v", latest, err)
		}
	}},
	{"Optional_event_fields_round_trip_null_and_empty", func(h *harness) {
		ep := h.id("ep-absent")
		for _, v := range []*string{nil, tracking.Str("")} {
			ev := h.id("nulls")
			if v != nil {
				ev = h.id("empties")
			}
			e := sample(ep, ev, "s1")
			e.CorrelationID, e.LastMessageID, e.OriginatingMessageID, e.ParentMessageID = v, v, v, v
			e.OriginatingFrom, e.Reason, e.DeadLetterReason, e.DeadLetterErrorDescription = v, v, v, v
			e.EventTypeID, e.To, e.From = v, v, v
			h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Failed, e)
			for _, g := range []*tracking.UnresolvedEvent{h.get(tracking.Failed, tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}), h.event(tracking.EventKey{EndpointID: ep, EventID: ev})} {
				if g == nil {
					h.Fatal("row missing")
				}
				for name, p := range map[string]*string{"CorrelationId": g.CorrelationID, "LastMessageId": g.LastMessageID, "OriginatingMessageId": g.OriginatingMessageID,
					"ParentMessageId": g.ParentMessageID, "OriginatingFrom": g.OriginatingFrom, "Reason": g.Reason, "DeadLetterReason": g.DeadLetterReason,
					"DeadLetterErrorDescription": g.DeadLetterErrorDescription, "EventTypeId": g.EventTypeID, "To": g.To, "From": g.From} {
					if !eqStr(p, v) {
						h.Fatalf("%s: got %s, want %s", name, str(p), str(v))
					}
				}
			}
		}
	}},
	{"Optional_message_fields_round_trip_null_and_empty", func(h *harness) {
		ep, ev := h.id("ep-absent-msg"), h.id("absent-msg")
		ids := map[string]*string{h.id("nulls"): nil, h.id("empties"): tracking.Str("")}
		for id, v := range ids {
			h.storeMessage(tracking.MessageEntity{EventID: ev, MessageID: id, EndpointID: ep, SessionID: v, CorrelationID: v, EventTypeID: v,
				OriginatingMessageID: v, ParentMessageID: v, From: v, To: v, OriginatingFrom: v, OriginalSessionID: v,
				DeadLetterReason: v, DeadLetterErrorDescription: v, EnqueuedTimeUtc: time.Now().UTC(), MessageContent: &message.Content{}})
		}
		hist := h.history(ev)
		if len(hist) != 2 {
			h.Fatalf("history has %d entries, want 2", len(hist))
		}
		for id, v := range ids {
			var fromHistory *tracking.MessageEntity
			for i := range hist {
				if hist[i].MessageID == id {
					fromHistory = &hist[i]
				}
			}
			for _, g := range []*tracking.MessageEntity{h.message(ev, id), fromHistory} {
				if g == nil {
					h.Fatal("message missing")
				}
				for name, p := range map[string]*string{"SessionId": g.SessionID, "CorrelationId": g.CorrelationID, "EventTypeId": g.EventTypeID,
					"OriginatingMessageId": g.OriginatingMessageID, "ParentMessageId": g.ParentMessageID, "From": g.From, "To": g.To,
					"OriginatingFrom": g.OriginatingFrom, "OriginalSessionId": g.OriginalSessionID, "DeadLetterReason": g.DeadLetterReason,
					"DeadLetterErrorDescription": g.DeadLetterErrorDescription} {
					if !eqStr(p, v) {
						h.Fatalf("%s: got %s, want %s", name, str(p), str(v))
					}
				}
				if g.ExpectedBy != nil {
					h.Fatal("ExpectedBy not nil")
				}
			}
		}
	}},
	{"StoreMessage_roundtrips_handoff_fields", func(h *harness) {
		ep, ev, mid := h.id("ep-ho-msg"), h.id("ho-msg"), h.id("ho-m1")
		by := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
		h.storeMessage(tracking.MessageEntity{EventID: ev, MessageID: mid, EndpointID: ep, MessageType: message.PendingHandoffResponse,
			EnqueuedTimeUtc: time.Now().UTC(), MessageContent: &message.Content{}, PendingSubStatus: tracking.Str("Handoff"),
			HandoffReason: tracking.Str("external work"), ExternalJobID: tracking.Str("JOB-9"), ExpectedBy: &by})
		dl, err := h.s.GetDeadletteredMessage(h.ctx(), tracking.EventKey{EndpointID: ep, EventID: ev})
		if err != nil {
			h.Fatal(err)
		}
		hist := h.history(ev)
		if len(hist) != 1 {
			h.Fatalf("history %d entries", len(hist))
		}
		for _, g := range []*tracking.MessageEntity{h.message(ev, mid), &hist[0], dl} {
			if g == nil || str(g.PendingSubStatus) != `"Handoff"` || str(g.HandoffReason) != `"external work"` || str(g.ExternalJobID) != `"JOB-9"` ||
				g.ExpectedBy == nil || !g.ExpectedBy.Equal(by) {
				h.Fatalf("got %+v", g)
			}
		}
	}},
	{"StoreMessage_is_idempotent_per_message_id", func(h *harness) {
		ev, ep := h.id("evt-idem"), h.id("ep-idem")
		m := tracking.MessageEntity{EventID: ev, MessageID: h.id("m1"), EndpointID: ep, MessageType: message.EventRequest, EnqueuedTimeUtc: time.Now().UTC(), MessageContent: &message.Content{}}
		h.storeMessage(m)
		h.storeMessage(m)
		if hist := h.history(ev); len(hist) != 1 {
			h.Fatalf("history has %d entries after a repeated StoreMessage, want 1", len(hist))
		}
	}},
	{"Every_message_field_round_trips", func(h *harness) {
		ev := h.id("msgdrift-1")
		in := fullySetMessage(h.id("ep-msgdrift"), ev, h.id("msgdrift-m1"))
		h.storeMessage(in)
		g := h.message(ev, in.MessageID)
		if g == nil {
			h.Fatal("message missing")
		}
		if diff := diffJSON(in, *g); diff != "" {
			h.Fatalf("message did not round-trip: %s", diff)
		}
	}},
	{"Reserved_endpoint_ids_are_refused", func(h *harness) {
		for _, id := range tracking.ReservedEndpointIDs() {
			_, err := h.s.Upload(h.ctx(), tracking.Key{EndpointID: id, EventID: h.id("e"), SessionID: "s1"}, tracking.Pending, sample(id, h.id("e"), "s1"))
			if !errors.Is(err, tracking.ErrReservedEndpointID) {
				h.Fatalf("Upload Pending on %q: %v, want ErrReservedEndpointID", id, err)
			}
			if _, err := h.s.GetEvent(h.ctx(), tracking.EventKey{EndpointID: id, EventID: h.id("e")}); !errors.Is(err, tracking.ErrReservedEndpointID) {
				h.Fatalf("GetEvent on %q: %v", id, err)
			}
		}
		// Case-sensitive: "Messages" is an ordinary endpoint.
		ep := "Messages"
		ev := h.id("case")
		h.mustApply(tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Failed, sample(ep, ev, "s1"))
		if g := h.get(tracking.Failed, tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}); g == nil {
			h.Fatal(`endpoint "Messages" did not store its row`)
		}
	}},
	{"Upload_refuses_a_status_without_a_method", func(h *harness) {
		ep, ev := h.id("ep-nomethod"), h.id("nm")
		key := tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}
		for _, s := range []tracking.ResolutionStatus{tracking.TooManyRequests, tracking.Published, tracking.ResolutionStatus(99)} {
			if _, err := h.s.Upload(h.ctx(), key, s, sample(ep, ev, "s1")); !errors.Is(err, tracking.ErrInvalidArgument) {
				h.Fatalf("Upload %s: %v", s, err)
			}
		}
		if h.event(key.Event()) != nil {
			h.Fatal("a refused status wrote a row")
		}
	}},
}
