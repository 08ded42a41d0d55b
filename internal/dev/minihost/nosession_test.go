package minihost

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testctx"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

// startNoSessions runs the Service Bus stand-in with topo, a handler server
// and a Host consuming Erp/DeferredProcessor without sessions.
func startNoSessions(t *testing.T, topo testenv.Topology, handler func(http.ResponseWriter, *invocation), mutate func(*Config)) *hostFixture {
	t.Helper()
	return startHost(t, topo, handler, Config{Topic: endpoint, Subscription: testenv.DeferredProcessorSub, NoSessions: true,
		Function: "DeferredProcessor", AcceptTimeout: 500 * time.Millisecond}, mutate)
}

// processDeferred is a ProcessDeferredRequest as the topology routes it: To
// DeferredProcessor, the blocked session's id as SessionId (the
// DeferredProcessor subscription has no sessions, so the broker ignores it
// for locking).
func processDeferred(session, id string) *azservicebus.Message {
	return &azservicebus.Message{MessageID: &id, SessionID: &session, Body: []byte(`{}`),
		ApplicationProperties: map[string]any{"To": testenv.DeferredProcessorSub, "MessageType": "ProcessDeferredRequest"}}
}

func TestHostWithoutSessionsRunsUpToMaxConcurrentCalls(t *testing.T) {
	t.Parallel()
	const calls, total = 3, 7
	var mu sync.Mutex
	seen := map[string]*invocation{}
	running := 0
	full := make(chan struct{}) // closed once `calls` invocations run at once
	f := startNoSessions(t, testenv.NimBusTopology(endpoint), func(w http.ResponseWriter, inv *invocation) {
		mu.Lock()
		seen[inv.messageID] = inv
		running++
		if running == calls {
			select {
			case <-full:
			default:
				close(full)
			}
		}
		mu.Unlock()
		// The first invocations wait until `calls` run at once: the host
		// must start that many without waiting for any to finish.
		select {
		case <-full:
		case <-inv.r.Context().Done():
		}
		mu.Lock()
		running--
		mu.Unlock()
		ok(w)
	}, func(c *Config) { c.MaxConcurrentCalls = calls })
	for i := range total {
		f.send(t, processDeferred(fmt.Sprintf("s-%d", i%2), fmt.Sprintf("pd-%d", i)))
	}
	if err := f.host.WaitFor(testctx.Timeout(t, 20*time.Second), func(s Stats) bool { return s.Completes == total }); err != nil {
		t.Fatal(err)
	}
	if got := f.host.MaxInFlight(); got != calls {
		t.Errorf("at most %d invocations ran at once, want exactly MaxConcurrentCalls = %d", got, calls)
	}
	if s := f.host.Stats(); s != (Stats{Invocations: total, Completes: total}) {
		t.Errorf("stats %+v", s)
	}
	mu.Lock()
	defer mu.Unlock()
	inv := seen["pd-0"]
	if inv == nil || len(seen) != total {
		t.Fatalf("invoked %d distinct messages, want %d", len(seen), total)
	}
	if inv.r.URL.Path != "/DeferredProcessor" || inv.sessionID != "s-0" || inv.delivery != "1" || inv.props["To"] != testenv.DeferredProcessorSub {
		t.Errorf("path %s session %q delivery %q props %v", inv.r.URL.Path, inv.sessionID, inv.delivery, inv.props)
	}
	// Without sessions the host passes ServiceBusMessageActions: the four
	// action keys are empty objects, with no SessionLockedUntil.
	for _, k := range []string{"MessageReceiver", "MessageSession", "MessageActions", "SessionActions", "ReceiveActions"} {
		if got := string(inv.metadata[k]); got != "{}" {
			t.Errorf("Metadata.%s = %s, want {}", k, got)
		}
	}
	var sys struct{ MethodName string }
	if err := json.Unmarshal(inv.metadata["sys"], &sys); err != nil || sys.MethodName != "DeferredProcessor" {
		t.Errorf("sys %s: %v", inv.metadata["sys"], err)
	}
	assertSubscriptionEmpty(t, f.client)
}

