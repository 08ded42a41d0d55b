package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/dev/minihost"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv/handlerproc"
)

// The sample endpoint and the producer whose events it consumes.
const (
	endpointID  = "BillingEndpoint"
	producerID  = "ShopEndpoint"
	orderPlaced = "OrderPlaced"
)

// TestMain runs the tests and benchmarks; the stand-ins they share and the
// handler binary's directory go when they end.
func TestMain(m *testing.M) { os.Exit(handlerproc.RunTests(sharedStandIns{m})) }

// sharedStandIns runs the tests with the package's shared Cosmos server.
type sharedStandIns struct{ m *testing.M }

func (s sharedStandIns) Run() int { return testenv.RunMain(s.m) }

// buildHandler builds ./handler once per test binary (with -race when this
// test binary has the race detector) and returns its path. It needs no
// testing.TB, so a goroutine that restarts the handler may call it.
func buildHandler() (string, error) {
	var flags []string
	if raceEnabled {
		flags = append(flags, "-race")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	return handlerproc.TestBinary(ctx, flags...)
}

// handlerBinary is buildHandler for a test: a failed build fails every
// test that needs it. Tests that -short skips never build it.
func handlerBinary(tb testing.TB) string {
	tb.Helper()
	bin, err := buildHandler()
	if err != nil {
		tb.Fatalf("building the handler: %v", err)
	}
	return bin
}

// longRun skips tb under -short: what is an end-to-end run of many
// messages, a crash, a fault or an outage is left to the full suite.
func longRun(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("a long end-to-end run: the full suite (go test without -short, scripts/test.sh) runs it")
	}
}

// ---------------------------------------------------------------------------
// The handler process

// invocation is one per-invocation log line of the handler.
type invocation struct {
	Seq           int // position among the handler's stdout lines
	Function      string
	InvocationID  string
	Endpoint      string
	MessageID     string
	SessionID     string
	EventID       string
	EventTypeID   string
	MessageType   string
	DeliveryCount int
	Outcome       string
	Inbox         string
	Operation     string
	DurationMs    float64
	// TxnReruns: how often a transactional handler ran again after its
	// batch conflicted.
	TxnReruns int
}

// handlerRan reports whether the app handler ran in this invocation, from the
// outcome: the handler runs before completed, pending_handoff and
// handler_failed, and before a failed inbox record.
func (iv invocation) handlerRan() bool {
	switch iv.Outcome {
	case "completed", "pending_handoff", "handler_failed":
		return true
	case "transient_failure":
		return iv.Operation == "record"
	}
	return false
}

// handlerProc is the running handler binary.
type handlerProc struct {
	*handlerproc.Proc
	base string
}

