package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/dev/minihost"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv/handlerproc"
	"github.com/nimbus-go/functions-subscriber/internal/message/nimbusmsg"
)

// The crash and fault runs share this stack: the session-blocking design
// end to end. Cosmos (Strong) holds the inbox and the session state
// (optionally behind the fault proxy); Service Bus has NimBus's topology
// (optionally refusing a share of the handler's sends); two mini hosts feed
// the handler binary, one for the endpoint's session subscription
// (Subscriber) and one without sessions for DeferredProcessor; a collector
// reads the Resolver topic. The handler can be killed (SIGKILL) and started
// again on the same port while everything else keeps running.

// chaosConfig configures a chaos stack.
type chaosConfig struct {
	// cosmosFaults, when set, puts the fault proxy in front of Cosmos.
	cosmosFaults *testenv.FaultProxyOptions
	// sendFaults, when set, makes Service Bus refuse a share of sends.
	sendFaults *testenv.SendFaults
	// sbFaults, when set, puts the AMQP fault proxy between the handler
	// and Service Bus (the mini hosts and the collector connect directly).
	sbFaults *testenv.AMQPFaultOptions
	// topology, when set, changes the stack's topology (NimBus's for the
	// endpoint) before the stand-in starts.
	topology func(testenv.Topology) testenv.Topology
	// settings are added to the handler's app settings.
	settings map[string]string
	// sessions is the Subscriber host's MaxConcurrentSessions (default 8).
	sessions int
}

type chaosStack struct {
	tb testing.TB
	*standIns
	sender    *azservicebus.Sender
	resolver  *collector
	host      *minihost.Host // Subscriber
	replayer  *minihost.Host // DeferredProcessor
	transport *crashTransport
	container string
	// sbProxy is the AMQP fault proxy the handler reaches Service Bus
	// through (nil without chaosConfig.sbFaults).
	sbProxy *testenv.AMQPFaultProxy

	settings map[string]string
	secrets  []string
	port     int

	mu    sync.Mutex
	procs []*handlerproc.Proc // every handler process, in start order
	kills int
}

func startChaos(tb testing.TB, cfg chaosConfig) *chaosStack {
	tb.Helper()
	if cfg.sessions <= 0 {
		cfg.sessions = 8
	}
	s := &chaosStack{tb: tb, container: containerName(tb, "inbox")}
	topo := testenv.NimBusTopology(endpointID)
	if cfg.topology != nil {
		topo = cfg.topology(topo)
	}
	s.standIns = startStandIns(tb, standInConfig{topo: topo, cosmosFaults: cfg.cosmosFaults, sendFaults: cfg.sendFaults})
	s.settings = s.endpointSettings(s.container, "100ms", "1s")
	s.secrets = s.standIns.secrets()
	if cfg.sbFaults != nil {
		s.sbProxy = testenv.StartAMQPFaultProxy(tb, s.sb, *cfg.sbFaults)
		s.settings["ServiceBusConnection"] = s.sbProxy.ConnectionString
		s.secrets = append(s.secrets, s.sbProxy.ConnectionString)
	}
	s.settings["NimBus__Inbox__Cosmos__SessionContainerId"] = "state-" + s.container[len("inbox-"):]
	s.settings["NimBus__Session__Store"] = "Cosmos"
	for k, v := range cfg.settings {
		s.settings[k] = v
	}
	port, err := handlerproc.FreePort()
	if err != nil {
		tb.Fatal(err)
	}
	s.port = port
	s.startProc()
	tb.Cleanup(s.stopLast)

	s.resolver = startCollector(tb, s.sb.Client(tb), 16)
	s.transport = newCrashTransport(60 * time.Second)
	invoker := &minihost.Invoker{BaseURL: s.base(), Client: &http.Client{Transport: s.transport}}
	s.host = startMiniHost(tb, minihost.Config{
		Client: s.sb.Client(tb), Topic: endpointID, Subscription: endpointID, Function: "Subscriber",
		Invoker: invoker, MaxConcurrentSessions: cfg.sessions, SessionIdleTimeout: 300 * time.Millisecond,
	})
	s.replayer = startMiniHost(tb, minihost.Config{
		Client: s.sb.Client(tb), Topic: endpointID, Subscription: testenv.DeferredProcessorSub, NoSessions: true,
		Function: "DeferredProcessor", Invoker: invoker, MaxConcurrentCalls: 16, InvocationTimeout: 5 * time.Minute,
	})
	snd, err := s.client.NewSender(endpointID, nil)
	if err != nil {
		tb.Fatal(err)
	}
	s.sender = snd
	return s
}

