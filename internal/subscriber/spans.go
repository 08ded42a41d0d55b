package subscriber

import (
	"go.opentelemetry.io/otel/codes"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
)

// Span names of the steps of a delivery.
const (
	spanInboxCheck   = "nimbus.inbox.check"
	spanHandler      = "nimbus.handler"
	spanInboxRecord  = "nimbus.inbox.record"
	spanSessionRead  = "nimbus.session.read"
	spanSessionWrite = "nimbus.session.write"
	// spanReplay is a replayed parked copy, in the trace of its event.
	spanReplay    = "nimbus.deferred.replay"
	attrEventType = "nimbus.event_type"
)

// endSpan ends span, marking it failed with err's text (bounded; store
// errors are already free of provider details) when err is not nil.
func endSpan(span oteltrace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, logsafe.Bound(err.Error()))
	}
	span.End()
}
