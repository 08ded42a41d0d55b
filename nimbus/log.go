package nimbus

import (
	"context"
	"log/slog"

	"github.com/nimbus-go/functions-subscriber/internal/handlerlog"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
)

// Logger returns the logger of the handler whose ctx this is: a standard
// *slog.Logger whose records are written as the app's own JSON lines (on
// the app's stdout, at the app's level NimBus__LogLevel, with the same
// field names, time format and level words: debug, info, warn, error),
// each carrying "source":"handler" and the invocation's fields: function,
// invocationId, and for an event its messageId and eventTypeId, and the
// traceId and spanId of the handler's span (nimbus.handler) when the
// delivery is traced. An HTTP function's request context gives one too
// (function, invocationId from the host's request, the request span's
// ids).
//
// The message and every string attribute are bounded as every logged
// string is (a long value is cut and marked, invalid UTF-8 repaired);
// groups become dotted keys ("order.id"); an attribute whose key is one
// of the line's own fields is written as "attr."+key; at most 32
// attributes are written per record and the rest counted in
// attrsDropped. Never log payload values you would not want in your logs:
// the logger bounds what it is given, it cannot know what is secret.
//
// A record at warn or error level also reaches the host with the
// invocation: a completed invocation's answer carries it in its Logs after
// the summary ("warning: handler logged: …" or "error: handler logged:
// …", with the fields), a failing one writes it on stderr before the
// failure line, as the pipeline's own warnings and errors; at most 8 per
// invocation are kept for the host, the rest counted. An HTTP function's
// go to stderr.
//
// On a context that is not a handler's (one a test or a program built),
// Logger returns slog.Default(); package nimbustest gives handler tests a
// context whose records the test reads.
func Logger(ctx context.Context) *slog.Logger {
	if h := handlerlog.FromContext(ctx); h != nil {
		return slog.New(h)
	}
	return slog.Default()
}

// eventLogContext returns ctx with the handler logger of the invocation,
// when it carries one, narrowed to in: its messageId and eventTypeId, and
// the trace of the handler's span ctx carries.
func eventLogContext(ctx context.Context, in *subscriber.Event) context.Context {
	return handlerlog.WithEvent(ctx, in.MessageID, in.EventTypeID)
}
