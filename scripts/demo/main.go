// Command demo builds the custom handler, starts it on embedded defaults
// (endpoint BillingEndpoint, in-memory inbox, in-memory session state,
// in-memory Resolver sink) and drives it with invocations shaped exactly as
// the Azure Functions host sends them, printing what happens to each: every
// outcome a user meets, including a failed event that blocks its session,
// the messages parked behind it, the Manager's resubmission and the ordered
// replay of the parked messages, and the transactional PaymentReceived
// handler whose effects commit exactly once (a redelivery, concurrent
// copies, a failure before the commit). It then starts the same binary with a
// retry policy (a scheduled RetryRequest) and as the Resolver app
// (in-memory tracking store). No Azure account is needed.
//
// Every step states the outcome it expects (HTTP status, outcome label,
// the messages the endpoint sends); the demo exits non-zero when one does
// not happen.
//
//	go run ./scripts/demo [-v]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/app"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv/handlerproc"
)

const endpoint = "BillingEndpoint"

func main() {
	verbose := flag.Bool("v", false, "print every property and the body of each message the endpoint sends")
	flag.Parse()
	if err := run(context.Background(), options{Out: os.Stdout, Verbose: *verbose}); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

// options configure one run of the demo.
type options struct {
	// Out receives the transcript.
	Out io.Writer
	// Verbose prints every property and the body of each sent message.
	Verbose bool
	// Binary is a prebuilt handler; "" builds one.
	Binary string
}

// baseSettings are the embedded defaults of the endpoint app in the demo.
func baseSettings() map[string]string {
	return map[string]string{
		"NimBus__Endpoint":               endpoint,
		"NimBus__Inbox__Enabled":         "true",
		"NimBus__Inbox__Store":           "InMemory",
		"NimBus__Inbox__RetentionPeriod": "00:00:05",
		"NimBus__Inbox__CleanupSchedule": "0 0 * * * *",
		"NimBus__Outbox__SweepSchedule":  "0 */5 * * * *",
		"NimBus__Outbox__MinimumAge":     "00:00:01",
		"NimBus__Resolver__Sink":         "InMemory",
		// External CloudEvents producers, deduplicated by source and id.
		"NimBus__CloudEvents__Enabled":       "true",
		"NimBus__CloudEvents__Deduplication": "SourceAndId",
	}
}

func run(ctx context.Context, o options) error {
	root, err := handlerproc.RepoRoot()
	if err != nil {
		return err
	}
	bin := o.Binary
	if bin == "" {
		tmp, err := os.MkdirTemp("", "nimbus-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		bin = filepath.Join(tmp, "handler")
		buildCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		if err := handlerproc.Build(buildCtx, root, bin); err != nil {
			return err
		}
	}
	s := &script{out: o.Out, verbose: o.Verbose, bin: bin}
	d, err := s.start(ctx, baseSettings())
	if err != nil {
		return err
	}
	defer d.stop(ctx)

	s.printf("NimBus subscriber demo: endpoint %s, in-memory inbox, session state and Resolver sink\n", endpoint)
	s.printf("Built ./handler and started it on 127.0.0.1:%d (the port the Functions host would assign).\n", d.proc.Port())
	s.println("Each step POSTs an invocation envelope as the Functions host builds it (Service Bus trigger: dataType binary,")
	s.println("sessions on) and checks the outcome it expects. \"Resolver ←\" is a response to the Resolver; \"topic ←\" is a")
	s.println("message the endpoint sends to its own topic (an event a handler publishes, a parked copy, a replay request, a")
	s.println("scheduled RetryRequest).")
	s.println("Inbox retention is 5 seconds here (7 days by default) so the cleanup step has records to purge.")

	if err := s.basics(d); err != nil {
		return err
	}
	if err := s.failurePath(d); err != nil {
		return err
	}
	if err := s.exactlyOnce(d); err != nil {
		return err
	}
	if err := s.frontDoor(d); err != nil {
		return err
	}
	if err := s.otherKinds(d); err != nil {
		return err
	}
	if err := s.cloudEvents(d); err != nil {
		return err
	}
	if err := s.metrics(d); err != nil {
		return err
	}
	if err := s.retryPolicy(ctx); err != nil {
		return err
	}
	if err := s.resolverSteps(ctx, d); err != nil {
		return err
	}

	stopCtx, cancelStop := context.WithTimeout(ctx, 15*time.Second)
	defer cancelStop()
	code, err := d.proc.Stop(stopCtx)
	switch {
	case errors.Is(err, handlerproc.ErrKilled):
		return errors.New("handler did not stop within 15s of SIGTERM")
	case err != nil:
		return err
	case code != 0:
		return fmt.Errorf("handler did not stop cleanly: exit code %d", code)
	}
	s.println("\nStopped the handler with SIGTERM (graceful shutdown).")
	d.printStderr("")
	if len(s.failures) > 0 {
		return fmt.Errorf("%d expected outcome(s) did not happen:\n  %s", len(s.failures), strings.Join(s.failures, "\n  "))
	}
	s.printf("\nEvery step had the outcome it expected (%d steps).\n", s.step)
	return nil
}

// basics are the steps of one healthy session: success, a duplicate, a
// transient failure and its redelivery, a message without a MessageId, an
// unsupported type, a malformed envelope, and the inbox cleanup.
func (s *script) basics(d *proc) error {
	s.section("The main path (session customer-C-7)")
	const sid = "customer-C-7"
	d.event("Fresh delivery of OrderPlaced: the handler publishes InvoiceRequested, then OrderAccepted (message ids from the order); they go out, in that order, before the ResolutionResponse",
		ev{id: "OrderPlaced-0001", session: sid, order: order("O-1", 42.5, "")},
		expect{status: 200, outcome: "completed", sends: orderCompleted()})
	d.event("The same message redelivered after it succeeded (lock lost before completion)",
		ev{id: "OrderPlaced-0001", session: sid, delivery: 2, order: order("O-1", 42.5, "")},
		expect{status: 200, outcome: "duplicate", sends: []string{"SkipResponse"}})
	d.event("transient: the handler returns Transient(err) (billing system busy); the handler waits 1s before answering, so redeliveries are paced",
		ev{id: "OrderPlaced-0002", session: sid, order: order("O-2", 42.5, `,"FailFirstAttempts":1`)},
		expect{status: 503, outcome: "handler_failed"})
	d.event("The broker redelivers it; this time the handler succeeds",
		ev{id: "OrderPlaced-0002", session: sid, delivery: 2, order: order("O-2", 42.5, `,"FailFirstAttempts":1`)},
		expect{status: 200, outcome: "completed", sends: orderCompleted()})
	lastRecord := time.Now()
	d.event("A message without a MessageId (cannot be deduplicated, nor be the parent of an event: the order completes unannounced)",
		ev{id: "", session: sid, order: order("O-3", 42.5, "")},
		expect{status: 200, outcome: "completed", sends: []string{"ResolutionResponse"}})
	d.event("An event type this endpoint has no handler for",
		ev{id: "CustomerMoved-0001", session: sid, eventType: "CustomerMoved", order: `{"CustomerId":"C-7"}`},
		expect{status: 200, outcome: "unsupported", sends: []string{"UnsupportedResponse"}})
	d.malformed("A malformed envelope (not valid base64)", expect{status: 400, outcome: "malformed_invocation"})
	// The handler's inbox runs on the wall clock: the records expire only
	// when 5 seconds have really passed, and the next step shows them purged.
	if wait := 5500*time.Millisecond - time.Since(lastRecord); wait > 0 {
		s.printf("\n(waiting %.1fs for the records to pass the 5-second retention)\n", wait.Seconds())
		time.Sleep(wait)
	}
	d.cleanup("The hourly InboxCleanup timer fires", expect{status: 200, outcome: "purged"})
	d.event("Message 1 arrives again after its record expired: it is new again (retention must exceed redelivery windows)",
		ev{id: "OrderPlaced-0001", session: sid, delivery: 3, order: order("O-1", 42.5, "")},
		expect{status: 200, outcome: "completed", sends: orderCompleted()})
	return nil
}

// otherKinds are the remaining failure kinds and settlements, each in a
// session of its own.
func (s *script) otherKinds(d *proc) error {
	s.section("The other failure kinds (session customer-C-9 unless noted)")
	const sid = "customer-C-9"
	d.event(`permanent: "Fail":"permanent" — Permanent(err) is answered at once (no pause), nothing is sent yet`,
		ev{id: "OrderPlaced-0020", session: sid, order: order("O-20", 10, `,"Fail":"permanent"`)},
		expect{status: 422, outcome: "permanent_failure"})
	d.event("The same message on its last delivery (DeliveryCount = NimBus__Session__MaxDeliveryCount, 10): the broker dead-letters it, the Resolver gets one ErrorResponse",
		ev{id: "OrderPlaced-0020", session: sid, delivery: 10, order: order("O-20", 10, `,"Fail":"permanent"`)},
		expect{status: 422, outcome: "permanent_failure", sends: []string{"ErrorResponse"}, flags: []string{"deadLetterReported"}})
	d.event(`discard: "Fail":"discard" — Discard(err) skips the event; the session is not blocked`,
		ev{id: "OrderPlaced-0021", session: sid, order: order("O-21", 10, `,"Fail":"discard"`)},
		expect{status: 200, outcome: "discarded", sends: []string{"SkipResponse"}})
	failed, ok := d.event(`An order with "Fail":"failed","FailOn":"always" blocks the session`,
		ev{id: "OrderPlaced-0022", session: sid, order: order("O-22", 10, `,"Fail":"failed","FailOn":"always"`)},
		expect{status: 200, outcome: "event_failed", sends: []string{"ErrorResponse"}, flags: []string{"sessionBlocked"}})
	if ok {
		// A made-up broker MessageId for the stored ErrorResponse.
		er := errorResponseOf(failed.sent[0], "7d3e2f10-5b8c-4c1e-9f7a-000000000022")
		d.controlOn(app.FuncCloudEventsIngress, "A producer on the CloudEvents ingress topic forges the same SkipRequest: the ingress function takes EventRequests only, so it is refused at once (the broker dead-letters it) and the session stays blocked",
			skipRequest(er), expect{status: 422, outcome: "unsupported_message_type"})
		d.control("The operator skips it in the Manager: a SkipRequest (as NimBus's ManagerClient sends it) lifts the block",
			skipRequest(er), expect{status: 200, outcome: "skipped", sends: []string{"SkipResponse"}, flags: []string{"sessionUnblocked"}})
	}
	d.event("The session takes new messages again", ev{id: "OrderPlaced-0023", session: sid, order: order("O-23", 10, "")},
		expect{status: 200, outcome: "completed", sends: orderCompleted()})

	const hsid = "customer-C-10"
	pending, ok := d.event("handoff (session customer-C-10): a large order the handler hands off for manual approval; the session waits for it",
		ev{id: "OrderPlaced-0030", session: hsid, order: order("O-30", 25000, "")},
		expect{status: 200, outcome: "pending_handoff", sends: []string{"PendingHandoffResponse"}, flags: []string{"sessionBlocked"}})
	d.event("Another order of that session is parked behind the handoff",
		ev{id: "OrderPlaced-0031", session: hsid, order: order("O-31", 10, "")},
		expect{status: 200, outcome: "deferred", sends: []string{"DeferralResponse", "EventRequest→Deferred"}})
	if ok {
		settle, err := handoffCompleted(pending)
		if err != nil {
			return err
		}
		done, ok := d.control("The approval finishes: a HandoffCompletedRequest (as NimBus's HandoffControlMessageFactory builds it) lifts the block",
			settle, expect{status: 200, outcome: "handoff_completed",
				sends: []string{"ResolutionResponse", "ProcessDeferredRequest→DeferredProcessor"}, flags: []string{"sessionUnblocked", "replayRequested"}})
		if ok {
			d.replay("The DeferredProcessor function replays the parked order", done.sent,
				expect{status: 200, outcome: "drained", sends: orderCompleted(), replays: []string{"evt-orderplaced-0031 completed"}})
		}
	}
	return nil
}

// cloudEvents are the steps of an external producer's CloudEvents.
func (s *script) cloudEvents(d *proc) error {
	s.section("CloudEvents from an external producer (session lead-42)")
	d.cloudEvent("An external producer's CloudEvent on the ingress topic (binary mode, ce- prefix; the broker assigned the MessageId)",
		"3f2a9c0d11e84b7a9e1c", order("O-6", 99, ""), expect{status: 200, outcome: "completed", sends: orderCompleted()})
	d.cloudEvent("The producer re-sends the same event; the broker assigns a new MessageId, but source and id match: a duplicate",
		"b81e0f4c2d6a4f1e8c07", order("O-6", 99, ""), expect{status: 200, outcome: "duplicate", sends: []string{"SkipResponse"}})
	return nil
}

func (s *script) metrics(d *proc) error {
	s.println()
	s.println("Metrics (GET /_nimbus/metrics: counters, and count and sum of each histogram):")
	var counters map[string]float64
	if err := d.getJSON("/_nimbus/metrics", &counters); err != nil {
		return err
	}
	keys := make([]string, 0, len(counters))
	for k := range counters {
		if !strings.Contains(k, ".duration.") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		s.printf("   %-72s %g\n", k, counters[k])
	}
	return nil
}

// orderCompleted is what a completed OrderPlaced sends: the two events
// the sample publishes, then the ResolutionResponse, and more.
func orderCompleted(more ...string) []string {
	return append([]string{"EventRequest→InvoiceRequested", "EventRequest→OrderAccepted", "ResolutionResponse"}, more...)
}

// order is the sample's OrderPlaced event JSON.
func order(id string, amount float64, extra string) string {
	return fmt.Sprintf(`{"OrderId":%q,"CustomerId":"C-7","Amount":%g%s}`, id, amount, extra)
}
