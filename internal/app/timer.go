package app

import (
	"context"
	"strconv"

	"github.com/rs/zerolog"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/nimbus-go/functions-subscriber/internal/funchost"
	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// timerRun is one invocation of a timer function (InboxCleanup,
// OutboxSweep): its decoded timer and the fields every line of it carries.
type timerRun struct {
	inv   *funchost.Invocation
	timer *funchost.TimerInfo
	a     *endpointApp
}

// beginTimer decodes a timer invocation. A malformed one is logged, as
// every function logs a malformed invocation, and its error returned: the
// invocation fails and the next tick runs again.
func (a *endpointApp) beginTimer(inv *funchost.Invocation) (*timerRun, error) {
	timer, err := funchost.DecodeTimer(inv.Body, bindingTimer)
	if err != nil {
		a.log.Error().Str("function", logsafe.Bound(inv.Function)).Str("invocationId", logsafe.Bound(inv.InvocationID)).
			Str("outcome", "malformed_invocation").Str("error", logsafe.Bound(err.Error())).Msg("malformed timer invocation")
		a.stderrLine("error: " + logsafe.Bound(inv.Function) + " invocation failed: malformed timer invocation: invocationId=" +
			logsafe.Bound(inv.InvocationID) + " error=" + strconv.Quote(logsafe.Bound(err.Error())))
		return nil, err
	}
	return &timerRun{inv: inv, timer: timer, a: a}, nil
}

// line adds the fields of every line of the run to ev.
func (t *timerRun) line(ev *zerolog.Event) *zerolog.Event {
	return ev.Str("function", logsafe.Bound(t.inv.Function)).Str("invocationId", logsafe.Bound(t.inv.InvocationID)).
		Str("endpoint", t.a.cfg.Endpoint).Bool("isPastDue", t.timer.IsPastDue)
}

// start begins the run's span and request charge under ctx; the context
// it returns also ends when the app begins shutting down, so a run stops
// at once and the next tick continues. end ends both.
func (t *timerRun) start(ctx context.Context, spanName string) (_ context.Context, span oteltrace.Span, charge *telemetry.Charge, end func()) {
	ctx, span = t.a.tracer.Start(ctx, spanName)
	ctx, charge = telemetry.WithCharge(ctx)
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(t.a.stopping, cancel)
	return ctx, span, charge, func() {
		stop()
		cancel()
		span.End()
	}
}
