package testenv

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// Topology declares the entities of the Service Bus stand-in
// (scripts/testenv/sbfake.js). It mirrors the JSON the script reads; see the
// comment at the top of the script for the rules.
type Topology struct {
	// LockMs is the message lock duration in milliseconds (0 = 60000).
	LockMs int `json:"lockMs,omitempty"`
	// MaxDeliveryCount is the default for every entity (0 = 10).
	MaxDeliveryCount int     `json:"maxDeliveryCount,omitempty"`
	Queues           []Queue `json:"queues,omitempty"`
	Topics           []Topic `json:"topics,omitempty"`
}

// Queue is a queue entity.
type Queue struct {
	Name             string `json:"name"`
	RequiresSession  bool   `json:"requiresSession,omitempty"`
	MaxDeliveryCount int    `json:"maxDeliveryCount,omitempty"`
}

// Topic is a topic and its subscriptions. Messages sent to the topic reach
// every matching subscription at send time, receiver attached or not.
type Topic struct {
	Name          string         `json:"name"`
	Subscriptions []Subscription `json:"subscriptions,omitempty"`
}

// Subscription is a topic subscription. With no rules it takes every
// message (like $Default). With ForwardTo set it keeps nothing and passes
// each matching copy on to that entity.
type Subscription struct {
	Name             string `json:"name"`
	RequiresSession  bool   `json:"requiresSession,omitempty"`
	MaxDeliveryCount int    `json:"maxDeliveryCount,omitempty"`
	ForwardTo        string `json:"forwardTo,omitempty"`
	Rules            []Rule `json:"rules,omitempty"`
}

// Rule is a subscription rule over application properties: every condition
// must hold. Set stamps string properties on the subscription's copy (a SQL
// rule action); the value NewID is replaced by a fresh GUID.
type Rule struct {
	Name    string            `json:"name,omitempty"`
	Equals  map[string]string `json:"equals,omitempty"`
	IsNull  []string          `json:"isNull,omitempty"`
	NotNull []string          `json:"notNull,omitempty"`
	Set     map[string]string `json:"set,omitempty"`
}

// NewID in a Rule's Set stands for newid(): a fresh GUID per copy.
const NewID = "newid()"

// NimBus entity names.
const (
	ResolverTopic             = "Resolver"
	ResolverSubscription      = "Resolver"
	DeferredSubscription      = "Deferred"
	DeferredProcessorSub      = "DeferredProcessor"
	nimbusMaxDeliveryCount    = 10
	nimbusContinuationAddress = "Continuation"
	nimbusRetryAddress        = "Retry"
)

// NimBusTopology returns the topology NimBus's provisioning creates for the
// given endpoints: per endpoint E a topic E with
//   - session subscription E: To = E, plus the Continuation and Retry rules
//     that rewrite To to E and stamp From;
//   - subscription Resolver forwarding to the Resolver topic: To = 'Resolver'
//     (stamping From = E) and audit copies of To = E;
//   - session subscription Deferred: To = 'Deferred' AND OriginalSessionId
//     IS NOT NULL;
//   - subscription DeferredProcessor: To = 'DeferredProcessor';
//
// and one Resolver topic whose session subscription Resolver takes
// everything. A test reads what a subscriber sent to the Resolver with a
// session receiver on Resolver/Resolver. Every subscription has
// MaxDeliveryCount 10, as NimBus provisions it.
func NimBusTopology(endpoints ...string) Topology {
	var t Topology
	for _, e := range endpoints {
		t.Topics = append(t.Topics, Topic{Name: e, Subscriptions: []Subscription{
			{Name: e, RequiresSession: true, MaxDeliveryCount: nimbusMaxDeliveryCount, Rules: []Rule{
				{Name: "to-" + e, Equals: map[string]string{"To": e}},
				{Name: "continuation", Equals: map[string]string{"To": nimbusContinuationAddress},
					Set: map[string]string{"To": e, "From": nimbusContinuationAddress}},
				{Name: "retry", Equals: map[string]string{"To": nimbusRetryAddress},
					Set: map[string]string{"To": e, "From": nimbusRetryAddress}},
			}},
			{Name: ResolverSubscription, ForwardTo: ResolverTopic, MaxDeliveryCount: nimbusMaxDeliveryCount, Rules: []Rule{
				{Name: "from-" + e, Equals: map[string]string{"To": ResolverTopic}, Set: map[string]string{"From": e}},
				{Name: "to-" + e, Equals: map[string]string{"To": e}},
			}},
			{Name: DeferredSubscription, RequiresSession: true, MaxDeliveryCount: nimbusMaxDeliveryCount, Rules: []Rule{
				{Name: "DeferredFilter", Equals: map[string]string{"To": DeferredSubscription}, NotNull: []string{"OriginalSessionId"}},
			}},
			{Name: DeferredProcessorSub, MaxDeliveryCount: nimbusMaxDeliveryCount, Rules: []Rule{
				{Name: "DeferredProcessorFilter", Equals: map[string]string{"To": DeferredProcessorSub}},
			}},
		}})
	}
	t.Topics = append(t.Topics, Topic{Name: ResolverTopic, Subscriptions: []Subscription{
		{Name: ResolverSubscription, RequiresSession: true, MaxDeliveryCount: nimbusMaxDeliveryCount},
	}})
	return t
}

