package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/dev/minihost"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

// resolverStack is the endpoint stack (Cosmos inbox, Service Bus with the
// NimBus topology, the handler binary as the endpoint app under a mini
// host) plus the same binary deployed a second time as the Resolver app
// under a second mini host on Resolver/Resolver. Nothing reads the
// Resolver subscription but the Resolver.
type resolverStack struct {
	tb testing.TB
	*standIns
	endpoint *handlerProc
	resolver *handlerProc
	epHost   *minihost.Host
	resHost  *minihost.Host
	sender   *azservicebus.Sender
	rows     rowReader
}

// rowReader reads the tracking row of an event in its session, nil when
// there is none.
type rowReader interface {
	row(ctx context.Context, endpoint string, e event) (*trackedRow, error)
}

// trackedRow is the part of a tracking row the tests check.
type trackedRow struct {
	Status           string  `json:"ResolutionStatus"`
	MessageType      string  `json:"MessageType"`
	LastMessageID    *string `json:"LastMessageId"`
	Reason           *string `json:"Reason"`
	PendingSubStatus *string `json:"PendingSubStatus"`
	HandoffReason    *string `json:"HandoffReason"`
	ExternalJobID    *string `json:"ExternalJobId"`
	EndpointID       string  `json:"EndpointId"`
	SessionID        string  `json:"SessionId"`
	From             *string `json:"From"`
	// Fields of the Cosmos tracking document around the row.
	Deleted bool
	TTL     *int64
}

// cosmosRows reads the tracking document straight from Cosmos (not
// through a fault proxy): container <endpoint>, id "{EventId}_{SessionId}",
// partition key the id; the status is the document's, as NimBus reads it.
type cosmosRows struct {
	client   *azcosmos.Client
	database string
}

func (c cosmosRows) row(ctx context.Context, endpoint string, e event) (*trackedRow, error) {
	ct, err := c.client.NewContainer(c.database, endpoint)
	if err != nil {
		return nil, err
	}
	id := e.EventID + "_" + e.SessionID
	resp, err := ct.ReadItem(ctx, azcosmos.NewPartitionKeyString(id), id, nil)
	var re *azcore.ResponseError
	switch {
	case errors.As(err, &re) && re.StatusCode == http.StatusNotFound:
		return nil, nil
	case err != nil:
		return nil, err
	}
	var doc struct {
		ID      string     `json:"id"`
		Status  string     `json:"status"`
		Deleted bool       `json:"deleted"`
		TTL     *int64     `json:"ttl"`
		Event   trackedRow `json:"event"`
	}
	if err := json.Unmarshal(resp.Value, &doc); err != nil {
		return nil, err
	}
	r := doc.Event
	r.Status, r.Deleted, r.TTL = doc.Status, doc.Deleted, doc.TTL
	return &r, nil
}

type resolverStackConfig struct {
	faults *testenv.FaultProxyOptions
	// resolverSessions is the Resolver host's MaxConcurrentSessions
	// (default 16, as NimBus pins it).
	resolverSessions int
	// resolverIdle is the Resolver host's session idle timeout (default
	// 300ms; the Resolver's host.json has 1 s).
	resolverIdle time.Duration
	// nimbusEndpoints are further endpoint topics with NimBus's topology
	// that no Go endpoint serves: the test plays a NimBus (.NET) endpoint
	// on them.
	nimbusEndpoints []string
	// resolverEnv are further settings of the Resolver process (e.g. the
	// OTEL_* variables).
	resolverEnv map[string]string
}

