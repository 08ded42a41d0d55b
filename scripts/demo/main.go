// Command demo builds the custom handler, starts it on embedded defaults
// (endpoint BillingEndpoint, in-memory inbox, in-memory Resolver sink) and
// drives it with invocations shaped exactly as the Azure Functions host
// sends them, printing what happens to each. It then starts the same binary
// as the Resolver app (in-memory tracking store) and shows the endpoint's
// response landing as a tracking row. No Azure account is needed.
//
//	go run ./scripts/demo
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/app"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/funchosttest"
	"github.com/nimbus-go/functions-subscriber/internal/testenv/handlerproc"
)

const endpoint = "BillingEndpoint"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

type demo struct {
	base   string
	client *http.Client
	proc   *handlerproc.Proc
	seen   int // Resolver responses already printed
	seq    int64
}

func run() error {
	root, err := handlerproc.RepoRoot()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "nimbus-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "handler")
	ctx := context.Background()
	buildCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := handlerproc.Build(buildCtx, root, bin); err != nil {
		return err
	}
	proc, err := handlerproc.Start(handlerproc.Options{
		Binary: bin,
		Settings: map[string]string{
			"NimBus__Endpoint":               endpoint,
			"NimBus__Inbox__Enabled":         "true",
			"NimBus__Inbox__Store":           "InMemory",
			"NimBus__Inbox__RetentionPeriod": "00:00:05",
			"NimBus__Inbox__CleanupSchedule": "0 0 * * * *",
			"NimBus__Resolver__Sink":         "InMemory",
			// External CloudEvents producers, deduplicated by source and id.
			"NimBus__CloudEvents__Enabled":       "true",
			"NimBus__CloudEvents__Deduplication": "SourceAndId",
		},
		Stderr: os.Stderr,
	})
	if err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, _ = proc.Stop(stopCtx)
	}()
	port := proc.Port()
	d := &demo{base: proc.BaseURL(), client: &http.Client{Timeout: 30 * time.Second}, proc: proc}
	readyCtx, cancelReady := context.WithTimeout(ctx, 20*time.Second)
	defer cancelReady()
	if err := proc.WaitReady(readyCtx); err != nil {
		return err
	}

	fmt.Printf("NimBus subscriber demo: endpoint %s, in-memory inbox, in-memory Resolver sink\n", endpoint)
	fmt.Printf("Built ./handler and started it on 127.0.0.1:%d (the port the Functions host would assign).\n", port)
	fmt.Println("Each step POSTs a Service Bus invocation envelope as the host builds it (dataType binary, sessions on).")
	fmt.Println("Inbox retention is 5 seconds here (7 days by default) so the cleanup step has records to purge.")

	order := func(id string, amount float64, extra string) string {
		return fmt.Sprintf(`{"OrderId":%q,"CustomerId":"C-7","Amount":%g%s}`, id, amount, extra)
	}
	d.step("1. Fresh delivery of OrderPlaced", "OrderPlaced-0001", 1, "OrderPlaced", order("O-1", 42.5, ""))
	d.step("2. The same message redelivered after it succeeded (lock lost before completion)", "OrderPlaced-0001", 2, "OrderPlaced", order("O-1", 42.5, ""))
	d.step("3. A delivery whose handler fails (billing system busy); the handler waits 1s before answering, so redeliveries are paced", "OrderPlaced-0002", 1, "OrderPlaced", order("O-2", 42.5, `,"FailFirstAttempts":1`))
	d.step("4. The broker redelivers it; this time the handler succeeds", "OrderPlaced-0002", 2, "OrderPlaced", order("O-2", 42.5, `,"FailFirstAttempts":1`))
	lastRecord := time.Now()
	d.step("5. A message without a MessageId (cannot be deduplicated)", "", 1, "OrderPlaced", order("O-3", 42.5, ""))
	d.step("6. An event type this endpoint has no handler for", "CustomerMoved-0001", 1, "CustomerMoved", `{"CustomerId":"C-7"}`)
	d.step("7. A large order the handler hands off for manual approval", "OrderPlaced-0004", 1, "OrderPlaced", order("O-4", 25000, ""))
	d.step("8. An order without an OrderId: the handler fails permanently, so it is answered at once (no pause) and dead-lettered after the last delivery", "OrderPlaced-0005", 1, "OrderPlaced", `{"CustomerId":"C-7","Amount":10}`)
	d.malformed("9. A malformed envelope (not valid base64)")
	// The handler's inbox runs on the wall clock: the records expire only
	// when 5 seconds have really passed, and step 10 shows them purged.
	if wait := 5500*time.Millisecond - time.Since(lastRecord); wait > 0 {
		fmt.Printf("\n(waiting %.1fs for the records to pass the 5-second retention)\n", wait.Seconds())
		time.Sleep(wait)
	}
	d.cleanup("10. The hourly InboxCleanup timer fires")
	d.step("11. Message 1 arrives again after its record expired: it is new again (retention must exceed redelivery windows)", "OrderPlaced-0001", 3, "OrderPlaced", order("O-1", 42.5, ""))
	d.cloudEvent("12. An external producer's CloudEvent on the ingress topic (binary mode, ce- prefix; the broker assigned the MessageId)", "3f2a9c0d11e84b7a9e1c", order("O-6", 99, ""))
	d.cloudEvent("13. The producer re-sends the same event; the broker assigns a new MessageId, but source and id match: a duplicate", "b81e0f4c2d6a4f1e8c07", order("O-6", 99, ""))

	fmt.Println()
	fmt.Println("Metrics (GET /_nimbus/metrics: counters, and count and sum of each histogram):")
	var counters map[string]float64
	if err := d.getJSON("/_nimbus/metrics", &counters); err != nil {
		return err
	}
	keys := make([]string, 0, len(counters))
	for k := range counters {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("   %-72s %g\n", k, counters[k])
	}

	if err := d.resolverSteps(ctx, bin); err != nil {
		return err
	}

	stopCtx, cancelStop := context.WithTimeout(ctx, 15*time.Second)
	defer cancelStop()
	code, err := proc.Stop(stopCtx)
	switch {
	case errors.Is(err, handlerproc.ErrKilled):
		return errors.New("handler did not stop within 15s of SIGTERM")
	case err != nil:
		return err
	case code != 0:
		return fmt.Errorf("handler did not stop cleanly: exit code %d", code)
	}
	fmt.Println("\nStopped the handler with SIGTERM (graceful shutdown).")
	return nil
}

