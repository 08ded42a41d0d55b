// Package cosmosid holds the Cosmos DB rule for database and container ids,
// without the SDK, so the configuration layer and the Cosmos adapter apply
// the same rule.
package cosmosid

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf16"
)

// MaxLen is the longest id, in UTF-16 code units.
const MaxLen = 255

// ErrInvalid reports a database or container id Cosmos DB would refuse.
var ErrInvalid = errors.New("not a valid Cosmos DB resource id")

// Check applies the rule, as NimBus applies it: 1 to 255 characters counted
// in UTF-16 code units, not blank, not ending with a space, none of
// / \ ? #. The error wraps ErrInvalid and names neither a setting nor an
// option: the caller says which value it checked.
func Check(id string) error {
	n := utf16Len(id)
	switch {
	case n < 1 || n > MaxLen:
		return fmt.Errorf("%w: 1-%d UTF-16 code units required (got %d)", ErrInvalid, MaxLen, n)
	case strings.TrimSpace(id) == "":
		return fmt.Errorf("%w: blank", ErrInvalid)
	case strings.HasSuffix(id, " "):
		return fmt.Errorf("%w: ends with a space", ErrInvalid)
	case strings.ContainsAny(id, `/\?#`):
		return fmt.Errorf(`%w: contains /, \, ? or #`, ErrInvalid)
	}
	return nil
}

// utf16Len counts s in UTF-16 code units; an invalid UTF-8 byte counts as
// one (it becomes U+FFFD on the wire).
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		if utf16.RuneLen(r) == 2 {
			n += 2
		} else {
			n++
		}
	}
	return n
}
