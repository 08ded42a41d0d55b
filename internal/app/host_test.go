package app

import (
	"context"
	"encoding/json"
	"regexp"
	"testing"
)

// Both apps put their completed invocation's summary in the Logs the same
// way: the outcome's message, the fields in a fixed order (an empty value
// quoted), the duration with three decimals and, on Cosmos, the request
// charge.
func TestBothAppsWriteTheSameSummaryLine(t *testing.T) {
	cases := []struct {
		name string
		post func(t *testing.T) answer
		want string
	}{
		{"endpoint", func(t *testing.T) answer {
			return newObsApp(t, nil).post(t, context.Background(), tracedEnvelope("m-1"))
		}, `^invocation completed: outcome=completed inbox=new messageId=m-1 sessionId=customer-1 eventId=evt-1 eventTypeId=OrderPlaced deliveryCount=1 handlerRan=true durationMs=\d+\.\d{3} requestCharge=6\.71 cosmosRequests=2$`},
		{"endpoint without MessageId", func(t *testing.T) answer {
			return newObsApp(t, nil).post(t, context.Background(), tracedEnvelope(""))
		}, `^invocation completed: outcome=completed inbox=bypassed messageId="" sessionId=customer-1 eventId=evt-1 eventTypeId=OrderPlaced deliveryCount=1 handlerRan=true durationMs=\d+\.\d{3} requestCharge=0 cosmosRequests=0$`},
		{"endpoint, inbox in memory (no charge)", func(t *testing.T) answer {
			code, body := newTestApp(t, nil, nil).post(t, FuncSubscriber, tracedEnvelope("m-1"))
			a := answer{status: code}
			if err := json.Unmarshal([]byte(body), &a); err != nil {
				t.Fatalf("answer %q: %v", body, err)
			}
			return a
		}, `^invocation completed: outcome=completed inbox=new messageId=m-1 sessionId=customer-1 eventId=evt-1 eventTypeId=OrderPlaced deliveryCount=1 handlerRan=true durationMs=\d+\.\d{3}$`},
		{"Resolver", func(t *testing.T) answer {
			return newResolverObs(t).post(t, context.Background(), resolverEnvelope("m-1"))
		}, `^tracking row written: outcome=written messageId=m-1 sessionId=customer-1 eventId=evt-1 messageType=EventRequest endpoint=BillingEndpoint status=Pending deliveryCount=1 throttleRetryCount=0 durationMs=\d+\.\d{3} requestCharge=5 cosmosRequests=2$`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := c.post(t)
			if a.status != 200 || len(a.Logs) == 0 {
				t.Fatalf("answered %d with Logs %q", a.status, a.Logs)
			}
			if !regexp.MustCompile(c.want).MatchString(a.Logs[0]) {
				t.Errorf("summary %q\nwant      %s", a.Logs[0], c.want)
			}
		})
	}
}
