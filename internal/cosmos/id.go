package cosmos

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf16"
)

// ErrInvalidID reports a database or container id Cosmos DB would refuse.
var ErrInvalidID = errors.New("not a valid Cosmos DB resource id")

// CheckID applies the Cosmos DB rule for resource ids (databases,
// containers), as NimBus applies it: 1 to 255 characters counted in UTF-16
// code units, not blank, not ending with a space, none of / \ ? #. The
// error wraps ErrInvalidID and names neither a setting nor an option: the
// caller says which value it checked.
func CheckID(id string) error {
	n := utf16Len(id)
	switch {
	case n < 1 || n > 255:
		return fmt.Errorf("%w: 1-255 UTF-16 code units required (got %d)", ErrInvalidID, n)
	case strings.TrimSpace(id) == "":
		return fmt.Errorf("%w: blank", ErrInvalidID)
	case strings.HasSuffix(id, " "):
		return fmt.Errorf("%w: ends with a space", ErrInvalidID)
	case strings.ContainsAny(id, `/\?#`):
		return fmt.Errorf(`%w: contains /, \, ? or #`, ErrInvalidID)
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
