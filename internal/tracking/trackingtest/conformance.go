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

func (h *harness) upload(status tracking.ResolutionStatus, eventID, sessionID, endpointID string, row tracking.UnresolvedEvent) bool {
	h.Helper()
	ok, err := tracking.Upload(h.ctx(), h.s, status, eventID, sessionID, endpointID, row)
	if err != nil {
		h.Fatalf("Upload %s %s: %v", status, eventID, err)
	}
	return ok
}

func (h *harness) mustApply(status tracking.ResolutionStatus, eventID, sessionID, endpointID string, row tracking.UnresolvedEvent) {
	h.Helper()
	if !h.upload(status, eventID, sessionID, endpointID, row) {
		h.Fatalf("%s write of %s (%s) was refused", status, eventID, row.MessageType)
	}
}

func (h *harness) mustRefuse(status tracking.ResolutionStatus, eventID, sessionID, endpointID string, row tracking.UnresolvedEvent) {
	h.Helper()
	if h.upload(status, eventID, sessionID, endpointID, row) {
		h.Fatalf("%s write of %s (%s) was applied, want refused", status, eventID, row.MessageType)
	}
}

func (h *harness) get(status tracking.ResolutionStatus, endpointID, eventID, sessionID string) *tracking.UnresolvedEvent {
	h.Helper()
	var (
		e   *tracking.UnresolvedEvent
		err error
	)
	switch status {
	case tracking.Pending:
		e, err = h.s.GetPendingEvent(h.ctx(), endpointID, eventID, sessionID)
	case tracking.Failed:
		e, err = h.s.GetFailedEvent(h.ctx(), endpointID, eventID, sessionID)
	case tracking.Deferred:
		e, err = h.s.GetDeferredEvent(h.ctx(), endpointID, eventID, sessionID)
	case tracking.DeadLettered:
		e, err = h.s.GetDeadletteredEvent(h.ctx(), endpointID, eventID, sessionID)
	case tracking.Unsupported:
		e, err = h.s.GetUnsupportedEvent(h.ctx(), endpointID, eventID, sessionID)
	default:
		h.Fatalf("no getter for %s", status)
	}
	if err != nil {
		h.Fatalf("Get%sEvent: %v", status, err)
	}
	return e
}

func (h *harness) event(endpointID, eventID string) *tracking.UnresolvedEvent {
	h.Helper()
	e, err := h.s.GetEvent(h.ctx(), endpointID, eventID)
	if err != nil {
		h.Fatalf("GetEvent: %v", err)
	}
	return e
}