func (d *demo) step(title, messageID string, deliveryCount int, eventType, eventJSON string) {
	d.seq++
	shown := messageID
	if shown == "" {
		shown = "(none)"
	}
	body := `{"EventContent":{"EventTypeId":` + jsonString(eventType) + `,"EventJson":` + jsonString(eventJSON) + `},"ErrorContent":null}`
	now := time.Now().UTC()
	env := funchosttest.ServiceBus(funchosttest.ServiceBusMessage{
		FunctionName:       app.FuncSubscriber,
		Body:               []byte(body),
		MessageID:          messageID,
		SessionID:          funchosttest.S("customer-C-7"),
		CorrelationID:      funchosttest.S("checkout-42"),
		ContentType:        funchosttest.S("application/json"),
		LockToken:          fmt.Sprintf("5e3d6a39-8f6c-4f55-9c0e-%012d", d.seq),
		DeliveryCount:      deliveryCount,
		SequenceNumber:     1000 + d.seq,
		EnqueuedTime:       now.Add(-2 * time.Second),
		SessionLockedUntil: now.Add(time.Minute),
		Properties: funchosttest.Props(
			"To", endpoint, "From", "ShopEndpoint", "MessageType", "EventRequest",
			"EventId", "evt-"+strings.ToLower(shown), "EventTypeId", eventType,
			"OriginatingMessageId", "self", "ParentMessageId", "self", "RetryCount", 0,
			"OriginatingFrom", "ShopEndpoint"),
		Namespace: "sb-demo.servicebus.windows.net",
		UtcNow:    now,
		RandGUID:  fmt.Sprintf("0f8fad5b-d9cb-469f-a165-%012d", d.seq),
	})
	fmt.Printf("\n%s\n   MessageId %s, DeliveryCount %d, EventTypeId %s\n", title, shown, deliveryCount, eventType)
	d.invoke(app.FuncSubscriber, env)
}

// cloudEvent delivers a binary-mode CloudEvent (as a partner's CRM sends
// it, with no NimBus properties) to the CloudEventsIngress function.
func (d *demo) cloudEvent(title, brokerMessageID, eventJSON string) {
	d.seq++
	now := time.Now().UTC()
	env := funchosttest.ServiceBus(funchosttest.ServiceBusMessage{
		FunctionName:       app.FuncCloudEventsIngress,
		Body:               []byte(eventJSON),
		MessageID:          brokerMessageID,
		SessionID:          funchosttest.S("lead-42"),
		ContentType:        funchosttest.S("application/json"),
		LockToken:          fmt.Sprintf("5e3d6a39-8f6c-4f55-9c0e-%012d", d.seq),
		DeliveryCount:      1,
		SequenceNumber:     1000 + d.seq,
		EnqueuedTime:       now.Add(-2 * time.Second),
		SessionLockedUntil: now.Add(time.Minute),
		Properties: funchosttest.Props(
			"ce-specversion", "1.0", "ce-id", "lead-42-converted", "ce-source", "/partner/crm",
			"ce-type", "com.partner.crm.OrderPlaced", "ce-subject", "lead/42"),
		Namespace: "sb-demo.servicebus.windows.net",
		UtcNow:    now,
		RandGUID:  fmt.Sprintf("0f8fad5b-d9cb-469f-a165-%012d", d.seq),
	})
	fmt.Printf("\n%s\n   MessageId %s, ce-source /partner/crm, ce-id lead-42-converted, ce-type com.partner.crm.OrderPlaced\n", title, brokerMessageID)
	d.invoke(app.FuncCloudEventsIngress, env)
}

