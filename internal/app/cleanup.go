package app

import (
	"context"
	"errors"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/nimbus-go/functions-subscriber/internal/funchost"
	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// invokeCleanup handles the InboxCleanup timer: it purges this endpoint's
// records older than the retention period, batch after batch, until none is
// left or the time budget is spent, and logs one line. A failure fails the
// invocation; the next tick retries.
func (a *endpointApp) invokeCleanup(ctx context.Context, inv *funchost.Invocation) error {
	start := a.now()
	t, err := a.beginTimer(inv)
	if err != nil {
		return err
	}
	if a.store == nil {
		t.line(a.log.Info()).Str("outcome", "inbox_off").Msg("inbox is disabled; nothing to clean")
		inv.Log("inbox is disabled; nothing to clean: outcome=inbox_off")
		return nil
	}
	c := inbox.Cleaner{
		Store:      a.store,
		EndpointID: a.cfg.Endpoint,
		Retention:  a.cfg.Inbox.Retention,
		Budget:     a.cfg.Inbox.CleanupBudget,
		Clock:      a.now,
	}
	ctx, span, charge, end := t.start(ctx, a.cleanupSpanName)
	defer end()
	rep, err := c.Run(ctx, a.now())
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("nimbus.inbox.purged", rep.Purged), attribute.Int("nimbus.inbox.batches", rep.Batches),
			attribute.Float64("nimbus.cosmos.request_charge", charge.RequestUnits()))
		if err != nil {
			span.SetStatus(codes.Error, newSafeError(inbox.OpPurge, err))
		}
	}
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
	ev = t.line(ev).Str("outcome", outcome).Int("purged", rep.Purged).Int("batches", rep.Batches).
		Bool("drained", rep.Drained).Bool("stoppedOnBudget", rep.StoppedOnBudget).
		Time("cutoff", rep.Cutoff).Float64("durationMs", float64(a.now().Sub(start).Microseconds())/1000)
	if rep.LagKnown {
		ev = ev.Float64("lagSeconds", rep.Lag.Seconds())
	}
	ev = a.withCharge(ev, charge)
	if err != nil {
		ev = ev.Str("error", newSafeError(inbox.OpPurge, err))
	}
	ev.Msg(msg)
	summary := msg + ": outcome=" + outcome + " purged=" + strconv.Itoa(rep.Purged) + " batches=" + strconv.Itoa(rep.Batches) +
		" drained=" + strconv.FormatBool(rep.Drained) + " stoppedOnBudget=" + strconv.FormatBool(rep.StoppedOnBudget)
	if rep.LagKnown {
		summary += " lagSeconds=" + strconv.FormatFloat(rep.Lag.Seconds(), 'f', 0, 64)
	}
	summary = string(a.appendCharge([]byte(summary), charge))
	switch {
	case err == nil:
		inv.Log(summary)
	case outcome == "canceled":
		a.stderrLine("warning: " + logsafe.Bound(inv.Function) + " invocation answered 503: " + summary)
	default:
		a.stderrLine("error: " + logsafe.Bound(inv.Function) + " invocation failed: " + summary + " error=" + strconv.Quote(newSafeError(inbox.OpPurge, err)))
	}
	return err
}