// startHandler starts the binary with settings (app setting → value) and
// waits until it answers GET /. secrets are replaced in anything printed.
// When tb ends, the handler is stopped with SIGTERM and must exit cleanly
// (and, built with -race, without reporting a data race).
func startHandler(tb testing.TB, settings map[string]string, secrets ...string) *handlerProc {
	tb.Helper()
	p, err := handlerproc.Start(handlerproc.Options{Binary: handlerBinary(tb), Settings: settings, Secrets: secrets})
	if err != nil {
		tb.Fatal(err)
	}
	h := &handlerProc{Proc: p, base: p.BaseURL()}
	tb.Cleanup(func() { h.stop(tb) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.WaitReady(ctx); err != nil {
		tb.Fatal(err)
	}
	return h
}

// stop sends SIGTERM, waits for a clean exit and reports data races the
// race-instrumented handler printed.
func (h *handlerProc) stop(tb testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, err := h.Stop(ctx)
	if err != nil {
		tb.Errorf("the handler did not exit within 30s of SIGTERM: %v", err)
	}
	if stderr := h.Stderr(); strings.Contains(stderr, "WARNING: DATA RACE") {
		tb.Errorf("the handler process reported a data race:\n%s", h.Redact(stderr))
	} else if err == nil && code != 0 {
		tb.Errorf("the handler exited with code %d after SIGTERM:\n%s", code, h.Output(40))
	}
	if tb.Failed() {
		tb.Logf("handler output (last lines):\n%s", h.Output(60))
	}
}

// invocations returns the Subscriber invocation lines in stdout order.
func (h *handlerProc) invocations() []invocation {
	var out []invocation
	for _, l := range h.Lines() {
		if l.Fields == nil || l.Fields["function"] != "Subscriber" {
			continue
		}
		if _, ok := l.Fields["outcome"]; !ok {
			continue
		}
		out = append(out, invocation{
			Seq: l.Seq, Function: l.Str("function"), InvocationID: l.Str("invocationId"), Endpoint: l.Str("endpoint"),
			MessageID: l.Str("messageId"), SessionID: l.Str("sessionId"), EventID: l.Str("eventId"), EventTypeID: l.Str("eventTypeId"),
			MessageType: l.Str("messageType"), DeliveryCount: int(l.Num("deliveryCount")), Outcome: l.Str("outcome"),
			Inbox: l.Str("inbox"), Operation: l.Str("operation"), DurationMs: l.Num("durationMs"),
			TxnReruns: int(l.Num("txnReruns")),
		})
	}
	return out
}

// byMessage groups invocation lines by MessageId, in order.
func byMessage(ivs []invocation) map[string][]invocation {
	out := map[string][]invocation{}
	for _, iv := range ivs {
		out[iv.MessageID] = append(out[iv.MessageID], iv)
	}
	return out
}

// ---------------------------------------------------------------------------
// Resolver collector

// received is a message read from the Resolver subscription and when.
type received struct {
	msg *azservicebus.ReceivedMessage
	at  time.Time
}

func (r received) messageType() string {
	s, _ := r.msg.ApplicationProperties["MessageType"].(string)
	return s
}

// isResponse tells a subscriber response from the audit copy of a request
// the topology also forwards to the Resolver.
func (r received) isResponse() bool { return r.messageType() != "EventRequest" }

func (r received) correlationID() string {
	if r.msg.CorrelationID == nil {
		return ""
	}
	return *r.msg.CorrelationID
}

// collector receives everything that reaches the Resolver topic's session
// subscription, as the NimBus Resolver does: session by session, in order.
type collector struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu           sync.Mutex
	all          []received
	bySession    map[string][]received
	settleErrors int
	redelivered  int
	seen         map[int64]bool // sequence numbers received
}

func startCollector(tb testing.TB, client *azservicebus.Client, workers int) *collector {
	ctx, cancel := context.WithCancel(context.Background())
	c := &collector{cancel: cancel, bySession: map[string][]received{}, seen: map[int64]bool{}}
	for range workers {
		c.wg.Add(1)
		go c.worker(ctx, client)
	}
	tb.Cleanup(c.stop)
	return c
}

func (c *collector) stop() {
	c.cancel()
	c.wg.Wait()
}

func (c *collector) worker(ctx context.Context, client *azservicebus.Client) {
	defer c.wg.Done()
	for ctx.Err() == nil {
		// A long accept wait, for the reason given at startMiniHost.
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		sr, err := client.AcceptNextSessionForSubscription(actx, testenv.ResolverTopic, testenv.ResolverSubscription, nil)
		cancel()
		if err != nil {
			var sbErr *azservicebus.Error
			if ctx.Err() == nil && !(errors.As(err, &sbErr) && sbErr.Code == azservicebus.CodeTimeout) && !errors.Is(err, context.DeadlineExceeded) {
				// A broker error: back off before accepting again (the
				// collector's retry pace, not a wait in a test).
				select {
				case <-ctx.Done():
				case <-time.After(50 * time.Millisecond):
				}
			}
			continue
		}
		for ctx.Err() == nil {
			// One message per call, as the mini host receives. With more
			// credit, a batch that returns early leaves messages in flight;
			// the SDK's releaser gives some back to the broker while later
			// ones stay prefetched, and the session's order is lost.
			rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			ms, err := sr.ReceiveMessages(rctx, 1, nil)
			cancel()
			now := time.Now()
			if len(ms) > 0 {
				c.mu.Lock()
				for _, m := range ms {
					// A copy redelivered after a failed settlement keeps its
					// sequence number: the Resolver would see it again, but
					// it is one message. (MessageIds repeat: audit copies
					// of a re-sent request share the request's.)
					if m.SequenceNumber != nil {
						if c.seen[*m.SequenceNumber] {
							c.redelivered++
							continue
						}
						c.seen[*m.SequenceNumber] = true
					}
					r := received{msg: m, at: now}
					c.all = append(c.all, r)
					sid := ""
					if m.SessionID != nil {
						sid = *m.SessionID
					}
					c.bySession[sid] = append(c.bySession[sid], r)
				}
				c.mu.Unlock()
			}
			for _, m := range ms {
				sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if err := sr.CompleteMessage(sctx, m, nil); err != nil {
					c.mu.Lock()
					c.settleErrors++
					c.mu.Unlock()
				}
				cancel()
			}
			if err != nil || len(ms) == 0 {
				break
			}
		}
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = sr.Close(cctx)
		cancel()
	}
}

// problems describes the settlement trouble the collector saw.
func (c *collector) problems() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("%d settle errors, %d redeliveries", c.settleErrors, c.redelivered)
}

