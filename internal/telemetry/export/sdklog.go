package export

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"

	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
)

// The OpenTelemetry SDK reports its own problems (a value it could not
// parse, an export that failed) through a global logger and error handler
// that by default write to stderr, quoting what they got: a header value, an
// endpoint with its password. installSDKLog routes both to the process log
// as bounded JSON lines, with every credential redacted and no string value
// of the SDK's key/value pairs written at all.
func installSDKLog(w io.Writer, secrets []string) {
	log := zerolog.New(w).With().Timestamp().Str("source", "opentelemetry").Logger()
	otel.SetLogger(logr.New(&sdkSink{log: log, secrets: secrets}))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn().Str("error", logsafe.Redact(err.Error(), secrets...)).Msg("OpenTelemetry export problem")
	}))
}

// sdkSink is the logr sink the SDK logs through. The SDK logs Warn at
// verbosity 1, Info at 4 and Debug at 8: levels above 1 are dropped.
type sdkSink struct {
	log     zerolog.Logger
	secrets []string
	name    string
	values  []any
}

func (s *sdkSink) Init(logr.RuntimeInfo) {}

func (s *sdkSink) Enabled(level int) bool { return level <= 1 }

func (s *sdkSink) Info(_ int, msg string, kv ...any) {
	s.write(s.log.Warn(), msg, kv)
}

func (s *sdkSink) Error(err error, msg string, kv ...any) {
	e := s.log.Error()
	if err != nil {
		e = e.Str("error", logsafe.Redact(err.Error(), s.secrets...))
	}
	s.write(e, msg, kv)
}

func (s *sdkSink) write(e *zerolog.Event, msg string, kv []any) {
	all := append(append([]any(nil), s.values...), kv...)
	for i := 0; i+1 < len(all) && i < 32; i += 2 {
		key := logsafe.BoundTo(fmt.Sprint(all[i]), 64)
		switch v := all[i+1].(type) {
		case bool, int, int32, int64, uint, uint32, uint64, float32, float64, time.Duration:
			e = e.Interface(key, v)
		default:
			// Strings may be a setting's value: named, never written.
			e = e.Str(key, "(not logged)")
		}
	}
	if s.name != "" {
		e = e.Str("logger", logsafe.BoundTo(s.name, 64))
	}
	e.Msg("OpenTelemetry: " + logsafe.Redact(msg, s.secrets...))
}

func (s *sdkSink) WithValues(kv ...any) logr.LogSink {
	c := *s
	c.values = append(append([]any(nil), s.values...), kv...)
	return &c
}

func (s *sdkSink) WithName(name string) logr.LogSink {
	c := *s
	if c.name != "" {
		name = c.name + "/" + name
	}
	c.name = name
	return &c
}

// headerSecrets returns what of a header list may be a credential: the
// whole value, each entry, and each entry's value as written and decoded.
func headerSecrets(raw string) []string {
	out := []string{raw}
	for _, e := range strings.Split(raw, ",") {
		out = append(out, strings.TrimSpace(e))
		if _, v, ok := strings.Cut(e, "="); ok {
			out = append(out, strings.TrimSpace(v))
			if d, err := url.PathUnescape(v); err == nil {
				out = append(out, strings.TrimSpace(d))
			}
		}
	}
	return out
}

// redactErr is err with its credentials redacted (nil for nil).
func redactErr(err error, secrets []string) error {
	if err == nil {
		return nil
	}
	return errors.New(logsafe.Redact(err.Error(), secrets...))
}
