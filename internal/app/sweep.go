package app

import (
	"context"
	"errors"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/nimbus-go/functions-subscriber/internal/frontdoor"
	"github.com/nimbus-go/functions-subscriber/internal/funchost"
	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
	"github.com/nimbus-go/functions-subscriber/internal/outbox"
	"github.com/nimbus-go/functions-subscriber/internal/storeerr"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// FuncOutboxSweep is the timer that sends the events of transactional
// deliveries whose dispatch no redelivery finished. It is always served;
// without transactional handlers it does nothing.
const FuncOutboxSweep = "OutboxSweep"

// invokeSweep handles the OutboxSweep timer: in every container a
// transactional handler is registered on, it sends the events (and the
// stored ResolutionResponse) of markers left undispatched for longer than
// NimBus__Outbox__MinimumAge, marks them dispatched, and logs one line of
// counts. A run that left markers pending for a failure fails the
// invocation; the next tick retries them.
func (a *endpointApp) invokeSweep(ctx context.Context, inv *funchost.Invocation) error {
	start := a.now()
	t, err := a.beginTimer(inv)
	if err != nil {
		return err
	}
	if len(a.txnTargets) == 0 {
		t.line(a.log.Info()).Str("outcome", "no_outbox").Msg("no transactional handler is registered; nothing to sweep")
		inv.Log("no transactional handler is registered; nothing to sweep: outcome=no_outbox")
		return nil
	}
	finder, ok := a.txnStore.(txn.PendingFinder)
	if !ok {
		err := errors.New("the transactional handlers' store cannot find pending markers")
		t.line(a.log.Error()).Str("outcome", "sweep_failed").Str("error", err.Error()).Msg("outbox sweep failed")
		a.stderrLine("error: " + logsafe.Bound(inv.Function) + " invocation failed: " + err.Error())
		return err
	}
	s := a.sweeper(finder)
	ctx, span, charge, end := t.start(ctx, a.sweepSpanName)
	defer end()
	rep, err := s.Run(ctx, a.now())
	a.metrics.Add(telemetry.OutboxSwept, "", "", int64(rep.Events))
	a.metrics.Add(telemetry.OutboxLeft, "", "", int64(rep.Left))
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("nimbus.outbox.dispatched", rep.Dispatched), attribute.Int("nimbus.outbox.events", rep.Events),
			attribute.Int("nimbus.outbox.left", rep.Left), attribute.Float64("nimbus.cosmos.request_charge", charge.RequestUnits()))
		if err != nil {
			span.SetStatus(codes.Error, sweepError(err))
		}
	}

	ev := a.log.Info()
	outcome, msg := "swept", "outbox sweep finished"
	switch {
	case err != nil && errors.Is(err, context.Canceled):
		ev, outcome, msg = a.log.Warn(), "canceled", "outbox sweep cancelled; the next tick continues"
	case errors.Is(err, outbox.ErrMarkerGone):
		ev, outcome, msg = a.log.Error(), "marker_gone", "outbox sweep sent the events of markers removed before their mark; nothing is left to send"
	case err != nil && rep.Unreadable > 0 && rep.Left == rep.Unreadable && rep.QueryFailed == 0:
		ev, outcome, msg = a.log.Error(), "unreadable_left", "outbox sweep left unreadable markers for an operator to repair or remove"
	case err != nil:
		ev, outcome, msg = a.log.Error(), "sweep_failed", "outbox sweep left markers pending; the next tick retries them"
	case rep.StoppedOnBudget:
		ev, msg = a.log.Warn(), "outbox sweep stopped on its time budget; the next tick continues"
	}
	ev = t.line(ev).Str("outcome", outcome).Int("containers", rep.Containers).Int("pages", rep.Pages).Int("found", rep.Found).
		Int("dispatched", rep.Dispatched).Int("alreadyDone", rep.AlreadyDone).Int("gone", rep.Gone).Int("events", rep.Events).Int("responses", rep.Responses).
		Int("sendFailed", rep.SendFailed).Int("markFailed", rep.MarkFailed).Int("unreadable", rep.Unreadable).Int("deferred", rep.Deferred).Int("queryFailed", rep.QueryFailed).
		Int("left", rep.Left).Bool("drained", rep.Drained).Bool("stoppedOnBudget", rep.StoppedOnBudget).
		Time("cutoff", rep.Cutoff).Float64("durationMs", float64(a.now().Sub(start).Microseconds())/1000)
	var oldest string
	if !rep.OldestLeft.IsZero() {
		age := max(a.now().Sub(rep.OldestLeft), 0).Seconds()
		ev = ev.Float64("oldestLeftSeconds", age)
		oldest = " oldestLeftSeconds=" + strconv.FormatFloat(age, 'f', 0, 64)
	}
	var named string
	if rep.FirstUnreadable != "" {
		ev = ev.Str("firstUnreadable", logsafe.Bound(rep.FirstUnreadable))
		named += " unreadable=" + strconv.Itoa(rep.Unreadable) + " firstUnreadable=" + strconv.Quote(logsafe.Bound(rep.FirstUnreadable))
	}
	if rep.FirstGone != "" {
		ev = ev.Str("firstGone", logsafe.Bound(rep.FirstGone))
		named += " gone=" + strconv.Itoa(rep.Gone) + " firstGone=" + logsafe.Bound(rep.FirstGone)
	}
	ev = a.withCharge(ev, charge)
	if err != nil {
		ev = ev.Str("error", sweepError(err))
	}
	ev.Msg(msg)
	summary := msg + ": outcome=" + outcome + " found=" + strconv.Itoa(rep.Found) + " dispatched=" + strconv.Itoa(rep.Dispatched) +
		" events=" + strconv.Itoa(rep.Events) + " left=" + strconv.Itoa(rep.Left) + " drained=" + strconv.FormatBool(rep.Drained) +
		" stoppedOnBudget=" + strconv.FormatBool(rep.StoppedOnBudget) + oldest + named
	summary = string(a.appendCharge([]byte(summary), charge))
	switch {
	case err == nil:
		inv.Log(summary)
	case outcome == "canceled":
		a.stderrLine("warning: " + logsafe.Bound(inv.Function) + " invocation answered 503: " + summary)
	default:
		a.stderrLine("error: " + logsafe.Bound(inv.Function) + " invocation failed: " + summary + " error=" + strconv.Quote(sweepError(err)))
	}
	return err
}

