package inbox_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/inbox/inboxtest"
)

func TestIdentityHashVectors(t *testing.T) {
	for _, c := range inboxtest.HashVectors {
		if got := inbox.IdentityHash(c.Endpoint, c.MessageID); got != c.ID {
			t.Errorf("inbox.IdentityHash(%q, %q) = %s, want %s", c.Endpoint, c.MessageID, got, c.ID)
		}
		k := inbox.NewKey(c.Endpoint, c.MessageID)
		if k.ID != c.ID || k.EndpointID != c.Endpoint || k.MessageID != c.MessageID {
			t.Errorf("inbox.NewKey(%q, %q) = %+v", c.Endpoint, c.MessageID, k)
		}
		if sum := k.Sum(); fmt.Sprintf("%X", sum[:]) != c.ID {
			t.Errorf("Sum() of %q/%q = %X", c.Endpoint, c.MessageID, sum)
		}
	}
}

func TestBypassReason(t *testing.T) {
	s := func(v string) *string { return &v }
	cases := []struct {
		name     string
		endpoint string
		message  *string
		want     string
	}{
		{"usable", "billing", s("m-1"), inbox.BypassNone},
		{"missing message id", "billing", nil, inbox.BypassMissing},
		{"empty message id", "billing", s(""), inbox.BypassMissing},
		{"blank message id", "billing", s("   "), inbox.BypassMissing},
		{"non-breaking blank message id", "billing", s("\u00a0\t"), inbox.BypassMissing},
		{"empty endpoint", "", s("m-1"), inbox.BypassMissing},
		{"blank endpoint", "  ", s("m-1"), inbox.BypassMissing},
		{"message id at 512", "billing", s(strings.Repeat("m", 512)), inbox.BypassNone},
		{"message id at 513", "billing", s(strings.Repeat("m", 513)), inbox.BypassTooLong},
		{"512 units with astral runes", "billing", s(strings.Repeat("😀", 256)), inbox.BypassNone},
		{"514 units with astral runes", "billing", s(strings.Repeat("😀", 257)), inbox.BypassTooLong},
		{"endpoint at 260", strings.Repeat("e", 260), s("m"), inbox.BypassNone},
		{"endpoint at 261", strings.Repeat("e", 261), s("m"), inbox.BypassTooLong},
	}
	for _, c := range cases {
		if got := inbox.BypassReason(c.endpoint, c.message); got != c.want {
			t.Errorf("%s: inbox.BypassReason = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestUTF16Len(t *testing.T) {
	for s, want := range map[string]int{"": 0, "abc": 3, "café": 4, "😀ep": 4, "日本": 2} {
		if got := inbox.UTF16Len(s); got != want {
			t.Errorf("inbox.UTF16Len(%q) = %d, want %d", s, got, want)
		}
	}
}

func BenchmarkIdentityHash(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = inbox.IdentityHash("BillingEndpoint", "OrderPlaced-3f2a9c0d11e84b7a")
	}
}
