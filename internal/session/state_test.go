package session_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/session"
)

// The state document's id is the inbox identity hash of (endpoint,
// SessionId): the same vectors.
func TestKeyIsTheInboxIdentityHash(t *testing.T) {
	for _, v := range []struct{ endpoint, session, id string }{
		{"billing", "customer-1", "23EF70E3280321C1FBFC863E2A54608827D434AACC71A0DE3D14B7613E4C2F77"},
		{"billing", "m-1", "52B03B3F613F2E7313454206FE3C2E51EC71F873F869B828F906B8FDF32A9835"},
		{"billing ", "m1", "1CADFF8DDEAB7183392077F0BC598CF7F3E7C85C9C86E84608D7A82F78834BCF"},
		{"😀ep", "m", "8AA69D0F44F594087DB8CD247034BEC654E1C7F0F3D453015B9B9CD710A63442"},
	} {
		k := session.NewKey(v.endpoint, v.session)
		if k.ID != v.id || k.ID != inbox.NewKey(v.endpoint, v.session).ID || k.Check() != nil {
			t.Errorf("NewKey(%q, %q).ID = %s, want %s", v.endpoint, v.session, k.ID, v.id)
		}
	}
}

func TestCheckRefusesBrokenInvariants(t *testing.T) {
	cases := map[string]session.State{
		"negative":              {NextDeferralSequence: -1, NextReplaySequence: -1},
		"cursor past the end":   {NextDeferralSequence: 1, NextReplaySequence: 2, DeferredCount: -1},
		"count inconsistent":    {NextDeferralSequence: 3, NextReplaySequence: 1, DeferredCount: 1},
		"last park unallocated": {NextDeferralSequence: 1, DeferredCount: 1, LastParkedMessageID: "m", LastParkedSequence: 1},
		"message without event": {BlockedByMessageID: "m"},
		"kind without event":    {BlockKind: session.BlockFailure},
		"unknown kind":          {BlockedByEventID: "e", BlockKind: "Other"},
	}
	for name, s := range cases {
		if err := s.Check(); !errors.Is(err, session.ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
	s, _, _ := session.State{}.Block("e", "m")
	for _, m := range []string{"a", "b", "c"} {
		s, _, _ = s.Park(m)
	}
	s, _ = s.Replayed(1)
	if err := s.Check(); err != nil {
		t.Errorf("a state built by transitions fails Check: %v", err)
	}
	s.BlockKind = session.BlockHandoff
	if err := s.Check(); err != nil {
		t.Errorf("a handoff block fails Check: %v", err)
	}
	if u, changed := s.Unblock(); !changed || u.BlockKind != "" || u.Blocked() {
		t.Errorf("Unblock left %+v", u)
	}
}

func TestParkAfterReplayOfTheSameMessageAllocatesAgain(t *testing.T) {
	s, seq, _ := session.State{}.Park("m1")
	s, _ = s.Replayed(seq)
	// The copy was replayed: parking the message again (say it blocked
	// the session anew and was re-parked) is a new copy.
	s, seq2, changed := s.Park("m1")
	if !changed || seq2 != 1 || s.DeferredCount != 1 {
		t.Fatalf("re-park after replay: changed=%v seq=%d %+v", changed, seq2, s)
	}
}

func TestBlockedByComparesCaseInsensitively(t *testing.T) {
	s, _, _ := session.State{}.Block("Event-ÄB", "m")
	if !s.BlockedBy("event-äb") || s.BlockedBy("event-ab") || !strings.EqualFold(s.BlockedByEventID, "EVENT-ÄB") {
		t.Fatal("BlockedBy is not a case-insensitive exact comparison")
	}
}
