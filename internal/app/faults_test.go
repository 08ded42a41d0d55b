package app

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/rs/zerolog"

	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testlog"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
	"github.com/nimbus-go/functions-subscriber/internal/inbox/cosmosstore"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/session/cosmossession"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
)

// TestPipelineUnderCosmosFaults drives the whole pipeline, host envelope to
// HTTP status, against the local Cosmos server behind a proxy that fails a
// seeded share of requests (503, 429, connections dropped before or after the
// request reached Cosmos). The test plays the broker: a delivery that does
// not get a 2xx is redelivered with DeliveryCount+1, and some completed
// messages are redelivered again (a lost lock). It checks that no message is
// lost and that the handler runs once per message, except in the documented
// window where the record fails after the handler succeeded.
func TestPipelineUnderCosmosFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("a fault run of the whole pipeline: the full suite (go test without -short, scripts/test.sh) runs it")
	}
	const (
		messages         = 500
		workers          = 8
		maxDeliveryCount = 10
	)
	cos := testenv.StartCosmos(t, testenv.CosmosOptions{Consistency: "Strong"})
	proxy := testenv.StartFaultProxy(t, cos.Endpoint, testenv.FaultProxyOptions{
		Seed:  20261130,
		Rate:  0.3,
		Kinds: []testenv.FaultKind{testenv.FaultUnavailable, testenv.FaultThrottle, testenv.FaultDrop, testenv.FaultDropAfterForward},
	})
	account, err := cosmos.NewAccount(cosmos.Config{
		Endpoint: proxy.URL,
		Key:      cos.Key,
		// Few SDK retries, so faults reach the pipeline.
		Retry: policy.RetryOptions{MaxRetries: 1, RetryDelay: 2 * time.Millisecond, MaxRetryDelay: 10 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	store, err := cosmosstore.New(account, cosmosstore.Options{ContainerID: "inbox-faults"})
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	runs := map[string]int{}
	reg := subscriber.NewRegistry()
	reg.Handle("OrderPlaced", func(ctx context.Context, ev *subscriber.Event) (subscriber.Result, error) {
		mu.Lock()
		runs[ev.MessageID]++
		mu.Unlock()
		return subscriber.Completed(), nil
	})
	logs := &testlog.Buffer{}
	pub := &resolver.Memory{}
	cfg, err := config.Load(config.FromMap(map[string]string{
		config.KeyEndpoint: "BillingEndpoint", config.KeyInboxEnabled: "true", config.KeyInboxStore: "Cosmos",
		config.KeyCosmosEndpoint: proxy.URL, config.KeyResolverSink: "InMemory", config.KeyRetryBaseDelay: "0",
	}))
	if err != nil {
		t.Fatal(err)
	}
	// The session state lives behind the same faulty proxy: every delivery
	// reads it alongside the inbox check.
	sessions, err := cosmossession.New(account, cosmossession.Options{ContainerID: "sessions-faults"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(cfg, Deps{Handlers: reg, Log: zerolog.New(logs), Store: store, Sessions: sessions, Publisher: pub})
	if err != nil {
		t.Fatal(err)
	}
	h := a.Handler()

	deliver := func(id string, n int) int {
		env := faultEnvelope(id, n)
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/Subscriber", bytes.NewReader(env))
		req.Header.Set("X-Azure-Functions-InvocationId", fmt.Sprintf("%s#%d", id, n))
		h.ServeHTTP(rec, req)
		return rec.Code
	}

	type result struct {
		id           string
		deliveries   int
		completed    bool
		deadLettered bool
	}
	results := make(chan result, messages)
	ids := make(chan string)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for id := range ids {
				r := result{id: id}
				// Deliver until completed or the broker would dead-letter.
				for !r.completed && r.deliveries < maxDeliveryCount {
					r.deliveries++
					r.completed = deliver(id, r.deliveries) == http.StatusOK
				}
				r.deadLettered = !r.completed
				// A third of the completed messages come back once more.
				if r.completed && rng.IntN(3) == 0 {
					again := false
					for !again && r.deliveries < 2*maxDeliveryCount {
						r.deliveries++
						again = deliver(id, r.deliveries) == http.StatusOK
					}
				}
				results <- r
			}
		}()
	}
	for i := range messages {
		ids <- fmt.Sprintf("OrderPlaced-%04d", i)
	}
	close(ids)
	wg.Wait()
	close(results)

	// What the invocation log lines say per message.
	recordFailures := map[string]int{}
	outcomes := map[string]int{}
	for _, l := range logs.Lines(t) {
		outcomes[fmt.Sprint(l["outcome"])]++
		if l["outcome"] == "transient_failure" && l["operation"] == "record" {
			recordFailures[l["messageId"].(string)]++
		}
	}
	responses := map[string][]string{}
	for _, m := range pub.Sent() {
		id := *m.CorrelationID
		responses[id] = append(responses[id], m.Type())
	}

	var deliveries, window, reruns, deadLettered int
	for r := range results {
		deliveries += r.deliveries
		if r.deadLettered {
			deadLettered++
			t.Errorf("%s was not completed within %d deliveries (the broker would dead-letter it)", r.id, maxDeliveryCount)
			continue
		}
		n := runs[r.id]
		if recordFailures[r.id] > 0 {
			window++
		}
		switch {
		case n == 0:
			t.Errorf("%s completed without its handler ever running", r.id)
		case n > 1+recordFailures[r.id]:
			t.Errorf("%s: handler ran %d times with only %d failed records", r.id, n, recordFailures[r.id])
		}
		reruns += n - 1
		got := responses[r.id]
		if len(got) == 0 {
			t.Errorf("%s completed without a Resolver response", r.id)
		}
		for i, typ := range got {
			if typ == message.ResolutionResponse.String() && i > 0 {
				t.Errorf("%s: a second ResolutionResponse after %v (the handler ran after a successful record)", r.id, got[:i])
			}
		}
	}
	faults := proxy.Counts()
	if faults.Injected() == 0 || outcomes["transient_failure"] == 0 {
		t.Fatalf("the proxy injected %d faults and %d invocations failed: the test exercised nothing", faults.Injected(), outcomes["transient_failure"])
	}
	t.Logf("%d messages, %d deliveries, %d dead-lettered; Cosmos requests %d, faults injected %d (503 %d, 429 %d, dropped %d, dropped after forward %d)",
		messages, deliveries, deadLettered, faults.Requests, faults.Injected(), faults.Unavailable, faults.Throttled, faults.Dropped, faults.DroppedAfterForward)
	t.Logf("invocation outcomes %v", outcomes)
	t.Logf("documented window: %d messages had a record fail after their handler succeeded; %d handler re-runs in total", window, reruns)
	if strings.Contains(logs.String(), cos.Key) {
		t.Fatal("the account key reached a log line")
	}
}

func faultEnvelope(id string, deliveryCount int) []byte {
	body := `{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"` + id + `\"}"},"ErrorContent":null}`
	return hostwire.ServiceBus(hostwire.ServiceBusMessage{
		FunctionName: FuncSubscriber, Body: []byte(body), MessageID: id, SessionID: hostwire.S("s-" + id[len(id)-1:]),
		DeliveryCount: deliveryCount, EnqueuedTime: time.Now(),
		Properties: hostwire.Props("To", "BillingEndpoint", "From", "ShopEndpoint", "MessageType", "EventRequest",
			"EventId", "evt-"+id, "EventTypeId", "OrderPlaced"),
		Namespace: "sb.test", UtcNow: time.Now(), RandGUID: "g",
	})
}

// A Session account makes every inbox operation fail until it is fixed: the
// delivery is retried (never skipped, never run), and the log line tells the
// operator what to change.
func TestRelaxedConsistencyAccountFailsDeliveriesWithGuidance(t *testing.T) {
	cos := testenv.StartCosmos(t, testenv.CosmosOptions{})
	// Built by the app's own wiring from the settings, as in production.
	ta := newTestApp(t, map[string]string{
		config.KeyInboxStore:             "Cosmos",
		config.KeyCosmosConnectionString: cos.ConnectionString(),
		config.KeyCosmosContainer:        "inbox-session",
	}, nil)
	if status, _ := ta.post(t, FuncSubscriber, envelope(msg{id: "m-1"})); status == 200 {
		t.Fatal("a delivery completed against a Session account")
	}
	l := ta.logs.Lines(t)[0]
	msg, _ := l["error"].(string)
	if l["outcome"] != "transient_failure" || !strings.Contains(msg, "Strong") || !strings.Contains(msg, config.KeyCosmosRelaxed+"=true") {
		t.Fatalf("log line = %v", l)
	}
	if strings.Contains(ta.logs.String(), cos.Key) {
		t.Fatal("key in logs")
	}
}
