package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/app"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/funchosttest"
	"github.com/nimbus-go/functions-subscriber/internal/testenv/handlerproc"
)

// resolverSteps starts the same binary a second time as the Resolver app
// (in-memory tracking store) and hands it what the Resolver subscription
// would deliver for message OrderPlaced-0001: the fan-out's copy of the
// request, the endpoint's ResolutionResponse from step 1 (with From stamped
// as the fan-out rule does), then the request copy once more, late. After
// each it prints the tracking row.
func (d *demo) resolverSteps(ctx context.Context, bin string) error {
	proc, err := handlerproc.Start(handlerproc.Options{
		Binary: bin,
		Settings: map[string]string{
			"NimBus__App":             "Resolver",
			"NimBus__Resolver__Store": "InMemory",
			// A placeholder: the Service Bus client is created only to
			// schedule a re-send after a store failure, and the in-memory
			// store does not fail.
			"ServiceBusConnection": "Endpoint=sb://localhost/;SharedAccessKeyName=demo;SharedAccessKey=ZGVtbw==",
		},
		Stderr: os.Stderr,
	})
	if err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, _ = proc.Stop(stopCtx)
	}()
	readyCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := proc.WaitReady(readyCtx); err != nil {
		return err
	}
	r := &demo{base: proc.BaseURL(), client: d.client, proc: proc, seq: 100}

	fmt.Printf("\nThe same binary as the NimBus Resolver (NimBus__App=Resolver, in-memory tracking store) on 127.0.0.1:%d\n", proc.Port())
	var sent []app.SentResponse
	if err := d.getJSON("/_nimbus/resolver", &sent); err != nil {
		return err
	}
	var response *app.SentResponse
	for i := range sent {
		if sent[i].CorrelationID != nil && *sent[i].CorrelationID == "OrderPlaced-0001" {
			response = &sent[i]
			break
		}
	}
	if response == nil {
		return fmt.Errorf("the endpoint sent no response for OrderPlaced-0001")
	}
	request := funchosttest.Props(
		"To", endpoint, "From", "ShopEndpoint", "MessageType", "EventRequest",
		"EventId", "evt-orderplaced-0001", "EventTypeId", "OrderPlaced",
		"OriginatingMessageId", "self", "ParentMessageId", "self", "RetryCount", 0, "OriginatingFrom", "ShopEndpoint")
	requestBody := `{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-1\",\"CustomerId\":\"C-7\",\"Amount\":42.5}"},"ErrorContent":null}`

	var props []funchosttest.Property
	for k, v := range response.Properties {
		val := v.Value
		if n, ok := val.(float64); ok && (v.Type == "int" || v.Type == "long") {
			val = int64(n)
		}
		props = append(props, funchosttest.Property{Name: k, Value: val})
	}
	props = append(props, funchosttest.Property{Name: "From", Value: endpoint})

	r.resolverStep("14. The Resolver receives the fan-out's copy of the request OrderPlaced-0001", "OrderPlaced-0001", request, requestBody)
	r.resolverStep("15. The Resolver receives the endpoint's "+fmt.Sprint(response.Properties["MessageType"].Value)+" from step 1 (From stamped by the fan-out)", "rsp-0001", props, response.Body)
	r.resolverStep("16. The request copy arrives once more, late (a lagging forward): refused as stale, the row stays Completed", "OrderPlaced-0001", request, requestBody)
	return nil
}

func (d *demo) resolverStep(title, messageID string, props []funchosttest.Property, body string) {
	d.seq++
	now := time.Now().UTC()
	env := funchosttest.ServiceBus(funchosttest.ServiceBusMessage{
		FunctionName: app.FuncResolver, Body: []byte(body), MessageID: messageID,
		SessionID: funchosttest.S("customer-C-7"), CorrelationID: funchosttest.S("OrderPlaced-0001"),
		LockToken: fmt.Sprintf("5e3d6a39-8f6c-4f55-9c0e-%012d", d.seq), DeliveryCount: 1, SequenceNumber: 5000 + d.seq,
		EnqueuedTime: now.Add(-time.Second), SessionLockedUntil: now.Add(time.Minute), Properties: props,
		Namespace: "sb-demo.servicebus.windows.net", UtcNow: now, RandGUID: fmt.Sprintf("0f8fad5b-d9cb-469f-a165-%012d", d.seq),
	})
	fmt.Printf("\n%s\n   MessageId %s\n", title, messageID)
	id := fmt.Sprintf("demo-invocation-%04d", d.seq)
	req, _ := http.NewRequest(http.MethodPost, d.base+"/"+app.FuncResolver, strings.NewReader(string(env)))
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("X-Azure-Functions-InvocationId", id)
	resp, err := d.client.Do(req)
	if err != nil {
		fmt.Printf("   request failed: %v\n", err)
		return
	}
	resp.Body.Close()
	fmt.Printf("   Resolver → host: HTTP %d\n", resp.StatusCode)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	line, err := d.proc.WaitLine(ctx, func(l handlerproc.Line) bool { return l.Fields["invocationId"] == id })
	cancel()
	if err == nil {
		fmt.Printf("   log line: %q outcome=%v status=%v endpoint=%v\n", line.Fields["message"], line.Fields["outcome"], line.Fields["status"], line.Fields["endpoint"])
	}
	var row map[string]any
	if err := d.getJSON("/_nimbus/tracking?endpoint="+endpoint+"&event=evt-orderplaced-0001", &row); err != nil {
		fmt.Printf("   tracking row: none (%v)\n", err)
		return
	}
	b, _ := json.Marshal(map[string]any{
		"ResolutionStatus": row["ResolutionStatus"], "MessageType": row["MessageType"], "LastMessageId": row["LastMessageId"],
		"EndpointId": row["EndpointId"], "From": row["From"], "To": row["To"], "ParentMessageId": row["ParentMessageId"],
		"ProcessingTimeMs": row["ProcessingTimeMs"],
	})
	fmt.Printf("   tracking row %s_customer-C-7: %s\n", "evt-orderplaced-0001", b)
}
