package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/app"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv/handlerproc"
	"github.com/nimbus-go/functions-subscriber/internal/devhost"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
)

// resolverSteps starts the same binary a second time as the Resolver app
// (in-memory tracking store) and hands it what the Resolver subscription
// would deliver for message OrderPlaced-0001: the fan-out's copy of the
// request, the endpoint's ResolutionResponse from step 1 (with From stamped
// as the fan-out rule does), then the request copy once more, late. After
// each it prints the tracking row.
func (s *script) resolverSteps(ctx context.Context, d *proc) error {
	settings := map[string]string{
		"NimBus__App":             "Resolver",
		"NimBus__Resolver__Store": "InMemory",
		// A placeholder: the Service Bus client is created only to
		// schedule a re-send after a store failure, and the in-memory
		// store does not fail.
		"ServiceBusConnection": "Endpoint=sb://localhost/;SharedAccessKeyName=demo;SharedAccessKey=ZGVtbw==",
	}
	r, err := s.start(ctx, settings)
	if err != nil {
		return err
	}
	defer r.stop(ctx)

	s.section(fmt.Sprintf("The same binary as the NimBus Resolver (NimBus__App=Resolver, in-memory tracking store) on 127.0.0.1:%d", r.proc.Port()))
	sent, err := d.host.Sent(ctx)
	if err != nil {
		return err
	}
	var response *devhost.SentResponse
	for i := range sent {
		if sent[i].CorrelationID != nil && *sent[i].CorrelationID == "OrderPlaced-0001" {
			response = &sent[i]
			break
		}
	}
	if response == nil {
		return fmt.Errorf("the endpoint sent no response for OrderPlaced-0001")
	}
	request := hostwire.Props(
		"To", endpoint, "From", "ShopEndpoint", "MessageType", "EventRequest",
		"EventId", "evt-orderplaced-0001", "EventTypeId", "OrderPlaced",
		"OriginatingMessageId", "self", "ParentMessageId", "self", "RetryCount", int32(0), "OriginatingFrom", "ShopEndpoint")
	requestBody := `{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-1\",\"CustomerId\":\"C-7\",\"Amount\":42.5}"},"ErrorContent":null}`

	out := toOutgoing(*response)
	var props []hostwire.Property
	for k, v := range out.ApplicationProperties {
		props = append(props, hostwire.Property{Name: k, Value: v})
	}
	props = append(props, hostwire.Property{Name: "From", Value: endpoint})

	r.resolverStep("The Resolver receives the fan-out's copy of the request OrderPlaced-0001", "OrderPlaced-0001", request, requestBody, "written")
	r.resolverStep("The Resolver receives the endpoint's "+fmt.Sprint(response.Properties["MessageType"].Value)+" for it (From stamped by the fan-out)", "rsp-0001", props, response.Body, "written")
	r.resolverStep("The request copy arrives once more, late (a lagging forward): refused as stale, the row stays Completed", "OrderPlaced-0001", request, requestBody, "stale")
	return nil
}

func (d *proc) resolverStep(title, messageID string, props []hostwire.Property, body, wantOutcome string) {
	d.title(title)
	d.seq++
	now := time.Now().UTC()
	sb := hostwire.ServiceBusMessage{
		FunctionName: app.FuncResolver, Body: []byte(body), MessageID: messageID,
		SessionID: hostwire.S("customer-C-7"), CorrelationID: hostwire.S("OrderPlaced-0001"),
		DeliveryCount: 1, EnqueuedTime: now.Add(-time.Second), SessionLockedUntil: now.Add(time.Minute), Properties: props,
	}
	d.s.printf("   MessageId %s\n", messageID)
	id := fmt.Sprintf("demo-invocation-%04d", d.s.step)
	status, err := d.post(app.FuncResolver, d.envelope(sb), id)
	if err != nil {
		d.s.fail("%v", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	line, err := d.proc.WaitLine(ctx, func(l handlerproc.Line) bool { return l.Str("invocationId") == id })
	cancel()
	if err != nil {
		d.s.fail("no log line for invocation %s: %v", id, err)
	}
	d.s.printf("   → HTTP %d; log: outcome=%v status=%v endpoint=%v\n", status, line.Fields["outcome"], line.Fields["status"], line.Fields["endpoint"])
	d.s.check(result{status: status, line: line}, expect{status: 200, outcome: wantOutcome})
	var row map[string]any
	if err := d.getJSON("/_nimbus/tracking?endpoint="+endpoint+"&event=evt-orderplaced-0001", &row); err != nil {
		d.s.fail("tracking row: none (%v)", err)
		return
	}
	b, _ := json.Marshal(map[string]any{
		"ResolutionStatus": row["ResolutionStatus"], "MessageType": row["MessageType"], "LastMessageId": row["LastMessageId"],
		"EndpointId": row["EndpointId"], "From": row["From"], "To": row["To"], "ParentMessageId": row["ParentMessageId"],
		"ProcessingTimeMs": row["ProcessingTimeMs"],
	})
	d.s.printf("   tracking row %s_customer-C-7: %s\n", "evt-orderplaced-0001", b)
}