func startResolverStack(tb testing.TB, cfg resolverStackConfig) *resolverStack {
	tb.Helper()
	if cfg.resolverSessions <= 0 {
		cfg.resolverSessions = 16
	}
	s := &resolverStack{tb: tb}
	// The Resolver's Cosmos is behind the fault proxy when asked; the
	// endpoint's is not.
	s.standIns = startStandIns(tb, standInConfig{
		topo:         testenv.NimBusTopology(append([]string{endpointID}, cfg.nimbusEndpoints...)...),
		cosmosFaults: cfg.faults,
	})
	cosmosConn := fmt.Sprintf("AccountEndpoint=%s;AccountKey=%s;", s.cosmos.Endpoint, s.cosmos.Key)
	endpointSettings := s.endpointSettings("", "50ms", "500ms")
	endpointSettings["NimBus__Inbox__Cosmos__ConnectionString"] = cosmosConn
	s.endpoint = startHandler(tb, endpointSettings, append(s.secrets(), cosmosConn)...)
	settings := map[string]string{
		"NimBus__App":                      "Resolver",
		"NimBus__Resolver__Store":          "Cosmos",
		"NimBus__Cosmos__ConnectionString": s.cosmosConn,
		"NimBus__Cosmos__DatabaseId":       s.database,
		"ServiceBusConnection":             s.sb.ConnectionString,
		"NimBus__Retry__BaseDelay":         "50ms",
		"NimBus__Retry__MaxDelay":          "500ms",
		"NimBus__LogLevel":                 "info",
	}
	for k, v := range cfg.resolverEnv {
		settings[k] = v
	}
	s.resolver = startHandler(tb, settings, append(s.secrets(), cosmosConn)...)
	s.rows = cosmosRows{client: s.cosmosClient(tb), database: s.database}

	s.epHost = s.startHost(endpointID, endpointID, "Subscriber", s.endpoint, 8, 300*time.Millisecond)
	if cfg.resolverIdle <= 0 {
		cfg.resolverIdle = 300 * time.Millisecond
	}
	s.resHost = s.startHost(testenv.ResolverTopic, testenv.ResolverSubscription, "Resolver", s.resolver, cfg.resolverSessions, cfg.resolverIdle)

	snd, err := s.client.NewSender(endpointID, nil)
	if err != nil {
		tb.Fatal(err)
	}
	s.sender = snd
	return s
}

func (s *resolverStack) startHost(topic, sub, fn string, h *handlerProc, sessions int, idle time.Duration) *minihost.Host {
	s.tb.Helper()
	return startMiniHost(s.tb, minihost.Config{
		Client: s.sb.Client(s.tb), Topic: topic, Subscription: sub, Function: fn,
		Invoker: &minihost.Invoker{BaseURL: h.base}, MaxConcurrentSessions: sessions, SessionIdleTimeout: idle,
	})
}

func (s *resolverStack) send(evs ...event) {
	s.tb.Helper()
	for _, e := range evs {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := s.sender.SendMessage(ctx, e.message(), nil)
		cancel()
		if err != nil {
			s.tb.Fatalf("sending %s: %v", e.MessageID, err)
		}
	}
}

// row reads the tracking row of e's event.
func (s *resolverStack) row(e event) *trackedRow {
	s.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := s.rows.row(ctx, endpointID, e)
	if err != nil {
		s.tb.Fatalf("reading the tracking row of %s: %v", e.MessageID, err)
	}
	return r
}

// waitRow waits until e's tracking row satisfies ok.
func (s *resolverStack) waitRow(e event, timeout time.Duration, what string, ok func(*trackedRow) bool) *trackedRow {
	s.tb.Helper()
	var last *trackedRow
	testenv.WaitUntil(s.tb, timeout, func() bool {
		last = s.row(e)
		return last != nil && ok(last)
	}, func() string {
		return fmt.Sprintf("the tracking row of %s %s: last read %+v (endpoint host %+v, Resolver host %+v)",
			e.MessageID, what, last, s.epHost.Stats(), s.resHost.Stats())
	})
	return last
}

// resolverLines returns the Resolver's invocation lines.
func (s *resolverStack) resolverLines() []map[string]any {
	var out []map[string]any
	for _, l := range s.resolver.Lines() {
		if l.Fields != nil && l.Fields["function"] == "Resolver" && l.Fields["outcome"] != nil {
			out = append(out, l.Fields)
		}
	}
	return out
}

