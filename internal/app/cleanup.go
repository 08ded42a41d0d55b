package app

import (
	"context"
	"errors"

	"github.com/rs/zerolog"

	"github.com/nimbus-go/functions-subscriber/internal/funchost"
	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// invokeCleanup handles the InboxCleanup timer: it purges this endpoint's
// records older than the retention period, batch after batch, until none is
// left or the time budget is spent, and logs one line. A failure fails the
// invocation; the next tick retries.
func (a *App) invokeCleanup(ctx context.Context, inv *funchost.Invocation) error {
	start := a.now()
	timer, err := funchost.DecodeTimer(inv.Body, bindingTimer)
	if err != nil {
		a.log.Error().Str("function", logsafe.Bound(inv.Function)).Str("invocationId", logsafe.Bound(inv.InvocationID)).
			Str("outcome", "malformed_invocation").Str("error", logsafe.Bound(err.Error())).Msg("malformed timer invocation")
		return err
	}
	base := func(ev *zerolog.Event) *zerolog.Event {
		return ev.Str("function", logsafe.Bound(inv.Function)).Str("invocationId", logsafe.Bound(inv.InvocationID)).
			Str("endpoint", a.cfg.Endpoint).Bool("isPastDue", timer.IsPastDue)
	}
	if a.store == nil {
		base(a.log.Info()).Str("outcome", "inbox_off").Msg("inbox is disabled; nothing to clean")
		return nil
	}
	c := inbox.Cleaner{
		Store:      a.store,
		EndpointID: a.cfg.Endpoint,
		Retention:  a.cfg.Inbox.Retention,
		Budget:     a.cfg.Inbox.CleanupBudget,
		Clock:      a.now,
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(a.stopping, cancel)
	defer stop()
	rep, err := c.Run(ctx, a.now())
	a.metrics.Add(telemetry.Purged, "", "", int64(rep.Purged))
	ev := a.log.Info()
	outcome, msg := "purged", "inbox cleanup finished"
	if rep.StoppedOnBudget {
		ev, msg = a.log.Warn(), "inbox cleanup stopped on its time budget; the next tick continues"
	}
	if err != nil {
		a.metrics.Inc(telemetry.InboxOperationFailed, telemetry.TagStoreOperation, inbox.OpPurge)
		ev, outcome, msg = a.log.Error(), "purge_failed", "inbox cleanup failed; the next tick retries"
		if errors.Is(err, context.Canceled) {
			ev, outcome, msg = a.log.Warn(), "canceled", "inbox cleanup cancelled; the next tick retries"
		}
	}
	ev = base(ev).Str("outcome", outcome).Int("purged", rep.Purged).Int("batches", rep.Batches).
		Bool("drained", rep.Drained).Bool("stoppedOnBudget", rep.StoppedOnBudget).
		Time("cutoff", rep.Cutoff).Float64("durationMs", float64(a.now().Sub(start).Microseconds())/1000)
	if rep.LagKnown {
		ev = ev.Float64("lagSeconds", rep.Lag.Seconds())
	}
	if err != nil {
		ev = ev.Str("error", newSafeError(inbox.OpPurge, err))
	}
	ev.Msg(msg)
	return err
}
