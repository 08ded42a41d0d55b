package config

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmosid"
)

// maxShown bounds how much of a bad value a message quotes.
const maxShown = 100

// show quotes v for an error message, cut to its first maxShown runes.
// Never pass it a secret.
func show(v string) string {
	if utf8.RuneCountInString(v) <= maxShown {
		return strconv.Quote(v)
	}
	i, n := 0, 0
	for i = range v {
		if n == maxShown {
			break
		}
		n++
	}
	return fmt.Sprintf("%s… (%d bytes in all)", strconv.Quote(v[:i]), len(v))
}

// utf16Len is the length of s in UTF-16 code units, the unit .NET and
// Cosmos DB count in: a rune above U+FFFF counts 2, and each byte of invalid
// UTF-8 counts 1 (it decodes to U+FFFD).
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		if l := utf16.RuneLen(r); l > 0 {
			n += l
		} else {
			n++
		}
	}
	return n
}

// Cosmos DB id limits, in UTF-16 code units.

// checkCosmosID applies the Cosmos DB rule for database and container ids,
// the same rule the Cosmos adapter applies.
func checkCosmosID(id string) error { return cosmosid.Check(id) }

// placeholder reports whether v still holds a placeholder of the sample
// settings, such as <account> or <namespace>.
func placeholder(v string) bool {
	i := strings.IndexByte(v, '<')
	return i >= 0 && strings.IndexByte(v[i:], '>') > 1
}