// startProc starts a handler process on the stack's port and waits until
// it answers.
func (s *chaosStack) startProc() {
	s.tb.Helper()
	if err := s.launch(); err != nil {
		s.tb.Fatal(err)
	}
}

// launch is startProc for any goroutine: it returns what went wrong.
func (s *chaosStack) launch() error {
	bin, err := buildHandler()
	if err != nil {
		return err
	}
	p, err := handlerproc.Start(handlerproc.Options{Binary: bin, Settings: s.settings, Secrets: s.secrets, Port: s.port})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return p.WaitReady(ctx)
}

func (s *chaosStack) current() *handlerproc.Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[len(s.procs)-1]
}

// base is the handler's address (the same across restarts).
func (s *chaosStack) base() string { return fmt.Sprintf("http://127.0.0.1:%d", s.port) }

// crash kills the handler with SIGKILL and starts it again on the same
// port. Invocations the kill cut fail (the mini hosts abandon their
// messages); invocations that find nobody listening wait for the restart,
// as the Functions host waits for its worker.
func (s *chaosStack) crash(why string) {
	s.tb.Helper()
	p := s.current()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Kill(ctx); err != nil {
		s.tb.Fatal(err)
	}
	s.mu.Lock()
	s.kills++
	n := s.kills
	s.mu.Unlock()
	s.tb.Logf("kill %d (%s) after %d log lines of that process", n, why, len(p.Lines()))
	s.startProc()
}

