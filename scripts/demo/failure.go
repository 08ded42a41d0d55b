package main

import (
	"context"
	"fmt"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/devhost"
	"github.com/nimbus-go/functions-subscriber/internal/message/nimbusmsg"
)

// failurePath shows what a user meets when an event fails: the session is
// blocked, later messages of the session are parked, the operator
// resubmits the failed event from the Manager, and the parked messages are
// replayed in order.
func (s *script) failurePath(d *proc) error {
	s.section("Failure → blocked session → parked messages → resubmission → ordered replay (session customer-C-8)")
	const sid = "customer-C-8"
	failed, ok := d.event(`failed: an order with "Fail":"failed" (FailOn "original": only its original delivery fails); the handler returns a plain error`,
		ev{id: "OrderPlaced-0010", session: sid, order: order("O-10", 42.5, `,"Fail":"failed"`)},
		expect{status: 200, outcome: "event_failed", sends: []string{"ErrorResponse"}, flags: []string{"sessionBlocked"}})
	parked := expect{status: 200, outcome: "deferred", sends: []string{"DeferralResponse", "EventRequest→Deferred"}}
	d.event("A later order of the same session is parked behind the block (a copy to the endpoint topic, To=Deferred)",
		ev{id: "OrderPlaced-0011", session: sid, order: order("O-11", 10, "")}, parked)
	d.event("And another one",
		ev{id: "OrderPlaced-0012", session: sid, order: order("O-12", 20, "")}, parked)
	if !ok {
		return nil
	}
	// The Resolver stores the ErrorResponse under the MessageId the broker
	// gave it; the in-memory sink has none, so the demo makes one up.
	er := errorResponseOf(failed.sent[0], "7d3e2f10-5b8c-4c1e-9f7a-000000000010")
	resubmit, err := resubmission(er, failed.sent[0])
	if err != nil {
		return err
	}
	done, ok := d.control("The operator resubmits the failed event in the Manager: a ResubmissionRequest, as NimBus's ManagerClient builds it from the stored ErrorResponse (its broker MessageId is the ParentMessageId)",
		resubmit, expect{status: 200, outcome: "completed", sends: orderCompleted("ProcessDeferredRequest→DeferredProcessor"),
			flags: []string{"sessionUnblocked", "replayRequested"}})
	if ok {
		d.replay("The host triggers the DeferredProcessor function with that ProcessDeferredRequest: the parked orders replay in order",
			done.sent, expect{status: 200, outcome: "drained", sends: append(orderCompleted(), orderCompleted()...),
				replays: []string{"evt-orderplaced-0011 completed", "evt-orderplaced-0012 completed"}})
	}
	d.event("A new order of the session is handled at once: the session is open again",
		ev{id: "OrderPlaced-0013", session: sid, order: order("O-13", 30, "")},
		expect{status: 200, outcome: "completed", sends: orderCompleted()})
	d.event("The failed order's original message is redelivered late: the resubmission recorded it, so it is a duplicate",
		ev{id: "OrderPlaced-0010", session: sid, delivery: 2, order: order("O-10", 42.5, `,"Fail":"failed"`)},
		expect{status: 200, outcome: "duplicate", sends: []string{"SkipResponse"}})
	return nil
}

// retryPolicy starts the binary a second time with a default retry policy
// (one retry, one second apart) and shows the scheduled RetryRequest that
// follows a failure, then delivers it when it is due: it succeeds and lifts
// the block.
func (s *script) retryPolicy(ctx context.Context) error {
	settings := baseSettings()
	settings["NimBus__RetryPolicies__Default__MaxRetries"] = "1"
	settings["NimBus__RetryPolicies__Default__BaseDelay"] = "00:00:01"
	d, err := s.start(ctx, settings)
	if err != nil {
		return err
	}
	defer d.stop(ctx)
	s.section(fmt.Sprintf("A retry policy (the same binary restarted on 127.0.0.1:%d with NimBus__RetryPolicies__Default__MaxRetries=1, BaseDelay=00:00:01; session customer-C-11)", d.proc.Port()))
	const sid = "customer-C-11"
	failed, ok := d.event(`An order with "Fail":"failed" fails; the policy schedules a RetryRequest (To=Retry, RetryCount 1)`,
		ev{id: "OrderPlaced-0040", session: sid, order: order("O-40", 42.5, `,"Fail":"failed"`)},
		expect{status: 200, outcome: "event_failed", sends: []string{"ErrorResponse", "RetryRequest→Retry"}, flags: []string{"sessionBlocked"}})
	if !ok {
		return nil
	}
	var retry *devhost.SentResponse
	for i := range failed.sent {
		if devhost.Label(failed.sent[i]) == "RetryRequest→Retry" {
			retry = &failed.sent[i]
		}
	}
	due, err := time.Parse(time.RFC3339Nano, retry.ScheduledEnqueueTime)
	if err != nil {
		s.fail("the RetryRequest has no scheduledEnqueueTime: %v", err)
		return nil
	}
	if wait := time.Until(due); wait > 0 {
		s.printf("\n(waiting %.1fs until the RetryRequest is due)\n", wait.Seconds())
		time.Sleep(wait)
	}
	// The endpoint subscription's retry rule rewrites To=Retry to the
	// endpoint and stamps From=Retry.
	m := nimbusmsg.FromOutgoing(toOutgoing(*retry)).Routed(endpoint)
	d.control("The broker enqueues the RetryRequest when due; the retry rule routes it back to the endpoint, and this attempt succeeds",
		m, expect{status: 200, outcome: "completed", sends: orderCompleted(), flags: []string{"sessionUnblocked"}})
	return nil
}