// responses returns the subscriber responses received so far, in arrival
// order.
func (c *collector) responses() []received {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []received
	for _, r := range c.all {
		if r.isResponse() {
			out = append(out, r)
		}
	}
	return out
}

// audits counts the audit copies of requests received so far.
func (c *collector) audits() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.all {
		if !r.isResponse() {
			n++
		}
	}
	return n
}

// sessionResponses returns the responses of one session in the order the
// Resolver subscription delivered them.
func (c *collector) sessionResponses(sid string) []received {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []received
	for _, r := range c.bySession[sid] {
		if r.isResponse() {
			out = append(out, r)
		}
	}
	return out
}

// responsesByRequest groups the responses by CorrelationId (the inbound
// MessageId).
func (c *collector) responsesByRequest() map[string][]received {
	out := map[string][]received{}
	for _, r := range c.responses() {
		out[r.correlationID()] = append(out[r.correlationID()], r)
	}
	return out
}

// ---------------------------------------------------------------------------
// The stand-ins and the mini hosts

// standInConfig configures the stand-ins of one test.
type standInConfig struct {
	// topo is the Service Bus topology (NimBus's for the endpoint when
	// empty).
	topo testenv.Topology
	// cosmosFaults, when set, puts the fault proxy in front of Cosmos with
	// these options (Disabled makes it a counting proxy).
	cosmosFaults *testenv.FaultProxyOptions
	// sendFaults, when set, makes Service Bus refuse a share of sends.
	sendFaults *testenv.SendFaults
}

// standIns are what every end-to-end test runs on: the package's shared
// Cosmos server (Strong) with a database of the test's own, optionally
// behind the fault proxy, and a Service Bus stand-in of the test's own.
type standIns struct {
	cosmos *testenv.Cosmos
	proxy  *testenv.FaultProxy
	// database is the test's Cosmos database: every Cosmos setting of the
	// handlers names it.
	database string
	// cosmosConn reaches Cosmos through the proxy when there is one.
	cosmosConn string
	sb         *testenv.ServiceBus
	client     *azservicebus.Client // for the test's own sends and peeks
}

func startStandIns(tb testing.TB, cfg standInConfig) *standIns {
	tb.Helper()
	si := &standIns{cosmos: testenv.SharedCosmos(tb, testenv.CosmosOptions{Consistency: "Strong"})}
	si.database = si.cosmos.Database(tb) // dropped after the handlers stop
	endpoint := si.cosmos.Endpoint
	if cfg.cosmosFaults != nil {
		si.proxy = testenv.StartFaultProxy(tb, si.cosmos.Endpoint, *cfg.cosmosFaults)
		endpoint = si.proxy.URL
	}
	si.cosmosConn = fmt.Sprintf("AccountEndpoint=%s;AccountKey=%s;", endpoint, si.cosmos.Key)
	topo := cfg.topo
	if len(topo.Topics) == 0 && len(topo.Queues) == 0 {
		topo = testenv.NimBusTopology(endpointID)
	}
	if cfg.sendFaults != nil {
		si.sb = testenv.StartServiceBusWithSendFaults(tb, topo, *cfg.sendFaults)
	} else {
		si.sb = testenv.StartServiceBus(tb, topo)
	}
	si.client = si.sb.Client(tb)
	return si
}

// secrets are the strings no handler output may show.
func (si *standIns) secrets() []string {
	return []string{si.cosmos.Key, si.cosmosConn, si.sb.ConnectionString}
}

