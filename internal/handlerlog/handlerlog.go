// Package handlerlog is the logger a handler gets from its context: a
// log/slog handler that writes the app's JSON lines (the pipeline's
// zerolog logger, its writer, level, field names and time format) with
// the invocation's fields, bounds every string the handler gives it, and
// keeps the warnings and errors of one invocation so the app can put them
// where the host logs the invocation's own (the answer's Logs, or stderr
// for a failing answer).
package handlerlog

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
)

// Field names the lines carry besides the handler's attributes.
const (
	FieldSource       = "source"
	FieldFunction     = "function"
	FieldInvocationID = "invocationId"
	FieldMessageID    = "messageId"
	FieldEventTypeID  = "eventTypeId"
	FieldTraceID      = "traceId"
	FieldSpanID       = "spanId"
	// SourceHandler is the value of FieldSource on a handler's lines,
	// which tells them from the pipeline's.
	SourceHandler = "handler"
	// AttrPrefix is put before an attribute key that is one of the line's
	// own fields, so the line never carries a key twice.
	AttrPrefix = "attr."
)

// reserved are the keys a line sets itself.
var reserved = map[string]bool{
	zerolog.LevelFieldName: true, zerolog.TimestampFieldName: true, zerolog.MessageFieldName: true,
	FieldSource: true, FieldFunction: true, FieldInvocationID: true, FieldMessageID: true,
	FieldEventTypeID: true, FieldTraceID: true, FieldSpanID: true,
}

// Bounds of what a handler's record may add.
const (
	// MaxKeyUnits bounds an attribute key.
	MaxKeyUnits = 64
	// MaxAttrs bounds the attributes written per record; later ones are
	// counted in the "attrsDropped" field.
	MaxAttrs = 32
	// MaxKept bounds the warnings and errors one invocation keeps for the
	// host; later ones are counted (Sink.Entries).
	MaxKept = 8
)

// Field is one key and its value as text.
type Field struct{ Key, Value string }

// Entry is a warning or an error a handler logged, as text bounded for
// the host's lines.
type Entry struct {
	// Error is true for an error, false for a warning.
	Error   bool
	Message string
	// Fields are the invocation's ids and the record's attributes.
	Fields []Field
}

// Sink keeps one invocation's handler warnings and errors.
type Sink struct {
	mu      sync.Mutex
	entries []Entry
	dropped int
}

// Entries returns the entries kept, in order, and how many more were
// logged and not kept. A nil Sink has none.
func (s *Sink) Entries() (kept []Entry, dropped int) {
	if s == nil {
		return nil, 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Entry(nil), s.entries...), s.dropped
}

func (s *Sink) add(e Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.entries) < MaxKept {
		s.entries = append(s.entries, e)
		return
	}
	s.dropped++
}

// Handler is the slog.Handler of a handler's logger.
type Handler struct {
	log zerolog.Logger
	// fixed are the line's own fields (bounded), in order; attrs the
	// handler's (WithAttrs), keys qualified by their groups.
	fixed  []Field
	attrs  []slog.Attr
	prefix string
	sink   *Sink
}

var _ slog.Handler = (*Handler)(nil)

// New returns the handler of an invocation of function ("" leaves the
// field out): its lines go to log at log's level, its warnings and errors
// also to sink (nil keeps none).
func New(log zerolog.Logger, function, invocationID string, sink *Sink) *Handler {
	h := &Handler{log: log, sink: sink}
	if function != "" {
		h.fixed = append(h.fixed, Field{FieldFunction, logsafe.Bound(function)})
	}
	if invocationID != "" {
		h.fixed = append(h.fixed, Field{FieldInvocationID, logsafe.Bound(invocationID)})
	}
	return h
}

// WithFields returns a copy of h whose lines carry fields too (the keys
// are the package's own; empty values are left out), and the trace id and
// span id of ctx's span when it has a valid one.
func (h *Handler) WithFields(ctx context.Context, fields ...Field) *Handler {
	return h.withFields(trace.SpanContextFromContext(ctx), fields...)
}

func (h *Handler) withFields(sc trace.SpanContext, fields ...Field) *Handler {
	c := *h
	c.fixed = make([]Field, len(h.fixed), len(h.fixed)+len(fields)+2)
	copy(c.fixed, h.fixed)
	for _, f := range fields {
		if f.Value != "" {
			c.fixed = append(c.fixed, Field{f.Key, logsafe.Bound(f.Value)})
		}
	}
	if sc.IsValid() {
		c.fixed = append(c.fixed, Field{FieldTraceID, sc.TraceID().String()}, Field{FieldSpanID, sc.SpanID().String()})
	}
	return &c
}

// zlevel is the zerolog level of an slog level: below Info is debug,
// below Warn info, below Error warn, else error.
func zlevel(l slog.Level) zerolog.Level {
	switch {
	case l < slog.LevelInfo:
		return zerolog.DebugLevel
	case l < slog.LevelWarn:
		return zerolog.InfoLevel
	case l < slog.LevelError:
		return zerolog.WarnLevel
	}
	return zerolog.ErrorLevel
}

// Enabled reports whether the app's level lets level through.
func (h *Handler) Enabled(_ context.Context, level slog.Level) bool {
	zl := zlevel(level)
	return zl >= h.log.GetLevel() && zl >= zerolog.GlobalLevel()
}