// sweeper is the OutboxSweep's sweeper over every container of a
// transactional handler or a front door: one for the process, so that a
// run resumes past the markers the last one failed on.
func (a *endpointApp) sweeper(finder txn.PendingFinder) *outbox.Sweeper {
	a.sweepOnce.Do(func() {
		a.sweep = &outbox.Sweeper{
			Store:      finder,
			Targets:    a.txnTargets,
			EndpointID: a.cfg.Endpoint,
			Publisher:  a.publisher,
			MinimumAge: a.cfg.Outbox.MinimumAge,
			Retention:  a.cfg.Inbox.Retention,
			Clock:      a.now,
		}
	})
	return a.sweep
}

// sweepError words a run's error for a log line, a span and the host: the
// text of a marker gone or left unreadable (the sweep's own, naming
// document ids and containers, never content), otherwise the class of the
// failure (a store's or a send's), never the provider's text.
func sweepError(err error) string {
	switch {
	case errors.Is(err, outbox.ErrMarkerGone):
		return logsafe.Bound(err.Error())
	case errors.Is(err, txn.ErrUnreadableOutbox):
		var ue interface{ OperatorMessage() string }
		if errors.As(err, &ue) {
			return logsafe.Bound("outbox sweep left unreadable markers: " + ue.OperatorMessage())
		}
		return "outbox sweep left unreadable markers"
	}
	return logsafe.Bound("outbox sweep left markers pending (" + storeerr.Class(err, func(error) string { return "unavailable" }) + "); the next tick retries them")
}

// Sweep runs the OutboxSweep's pass once, as the timer does, without an
// invocation: for a process that is not run by the Functions host, which
// calls it on a ticker. The Resolver app, and an endpoint without
// transactional containers, sweep nothing.
func (a *App) Sweep(ctx context.Context) (outbox.Report, error) {
	e := a.endpoint
	if e == nil || len(e.txnTargets) == 0 {
		return outbox.Report{}, nil
	}
	finder, ok := e.txnStore.(txn.PendingFinder)
	if !ok {
		return outbox.Report{}, errors.New("the transactional store cannot find pending markers")
	}
	s := e.sweeper(finder)
	return s.Run(ctx, e.now())
}

// FrontDoor returns the endpoint's front door: its publisher, outside any
// delivery, and the store of its containers; nil in the Resolver app.
func (a *App) FrontDoor() *frontdoor.Door {
	e := a.endpoint
	if e == nil {
		return nil
	}
	return &frontdoor.Door{EndpointID: e.cfg.Endpoint, Store: e.txnStore, Publisher: e.publisher,
		Retention: e.cfg.Inbox.Retention, MaxEventBytes: e.cfg.Outbox.MaxMessageBytes, Now: e.now}
}