// WithForwarder adds NimBus's consumer forwarder on the producer's topic:
// subscription consumer, forwarding to topic consumer, one rule per event
// type (EventTypeId = T AND From IS NULL → SET From = producer, EventId =
// newid(), To = consumer).
func (t Topology) WithForwarder(producer, consumer string, eventTypeIDs ...string) Topology {
	sub := Subscription{Name: consumer, ForwardTo: consumer, MaxDeliveryCount: nimbusMaxDeliveryCount}
	for _, id := range eventTypeIDs {
		sub.Rules = append(sub.Rules, Rule{
			Name: id, Equals: map[string]string{"EventTypeId": id}, IsNull: []string{"From"},
			Set: map[string]string{"From": producer, "EventId": NewID, "To": consumer},
		})
	}
	topics := make([]Topic, len(t.Topics))
	copy(topics, t.Topics)
	for i := range topics {
		if topics[i].Name == producer {
			topics[i].Subscriptions = append(append([]Subscription(nil), topics[i].Subscriptions...), sub)
		}
	}
	t.Topics = topics
	return t
}

// ServiceBus is a running Service Bus stand-in.
type ServiceBus struct {
	// ConnectionString connects the azservicebus SDK to the stand-in.
	ConnectionString string
	Port             int
	proc             standIn
}

// StartServiceBus starts a Service Bus stand-in with topo and stops it in
// tb.Cleanup. In a package whose TestMain calls Main, the stand-ins are
// brokers of one shared sbfake.js process; otherwise each is a process of
// its own. Without Node it skips tb (fails under
// NIMBUS_REQUIRE_EMULATORS=1).
func StartServiceBus(tb testing.TB, topo Topology) *ServiceBus {
	tb.Helper()
	return startServiceBus(tb, topo)
}

// startServiceBus starts the stand-in with topo and extra settings
// ("KEY=value").
func startServiceBus(tb testing.TB, topo Topology, env ...string) *ServiceBus {
	tb.Helper()
	js, err := json.Marshal(topo)
	if err != nil {
		tb.Fatalf("testenv: encoding topology: %v", err)
	}
	if why := nodeReady(); why != "" {
		Unavailable(tb, "Service Bus stand-in unavailable: %s", why)
	}
	proc, port, err := startStandIn("sbfake.js", append([]string{"PORT=0", "TOPOLOGY=" + string(js)}, env...))
	if err != nil {
		tb.Fatalf("testenv: starting sbfake.js: %v", err)
	}
	sb := &ServiceBus{Port: port, proc: proc}
	sb.ConnectionString = ConnectionString(sb.Port)
	tb.Cleanup(func() {
		sb.Stop()
		if tb.Failed() {
			if logs := sb.Logs(); logs != "" {
				tb.Logf("sbfake output:\n%s", logs)
			}
		}
	})
	return sb
}

// ConnectionString returns the connection string for a stand-in on port.
func ConnectionString(port int) string {
	return "Endpoint=sb://127.0.0.1:" + strconv.Itoa(port) +
		";SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true"
}

// Stop kills the stand-in (tests of failure paths); it is safe to call twice.
func (sb *ServiceBus) Stop() { sb.proc.Stop() }

// Logs returns what the stand-in printed (DEBUG_FAKE=1 in the environment
// adds a line per entity operation, never message bodies).
func (sb *ServiceBus) Logs() string { return sb.proc.Logs() }

// Client returns a new SDK client for the stand-in, closed in tb.Cleanup.
// Retries are short so failures surface quickly in tests.
func (sb *ServiceBus) Client(tb testing.TB) *azservicebus.Client {
	tb.Helper()
	c, err := azservicebus.NewClientFromConnectionString(sb.ConnectionString, &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: 2, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: 200 * time.Millisecond},
	})
	if err != nil {
		tb.Fatalf("testenv: service bus client: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// ReceiveSession accepts session sessionID on topic/subscription, receives
// exactly n messages within timeout, completes them and returns them in
// order. It fails tb otherwise. Use it to read what a subscriber sent, e.g.
// ReceiveSession(tb, c, ResolverTopic, ResolverSubscription, sid, 1, 10*time.Second).
func ReceiveSession(tb testing.TB, c *azservicebus.Client, topic, subscription, sessionID string, n int, timeout time.Duration) []*azservicebus.ReceivedMessage {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r, err := c.AcceptSessionForSubscription(ctx, topic, subscription, sessionID, nil)
	if err != nil {
		tb.Fatalf("testenv: accepting session %q on %s/%s: %v", sessionID, topic, subscription, err)
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		_ = r.Close(cctx)
	}()
	var got []*azservicebus.ReceivedMessage
	for len(got) < n {
		// One message per call: asking for several lets the SDK release
		// some in-flight messages while later ones stay buffered, which
		// breaks the session's order.
		ms, err := r.ReceiveMessages(ctx, 1, nil)
		if err != nil {
			tb.Fatalf("testenv: received %d of %d messages from session %q on %s/%s: %v", len(got), n, sessionID, topic, subscription, err)
		}
		for _, m := range ms {
			if err := r.CompleteMessage(ctx, m, nil); err != nil {
				tb.Fatalf("testenv: completing a message of session %q: %v", sessionID, err)
			}
		}
		got = append(got, ms...)
	}
	return got
}
