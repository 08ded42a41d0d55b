package scaffold

import (
	"bytes"
	"errors"
)

// hostJSONText returns b as standard JSON, read as the Functions host reads
// host.json and function.json (Newtonsoft.Json's JObject.Parse with its
// default settings): a UTF-8 byte order mark first, // and /* */ comments,
// and a comma before a closing } or ] are allowed. Each of them becomes
// spaces (line breaks kept), so the offsets in a later JSON error stay
// right. b is not modified.
func hostJSONText(b []byte) ([]byte, error) {
	out := bytes.Clone(bytes.TrimPrefix(b, []byte("\xef\xbb\xbf")))
	comma := -1     // a comma after a value, not yet followed by anything but space and comments
	last := byte(0) // the last byte of JSON text before i
	for i := 0; i < len(out); i++ {
		switch ch := out[i]; {
		case ch == '"':
			comma, last = -1, '"'
			for i++; i < len(out) && out[i] != '"'; i++ {
				if out[i] == '\\' {
					i++
				}
			}
		case ch == '/' && i+1 < len(out) && out[i+1] == '/':
			for ; i < len(out) && out[i] != '\n' && out[i] != '\r'; i++ {
				out[i] = ' '
			}
		case ch == '/' && i+1 < len(out) && out[i+1] == '*':
			end := bytes.Index(out[i+2:], []byte("*/"))
			if end < 0 {
				return nil, errors.New("not valid JSON: a /* comment is not closed")
			}
			for j := i; j < i+2+end+2; j++ {
				if out[j] != '\n' && out[j] != '\r' {
					out[j] = ' '
				}
			}
			i += 2 + end + 1
		case ch == ',':
			if comma = -1; last != ',' && last != '[' && last != '{' && last != ':' && last != 0 {
				comma = i
			}
			last = ch
		case ch == '}' || ch == ']':
			if comma >= 0 {
				out[comma] = ' '
			}
			comma, last = -1, ch
		case ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r':
			comma, last = -1, ch
		}
	}
	return out, nil
}

// decodeHostJSON decodes host.json or a function.json as the host reads it
// (hostJSONText), strictly otherwise.
func decodeHostJSON(b []byte, v any) error {
	text, err := hostJSONText(b)
	if err != nil {
		return err
	}
	return decodeStrict(text, v)
}