func TestHostWithoutSessionsAbandonsFailuresAndTheBrokerRedelivers(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	deliveries := map[string][]string{}
	f := startNoSessions(t, testenv.NimBusTopology(endpoint), func(w http.ResponseWriter, inv *invocation) {
		mu.Lock()
		deliveries[inv.messageID] = append(deliveries[inv.messageID], inv.delivery)
		n := len(deliveries[inv.messageID])
		mu.Unlock()
		if inv.messageID == "fails-once" && n == 1 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{}`))
			return
		}
		ok(w)
	}, nil)
	f.send(t, processDeferred("a", "fails-once"), processDeferred("b", "fine"))
	if err := f.host.WaitFor(testctx.Timeout(t, 20*time.Second), func(s Stats) bool { return s.Completes == 2 }); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := fmt.Sprint(deliveries["fails-once"], deliveries["fine"]); got != "[1 2] [1]" {
		t.Errorf("DeliveryCount per invocation = %s, want [1 2] [1]", got)
	}
	if s := f.host.Stats(); s != (Stats{Invocations: 3, Completes: 2, Abandons: 1, Failures: 1}) {
		t.Errorf("stats %+v", s)
	}
	assertSubscriptionEmpty(t, f.client)
}

// TestHostWithoutSessionsRenewsTheLockOfARunningInvocation holds one
// invocation for three lock durations. With renewal the message is invoked
// once and completes; with renewal slower than the lock (the control) the
// lock expires mid-invocation, the broker redelivers, and the late
// completion is refused, which shows the test can tell the two apart.
func TestHostWithoutSessionsRenewsTheLockOfARunningInvocation(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("invocations outlast several lock periods (about 6 s): the full suite (without -short) runs it")
	}
	const lock = 800 * time.Millisecond
	for _, c := range []struct {
		name    string
		renew   time.Duration
		renewed bool
	}{{"renewed", lock / 4, true}, {"not renewed", time.Hour, false}} {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			var counts []string
			topo := testenv.NimBusTopology(endpoint)
			topo.LockMs = int(lock / time.Millisecond)
			f := startNoSessions(t, topo, func(w http.ResponseWriter, inv *invocation) {
				mu.Lock()
				counts = append(counts, inv.delivery)
				first := len(counts) == 1
				mu.Unlock()
				if first {
					// Outlast the lock: this wait is the condition under test.
					timer := time.NewTimer(3 * lock)
					defer timer.Stop()
					select {
					case <-timer.C:
					case <-inv.r.Context().Done():
					}
				}
				ok(w)
			}, func(cfg *Config) { cfg.LockRenewInterval = c.renew })
			f.send(t, processDeferred("a", "long"))
			if c.renewed {
				if err := f.host.WaitFor(testctx.Timeout(t, 20*time.Second), func(s Stats) bool { return s.Completes == 1 }); err != nil {
					t.Fatal(err)
				}
				if s := f.host.Stats(); s != (Stats{Invocations: 1, Completes: 1}) {
					t.Errorf("stats %+v, want one invocation completed", s)
				}
				assertSubscriptionEmpty(t, f.client)
				return
			}
			// The redelivery completes; the first invocation's completion
			// comes after its lock expired and is refused.
			if err := f.host.WaitFor(testctx.Timeout(t, 20*time.Second), func(s Stats) bool { return s.Completes == 1 && s.SettleErrors == 1 }); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if fmt.Sprint(counts) != "[1 2]" {
				t.Errorf("DeliveryCount per invocation = %v, want [1 2]", counts)
			}
		})
	}
}

// assertSubscriptionEmpty checks the DeferredProcessor subscription holds no
// message, locked or not: a peek sees every message still in it.
func assertSubscriptionEmpty(t *testing.T, c *azservicebus.Client) {
	t.Helper()
	r, err := c.NewReceiverForSubscription(endpoint, testenv.DeferredProcessorSub, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	ms, err := r.PeekMessages(testctx.Timeout(t, 5*time.Second), 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 0 {
		t.Errorf("%d messages left on %s/%s", len(ms), endpoint, testenv.DeferredProcessorSub)
	}
}
