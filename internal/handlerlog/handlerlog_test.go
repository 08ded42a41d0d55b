package handlerlog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/slogtest"

	"github.com/rs/zerolog"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testlog"
)

// The handler follows log/slog's rules for a Handler (testing/slogtest),
// groups written as dotted keys, except one: every line has a time, the
// app logger's, even for a record without one.
func TestHandlerFollowsTheSlogRules(t *testing.T) {
	var buf bytes.Buffer
	var lines []map[string]any
	h := New(zerolog.New(&buf).With().Timestamp().Logger(), "", "", nil)
	err := slogtest.TestHandler(h, func() []map[string]any {
		lines = lines[:0]
		for _, raw := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
			var m map[string]any
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, nested(m))
		}
		return lines
	})
	for _, e := range unwrapJoined(err) {
		if !strings.Contains(e.Error(), "should ignore a zero Record.Time") {
			t.Error(e)
		}
	}
}

// nested turns a line's dotted keys back into groups, and its message
// field into slog's.
func nested(m map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		switch k {
		case "message":
			out[slog.MessageKey] = v
			continue
		case FieldSource:
			continue
		}
		parts := strings.Split(k, ".")
		cur := out
		for _, p := range parts[:len(parts)-1] {
			next, ok := cur[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				cur[p] = next
			}
			cur = next
		}
		cur[parts[len(parts)-1]] = v
	}
	return out
}

func unwrapJoined(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// The level words are the pipeline's, and the sink keeps warnings and
// errors with their fields, at most MaxKept, from concurrent goroutines.
func TestLevelsAndSink(t *testing.T) {
	var buf testlog.Buffer
	sink := &Sink{}
	h := New(zerolog.New(&buf).Level(zerolog.InfoLevel), "Subscriber", "inv-1", sink).
		WithFields(context.Background(), Field{FieldMessageID, "M-1"}, Field{FieldEventTypeID, ""})
	l := slog.New(h)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 5 {
				l.Debug("d")
				l.Info("i")
				l.Warn("w", "k", "v w")
				l.Log(context.Background(), slog.LevelError+4, "e", "err", errors.New("boom"))
			}
		})
	}
	wg.Wait()
	counts := map[string]int{}
	for _, raw := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			t.Fatal(err)
		}
		counts[m["level"].(string)]++
		if m["function"] != "Subscriber" || m["invocationId"] != "inv-1" || m["messageId"] != "M-1" || m["source"] != "handler" {
			t.Fatalf("line %v", m)
		}
		if _, ok := m["eventTypeId"]; ok {
			t.Fatalf("an empty field was written: %v", m)
		}
	}
	if counts["debug"] != 0 || counts["info"] != 20 || counts["warn"] != 20 || counts["error"] != 20 {
		t.Fatalf("levels %v", counts)
	}
	kept, dropped := sink.Entries()
	if len(kept) != MaxKept || dropped != 40-MaxKept {
		t.Fatalf("kept %d, dropped %d", len(kept), dropped)
	}
	for _, e := range kept {
		last := e.Fields[len(e.Fields)-1]
		if e.Error && (e.Message != "e" || last != Field{"err", "boom"}) || !e.Error && (e.Message != "w" || last != Field{"k", "v w"}) {
			t.Fatalf("entry %+v", e)
		}
	}
	if k, d := (*Sink)(nil).Entries(); k != nil || d != 0 {
		t.Fatal("a nil sink has entries")
	}
}