// cosmosClient is a client of the Cosmos server itself (not through the
// proxy), for reading what the handlers wrote.
func (si *standIns) cosmosClient(tb testing.TB) *azcosmos.Client {
	tb.Helper()
	return si.cosmos.Client(tb)
}

// startMiniHost starts a mini host for cfg and stops it when tb ends.
// Unset, Binding is "message", AcceptTimeout 5 s and InvocationTimeout
// 2 min. The long accept wait: when an AcceptNextSession deadline expires
// during the SDK's CBS negotiation (a loaded machine), azservicebus
// recycles the client's whole AMQP connection, which kills the other
// workers' session links mid-settlement. Idle workers wait in the broker
// instead and are refused with com.microsoft:timeout.
func startMiniHost(tb testing.TB, cfg minihost.Config) *minihost.Host {
	tb.Helper()
	if cfg.Binding == "" {
		cfg.Binding = "message"
	}
	if cfg.AcceptTimeout == 0 {
		cfg.AcceptTimeout = 5 * time.Second
	}
	if cfg.InvocationTimeout == 0 {
		cfg.InvocationTimeout = 2 * time.Minute
	}
	host, err := minihost.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := host.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := host.Stop(ctx); err != nil {
			tb.Errorf("stopping the %s mini host: %v", cfg.Function, err)
		}
	})
	return host
}

// containerName is "<prefix>-<the test's name>" as a container id.
func containerName(tb testing.TB, prefix string) string {
	name := prefix + "-" + strings.Trim(nonContainerChars.ReplaceAllString(tb.Name(), "-"), "-")
	if len(name) > 180 {
		name = name[:180]
	}
	return name
}

// ---------------------------------------------------------------------------
// The whole stack

type stackConfig struct {
	// faults, when set, puts the fault proxy in front of Cosmos with these
	// options (Disabled makes it a counting proxy).
	faults *testenv.FaultProxyOptions
	// sessions is the mini host's MaxConcurrentSessions (default 8).
	sessions int
	// retryBase and retryMax pace redeliveries (default 50ms and 500ms).
	retryBase, retryMax string
	// ingress, when set, adds a CloudEvents ingress topic of that name with
	// the endpoint's session subscription, turns CloudEvents on (keyed on
	// source and id) and runs a second mini host for CloudEventsIngress.
	ingress string
	// settings are further app settings of the handler (retry policies,
	// session settings); they override the stack's own.
	settings map[string]string
	// deferred adds a mini host for the DeferredProcessor function on the
	// endpoint topic's DeferredProcessor subscription (no sessions), so
	// parked messages are replayed.
	deferred bool
	// topology, when set, changes the stack's topology (NimBus's for the
	// endpoint) before the stand-in starts: forwarders, taps.
	topology func(testenv.Topology) testenv.Topology
}

// stack is Cosmos (Strong) [+ fault proxy] + Service Bus (NimBus topology)
// + the handler binary + the mini host + a Resolver collector.
type stack struct {
	tb testing.TB
	*standIns
	handler *handlerProc
	host    *minihost.Host
	// ingressHost drains the CloudEvents ingress subscription (nil without
	// an ingress).
	ingressHost *minihost.Host
	// deferredHost drains the DeferredProcessor subscription (nil unless
	// stackConfig.deferred).
	deferredHost *minihost.Host
	resolver     *collector
	container    string

	sender *azservicebus.Sender
	mu     sync.Mutex
	sentAt map[string][]time.Time // MessageId → when each copy was sent
}

var nonContainerChars = regexp.MustCompile(`[^A-Za-z0-9-]+`)

