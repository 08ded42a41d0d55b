package nimbustest

import (
	"encoding/json"
	"log/slog"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testlog"
	"github.com/nimbus-go/functions-subscriber/internal/handlerlog"
)

// LogRecord is one record a handler logged through nimbus.Logger, read
// back from the JSON line the logger wrote: what the test sees is what
// the app's logs would hold, bounded as they are.
type LogRecord struct {
	// Time is the line's time.
	Time time.Time
	// Level is slog.LevelDebug, LevelInfo, LevelWarn or LevelError (the
	// app's logs keep four levels).
	Level slog.Level
	// Message is the record's message, as bounded on the line.
	Message string
	// Attrs are the line's fields other than time, level, message and
	// source: the invocation's (function, invocationId, messageId,
	// eventTypeId, traceId, spanId, where known) and the record's
	// attributes (groups as dotted keys, a key that is one of those fields
	// as "attr."+key). Each value is its text: a string as it is, a
	// number or a boolean as JSON writes it.
	Attrs map[string]string
}

// Logs holds what a handler logged, for a test to read. It is safe for
// concurrent use.
type Logs struct{ lines testlog.Buffer }

// String returns the JSON lines written so far.
func (l *Logs) String() string { return l.lines.String() }

// Records returns the handler's records logged so far, in order.
func (l *Logs) Records() []LogRecord { return handlerRecords(l.String()) }

// handlerRecords reads the handler's records among the JSON lines of out
// (an app's stdout holds the pipeline's lines too).
func handlerRecords(out string) []LogRecord {
	lines := testlog.DecodeText(out, func(line map[string]json.RawMessage) bool {
		return jsonText(line[handlerlog.FieldSource]) == handlerlog.SourceHandler
	})
	var recs []LogRecord
	for _, line := range lines {
		r := LogRecord{Message: jsonText(line["message"]), Level: logLevelOf(jsonText(line["level"])), Attrs: map[string]string{}}
		r.Time, _ = time.Parse(time.RFC3339Nano, jsonText(line["time"]))
		for k, v := range line {
			switch k {
			case "time", "level", "message", handlerlog.FieldSource:
				continue
			}
			r.Attrs[k] = jsonText(v)
		}
		recs = append(recs, r)
	}
	return recs
}

// jsonText is a JSON value's text: a string unquoted, anything else as
// written.
func jsonText(v json.RawMessage) string {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s
	}
	return string(v)
}

// logLevelOf reads the app's level words.
func logLevelOf(s string) slog.Level {
	switch s {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}
