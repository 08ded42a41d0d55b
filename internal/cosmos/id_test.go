package cosmos_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
)

func TestCheckID(t *testing.T) {
	t.Parallel()
	const emoji = "\U0001F600" // 4 UTF-8 bytes, 2 UTF-16 units
	cases := []struct {
		name string
		id   string
		ok   bool
	}{
		{"default database", "MessageDatabase", true},
		{"one character", "a", true},
		{"inner spaces", "my inbox", true},
		{"leading space", " inbox", true},
		{"dots and dashes", "inbox-v2.eu_1", true},
		{"255 ASCII", strings.Repeat("d", 255), true},
		{"256 ASCII", strings.Repeat("d", 256), false},
		{"255 two-byte runes (510 bytes, 255 units)", strings.Repeat("é", 255), true},
		{"127 emoji + 1 (255 units)", strings.Repeat(emoji, 127) + "a", true},
		{"128 emoji (256 units, 512 bytes)", strings.Repeat(emoji, 128), false},
		{"empty", "", false},
		{"blank", "   ", false},
		{"tab only", "\t", false},
		{"trailing space", "inbox ", false},
		{"slash", "a/b", false},
		{"backslash", `a\b`, false},
		{"question mark", "a?b", false},
		{"hash", "a#b", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := cosmos.CheckID(tc.id)
			if tc.ok != (err == nil) {
				t.Fatalf("CheckID(%q) = %v, want ok=%v", tc.id, err, tc.ok)
			}
			if err != nil && !errors.Is(err, cosmos.ErrInvalidID) {
				t.Fatalf("error %v does not wrap ErrInvalidID", err)
			}
		})
	}
}