func startStack(tb testing.TB, cfg stackConfig) *stack {
	tb.Helper()
	if cfg.sessions <= 0 {
		cfg.sessions = 8
	}
	if cfg.retryBase == "" {
		cfg.retryBase, cfg.retryMax = "50ms", "500ms"
	}
	s := &stack{tb: tb, sentAt: map[string][]time.Time{}, container: containerName(tb, "inbox")}
	topo := testenv.NimBusTopology(endpointID)
	if cfg.ingress != "" {
		topo.Topics = append(topo.Topics, testenv.Topic{Name: cfg.ingress, Subscriptions: []testenv.Subscription{
			{Name: endpointID, RequiresSession: true, MaxDeliveryCount: 10},
		}})
	}
	if cfg.topology != nil {
		topo = cfg.topology(topo)
	}
	s.standIns = startStandIns(tb, standInConfig{topo: topo, cosmosFaults: cfg.faults})

	settings := s.endpointSettings(s.container, cfg.retryBase, cfg.retryMax)
	if cfg.ingress != "" {
		settings["NimBus__CloudEvents__Enabled"] = "true"
		settings["NimBus__CloudEvents__Deduplication"] = "SourceAndId"
		settings["NimBus__CloudEvents__IngressTopic"] = cfg.ingress
		settings["NimBus__CloudEvents__IngressSubscription"] = endpointID
	}
	for k, v := range cfg.settings {
		settings[k] = v
	}
	s.handler = startHandler(tb, settings, s.secrets()...)

	s.resolver = startCollector(tb, s.sb.Client(tb), 16)

	s.host = s.startHost(endpointID, "Subscriber", cfg.sessions)
	if cfg.ingress != "" {
		s.ingressHost = s.startHost(cfg.ingress, "CloudEventsIngress", cfg.sessions)
	}
	if cfg.deferred {
		s.deferredHost = startDeferredHost(tb, s.sb.Client(tb), s.handler.base)
	}

	snd, err := s.client.NewSender(endpointID, nil)
	if err != nil {
		tb.Fatal(err)
	}
	s.sender = snd
	return s
}

// endpointSettings are the app settings of an endpoint handler on si: the
// endpoint, its Cosmos inbox in the test's database (in container unless
// it is empty), Service Bus and the retry pace.
func (si *standIns) endpointSettings(container, retryBase, retryMax string) map[string]string {
	settings := map[string]string{
		"NimBus__Endpoint":                        endpointID,
		"NimBus__Inbox__Enabled":                  "true",
		"NimBus__Inbox__Store":                    "Cosmos",
		"NimBus__Inbox__Cosmos__ConnectionString": si.cosmosConn,
		"NimBus__Inbox__Cosmos__DatabaseId":       si.database,
		"NimBus__Inbox__CleanupSchedule":          "0 0 * * * *",
		"NimBus__Outbox__SweepSchedule":           "0 */5 * * * *",
		"ServiceBusConnection":                    si.sb.ConnectionString,
		"NimBus__Retry__BaseDelay":                retryBase,
		"NimBus__Retry__MaxDelay":                 retryMax,
		"NimBus__LogLevel":                        "info",
	}
	if container != "" {
		settings["NimBus__Inbox__Cosmos__ContainerId"] = container
	}
	return settings
}

// startHost starts a mini host that drains topic's session subscription
// named after the endpoint and invokes function.
func (s *stack) startHost(topic, function string, sessions int) *minihost.Host {
	return startMiniHost(s.tb, minihost.Config{
		Client:                s.sb.Client(s.tb),
		Topic:                 topic,
		Subscription:          endpointID,
		Function:              function,
		Invoker:               &minihost.Invoker{BaseURL: s.handler.base},
		MaxConcurrentSessions: sessions,
		SessionIdleTimeout:    300 * time.Millisecond,
	})
}

// send publishes the events in order, as NimBus's forwarder delivers them
// to topic BillingEndpoint.
func (s *stack) send(evs ...event) {
	s.tb.Helper()
	for _, e := range evs {
		if err := s.sendOne(e); err != nil {
			s.tb.Fatal(err)
		}
	}
}

// sendOne publishes e and notes when.
func (s *stack) sendOne(e event) error {
	return s.sendMessage(e.MessageID, e.message())
}

// sendRaw publishes m (built from the event with the id messageID, then
// changed) and notes when.
func (s *stack) sendRaw(messageID string, m *azservicebus.Message) {
	s.tb.Helper()
	if err := s.sendMessage(messageID, m); err != nil {
		s.tb.Fatal(err)
	}
}

func (s *stack) sendMessage(messageID string, m *azservicebus.Message) error {
	e := event{MessageID: messageID}
	s.mu.Lock()
	s.sentAt[e.MessageID] = append(s.sentAt[e.MessageID], time.Now())
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.sender.SendMessage(ctx, m, nil); err != nil {
		return fmt.Errorf("sending %s: %w", e.MessageID, err)
	}
	return nil
}

