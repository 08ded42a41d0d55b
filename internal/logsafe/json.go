package logsafe

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// JSONError describes why JSON did not decode without quoting any value
// from it: the byte offset of a syntax error, or the field, the kind of
// JSON value and the Go type of a value that did not fit. subject names
// the JSON ("the event", "the document"). encoding/json's own texts quote
// numbers and strings of the input ("cannot unmarshal number 12 into …"),
// so they must not be logged; this text can be.
func JSONError(subject string, err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("%s is not valid JSON (at byte offset %d)", subject, syn.Offset)
	case errors.As(err, &typ):
		// Value is "number 12", "string", ...: keep only its kind.
		kind, _, _ := strings.Cut(typ.Value, " ")
		field := typ.Field
		if field == "" {
			field = "(top level)"
		}
		return fmt.Sprintf("field %s holds a JSON %s, which does not fit %s", field, kind, typ.Type)
	}
	return subject + " JSON could not be decoded"
}
