package tracking

import (
	"fmt"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// These cases port NimBus's StaleWriteGuardTests.

var allStatuses = []ResolutionStatus{Pending, Deferred, Failed, TooManyRequests, DeadLettered, Unsupported, Published, Completed, Skipped}

var terminalStatuses = []ResolutionStatus{Completed, Skipped, Failed, DeadLettered, Unsupported}

var controlTypes = []message.Type{
	message.ResubmissionRequest, message.SkipRequest, message.RetryRequest,
	message.ContinuationRequest, message.HandoffCompletedRequest, message.HandoffFailedRequest,
}

func row(status ResolutionStatus, t message.Type, lastID, parent string) *UnresolvedEvent {
	r := &UnresolvedEvent{ResolutionStatus: status, MessageType: t, LastMessageID: Str(lastID)}
	if parent != "" {
		r.ParentMessageID = Str(parent)
	}
	return r
}

func TestIsTerminalMatchesTheSettledStatuses(t *testing.T) {
	want := map[ResolutionStatus]bool{Completed: true, Skipped: true, Failed: true, DeadLettered: true, Unsupported: true}
	for _, s := range allStatuses {
		if got := IsTerminal(s); got != want[s] {
			t.Errorf("IsTerminal(%s) = %v, want %v", s, got, want[s])
		}
	}
}

func TestIsRequestStageIsLenientAboutUnknown(t *testing.T) {
	for typ, want := range map[message.Type]bool{
		message.EventRequest: true, message.DeferralResponse: true, message.Unknown: true,
		message.ResubmissionRequest: false, message.PendingHandoffResponse: false, message.ResolutionResponse: false,
	} {
		if got := IsRequestStage(typ); got != want {
			t.Errorf("IsRequestStage(%s) = %v, want %v", typ, got, want)
		}
	}
}

func TestIsControlRequestCoversOperatorAndManagerIntent(t *testing.T) {
	for _, typ := range controlTypes {
		if !IsControlRequest(typ) {
			t.Errorf("IsControlRequest(%s) = false", typ)
		}
	}
	for _, typ := range []message.Type{message.EventRequest, message.PendingHandoffResponse, message.ProcessDeferredRequest} {
		if IsControlRequest(typ) {
			t.Errorf("IsControlRequest(%s) = true", typ)
		}
	}
}

func TestIsGuardedExemptsTerminalWritesAndUnguardedTypes(t *testing.T) {
	cases := []struct {
		status ResolutionStatus
		typ    message.Type
		want   bool
	}{
		{Completed, message.ResolutionResponse, false},
		{Failed, message.ErrorResponse, false},
		{Pending, message.Unknown, false},
		{Pending, message.EventRequest, true},
		{Deferred, message.DeferralResponse, true},
		{Pending, message.PendingHandoffResponse, true},
		{Pending, message.ResubmissionRequest, true},
	}
	for _, c := range cases {
		if got := IsGuarded(c.status, c.typ); got != c.want {
			t.Errorf("IsGuarded(%s, %s) = %v, want %v", c.status, c.typ, got, c.want)
		}
	}
}

func TestAllowsAnAbsentRow(t *testing.T) {
	if !Allows(Pending, row(Pending, message.EventRequest, "req-1", ""), nil) {
		t.Fatal("a write over an absent row was refused")
	}
}

func TestAllowsEveryTerminalWriteOverAnyRow(t *testing.T) {
	for _, in := range terminalStatuses {
		for _, cur := range allStatuses {
			// Even with an ancestor hit: terminal writes are unguarded.
			if !Allows(in, row(in, message.ResolutionResponse, "rsp-1", ""), row(cur, message.ResolutionResponse, "x", "rsp-1")) {
				t.Errorf("terminal %s over %s refused", in, cur)
			}
		}
	}
}

func TestAllowsAnUnguardedMessageTypeOverAnyRow(t *testing.T) {
	if !Allows(Pending, row(Pending, message.Unknown, "seed", ""), row(Completed, message.ResolutionResponse, "rsp", "req")) {
		t.Fatal("Unknown over Completed refused")
	}
}

func TestRefusesAWriteTheRowAlreadyAnswers(t *testing.T) {
	if Allows(Pending, row(Pending, message.ResubmissionRequest, "rs-1", ""), row(Completed, message.ResolutionResponse, "rsp-1", "rs-1")) {
		t.Fatal("a rescheduled rs-1 over the row holding rs-1's outcome was applied")
	}
}

func TestTheAncestorCheckIgnoresEmptyIDs(t *testing.T) {
	// Empty parent and empty incoming id never match.
	if !Allows(Pending, row(Pending, message.ResubmissionRequest, "", ""), &UnresolvedEvent{ResolutionStatus: Failed, MessageType: message.ErrorResponse, ParentMessageID: Str("")}) {
		t.Error("empty ids matched")
	}
	// A nil incoming id never matches either.
	if !Allows(Pending, &UnresolvedEvent{MessageType: message.ResubmissionRequest}, row(Failed, message.ErrorResponse, "e", "x")) {
		t.Error("nil incoming id matched")
	}
	// "self" is an ordinary parent value.
	if !Allows(Pending, row(Pending, message.EventRequest, "req-2", ""), row(Pending, message.EventRequest, "req-1", "self")) {
		t.Error(`parent "self" refused req-2`)
	}
	// Comparison is ordinal.
	if !Allows(Pending, row(Pending, message.ResubmissionRequest, "RS-1", ""), row(Completed, message.ResolutionResponse, "rsp", "rs-1")) {
		t.Error("the ancestor check ignored case")
	}
}

func TestARequestStageWriteRefreshesARequestStageRow(t *testing.T) {
	for _, in := range []struct {
		status ResolutionStatus
		typ    message.Type
	}{{Pending, message.EventRequest}, {Deferred, message.DeferralResponse}} {
		for _, cur := range []ResolutionStatus{Pending, Deferred} {
			for _, curType := range []message.Type{message.EventRequest, message.DeferralResponse, message.Unknown} {
				if !Allows(in.status, row(in.status, in.typ, "m2", ""), row(cur, curType, "m1", "self")) {
					t.Errorf("%s over %s written by %s refused", in.typ, cur, curType)
				}
			}
		}
	}
}

func TestARequestStageWriteIsRefusedOverATerminalRow(t *testing.T) {
	for _, cur := range terminalStatuses {
		if Allows(Pending, row(Pending, message.EventRequest, "req-late", ""), row(cur, message.ResolutionResponse, "rsp-1", "req-1")) {
			t.Errorf("late EventRequest over %s applied", cur)
		}
		if Allows(Deferred, row(Deferred, message.DeferralResponse, "def-late", ""), row(cur, message.ResolutionResponse, "rsp-1", "req-1")) {
			t.Errorf("late DeferralResponse over %s applied", cur)
		}
	}
}

func TestARequestStageWriteIsRefusedOverANonRequestStagePendingRow(t *testing.T) {
	for _, curType := range []message.Type{message.ResubmissionRequest, message.SkipRequest, message.HandoffCompletedRequest, message.HandoffFailedRequest, message.PendingHandoffResponse} {
		if Allows(Pending, row(Pending, message.EventRequest, "req-late", ""), row(Pending, curType, "x", "")) {
			t.Errorf("late EventRequest over Pending by %s applied", curType)
		}
		if Allows(Deferred, row(Deferred, message.DeferralResponse, "def-late", ""), row(Pending, curType, "x", "")) {
			t.Errorf("late DeferralResponse over Pending by %s applied", curType)
		}
	}
}

func TestAHandoffParkIsRefusedOnlyOverCompletedAndSkipped(t *testing.T) {
	cases := []struct {
		cur     ResolutionStatus
		curType message.Type
		want    bool
	}{
		{Completed, message.ResolutionResponse, false},
		{Skipped, message.SkipResponse, false},
		{Failed, message.ErrorResponse, true},
		{DeadLettered, message.ErrorResponse, true},
		{Unsupported, message.UnsupportedResponse, true},
		{Deferred, message.DeferralResponse, true},
		{Pending, message.ResubmissionRequest, true},
	}
	for _, c := range cases {
		got := Allows(Pending, row(Pending, message.PendingHandoffResponse, "ho-1", ""), row(c.cur, c.curType, "x", "req-1"))
		if got != c.want {
			t.Errorf("handoff park over %s (%s) = %v, want %v", c.cur, c.curType, got, c.want)
		}
	}
}

func TestAControlRequestReopensAnyRow(t *testing.T) {
	for _, typ := range controlTypes {
		for _, cur := range []ResolutionStatus{Pending, Deferred, Failed, DeadLettered, Unsupported, Completed, Skipped} {
			if !Allows(Pending, row(Pending, typ, "ctl-1", ""), row(cur, message.ErrorResponse, "x", "req-1")) {
				t.Errorf("%s over %s refused", typ, cur)
			}
		}
	}
}

// TestDecisionTable checks the documented table cell by cell, including the
// ancestor-hit row, so a change to one branch cannot pass unnoticed.
func TestDecisionTable(t *testing.T) {
	type column struct {
		name string
		cur  *UnresolvedEvent
	}
	columns := []column{
		{"absent", nil},
		{"request-stage", row(Pending, message.EventRequest, "r0", "p")},
		{"control/park", row(Pending, message.ResubmissionRequest, "r0", "p")},
		{"failed-like", row(Failed, message.ErrorResponse, "r0", "p")},
		{"completed", row(Completed, message.ResolutionResponse, "r0", "p")},
	}
	rows := []struct {
		name   string
		status ResolutionStatus
		typ    message.Type
		want   [5]bool
	}{
		{"EventRequest", Pending, message.EventRequest, [5]bool{true, true, false, false, false}},
		{"DeferralResponse", Deferred, message.DeferralResponse, [5]bool{true, true, false, false, false}},
		{"PendingHandoffResponse", Pending, message.PendingHandoffResponse, [5]bool{true, true, true, true, false}},
		{"ResubmissionRequest", Pending, message.ResubmissionRequest, [5]bool{true, true, true, true, true}},
		{"terminal", Completed, message.ResolutionResponse, [5]bool{true, true, true, true, true}},
		{"Unknown", Pending, message.Unknown, [5]bool{true, true, true, true, true}},
	}
	for _, r := range rows {
		for i, c := range columns {
			t.Run(fmt.Sprintf("%s/%s", r.name, c.name), func(t *testing.T) {
				if got := Allows(r.status, row(r.status, r.typ, "new", ""), c.cur); got != r.want[i] {
					t.Errorf("got %v, want %v", got, r.want[i])
				}
				// Ancestor hit: every guarded write is refused over an existing row.
				if c.cur != nil && IsGuarded(r.status, r.typ) {
					if Allows(r.status, row(r.status, r.typ, "p", ""), c.cur) {
						t.Error("ancestor hit applied")
					}
				}
			})
		}
	}
}

func TestCheckEndpointIDIsOrdinal(t *testing.T) {
	for _, id := range ReservedEndpointIDs() {
		if err := CheckEndpointID(id); err == nil {
			t.Errorf("%q accepted", id)
		}
	}
	for _, id := range []string{"Messages", "Subscriptions", "INBOX", "metadata", "orders"} {
		if err := CheckEndpointID(id); err != nil {
			t.Errorf("%q refused: %v", id, err)
		}
	}
	if err := CheckEndpointID(""); err == nil {
		t.Error("empty id accepted")
	}
	for _, id := range []string{"subscriptions", "messages", "audits", "eventschemas", "eventreports", "accesscontrol", "Metadata", "inbox"} {
		if err := CheckEndpointID(id); err == nil {
			t.Errorf("the specification's reserved id %q accepted", id)
		}
	}
}
