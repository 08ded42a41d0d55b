package app

import (
	"net/http"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
)

// managerEnvelope is a native Manager request for evt-1 as the host
// delivers it to function fn.
func managerEnvelope(fn, messageType string) []byte {
	body := `{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{}"},"ErrorContent":null}`
	return hostwire.ServiceBus(hostwire.ServiceBusMessage{
		FunctionName: fn, Body: []byte(body), MessageID: "m-" + messageType, SessionID: hostwire.S("customer-1"),
		DeliveryCount: 1, SequenceNumber: 7, EnqueuedTime: time.Now().Add(-time.Second),
		Properties: hostwire.Props(
			"To", "BillingEndpoint", "From", "Manager", "MessageType", messageType, "EventId", "evt-1",
			"EventTypeId", "OrderPlaced", "OriginatingMessageId", "self", "ParentMessageId", "self",
			"RetryCount", 0, "OriginatingFrom", "self"),
		Namespace: "sb.test", UtcNow: time.Now(), RandGUID: "00000000-0000-0000-0000-000000000000",
	})
}

// Each function accepts only what its senders may send: a Manager request
// runs on Subscriber, and is refused (422, dead-letter path, no handler)
// on CloudEventsIngress and on DeferredProcessor.
func TestFunctionsAcceptOnlyTheirMessageTypes(t *testing.T) {
	cases := []struct {
		fn, messageType string
		status, handled int
	}{
		{FuncSubscriber, "ResubmissionRequest", http.StatusOK, 1},
		{FuncCloudEventsIngress, "ResubmissionRequest", http.StatusUnprocessableEntity, 0},
		{FuncCloudEventsIngress, "SkipRequest", http.StatusUnprocessableEntity, 0},
		{FuncCloudEventsIngress, "RetryRequest", http.StatusUnprocessableEntity, 0},
		{FuncCloudEventsIngress, "EventRequest", http.StatusOK, 1},
		{FuncDeferredProcessor, "SkipRequest", http.StatusUnprocessableEntity, 0},
	}
	for _, c := range cases {
		t.Run(c.fn+"/"+c.messageType, func(t *testing.T) {
			ta := newTestApp(t, ceSettings, nil)
			status, body := ta.post(t, c.fn, managerEnvelope(c.fn, c.messageType))
			if status != c.status || ta.handled != c.handled {
				t.Fatalf("status %d (%s), handler ran %d times; want %d, %d", status, body, ta.handled, c.status, c.handled)
			}
		})
	}
}