// stopLast stops the running handler gracefully and reports data races any
// process printed.
func (s *chaosStack) stopLast() {
	p := s.current()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, err := p.Stop(ctx)
	if err != nil {
		s.tb.Errorf("the handler did not exit within 30s of SIGTERM: %v", err)
	} else if code != 0 {
		s.tb.Errorf("the handler exited with code %d after SIGTERM:\n%s", code, p.Output(40))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, q := range s.procs {
		if strings.Contains(q.Stderr(), "WARNING: DATA RACE") {
			s.tb.Errorf("handler process %d reported a data race:\n%s", i+1, q.Redact(q.Stderr()))
		}
	}
	if s.tb.Failed() {
		s.tb.Logf("last handler output:\n%s", p.Output(60))
		s.dumpLogs()
	}
}

// dumpLogs writes every handler process's stdout and stderr (secrets
// redacted) to a file in the temporary directory, for a failed run.
func (s *chaosStack) dumpLogs() {
	f, err := os.CreateTemp("", "chaos-*.log")
	if err != nil {
		s.tb.Logf("writing the handler logs: %v", err)
		return
	}
	defer f.Close()
	for i, q := range s.procs {
		fmt.Fprintf(f, "=== handler process %d\n", i+1)
		for _, l := range q.Lines() {
			fmt.Fprintln(f, q.Redact(l.Raw))
		}
		fmt.Fprintf(f, "--- stderr\n%s\n", q.Redact(q.Stderr()))
	}
	s.tb.Logf("every handler log line: %s", f.Name())
}

// send publishes messages in order.
func (s *chaosStack) send(ms ...*azservicebus.Message) {
	s.tb.Helper()
	for _, m := range ms {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := s.sender.SendMessage(ctx, m, nil)
		cancel()
		if err != nil {
			s.tb.Fatal(err)
		}
	}
}

// waitUntil polls cond until it holds or timeout passes.
func (s *chaosStack) waitUntil(timeout time.Duration, what string, cond func() bool) {
	s.tb.Helper()
	testenv.WaitUntil(s.tb, timeout, cond, func() string {
		return fmt.Sprintf("%s (Subscriber host %+v, DeferredProcessor host %+v, %d responses, collector: %s)",
			what, s.host.Stats(), s.replayer.Stats(), len(s.resolver.responses()), s.resolver.problems())
	})
}

// quiet waits until neither mini host has an invocation in flight and the
// Subscriber host has completed at least completes messages.
func (s *chaosStack) quiet(timeout time.Duration) {
	s.tb.Helper()
	s.waitUntil(timeout, "both mini hosts idle", func() bool {
		a, b := s.host.Stats(), s.replayer.Stats()
		return a.Invocations == a.Completes+a.Abandons+a.SettleErrors && b.Invocations == b.Completes+b.Abandons+b.SettleErrors
	})
}

// lines returns every log line of every handler process, process by
// process, each in its order.
func (s *chaosStack) lines() []chaosLine {
	s.mu.Lock()
	procs := append([]*handlerproc.Proc(nil), s.procs...)
	s.mu.Unlock()
	var out []chaosLine
	for i, p := range procs {
		for _, l := range p.Lines() {
			if l.Fields == nil || l.Str("outcome") == "" {
				continue
			}
			ran, _ := l.Fields["handlerRan"].(bool)
			out = append(out, chaosLine{
				Proc: i + 1, Seq: l.Seq, Function: l.Str("function"), MessageID: l.Str("messageId"), SessionID: l.Str("sessionId"),
				EventID: l.Str("eventId"), MessageType: l.Str("messageType"), DeliveryCount: int(l.Num("deliveryCount")),
				Outcome: l.Str("outcome"), Inbox: l.Str("inbox"), Operation: l.Str("operation"), HandlerRan: ran,
				ReplayStop: l.Str("replayStop"),
			})
		}
	}
	return out
}

// chaosLine is one per-invocation (or per-replayed-message) log line.
type chaosLine struct {
	Proc, Seq     int
	Function      string
	MessageID     string
	SessionID     string
	EventID       string
	MessageType   string
	DeliveryCount int
	Outcome       string
	Inbox         string
	Operation     string
	HandlerRan    bool
	ReplayStop    string
}

func (l chaosLine) String() string {
	return fmt.Sprintf("p%d#%d %s %s %s dc=%d %s/%s inbox=%s ran=%v", l.Proc, l.Seq, l.Function, l.MessageType, l.MessageID,
		l.DeliveryCount, l.Outcome, l.Operation, l.Inbox, l.HandlerRan)
}

// original: the line is an event's original delivery (not a retry,
// resubmission or replay).
func (l chaosLine) original() bool {
	return l.Function == "Subscriber" && l.MessageType == "EventRequest"
}

// recordFailedAfterRun: the handler ran and succeeded, then the inbox
// record failed, so the delivery fails and the handler runs again on the
// next one: the documented re-run window.
func (l chaosLine) recordFailedAfterRun() bool {
	return l.HandlerRan && l.Outcome == "transient_failure" && l.Operation == "record"
}

// ---------------------------------------------------------------------------
// The invoker's transport

// crashTransport is the mini hosts' HTTP transport. A connection that
// cannot be made (the handler is down) is retried until the handler
// answers again or wait passes, as the Functions host holds invocations
// while it restarts its worker. Any other failure (the kill cut a request
// in flight) fails the invocation and is noted, with the message it
// carried.
type crashTransport struct {
	base *http.Transport
	wait time.Duration

	mu  sync.Mutex
	cut []cutInvocation
}

// cutInvocation is an invocation a kill cut: the handler may or may not
// have run for it.
type cutInvocation struct {
	Function  string
	MessageID string
	SessionID string
	EventID   string
	Type      string
	At        time.Time
}

func newCrashTransport(wait time.Duration) *crashTransport {
	// No keep-alive: every invocation dials, so a refused dial means that
	// nothing reached the handler, and any later failure means the request
	// was (at least partly) sent to a process that died.
	return &crashTransport{base: &http.Transport{DisableKeepAlives: true}, wait: wait}
}

func (t *crashTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(t.wait)
	for {
		r := req.Clone(req.Context())
		r.Body = io.NopCloser(struct{ io.Reader }{bytes.NewReader(body)})
		r.ContentLength = -1
		resp, err := t.base.RoundTrip(r)
		if err == nil {
			return resp, nil
		}
		if refused(err) && time.Now().Before(deadline) && req.Context().Err() == nil {
			select {
			case <-req.Context().Done():
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		t.noteCut(req, body)
		return nil, err
	}
}

func refused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" && errors.Is(err, syscall.ECONNREFUSED)
}

func (t *crashTransport) noteCut(req *http.Request, envelope []byte) {
	var env struct {
		Metadata struct {
			MessageID             string         `json:"MessageId"`
			SessionID             string         `json:"SessionId"`
			ApplicationProperties map[string]any `json:"ApplicationProperties"`
		} `json:"Metadata"`
	}
	_ = json.Unmarshal(envelope, &env)
	unq := func(s string) string {
		var v string
		if json.Unmarshal([]byte(s), &v) == nil {
			return v
		}
		return s
	}
	c := cutInvocation{Function: strings.TrimPrefix(req.URL.Path, "/"), MessageID: unq(env.Metadata.MessageID),
		SessionID: unq(env.Metadata.SessionID), At: time.Now()}
	c.EventID, _ = env.Metadata.ApplicationProperties["EventId"].(string)
	c.Type, _ = env.Metadata.ApplicationProperties["MessageType"].(string)
	t.mu.Lock()
	t.cut = append(t.cut, c)
	t.mu.Unlock()
}

func (t *crashTransport) cuts() []cutInvocation {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]cutInvocation(nil), t.cut...)
}

