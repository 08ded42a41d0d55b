package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
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
const maxCosmosIDLen = 255

// checkCosmosID applies the rule for Cosmos DB database and container ids:
// 1 to 255 UTF-16 code units, not blank, not ending with a space, none of
// / \ ? #.
func checkCosmosID(id string) error {
	n := utf16Len(id)
	switch {
	case n < 1 || n > maxCosmosIDLen:
		return fmt.Errorf("a Cosmos DB id is 1 to %d UTF-16 code units long (this one is %d)", maxCosmosIDLen, n)
	case strings.TrimSpace(id) == "":
		return errors.New("a Cosmos DB id must not be blank")
	case strings.HasSuffix(id, " "):
		return errors.New("a Cosmos DB id must not end with a space")
	case strings.ContainsAny(id, `/\?#`):
		return errors.New(`a Cosmos DB id must not contain /, \, ? or #`)
	}
	return nil
}