func strOf(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// TestResolverTracksTheEndpointsOutcomes deploys the binary twice (endpoint
// and Resolver). Published events reach the endpoint; its responses and the
// fan-out's request copies reach the Resolver, whose tracking rows read
// back Completed, Skipped with the DuplicateDetected reason, Unsupported,
// and Pending with the handoff sub-status. A request copy delivered after
// the response is refused as stale and the row stays Completed.
//
// Failed → Deferred → Completed after a resubmission is
// TestResolverTracksTheGoEndpointFailedDeferredCompleted (the Go endpoint)
// and TestResolverTracksNimBusFailedDeferredCompleted (the messages a NimBus
// endpoint and the NimBus Manager send).
func TestResolverTracksTheEndpointsOutcomes(t *testing.T) {
	t.Parallel()
	s := startResolverStack(t, resolverStackConfig{})
	done := order("OrderPlaced-done-1", "customer-a", 100, 0)
	dup := order("OrderPlaced-dup-1", "customer-b", 100, 0)
	unsupported := event{MessageID: "OrderCancelled-1", SessionID: "customer-c", EventID: guidFor("OrderCancelled-1"),
		EventTypeID: "OrderCancelled", EventJSON: `{"OrderId":"O-9"}`}
	handoff := order("OrderPlaced-big-1", "customer-d", 25000, 0)
	s.send(done, dup, unsupported, handoff)

	r := s.waitRow(done, 60*time.Second, "to be Completed", func(r *trackedRow) bool { return r.Status == "Completed" })
	// NimBus's terminal document: soft-deleted, 30 days.
	if r.MessageType != "ResolutionResponse" || r.EndpointID != endpointID || r.SessionID != done.SessionID || strOf(r.From) != endpointID ||
		!r.Deleted || r.TTL == nil || *r.TTL != 2592000 {
		t.Errorf("Completed row %+v", r)
	}
	s.waitRow(unsupported, 30*time.Second, "to be Unsupported", func(r *trackedRow) bool { return r.Status == "Unsupported" })
	r = s.waitRow(handoff, 30*time.Second, "to be Pending with the handoff sub-status", func(r *trackedRow) bool {
		return r.Status == "Pending" && r.MessageType == "PendingHandoffResponse"
	})
	// An unresolved row: not deleted, unlimited retention by default.
	if strOf(r.PendingSubStatus) != "Handoff" || strOf(r.HandoffReason) != "ManualApproval" || strOf(r.ExternalJobID) != "approval-O-big-1" ||
		r.Deleted || r.TTL == nil || *r.TTL != -1 {
		t.Errorf("handoff row %+v", r)
	}
	s.waitRow(dup, 30*time.Second, "to be Completed", func(r *trackedRow) bool { return r.Status == "Completed" })

	// The duplicate: the inbox skips it and the Resolver records Skipped
	// with the DuplicateDetected reason.
	s.send(dup)
	r = s.waitRow(dup, 30*time.Second, "to be Skipped", func(r *trackedRow) bool { return r.Status == "Skipped" })
	if strOf(r.Reason) != "DuplicateDetected" || r.MessageType != "SkipResponse" {
		t.Errorf("Skipped row %+v", r)
	}

	// A late request copy: the fan-out's copy of done's EventRequest
	// delivered after its response (here sent straight to the Resolver
	// topic, as a lagging forward would deliver it).
	late := done.message()
	late.ApplicationProperties["From"] = producerID
	rs, err := s.client.NewSender(testenv.ResolverTopic, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rs.SendMessage(ctx, late, nil); err != nil {
		t.Fatal(err)
	}
	var staleLine map[string]any
	testenv.WaitUntil(t, 30*time.Second, func() bool {
		staleLine = nil
		for _, l := range s.resolverLines() {
			if l["messageId"] == done.MessageID && l["outcome"] == "stale" {
				staleLine = l
			}
		}
		return staleLine != nil
	}, func() string { return "the Resolver's stale line for the late copy" })
	if staleLine["level"] != "warn" || staleLine["messageType"] != "EventRequest" || staleLine["status"] != "Pending" {
		t.Errorf("stale line %v", staleLine)
	}
	if r := s.row(done); r.Status != "Completed" || r.MessageType != "ResolutionResponse" {
		t.Errorf("after the late copy the row is %+v, want it still Completed", r)
	}

	// Every Resolver invocation completed; none failed.
	counts := map[string]int{}
	for _, l := range s.resolverLines() {
		counts[l["outcome"].(string)]++
	}
	if st := s.resHost.Stats(); st.Abandons != 0 || st.Failures != 0 {
		t.Errorf("Resolver host %+v, outcomes %v", st, counts)
	}
	// Four events and a duplicate: five request copies and five responses,
	// plus the late copy.
	if n := counts["written"] + counts["stale"]; n != 11 {
		t.Errorf("Resolver outcomes %v: %d messages tracked, want 11", counts, n)
	}
}

// TestResolverLosesNoOutcomeUnderCosmosFaults runs 1,000 events through the
// endpoint and the Resolver while 20% of the Resolver's Cosmos requests fail
// (503, 429, connections dropped before or after Cosmos applied them). Every
// event's row ends Completed, nothing is dead-lettered, and the failures
// were met by retries within the invocation and same-MessageId re-sends.
func TestResolverLosesNoOutcomeUnderCosmosFaults(t *testing.T) {
	longRun(t)
	s := startResolverStack(t, resolverStackConfig{faults: &testenv.FaultProxyOptions{
		Seed:  20261130,
		Rate:  0.2,
		Kinds: []testenv.FaultKind{testenv.FaultUnavailable, testenv.FaultThrottle, testenv.FaultDrop, testenv.FaultDropAfterForward},
	}})
	const sessions, perSession = 50, 20
	var evs []event
	for i := range sessions * perSession {
		evs = append(evs, order(fmt.Sprintf("OrderPlaced-f%04d", i), fmt.Sprintf("faults-%02d", i%sessions), 100, 0))
	}
	s.send(evs...)

	pending := map[string]event{}
	for _, e := range evs {
		pending[e.MessageID] = e
	}
	testenv.WaitUntil(t, 5*time.Minute, func() bool {
		for id, e := range pending {
			if r := s.row(e); r != nil && r.Status == "Completed" {
				delete(pending, id)
			}
		}
		return len(pending) == 0
	}, func() string {
		return fmt.Sprintf("%d of %d rows not Completed (endpoint host %+v, Resolver host %+v, faults %+v)",
			len(pending), len(evs), s.epHost.Stats(), s.resHost.Stats(), s.proxy.Counts())
	})

	counts := map[string]int{}
	quick := 0
	for _, l := range s.resolverLines() {
		counts[l["outcome"].(string)]++
		if n, ok := l["quickRetries"].(float64); ok {
			quick += int(n)
		}
	}
	fc := s.proxy.Counts()
	t.Logf("faults %+v; Resolver outcomes %v; %d quick retries", fc, counts, quick)
	if fc.Injected() < 100 {
		t.Errorf("only %d faults injected", fc.Injected())
	}
	if counts["store_budget_spent"] != 0 || counts["store_rejected"] != 0 || counts["invalid_message"] != 0 {
		t.Errorf("Resolver outcomes %v: a message failed toward the dead-letter queue", counts)
	}
	if quick == 0 {
		t.Error("no store write was retried; the faults did not reach the Resolver")
	}
	// Nothing in the Resolver subscription's dead-letter queue.
	r, err := s.client.NewReceiverForSubscription(testenv.ResolverTopic, testenv.ResolverSubscription, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ms, err := r.PeekMessages(ctx, 10, nil); err != nil || len(ms) != 0 {
		t.Errorf("Resolver dead-letter queue: %d messages (%v)", len(ms), err)
	}
}