// ---------------------------------------------------------------------------
// Events and the checks both runs make

// chaosEvent is one event of a run and whether the sample handler fails
// its original delivery.
type chaosEvent struct {
	event
	fails bool
}

// newChaosEvent builds the i-th event of session sid; fails sets the sample
// handler's Fail=failed (on the original delivery only).
func newChaosEvent(sid string, i int, fails bool) chaosEvent {
	mid := fmt.Sprintf("%s-%03d", sid, i)
	js := fmt.Sprintf(`{"OrderId":"O-%s","Amount":%d`, mid, 10+i)
	if fails {
		js += `,"Fail":"failed","FailOn":"original"`
	}
	return chaosEvent{event: event{MessageID: mid, SessionID: sid, EventID: guidFor(mid), EventTypeID: orderPlaced, EventJSON: js + "}"}, fails: fails}
}

func (r received) eventID() string {
	s, _ := r.msg.ApplicationProperties["EventId"].(string)
	return s
}

// resolves: the response settles its event for the Resolver.
func (r received) resolves() bool {
	return r.messageType() == "ResolutionResponse" || r.messageType() == "SkipResponse"
}

// resolved returns the EventIds with a ResolutionResponse or SkipResponse.
func (s *chaosStack) resolved() map[string]bool {
	out := map[string]bool{}
	for _, r := range s.resolver.responses() {
		if r.resolves() {
			out[r.eventID()] = true
		}
	}
	return out
}

// errorResponse returns the first ErrorResponse for eventID, or nil.
func (s *chaosStack) errorResponse(eventID string) *received {
	for _, r := range s.resolver.responses() {
		if r.messageType() == "ErrorResponse" && r.eventID() == eventID {
			return &r
		}
	}
	return nil
}

// resubmission is the Manager's ResubmissionRequest for the failed event
// e, built from its ErrorResponse as the Resolver stores it.
func resubmission(er received, e chaosEvent) *azservicebus.Message {
	orig, _ := er.msg.ApplicationProperties["OriginatingMessageId"].(string)
	m := nimbusmsg.Resubmission(nimbusmsg.ErrorResponse{
		MessageID: er.msg.MessageID, CorrelationID: er.correlationID(), EventID: e.EventID, SessionID: e.SessionID,
		OriginatingMessageID: orig,
	}, endpointID, e.EventTypeID, e.EventJSON)
	sid := m.SessionID
	return &azservicebus.Message{SessionID: &sid, CorrelationID: m.CorrelationID, Body: m.Body, ApplicationProperties: m.ApplicationProperties}
}