func (h *harness) mustEventStatus(endpointID, eventID string, want tracking.ResolutionStatus) {
	h.Helper()
	e := h.event(endpointID, eventID)
	if e == nil {
		h.Fatalf("GetEvent %s: nil, want a %s row", eventID, want)
	}
	if e.ResolutionStatus != want {
		h.Fatalf("GetEvent %s: status %s, want %s", eventID, e.ResolutionStatus, want)
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

func (h *harness) tryComplete(eventID, sessionID, endpointID string, expected *string, content tracking.UnresolvedEvent) bool {
	h.Helper()
	ok, err := h.s.TryCompletePendingMessage(h.ctx(), eventID, sessionID, endpointID, expected, content)
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
		h.mustApply(tracking.Pending, ev, "s1", ep, sample(ep, ev, "s1"))
		got := h.get(tracking.Pending, ep, ev, "s1")
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
		h.mustApply(tracking.Pending, ev, "s-handoff", ep, c)
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
		h.mustApply(tracking.Pending, plain.EventID, "s1", ep, plain)
		failed := sample(ep, h.id("e-failed"), "s2")
		failed.PendingSubStatus = tracking.Str("Handoff")
		h.mustApply(tracking.Failed, failed.EventID, "s2", ep, failed)
		ho := sample(ep, h.id("e-handoff"), "s3")
		ho.PendingSubStatus = tracking.Str("Handoff")
		ho.ExternalJobID = tracking.Str(h.id("job"))
		h.mustApply(tracking.Pending, ho.EventID, "s3", ep, ho)
		got, err := h.s.GetNextPendingHandoffEvent(h.ctx(), ep, nil)
		if err != nil || got == nil || got.EventID != ho.EventID || str(got.PendingSubStatus) != `"Handoff"` {
			h.Fatalf("got %+v, %v", got, err)
		}
	}},
	{"GetNextPendingHandoffEvent_returns_null_when_no_handoff", func(h *harness) {
		ep := h.id("ep-next-miss")
		plain := sample(ep, h.id("e-plain"), "s1")
		h.mustApply(tracking.Pending, plain.EventID, "s1", ep, plain)
		got, err := h.s.GetNextPendingHandoffEvent(h.ctx(), ep, nil)
		if err != nil || got != nil {
			h.Fatalf("got %+v, %v", got, err)
		}
	}},
	{"GetNextPendingHandoffEvent_respects_eventTypeIds_filter", func(h *harness) {
		ep := h.id("ep-next-filter")
		ho := sample(ep, h.id("e-handoff"), "s1")
		ho.PendingSubStatus = tracking.Str("Handoff")
		h.mustApply(tracking.Pending, ho.EventID, "s1", ep, ho)
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
		h.mustApply(tracking.Failed, ev, "s1", ep, sample(ep, ev, "s1"))
		h.mustApply(tracking.Failed, ev, "s1", ep, sample(ep, ev, "s1"))
		if c := h.counts(ep); c.FailedCount != 1 {
			h.Fatalf("FailedCount %d, want 1", c.FailedCount)
		}
	}},
	{"Status_transition_replaces_previous_status", func(h *harness) {
		ep, ev := h.id("ep1"), h.id("e3")
		h.mustApply(tracking.Pending, ev, "s1", ep, sample(ep, ev, "s1"))
		h.mustApply(tracking.Completed, ev, "s1", ep, sample(ep, ev, "s1"))
		if c := h.counts(ep); c.PendingCount != 0 {
			h.Fatalf("PendingCount %d, want 0", c.PendingCount)
		}
	}},
	{"TryCompletePendingMessage_replaces_matching_pending_row_and_guard_refuses_late_copy", func(h *harness) {
		ep, ev := h.id("ep-reconcile"), h.id("repair-1")
		p := sample(ep, ev, "s1")
		p.LastMessageID = tracking.Str("stale-message")
		h.mustApply(tracking.Pending, ev, "s1", ep, p)
		done := sample(ep, ev, "s1")
		done.MessageType = message.ResolutionResponse
		done.LastMessageID = tracking.Str("response-message")
		if !h.tryComplete(ev, "s1", ep, tracking.Str("stale-message"), done) {
			h.Fatal("matching Pending row not completed")
		}
		h.mustEventStatus(ep, ev, tracking.Completed)
		if c := h.counts(ep); c.PendingCount != 0 {
			h.Fatalf("PendingCount %d", c.PendingCount)
		}
		h.mustRefuse(tracking.Pending, ev, "s1", ep, guarded(ep, ev, "s1", message.EventRequest, "stale-message", ""))
		h.mustEventStatus(ep, ev, tracking.Completed)
	}},
	{"TryCompletePendingMessage_refuses_mismatch_terminal_and_missing_rows", func(h *harness) {
		ep := h.id("ep-reconcile-refuse")
		mm := h.id("mismatch")
		row := sample(ep, mm, "s1")
		row.LastMessageID = tracking.Str("actual")
		h.mustApply(tracking.Pending, mm, "s1", ep, row)
		if h.tryComplete(mm, "s1", ep, tracking.Str("expected"), sample(ep, mm, "s1")) {
			h.Fatal("mismatched id completed")
		}
		if g := h.get(tracking.Pending, ep, mm, "s1"); g == nil {
			h.Fatal("mismatched row no longer Pending")
		}
		term := h.id("terminal")
		h.mustApply(tracking.Completed, term, "s1", ep, sample(ep, term, "s1"))
		if h.tryComplete(term, "s1", ep, tracking.Str("last-message"), sample(ep, term, "s1")) {
			h.Fatal("terminal row completed again")
		}
		if h.tryComplete(h.id("missing"), "s1", ep, nil, sample(ep, h.id("missing"), "s1")) {
			h.Fatal("missing row completed")
		}
		if e := h.event(ep, h.id("missing")); e != nil {
			h.Fatal("TryCompletePendingMessage created a row")
		}
	}},
	{"TryCompletePendingMessage_null_expected_id_matches_only_null", func(h *harness) {
		ep, ev := h.id("ep-reconcile-null"), h.id("null-id")
		p := sample(ep, ev, "s1")
		p.LastMessageID = nil
		h.mustApply(tracking.Pending, ev, "s1", ep, p)
		if !h.tryComplete(ev, "s1", ep, nil, sample(ep, ev, "s1")) {
			h.Fatal("nil expectation did not complete a nil-id row")
		}
		with := h.id("null-id-negative")
		h.mustApply(tracking.Pending, with, "s1", ep, sample(ep, with, "s1"))
		if h.tryComplete(with, "s1", ep, nil, sample(ep, with, "s1")) {
			h.Fatal("nil expectation completed a row with an id")
		}
		empty := h.id("empty-id")
		e := sample(ep, empty, "s1")
		e.LastMessageID = tracking.Str("")
		h.mustApply(tracking.Pending, empty, "s1", ep, e)
		if h.tryComplete(empty, "s1", ep, nil, sample(ep, empty, "s1")) {
			h.Fatal(`nil expectation completed a row whose id is ""`)
		}
		if g := h.get(tracking.Pending, ep, with, "s1"); g == nil {
			h.Fatal("refused row changed")
		}
	}},
	{"TryCompletePendingMessage_refuses_a_removed_row", func(h *harness) {
		ep, ev := h.id("ep-reconcile-removed"), h.id("removed")
		h.mustApply(tracking.Pending, ev, "s1", ep, sample(ep, ev, "s1"))
		if ok, err := h.s.RemoveMessage(h.ctx(), ev, "s1", ep); err != nil || !ok {
			h.Fatalf("RemoveMessage: %v, %v", ok, err)
		}
		if h.tryComplete(ev, "s1", ep, tracking.Str("last-message"), sample(ep, ev, "s1")) {
			h.Fatal("soft-deleted Pending row completed")
		}
	}},
	{"Stale_request_copy_does_not_regress_settled_rows", func(h *harness) {
		ep := h.id("ep-stale-request")
		for _, term := range terminalStatuses {
			req := h.id("sr-req-" + term.String())
			h.mustApply(tracking.Pending, req, "s1", ep, guarded(ep, req, "s1", message.EventRequest, "req-1", ""))
			h.mustApply(term, req, "s1", ep, guarded(ep, req, "s1", message.ResolutionResponse, "rsp-1", "req-1"))
			h.mustRefuse(tracking.Pending, req, "s1", ep, guarded(ep, req, "s1", message.EventRequest, "req-late", ""))
			h.mustEventStatus(ep, req, term)

			def := h.id("sr-def-" + term.String())
			h.mustApply(tracking.Pending, def, "s1", ep, guarded(ep, def, "s1", message.EventRequest, "req-2", ""))
			h.mustApply(term, def, "s1", ep, guarded(ep, def, "s1", message.ResolutionResponse, "rsp-2", "req-2"))
			h.mustRefuse(tracking.Deferred, def, "s1", ep, guarded(ep, def, "s1", message.DeferralResponse, "def-late", ""))
			h.mustEventStatus(ep, def, term)
		}
		if c := h.counts(ep); c.PendingCount != 0 || c.DeferredCount != 0 {
			h.Fatalf("counts %+v: a settled row was reopened", c)
		}
	}},
	{"Request_copy_refreshes_request_stage_rows", func(h *harness) {
		ep := h.id("ep-refresh")
		rep := h.id("rf-repeat")
		h.mustApply(tracking.Pending, rep, "s1", ep, guarded(ep, rep, "s1", message.EventRequest, "m1", ""))
		h.mustApply(tracking.Pending, rep, "s1", ep, guarded(ep, rep, "s1", message.EventRequest, "m2", ""))
		if g := h.get(tracking.Pending, ep, rep, "s1"); g == nil || str(g.LastMessageID) != `"m2"` {
			h.Fatalf("after refresh: %+v", g)
		}
		dr := h.id("rf-drain")
		h.mustApply(tracking.Deferred, dr, "s1", ep, guarded(ep, dr, "s1", message.DeferralResponse, "d1", ""))
		h.mustApply(tracking.Pending, dr, "s1", ep, guarded(ep, dr, "s1", message.EventRequest, "d2", ""))
		if g := h.get(tracking.Pending, ep, dr, "s1"); g == nil {
			h.Fatal("drained row not Pending")
		}
		de := h.id("rf-defer")
		h.mustApply(tracking.Pending, de, "s1", ep, guarded(ep, de, "s1", message.EventRequest, "p1", ""))
		h.mustApply(tracking.Deferred, de, "s1", ep, guarded(ep, de, "s1", message.DeferralResponse, "p2", ""))
		if g := h.get(tracking.Deferred, ep, de, "s1"); g == nil {
			h.Fatal("re-deferred row not Deferred")
		}
	}},
	{"Request_copy_does_not_replace_control_or_handoff_rows", func(h *harness) {
		ep := h.id("ep-control-row")
		rs := h.id("cr-resubmit")
		h.mustApply(tracking.Pending, rs, "s1", ep, guarded(ep, rs, "s1", message.ResubmissionRequest, "rs-1", ""))
		h.mustRefuse(tracking.Pending, rs, "s1", ep, guarded(ep, rs, "s1", message.EventRequest, "req-late", ""))
		if g := h.get(tracking.Pending, ep, rs, "s1"); g == nil || g.MessageType != message.ResubmissionRequest {
			h.Fatalf("resubmission row: %+v", g)
		}
		parked, job := h.id("cr-park"), h.id("cr-job")
		park := guarded(ep, parked, "s2", message.PendingHandoffResponse, "ho-1", "")
		park.PendingSubStatus = tracking.Str("Handoff")
		park.ExternalJobID = tracking.Str(job)
		h.mustApply(tracking.Pending, parked, "s2", ep, park)
		h.mustRefuse(tracking.Pending, parked, "s2", ep, guarded(ep, parked, "s2", message.EventRequest, "req-late", ""))
		if g, err := h.s.GetPendingHandoffByExternalJobID(h.ctx(), ep, job); err != nil || g == nil {
			h.Fatalf("handoff lost: %v, %v", g, err)
		}
		st := h.id("cr-settled")
		h.mustApply(tracking.Pending, st, "s3", ep, guarded(ep, st, "s3", message.HandoffCompletedRequest, "hc-1", ""))
		h.mustRefuse(tracking.Pending, st, "s3", ep, guarded(ep, st, "s3", message.EventRequest, "req-late", ""))
		if g := h.get(tracking.Pending, ep, st, "s3"); g == nil || g.MessageType != message.HandoffCompletedRequest {
			h.Fatalf("settlement row: %+v", g)
		}
	}},
	{"Handoff_park_is_refused_over_completed_and_skipped_only", func(h *harness) {
		ep := h.id("ep-park")
		for _, settled := range []tracking.ResolutionStatus{tracking.Completed, tracking.Skipped} {
			ev := h.id("hp-closed-" + settled.String())
			h.mustApply(settled, ev, "s1", ep, guarded(ep, ev, "s1", message.ResolutionResponse, "rsp-1", ""))
			park := guarded(ep, ev, "s1", message.PendingHandoffResponse, "ho-late", "")
			park.PendingSubStatus = tracking.Str("Handoff")
			h.mustRefuse(tracking.Pending, ev, "s1", ep, park)
			h.mustEventStatus(ep, ev, settled)
		}
		for _, open := range []tracking.ResolutionStatus{tracking.Failed, tracking.DeadLettered, tracking.Unsupported} {
			ev := h.id("hp-open-" + open.String())
			h.mustApply(open, ev, "s1", ep, guarded(ep, ev, "s1", message.ErrorResponse, "err-1", ""))
			park := guarded(ep, ev, "s1", message.PendingHandoffResponse, "ho-1", "")
			park.PendingSubStatus = tracking.Str("Handoff")
			h.mustApply(tracking.Pending, ev, "s1", ep, park)
			if g := h.get(tracking.Pending, ep, ev, "s1"); g == nil || str(g.PendingSubStatus) != `"Handoff"` {
				h.Fatalf("park over %s: %+v", open, g)
			}
		}
		de := h.id("hp-open-deferred")
		h.mustApply(tracking.Deferred, de, "s1", ep, guarded(ep, de, "s1", message.DeferralResponse, "def-1", ""))
		dp := guarded(ep, de, "s1", message.PendingHandoffResponse, "ho-2", "")
		dp.PendingSubStatus = tracking.Str("Handoff")
		h.mustApply(tracking.Pending, de, "s1", ep, dp)
		rs := h.id("hp-open-resubmission")
		h.mustApply(tracking.Pending, rs, "s1", ep, guarded(ep, rs, "s1", message.ResubmissionRequest, "rs-1", ""))
		rp := guarded(ep, rs, "s1", message.PendingHandoffResponse, "ho-3", "")
		rp.PendingSubStatus = tracking.Str("Handoff")
		h.mustApply(tracking.Pending, rs, "s1", ep, rp)
		if g := h.get(tracking.Pending, ep, rs, "s1"); g == nil || str(g.PendingSubStatus) != `"Handoff"` {
			h.Fatalf("park over resubmission: %+v", g)
		}
	}},
	{"Handoff_settlement_clears_substatus", func(h *harness) {
		ep, ev, job := h.id("ep-settle"), h.id("hs-1"), h.id("hs-job")
		park := guarded(ep, ev, "s1", message.PendingHandoffResponse, "ho-1", "")
		park.PendingSubStatus = tracking.Str("Handoff")
		park.ExternalJobID = tracking.Str(job)
		h.mustApply(tracking.Pending, ev, "s1", ep, park)
		h.mustApply(tracking.Pending, ev, "s1", ep, guarded(ep, ev, "s1", message.HandoffCompletedRequest, randomHex(8), ""))
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
			h.mustApply(c.settled, ev, "s1", ep, guarded(ep, ev, "s1", message.ErrorResponse, "err-1", "req-1"))
			h.mustApply(tracking.Pending, ev, "s1", ep, guarded(ep, ev, "s1", c.control, randomHex(8), "err-1"))
			if g := h.get(tracking.Pending, ep, ev, "s1"); g == nil {
				h.Fatalf("%s did not reopen %s", c.control, c.settled)
			}
		}
		if c := h.counts(ep); c.PendingCount != len(cs) {
			h.Fatalf("PendingCount %d, want %d", c.PendingCount, len(cs))
		}
	}},
	{"Write_answered_by_row_is_refused", func(h *harness) {
		ep, ev := h.id("ep-ancestor"), h.id("an-1")
		h.mustApply(tracking.Pending, ev, "s1", ep, guarded(ep, ev, "s1", message.ResubmissionRequest, "rs-1", ""))
		h.mustApply(tracking.Completed, ev, "s1", ep, guarded(ep, ev, "s1", message.ResolutionResponse, "rsp-1", "rs-1"))
		h.mustRefuse(tracking.Pending, ev, "s1", ep, guarded(ep, ev, "s1", message.ResubmissionRequest, "rs-1", ""))
		h.mustEventStatus(ep, ev, tracking.Completed)
		h.mustApply(tracking.Pending, ev, "s1", ep, guarded(ep, ev, "s1", message.ResubmissionRequest, "rs-2", ""))
		if g := h.get(tracking.Pending, ep, ev, "s1"); g == nil {
			h.Fatal("new resubmission did not reopen")
		}
	}},
	{"Pending_write_after_ArchiveFailedEvent_revives_row", func(h *harness) {
		ep, ev := h.id("ep-archive-revive"), h.id("ar-1")
		h.mustApply(tracking.Failed, ev, "s1", ep, guarded(ep, ev, "s1", message.ErrorResponse, "err-1", ""))
		if err := h.s.ArchiveFailedEvent(h.ctx(), ev, "s1", ep); err != nil {
			h.Fatal(err)
		}
		h.mustApply(tracking.Pending, ev, "s1", ep, guarded(ep, ev, "s1", message.ResubmissionRequest, "rs-1", ""))
		if g := h.get(tracking.Pending, ep, ev, "s1"); g == nil {
			h.Fatal("archived row not revived")
		}
	}},
	{"First_write_of_every_status_reports_applied", func(h *harness) {
		ep := h.id("ep-first-write")
		for _, s := range []tracking.ResolutionStatus{tracking.Pending, tracking.Deferred, tracking.Failed, tracking.DeadLettered, tracking.Unsupported, tracking.Skipped, tracking.Completed} {
			ev := h.id("fw-" + s.String())
			h.mustApply(s, ev, "s1", ep, guarded(ep, ev, "s1", message.EventRequest, "m-"+s.String(), ""))
		}
	}},
	{"All_lookup_resolution_statuses_round_trip", func(h *harness) {
		ep := h.id("ep-all")
		for _, s := range []tracking.ResolutionStatus{tracking.Pending, tracking.Deferred, tracking.Failed, tracking.DeadLettered, tracking.Unsupported} {
			ev := h.id("rt-" + s.String())
			h.mustApply(s, ev, "s1", ep, sample(ep, ev, "s1"))
			g := h.get(s, ep, ev, "s1")
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
		h.mustApply(tracking.Skipped, ev, "s1", ep, e)
		g := h.event(ep, ev)
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
		h.mustApply(tracking.Failed, ev, "session-ce", ep, e)
		g := h.get(tracking.Failed, ep, ev, "session-ce")
		if g == nil || str(g.CloudEventID) != `"ce-event-1"` || str(g.CloudEventSource) != `"urn:nimbus:conformance"` ||
			str(g.CloudEventType) != `"com.nimbus.order-placed.v1"` || str(g.CloudEventSubject) != `"orders/42"` {
			h.Fatalf("got %+v", g)
		}
	}},
	{"Native_message_and_event_keep_CloudEvent_identity_null", func(h *harness) {
		ep, ev, mid := h.id("ep-native"), h.id("event-native"), h.id("message-native")
		h.storeMessage(tracking.MessageEntity{EventID: ev, MessageID: mid, EndpointID: ep, EnqueuedTimeUtc: time.Now().UTC(), MessageContent: &message.Content{}})
		h.mustApply(tracking.Pending, ev, "session-native", ep, sample(ep, ev, "session-native"))
		m := h.message(ev, mid)
		e := h.get(tracking.Pending, ep, ev, "session-native")
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
			if err := h.s.StoreMessageAudit(h.ctx(), ev, a, "", ""); err != nil {
				h.Fatal(err)
			}
		}
		got, err := h.s.GetMessageAudits(h.ctx(), ev)
		if err != nil || len(got) != 2 {
			h.Fatalf("got %d audits, %v; want 2", len(got), err)
		}
		// A repeat is a second entry (plain insert).
		if err := h.s.StoreMessageAudit(h.ctx(), ev, got[0], "", ""); err != nil {
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
		if err := h.s.StoreMessageAudit(h.ctx(), ev, in, ep, "OrderPlaced"); err != nil {
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
		if err := h.s.StoreMessageAudit(h.ctx(), ev, tracking.MessageAudit{AuditorName: tracking.Str("legacy"), AuditTimestamp: time.Now().UTC(), AuditType: tracking.AuditResubmit}, "", ""); err != nil {
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
		h.mustApply(tracking.Pending, h.id("p1"), "s1", ep, sample(ep, h.id("p1"), "s1"))
		h.mustApply(tracking.Pending, h.id("p2"), "s2", ep, sample(ep, h.id("p2"), "s2"))
		h.mustApply(tracking.Failed, h.id("f1"), "s1", ep, sample(ep, h.id("f1"), "s1"))
		c := h.counts(ep)
		if c.PendingCount != 2 || c.FailedCount != 1 || c.DeadletteredCount != 0 {
			h.Fatalf("counts %+v", c)
		}
	}},
	{"Endpoint_counts_preserve_all_unfinished_statuses_and_exclude_terminal_history", func(h *harness) {
		ep := h.id("ep-active-counts")
		for _, s := range []tracking.ResolutionStatus{tracking.Pending, tracking.Deferred, tracking.Failed, tracking.DeadLettered, tracking.Unsupported, tracking.Completed, tracking.Skipped} {
			ev := h.id(randomHex(8))
			h.mustApply(s, ev, "session", ep, sample(ep, ev, "session"))
		}
		ho := sample(ep, h.id("handoff-count"), "session")
		ho.PendingSubStatus = tracking.Str("Handoff")
		h.mustApply(tracking.Pending, ho.EventID, "session", ep, ho)
		other := h.id("other-endpoint")
		h.mustApply(tracking.Failed, h.id("other-event"), "session", other, sample(other, h.id("other-event"), "session"))
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
			h.mustApply(s, h.id(ev), "s1", ep, e)
		}
		at("pending-older", tracking.Pending, 3*time.Hour) // not a failure
		at("failed-new", tracking.Failed, 0)
		at("dlq-old", tracking.DeadLettered, 2*time.Hour)
		at("removed-oldest", tracking.Failed, 5*time.Hour)
		if _, err := h.s.RemoveMessage(h.ctx(), h.id("removed-oldest"), "s1", ep); err != nil {
			h.Fatal(err)
		}
		c := h.counts(ep)
		if c.OldestFailureAt == nil || !c.OldestFailureAt.Equal(base.Add(-2*time.Hour)) || c.OldestFailureAt.Location() != time.UTC {
			h.Fatalf("OldestFailureAt %v, want %v (UTC)", c.OldestFailureAt, base.Add(-2*time.Hour))
		}
		dlqOnly := h.id("ep-oldest-dlq")
		e := sample(dlqOnly, h.id("d"), "s1")
		e.UpdatedAt = base
		h.mustApply(tracking.DeadLettered, h.id("d"), "s1", dlqOnly, e)
		if c := h.counts(dlqOnly); c.OldestFailureAt == nil || !c.OldestFailureAt.Equal(base) {
			h.Fatalf("dead-letter only: %v", c.OldestFailureAt)
		}
		pendingOnly := h.id("ep-oldest-pending")
		h.mustApply(tracking.Pending, h.id("p"), "s1", pendingOnly, sample(pendingOnly, h.id("p"), "s1"))
		if c := h.counts(pendingOnly); c.OldestFailureAt != nil {
			h.Fatalf("pending only: %v", c.OldestFailureAt)
		}
	}},
	{"RemoveMessage_drops_from_state_count", func(h *harness) {
		ep, ev := h.id("ep-rm"), h.id("rm1")
		h.mustApply(tracking.Failed, ev, "s1", ep, sample(ep, ev, "s1"))
		ok, err := h.s.RemoveMessage(h.ctx(), ev, "s1", ep)
		if err != nil || !ok {
			h.Fatalf("RemoveMessage: %v, %v", ok, err)
		}
		if c := h.counts(ep); c.FailedCount != 0 {
			h.Fatalf("FailedCount %d", c.FailedCount)
		}
		if ok, err := h.s.RemoveMessage(h.ctx(), h.id("never"), "s1", ep); err != nil || ok {
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
		h.mustApply(tracking.Pending, ev, sess, ep, e)
		g := h.get(tracking.Pending, ep, ev, sess)
		if g == nil || str(g.PendingSubStatus) != `"Handoff"` || str(g.HandoffReason) != `"DMF import in progress"` ||
			str(g.ExternalJobID) != `"DMF-JOB-42"` || g.ExpectedBy == nil || !g.ExpectedBy.Equal(by) {
			h.Fatalf("got %+v", g)
		}
	}},
	{"Every_event_field_round_trips", func(h *harness) {
		ep, ev, sess := h.id("ep-drift"), h.id("drift-1"), "session-drift"
		in := fullySetEvent(ep, ev, sess)
		h.mustApply(tracking.Failed, ev, sess, ep, in)
		g := h.get(tracking.Failed, ep, ev, sess)
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
		h.mustApply(tracking.Pending, present, "s1", ep, sample(ep, present, "s1"))
		for _, s := range []tracking.ResolutionStatus{tracking.Pending, tracking.Failed, tracking.Deferred, tracking.DeadLettered, tracking.Unsupported} {
			if g := h.get(s, ep, missing, "s1"); g != nil {
				h.Fatalf("Get%sEvent of a missing row: %+v", s, g)
			}
		}
		if g := h.event(ep, missing); g != nil {
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
		h.mustApply(tracking.Pending, ev, "s1", ep, sample(ep, ev, "s1"))
		for _, s := range []tracking.ResolutionStatus{tracking.Failed, tracking.Deferred, tracking.DeadLettered, tracking.Unsupported} {
			if g := h.get(s, ep, ev, "s1"); g != nil {
				h.Fatalf("Get%sEvent of a Pending row: %+v", s, g)
			}
		}
		if g := h.get(tracking.Pending, ep, ev, "other-session"); g != nil {
			h.Fatal("another session's row returned")
		}
		if g := h.get(tracking.Pending, ep, ev, "s1"); g == nil {
			h.Fatal("the row itself is missing")
		}
	}},
	{"Single_row_message_getters_return_null_for_missing_messages", func(h *harness) {
		ep, missing := h.id("ep-miss-msg"), h.id("missing-evt")
		if g := h.message(missing, h.id("missing-msg")); g != nil {
			h.Fatal("GetMessage not nil")
		}
		for name, f := range map[string]func() (*tracking.MessageEntity, error){
			"GetFailedMessage":             func() (*tracking.MessageEntity, error) { return h.s.GetFailedMessage(h.ctx(), missing, ep) },
			"GetDeadletteredMessage":       func() (*tracking.MessageEntity, error) { return h.s.GetDeadletteredMessage(h.ctx(), missing, ep) },
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
		h.mustApply(tracking.Pending, removed, "s1", ep, sample(ep, removed, "s1"))
		h.mustApply(tracking.Failed, archived, "s1", ep, sample(ep, archived, "s1"))
		if _, err := h.s.RemoveMessage(h.ctx(), removed, "s1", ep); err != nil {
			h.Fatal(err)
		}
		if err := h.s.ArchiveFailedEvent(h.ctx(), archived, "s1", ep); err != nil {
			h.Fatal(err)
		}
		if h.get(tracking.Pending, ep, removed, "s1") != nil || h.event(ep, removed) != nil {
			h.Fatal("removed row found")
		}
		if h.get(tracking.Failed, ep, archived, "s1") != nil || h.event(ep, archived) != nil {
			h.Fatal("archived row found")
		}
		for _, id := range []string{tracking.StoredID(removed, "s1"), tracking.StoredID(archived, "s1")} {
			if g, err := h.s.GetEventByID(h.ctx(), ep, id); err != nil || g != nil {
				h.Fatalf("GetEventByID(%s): %v, %v", id, g, err)
			}
		}
		if err := h.s.ArchiveFailedEvent(h.ctx(), h.id("never"), "s1", ep); err != nil {
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
		h.mustApply(tracking.Pending, ev, "s-new", ep, newer)
		h.mustApply(tracking.Failed, ev, "s-old", ep, older)
		g := h.event(ep, ev)
		if g == nil || g.SessionID != "s-new" {
			h.Fatalf("got %+v", g)
		}
	}},
	{"GetEvent_sees_completed_rows", func(h *harness) {
		ep, ev := h.id("ep-latest-done"), h.id("done")
		h.mustApply(tracking.Completed, ev, "s1", ep, sample(ep, ev, "s1"))
		h.mustEventStatus(ep, ev, tracking.Completed)
		if g, err := h.s.GetEventByID(h.ctx(), ep, tracking.StoredID(ev, "s1")); err != nil || g == nil || g.ResolutionStatus != tracking.Completed {
			h.Fatalf("GetEventByID: %+v, %v", g, err)
		}
	}},
	{"GetEventById_looks_up_by_stored_id", func(h *harness) {
		ep, ev := h.id("ep-by-id"), h.id("by-id")
		h.mustApply(tracking.Failed, ev, "s1", ep, sample(ep, ev, "s1"))
		h.mustApply(tracking.Pending, ev, "s2", ep, sample(ep, ev, "s2"))
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
		failed, err := h.s.GetFailedMessage(h.ctx(), ev, ep)
		if err != nil || failed == nil || failed.MessageID != h.id("error-2") {
			h.Fatalf("GetFailedMessage: %+v, %v", failed, err)
		}
		latest, err := h.s.GetDeadletteredMessage(h.ctx(), ev, ep)
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
			h.mustApply(tracking.Failed, ev, "s1", ep, e)
			for _, g := range []*tracking.UnresolvedEvent{h.get(tracking.Failed, ep, ev, "s1"), h.event(ep, ev)} {
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
		dl, err := h.s.GetDeadletteredMessage(h.ctx(), ev, ep)
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
			_, err := h.s.UploadPendingMessage(h.ctx(), h.id("e"), "s1", id, sample(id, h.id("e"), "s1"))
			if !errors.Is(err, tracking.ErrReservedEndpointID) {
				h.Fatalf("UploadPendingMessage on %q: %v, want ErrReservedEndpointID", id, err)
			}
			if _, err := h.s.GetEvent(h.ctx(), id, h.id("e")); !errors.Is(err, tracking.ErrReservedEndpointID) {
				h.Fatalf("GetEvent on %q: %v", id, err)
			}
		}
		// Case-sensitive: "Messages" is an ordinary endpoint.
		ep := "Messages"
		ev := h.id("case")
		h.mustApply(tracking.Failed, ev, "s1", ep, sample(ep, ev, "s1"))
		if g := h.get(tracking.Failed, ep, ev, "s1"); g == nil {
			h.Fatal(`endpoint "Messages" did not store its row`)
		}
	}},
	{"Upload_refuses_a_status_without_a_method", func(h *harness) {
		ep, ev := h.id("ep-nomethod"), h.id("nm")
		for _, s := range []tracking.ResolutionStatus{tracking.TooManyRequests, tracking.Published} {
			if _, err := tracking.Upload(h.ctx(), h.s, s, ev, "s1", ep, sample(ep, ev, "s1")); !errors.Is(err, tracking.ErrInvalidArgument) {
				h.Fatalf("Upload %s: %v", s, err)
			}
		}
	}},
}