// WithAttrs implements slog.Handler.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	c := *h
	c.attrs = append([]slog.Attr(nil), h.attrs...)
	for _, a := range attrs {
		if h.prefix != "" {
			a.Key = h.prefix + a.Key
		}
		c.attrs = append(c.attrs, a)
	}
	return &c
}

// WithGroup implements slog.Handler: later attributes' keys are
// qualified as "name.key".
func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.prefix = h.prefix + name + "."
	return &c
}

// Handle writes r as one JSON line and, for a warning or an error, keeps
// it for the host. The message and every string value are bounded;
// nothing is dropped but the attributes beyond MaxAttrs, which are
// counted.
func (h *Handler) Handle(_ context.Context, r slog.Record) error {
	zl := zlevel(r.Level)
	ev := h.log.WithLevel(zl)
	if ev == nil {
		return nil
	}
	keep := h.sink != nil && zl >= zerolog.WarnLevel
	var entry Entry
	if keep {
		entry = Entry{Error: zl >= zerolog.ErrorLevel, Message: logsafe.Bound(r.Message), Fields: make([]Field, 0, len(h.fixed)+len(h.attrs)+r.NumAttrs())}
		entry.Fields = append(entry.Fields, h.fixed...)
	}
	ev = ev.Str(FieldSource, SourceHandler)
	for _, f := range h.fixed {
		ev = ev.Str(f.Key, f.Value)
	}
	w := writer{ev: ev, keep: keep, entry: &entry}
	for _, a := range h.attrs {
		w.attr("", a)
	}
	r.Attrs(func(a slog.Attr) bool {
		w.attr(h.prefix, a)
		return true
	})
	if w.dropped > 0 {
		w.ev = w.ev.Int("attrsDropped", w.dropped)
	}
	w.ev.Msg(logsafe.Bound(r.Message))
	if keep {
		h.sink.add(entry)
	}
	return nil
}

// writer adds a record's attributes to its line (and entry).
type writer struct {
	ev      *zerolog.Event
	n       int
	dropped int
	keep    bool
	entry   *Entry
}

func (w *writer) attr(prefix string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if a.Value.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p = prefix + a.Key + "."
		}
		for _, g := range a.Value.Group() {
			w.attr(p, g)
		}
		return
	}
	if w.n == MaxAttrs {
		w.dropped++
		return
	}
	w.n++
	key := logsafe.BoundTo(prefix+a.Key, MaxKeyUnits)
	if reserved[key] {
		key = AttrPrefix + key
	}
	var text string
	v := a.Value
	switch v.Kind() {
	case slog.KindString:
		text = logsafe.Bound(v.String())
		w.ev = w.ev.Str(key, text)
	case slog.KindInt64:
		w.ev = w.ev.Int64(key, v.Int64())
		text = strconv.FormatInt(v.Int64(), 10)
	case slog.KindUint64:
		w.ev = w.ev.Uint64(key, v.Uint64())
		text = strconv.FormatUint(v.Uint64(), 10)
	case slog.KindFloat64:
		w.ev = w.ev.Float64(key, v.Float64())
		text = strconv.FormatFloat(v.Float64(), 'g', -1, 64)
	case slog.KindBool:
		w.ev = w.ev.Bool(key, v.Bool())
		text = strconv.FormatBool(v.Bool())
	case slog.KindDuration:
		text = v.Duration().String()
		w.ev = w.ev.Str(key, text)
	case slog.KindTime:
		text = v.Time().Format(time.RFC3339Nano)
		w.ev = w.ev.Str(key, text)
	default:
		text = logsafe.Bound(anyText(v.Any()))
		w.ev = w.ev.Str(key, text)
	}
	if w.keep {
		w.entry.Fields = append(w.entry.Fields, Field{key, text})
	}
}

// anyText renders a value of kind Any as fmt's %+v does (an error's
// text, a Stringer's String); fmt recovers a panicking method.
func anyText(v any) string { return fmt.Sprintf("%+v", v) }

type ctxKey struct{}

// WithContext returns ctx carrying h as the handler logger.
func WithContext(ctx context.Context, h *Handler) context.Context {
	return context.WithValue(ctx, ctxKey{}, h)
}

// eventLogger is the handler logger of ctx narrowed to one event, made
// when the handler asks for it: a delivery whose handler does not log
// pays for the pointer only.
type eventLogger struct {
	base                   *Handler
	span                   trace.SpanContext
	messageID, eventTypeID string
}

// WithEvent returns ctx with its handler logger, when it carries one,
// narrowed to an event: its messageId and eventTypeId, and the trace of
// ctx's span (the handler's).
func WithEvent(ctx context.Context, messageID, eventTypeID string) context.Context {
	base := FromContext(ctx)
	if base == nil {
		return ctx
	}
	return context.WithValue(ctx, ctxKey{}, &eventLogger{base: base, span: trace.SpanContextFromContext(ctx), messageID: messageID, eventTypeID: eventTypeID})
}

// FromContext returns the handler logger ctx carries, nil when none.
func FromContext(ctx context.Context) *Handler {
	switch v := ctx.Value(ctxKey{}).(type) {
	case *Handler:
		return v
	case *eventLogger:
		return v.base.withFields(v.span, Field{FieldMessageID, v.messageID}, Field{FieldEventTypeID, v.eventTypeID})
	}
	return nil
}