// sendPerSession publishes the events of each session in order, the
// sessions concurrently (one goroutine each, one shared sender), so the
// sender is not the bottleneck of a throughput measurement.
func (s *stack) sendPerSession(evs ...event) {
	s.tb.Helper()
	bySession := map[string][]event{}
	var order []string
	for _, e := range evs {
		if _, ok := bySession[e.SessionID]; !ok {
			order = append(order, e.SessionID)
		}
		bySession[e.SessionID] = append(bySession[e.SessionID], e)
	}
	errs := make(chan error, len(order))
	var wg sync.WaitGroup
	for _, sid := range order {
		wg.Add(1)
		go func(evs []event) {
			defer wg.Done()
			for _, e := range evs {
				if err := s.sendOne(e); err != nil {
					errs <- err
					return
				}
			}
		}(bySession[sid])
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		s.tb.Fatal(err)
	}
}

// firstSent returns when the first copy of messageID was sent.
func (s *stack) firstSent(messageID string) time.Time { return s.sent(messageID, 0) }

// sent returns when copy i (0-based) of messageID was sent.
func (s *stack) sent(messageID string, i int) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ts := s.sentAt[messageID]; i < len(ts) {
		return ts[i]
	}
	return time.Time{}
}

// waitUntil polls cond until it holds or timeout passes, then fails tb with
// what.
func (s *stack) waitUntil(timeout time.Duration, what string, cond func() bool) {
	s.tb.Helper()
	testenv.WaitUntil(s.tb, timeout, cond, func() string {
		return fmt.Sprintf("%s (host stats %+v, %d responses, %d audit copies, collector: %s)",
			what, s.host.Stats(), len(s.resolver.responses()), s.resolver.audits(), s.resolver.problems())
	})
}

// waitResponses waits until n responses reached the Resolver.
func (s *stack) waitResponses(n int, timeout time.Duration) {
	s.tb.Helper()
	s.waitUntil(timeout, fmt.Sprintf("%d Resolver responses", n), func() bool { return len(s.resolver.responses()) >= n })
}

// settle waits until the mini host has settled completes messages and has
// nothing in flight, and the Resolver has received audits audit copies.
func (s *stack) settle(completes, audits int, timeout time.Duration) {
	s.tb.Helper()
	s.waitUntil(timeout, fmt.Sprintf("%d completions and %d audit copies", completes, audits), func() bool {
		st := s.host.Stats()
		return st.Completes >= int64(completes) && st.Invocations == st.Completes+st.Abandons+st.SettleErrors && s.resolver.audits() >= audits
	})
}