// chaosReport is what checkRun found.
type chaosReport struct {
	runs        int // successful handler runs seen in the logs
	reruns      int // successful runs beyond the first, per event
	windowLines int // runs whose record failed after them
	failedRuns  int // original deliveries the handler failed
	// failedEvents are the events whose original delivery failed (at
	// least once: a failure whose answer did not go out fails again).
	failedEvents int
	cutRuns      int // cut invocations that may have run a handler
	outcomes     map[string]int
	deliveries   map[string]int // per EventId: log lines of its messages
	// resolverOrder are the sessions whose events the Resolver heard of
	// in another order than they were handled.
	resolverOrder []string
}

// checkRun asserts what both runs promise, from the Resolver's responses
// and the handler's log lines:
//   - nothing lost: every event has a ResolutionResponse or SkipResponse;
//   - per-session order is asserted by checkRecords; the Resolver's order
//     is reported (rep.resolverOrder);
//   - re-runs: an event's handler succeeds once, plus once more per run
//     whose inbox record failed after it (the documented window), plus at
//     most once per invocation a kill cut that may have been running it
//     (its record may not have been durable: the same window); a later
//     redelivery of a recorded event is a duplicate.
func (s *chaosStack) checkRun(t *testing.T, evs []chaosEvent) chaosReport {
	t.Helper()
	rep := chaosReport{outcomes: map[string]int{}, deliveries: map[string]int{}}
	bySession := map[string][]chaosEvent{}
	byEvent := map[string]chaosEvent{}
	for _, e := range evs {
		bySession[e.SessionID] = append(bySession[e.SessionID], e)
		byEvent[e.EventID] = e
	}
	// Nothing lost, order held.
	resolved := s.resolved()
	lost := 0
	for _, e := range evs {
		if !resolved[e.EventID] {
			lost++
			if lost <= 10 {
				t.Errorf("event %s (%s) lost: no ResolutionResponse or SkipResponse", e.MessageID, e.EventID)
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d events lost", lost, len(evs))
		for _, e := range evs {
			if resolved[e.EventID] {
				continue
			}
			var got []string
			s.resolver.mu.Lock()
			for _, r := range s.resolver.bySession[e.SessionID] {
				got = append(got, fmt.Sprintf("%s/%s/seq=%d", r.messageType(), r.correlationID(), *r.msg.SequenceNumber))
			}
			s.resolver.mu.Unlock()
			t.Logf("session %s (%d messages on the Resolver): %s", e.SessionID, len(got), strings.Join(got, " "))
			break
		}
	}
	sids := make([]string, 0, len(bySession))
	for sid := range bySession {
		sids = append(sids, sid)
	}
	sort.Strings(sids)
	for _, sid := range sids {
		var got, want []string
		seen := map[string]bool{}
		for _, r := range s.resolver.sessionResponses(sid) {
			if e, ok := byEvent[r.eventID()]; ok && r.resolves() && !seen[e.EventID] {
				seen[e.EventID] = true
				got = append(got, e.MessageID)
			}
		}
		for _, e := range bySession[sid] {
			want = append(want, e.MessageID)
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			// Not a handling-order failure (checkRecords asserts that): an
			// unblocking event's response can fail after its replay request
			// went out, and its duplicate's SkipResponse then follows the
			// replayed events' responses.
			rep.resolverOrder = append(rep.resolverOrder, sid)
			t.Logf("session %s: the Resolver heard of its events in the order\n%s", sid, strings.Join(got, " "))
		}
	}

	// Re-runs.
	lines := s.lines()
	success := map[string]int{}
	window := map[string]int{}
	failedSeen := map[string]bool{}
	for _, l := range lines {
		rep.outcomes[l.Function+"/"+l.Outcome]++
		e, ok := byEvent[l.EventID]
		if !ok {
			continue
		}
		rep.deliveries[e.EventID]++
		if !l.HandlerRan {
			continue
		}
		if e.fails && l.original() {
			if rep.failedRuns++; !failedSeen[e.EventID] {
				failedSeen[e.EventID] = true
				rep.failedEvents++
			}
			continue
		}
		success[e.EventID]++
		rep.runs++
		if l.recordFailedAfterRun() {
			window[e.EventID]++
			rep.windowLines++
		}
	}
	cutBy := map[string]int{}
	for _, c := range s.transport.cuts() {
		switch {
		case c.Function == "DeferredProcessor":
			// A replay in flight may have been running any parked event of
			// its session.
			for _, e := range bySession[c.SessionID] {
				cutBy[e.EventID]++
			}
			rep.cutRuns++
		case c.EventID != "":
			cutBy[c.EventID]++
			rep.cutRuns++
		}
	}
	for _, e := range evs {
		n := success[e.EventID]
		if n > 1 {
			rep.reruns += n - 1
		}
		if allowed := 1 + window[e.EventID] + cutBy[e.EventID]; n > allowed {
			t.Errorf("event %s: the handler succeeded %d times, at most %d explained (1 + %d failed records after a run + %d cut invocations)",
				e.MessageID, n, allowed, window[e.EventID], cutBy[e.EventID])
			for _, l := range lines {
				if l.EventID == e.EventID {
					t.Logf("  %s", l)
				}
			}
		}
		if n == 0 && cutBy[e.EventID] == 0 {
			t.Errorf("event %s: no successful handler run in the logs, and no cut invocation explains it", e.MessageID)
		}
	}
	return rep
}

// checkRecords asserts that every event's original MessageId has an inbox
// record (directly, or as the InboxMessageId of the retry, resubmission or
// replay that handled it), and that within each session the records were
// made in send order: a record is written right after the handler
// succeeded, so its createdAtUtc (100 ns resolution) orders the handler
// completions.
func (s *chaosStack) checkRecords(t *testing.T, evs []chaosEvent) {
	t.Helper()
	reader := &stack{tb: t, standIns: s.standIns, container: s.container}
	ids := make([]string, len(evs))
	for i, e := range evs {
		ids[i] = e.MessageID
	}
	recs := reader.inboxRecords(ids...)
	missing := 0
	last := map[string]time.Time{}
	lastID := map[string]string{}
	for _, e := range evs {
		rec, ok := recs[e.MessageID]
		if !ok {
			missing++
			if missing <= 10 {
				t.Errorf("%s: no inbox record", e.MessageID)
			}
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, rec.CreatedAtUTC)
		if err != nil {
			t.Errorf("%s: createdAtUtc %q: %v", e.MessageID, rec.CreatedAtUTC, err)
			continue
		}
		if prev, ok := last[e.SessionID]; ok && !at.After(prev) {
			t.Errorf("session %s: %s was recorded at %s, not after %s (%s): handled out of send order",
				e.SessionID, e.MessageID, rec.CreatedAtUTC, lastID[e.SessionID], prev.Format(time.RFC3339Nano))
		}
		last[e.SessionID], lastID[e.SessionID] = at, e.MessageID
	}
	if missing > 0 {
		t.Errorf("%d of %d events have no inbox record", missing, len(evs))
	}
}

// deadLettered counts the dead-lettered messages of each subscription of
// the endpoint topic.
func (s *chaosStack) deadLettered() map[string]int {
	s.tb.Helper()
	out := map[string]int{}
	for _, sub := range []string{endpointID, testenv.DeferredSubscription, testenv.DeferredProcessorSub} {
		r, err := s.client.NewReceiverForSubscription(endpointID, sub, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
		if err != nil {
			s.tb.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ms, err := r.PeekMessages(ctx, 100, nil)
		_ = r.Close(ctx)
		cancel()
		if err != nil {
			s.tb.Fatalf("peeking the dead-letter queue of %s: %v", sub, err)
		}
		if len(ms) > 0 {
			out[sub] = len(ms)
		}
	}
	return out
}

// deadLetteredIDs peeks the MessageIds of the messages dead-lettered on
// the endpoint topic's subscription sub.
func (s *chaosStack) deadLetteredIDs(sub string) []string {
	s.tb.Helper()
	r, err := s.client.NewReceiverForSubscription(endpointID, sub, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		s.tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defer r.Close(ctx)
	ms, err := r.PeekMessages(ctx, 100, nil)
	if err != nil {
		s.tb.Fatalf("peeking the dead-letter queue of %s: %v", sub, err)
	}
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.MessageID
	}
	return ids
}

func outcomeSummary(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}