func (d *demo) malformed(title string) {
	d.seq++
	fmt.Printf("\n%s\n", title)
	d.invoke(app.FuncSubscriber, []byte(`{"Data":{"message":"%%% not base64 %%%"},"Metadata":{"DeliveryCount":"1"}}`))
}

func (d *demo) cleanup(title string) {
	d.seq++
	fmt.Printf("\n%s\n", title)
	now := time.Now().UTC()
	env := funchosttest.TimerEnvelope(funchosttest.Timer{
		FunctionName: app.FuncInboxCleanup, Last: now.Add(-time.Hour), Next: now, LastUpdated: now.Add(-time.Hour),
		UtcNow: now, RandGUID: fmt.Sprintf("b3c2a1d4-5e6f-4a7b-8c9d-%012d", d.seq),
	})
	d.invoke(app.FuncInboxCleanup, env)
}

func (d *demo) invoke(function string, env []byte) {
	id := fmt.Sprintf("demo-invocation-%04d", d.seq)
	req, _ := http.NewRequest(http.MethodPost, d.base+"/"+function, bytes.NewReader(env))
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "Azure-Functions-Host/demo")
	req.Header.Set("X-Azure-Functions-InvocationId", id)
	resp, err := d.client.Do(req)
	if err != nil {
		fmt.Printf("   request failed: %v\n", err)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	verdict := "the host completes the message"
	switch {
	case resp.StatusCode == http.StatusServiceUnavailable:
		verdict = "the host abandons the message; the broker redelivers it"
	case resp.StatusCode/100 != 2:
		verdict = "the host abandons the message; redelivered at once, dead-lettered after MaxDeliveryCount"
	}
	if function == app.FuncInboxCleanup {
		verdict = "timer invocation succeeded"
		if resp.StatusCode/100 != 2 {
			verdict = "timer invocation failed; the next tick retries"
		}
	}
	fmt.Printf("   handler → host: HTTP %d (%s)\n", resp.StatusCode, verdict)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	line, err := d.proc.WaitLine(ctx, func(l handlerproc.Line) bool { return l.Fields["invocationId"] == id })
	cancel()
	if err == nil {
		fields := []string{}
		for _, k := range []string{"outcome", "inbox", "cloudEvent", "bypassReason", "purged", "batches", "stoppedOnBudget", "error"} {
			if v, ok := line.Fields[k]; ok {
				fields = append(fields, fmt.Sprintf("%s=%v", k, v))
			}
		}
		fmt.Printf("   log line: %q %s\n", line.Fields["message"], strings.Join(fields, " "))
	}
	d.printResponses()
}

func (d *demo) printResponses() {
	var sent []app.SentResponse
	if err := d.getJSON("/_nimbus/resolver", &sent); err != nil {
		fmt.Printf("   could not read the Resolver sink: %v\n", err)
		return
	}
	if len(sent) == d.seen {
		fmt.Println("   Resolver: no response sent")
		return
	}
	for _, r := range sent[d.seen:] {
		p := r.Properties
		corr := "(none)"
		if r.CorrelationID != nil {
			corr = *r.CorrelationID
		}
		fmt.Printf("   Resolver ← %v (SessionId %s, CorrelationId %s)\n", p["MessageType"].Value, r.SessionID, corr)
		names := make([]string, 0, len(p))
		for k := range p {
			if k != "MessageType" {
				names = append(names, k)
			}
		}
		sort.Strings(names)
		var parts []string
		for _, k := range names {
			parts = append(parts, fmt.Sprintf("%s=%v:%s", k, p[k].Value, p[k].Type))
		}
		fmt.Printf("      properties: %s\n", strings.Join(parts, ", "))
		fmt.Printf("      body: %s\n", r.Body)
	}
	d.seen = len(sent)
}

func (d *demo) getJSON(path string, v any) error {
	resp, err := d.client.Get(d.base + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