// deadLettered peeks the endpoint subscription's dead-letter queue.
func (s *stack) deadLettered() []*azservicebus.ReceivedMessage {
	s.tb.Helper()
	r, err := s.client.NewReceiverForSubscription(endpointID, endpointID, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		s.tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defer r.Close(ctx)
	ms, err := r.PeekMessages(ctx, 100, nil)
	if err != nil {
		s.tb.Fatalf("peeking the dead-letter queue: %v", err)
	}
	return ms
}

// inboxRecord is the inbox document as stored in Cosmos.
type inboxRecord struct {
	ID           string `json:"id"`
	EndpointID   string `json:"endpointId"`
	MessageID    string `json:"messageId"`
	CreatedAtUTC string `json:"createdAtUtc"`
}

// inboxID is NimBus's inbox identity, computed here independently of the
// code under test: upper-case hex SHA-256 of
// "<UTF-16 length of endpoint>\x1f<endpoint>\x1f<messageId>" (the ids used
// here are ASCII, so the UTF-16 length is the byte length).
func inboxID(endpoint, messageID string) string {
	sum := sha256.Sum256([]byte(strconv.Itoa(len(endpoint)) + "\x1f" + endpoint + "\x1f" + messageID))
	return strings.ToUpper(hex.EncodeToString(sum[:]))
}

// inboxRecords reads the records of messageIDs straight from Cosmos (not
// through the proxy); absent ones are missing from the map.
func (s *stack) inboxRecords(messageIDs ...string) map[string]inboxRecord {
	s.tb.Helper()
	c, err := s.cosmosClient(s.tb).NewContainer(s.database, s.container)
	if err != nil {
		s.tb.Fatal(err)
	}
	out := map[string]inboxRecord{}
	for _, mid := range messageIDs {
		id := inboxID(endpointID, mid)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := c.ReadItem(ctx, azcosmos.NewPartitionKeyString(id), id, nil)
		cancel()
		var re *azcore.ResponseError
		switch {
		case errors.As(err, &re) && re.StatusCode == http.StatusNotFound:
			continue
		case err != nil:
			s.tb.Fatalf("reading the inbox record of %s: %v", mid, err)
		}
		var rec inboxRecord
		if err := json.Unmarshal(resp.Value, &rec); err != nil {
			s.tb.Fatalf("inbox record of %s: %v", mid, err)
		}
		out[mid] = rec
	}
	return out
}

// ---------------------------------------------------------------------------
// Messages

// event is one NimBus EventRequest as the consumer forwarder delivers it.
type event struct {
	MessageID   string
	SessionID   string
	EventID     string
	EventTypeID string
	// EventJSON is the domain event serialized as JSON.
	EventJSON string
}

// order returns an OrderPlaced event. failFirst > 0 makes the sample
// handler fail the first failFirst deliveries.
func order(messageID, session string, amount, failFirst int) event {
	js := fmt.Sprintf(`{"OrderId":"O-%s","Amount":%d`, strings.TrimPrefix(messageID, "OrderPlaced-"), amount)
	if failFirst > 0 {
		js += fmt.Sprintf(`,"FailFirstAttempts":%d`, failFirst)
	}
	return event{MessageID: messageID, SessionID: session, EventID: guidFor(messageID), EventTypeID: orderPlaced, EventJSON: js + "}"}
}

// guidFor derives a GUID-shaped EventId from seed, as the forwarder's
// newid() would stamp one.
func guidFor(seed string) string {
	sum := sha256.Sum256([]byte(seed))
	h := hex.EncodeToString(sum[:16])
	return h[0:8] + "-" + h[8:12] + "-4" + h[13:16] + "-a" + h[17:20] + "-" + h[20:32]
}

// jsonString writes s as a JSON string the way Newtonsoft.Json does for the
// ASCII texts used here (only quotes and backslashes need escaping).
func jsonString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// body is the MessageContent of e.
func (e event) body() string {
	return `{"EventContent":{"EventTypeId":` + jsonString(e.EventTypeID) + `,"EventJson":` + jsonString(e.EventJSON) + `},"ErrorContent":null}`
}

// skipBody is the SkipResponse body NimBus writes for a duplicate of e.
func (e event) skipBody() string {
	return `{"EventContent":{"EventTypeId":` + jsonString(e.EventTypeID) + `,"EventJson":` + jsonString(e.EventJSON) + `},` +
		`"ErrorContent":{"ErrorText":"DuplicateDetected","ErrorType":null,"ExceptionStackTrace":null,"ExceptionSource":null}}`
}

func (e event) message() *azservicebus.Message {
	mid, sid := e.MessageID, e.SessionID
	corr := guidFor("correlation/" + e.MessageID)
	return &azservicebus.Message{
		MessageID:     &mid,
		SessionID:     &sid,
		CorrelationID: &corr,
		Body:          []byte(e.body()),
		ApplicationProperties: map[string]any{
			"To":                   endpointID,
			"From":                 producerID,
			"MessageType":          "EventRequest",
			"EventId":              e.EventID,
			"EventTypeId":          e.EventTypeID,
			"OriginatingMessageId": "self",
			"ParentMessageId":      "self",
			"RetryCount":           int32(0),
			"OriginatingFrom":      producerID,
		},
	}
}

var brokerMessageID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// sdkMessageID is the form of the MessageId azservicebus gives a message of
// a batch that has none (a response sent with a transactional handler's
// events): a random UUID.
var sdkMessageID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// traceparentForm is a W3C traceparent with a valid (non-zero) trace and
// span id.
var traceparentForm = regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$`)

// propertyCheck validates a property value checkResponse cannot know
// exactly; it returns what is wrong, or "".
type propertyCheck func(v any) string

// checkResponse asserts the exact wire format of a response to in, after
// the round trip through the topology: every application property with its
// Go (AMQP) type, the broker properties and the body bytes. extra are the
// expected additional properties (handoff), values or propertyChecks; sent
// is when in was sent.
func checkResponse(tb testing.TB, r received, in event, wantType, wantBody string, extra map[string]any, sent time.Time) {
	tb.Helper()
	m := r.msg
	where := fmt.Sprintf("%s for %s", wantType, in.MessageID)
	want := map[string]any{
		"To":                   "Resolver",
		"From":                 endpointID, // stamped by the Resolver fan-out rule
		"MessageType":          wantType,
		"EventId":              in.EventID,
		"OriginatingMessageId": in.MessageID, // inbound "self" → inbound MessageId
		"ParentMessageId":      in.MessageID,
		"RetryCount":           int32(0),
		"OriginatingFrom":      producerID,
		"EventTypeId":          in.EventTypeID,
	}
	// Every response continues a trace (a new one when the request carried
	// none), as NimBus writes it: traceparent of the sending span.
	want["traceparent"] = propertyCheck(func(v any) string {
		if s, ok := v.(string); !ok || !traceparentForm.MatchString(s) {
			return "want a W3C traceparent string"
		}
		return ""
	})
	for k, v := range extra {
		want[k] = v
	}
	props := m.ApplicationProperties
	for k, v := range want {
		got, ok := props[k]
		if !ok {
			tb.Errorf("%s: property %s missing", where, k)
			continue
		}
		if check, ok := v.(propertyCheck); ok {
			if problem := check(got); problem != "" {
				tb.Errorf("%s: %s = %#v (%T): %s", where, k, got, got, problem)
			}
			continue
		}
		if fmt.Sprintf("%T", got) != fmt.Sprintf("%T", v) || got != v {
			tb.Errorf("%s: %s = %#v (%T), want %#v (%T)", where, k, got, got, v, v)
		}
	}
	// Both figures lie within the time from send to receipt (+2ms for the
	// rounding on either side). QueueTimeMs may exceed it by up to a second:
	// the Functions host sends EnqueuedTimeUtc truncated to whole seconds, so
	// the handler sees an earlier enqueue.
	elapsed := r.at.Sub(sent).Milliseconds() + 2
	for k, slack := range map[string]int64{"QueueTimeMs": 1000, "ProcessingTimeMs": 0} {
		v, ok := props[k].(int64)
		if !ok {
			tb.Errorf("%s: %s = %#v (%T), want an int64", where, k, props[k], props[k])
			continue
		}
		if v < 0 || (!sent.IsZero() && v > elapsed+slack) {
			tb.Errorf("%s: %s = %d, want 0..%d (the time from send to receipt, +%dms)", where, k, v, elapsed+slack, slack)
		}
	}
	for k := range props {
		if _, ok := want[k]; !ok && k != "QueueTimeMs" && k != "ProcessingTimeMs" {
			tb.Errorf("%s: unexpected property %s = %#v", where, k, props[k])
		}
	}
	if m.CorrelationID == nil || *m.CorrelationID != in.MessageID {
		tb.Errorf("%s: CorrelationId = %v, want the inbound MessageId", where, strp(m.CorrelationID))
	}
	if m.SessionID == nil || *m.SessionID != in.SessionID {
		tb.Errorf("%s: SessionId = %v, want %q", where, strp(m.SessionID), in.SessionID)
	}
	if !(brokerMessageID.MatchString(m.MessageID) || sdkMessageID.MatchString(m.MessageID)) || m.MessageID == in.MessageID {
		tb.Errorf("%s: MessageId = %q, want one the broker or the SDK assigned (the sender sets none)", where, m.MessageID)
	}
	if m.To != nil || m.ReplyTo != nil || m.Subject != nil || m.ReplyToSessionID != nil || m.ContentType != nil {
		tb.Errorf("%s: unexpected broker properties To=%v ReplyTo=%v Subject=%v ReplyToSessionId=%v ContentType=%v",
			where, strp(m.To), strp(m.ReplyTo), strp(m.Subject), strp(m.ReplyToSessionID), strp(m.ContentType))
	}
	if string(m.Body) != wantBody {
		tb.Errorf("%s: body\n got %s\nwant %s", where, m.Body, wantBody)
	}
}

func strp(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return strconv.Quote(*s)
}

// percentile returns the p-th percentile (0..100) of sorted xs, nearest
// rank.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
