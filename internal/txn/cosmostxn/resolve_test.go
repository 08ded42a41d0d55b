package cosmostxn_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// On Cosmos DB: the batch of a transactional handler that publishes
// nothing is applied and its answer lost (the connection closes after the
// request reached the server), so the delivery ends txn_ambiguous without
// a response; the redelivery finds the marker, does not run the handler,
// and the Resolver receives the ResolutionResponse of the event.
func TestAnswerLostBatchIsResolvedByTheRedelivery(t *testing.T) {
	t.Parallel()
	e, tg := newReadyEnv(t)
	var lost atomic.Bool
	e.rec.SetHooks(func(req *http.Request) (*http.Response, error) {
		if !testenv.IsBatchRequest(req) || !lost.CompareAndSwap(false, true) {
			return nil, nil
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, errors.New("connection reset by peer after the request was sent")
	}, nil)
	runs := 0
	reg := subscriber.NewRegistry()
	reg.HandleTx("OrderPlaced", subscriber.TxBinding{Target: tg, PartitionKey: func(*subscriber.Event) (string, error) { return "t", nil }},
		func(ctx context.Context, ev *subscriber.Event, u *txn.Unit) (subscriber.Result, error) {
			runs++
			return subscriber.Completed(), u.Create(map[string]any{"id": "order-1", "tenant": "t"})
		})
	mem, _ := inbox.NewMemoryStore(inbox.MemoryOptions{})
	pub := &resolver.Memory{}
	p, err := subscriber.New(subscriber.Options{EndpointID: "billing", Inbox: mem, Txn: e.store, Publisher: pub, Handlers: reg})
	if err != nil {
		t.Fatal(err)
	}
	id, sid, corr := "m-1", "s-1", "c-1"
	d := &subscriber.Delivery{
		Broker: message.Broker{MessageID: &id, SessionID: &sid, CorrelationID: &corr, EnqueuedTime: time.Now(), DeliveryCount: 1},
		Properties: map[string]any{"To": "billing", "From": "shop", "MessageType": "EventRequest", "EventId": "event-1",
			"EventTypeId": "OrderPlaced", "OriginatingMessageId": "self", "ParentMessageId": "self", "RetryCount": "0", "OriginatingFrom": "shop"},
		Body: []byte(`{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{}"},"ErrorContent":null}`),
	}
	ctx := context.Background()
	if r := p.Process(ctx, d); r.Outcome != subscriber.OutcomeTxnAmbiguous || r.Published {
		t.Fatalf("first delivery: %s, published %v: %v", r.Outcome, r.Published, r.Err)
	}
	if found, err := txn.HasMarker(ctx, e.store, tg, "t", "billing", id); err != nil || !found {
		t.Fatalf("the batch was not applied: marker %v, %v", found, err)
	}
	if n := len(pub.Sent()); n != 0 {
		t.Fatalf("the first delivery sent %d messages", n)
	}
	again := *d
	again.Broker.DeliveryCount = 2
	r := p.Process(ctx, &again)
	if r.Outcome != subscriber.OutcomeDuplicateResolved || r.HandlerRan || runs != 1 {
		t.Fatalf("redelivery: %s, handler ran %v (%d runs): %v", r.Outcome, r.HandlerRan, runs, r.Err)
	}
	sent := pub.Sent()
	if len(sent) != 1 || sent[0].Type() != message.ResolutionResponse.String() || *sent[0].CorrelationID != id ||
		sent[0].ApplicationProperties[message.PropEventID] != "event-1" {
		t.Fatalf("the Resolver received %d messages, want the ResolutionResponse of event-1: %+v", len(sent), sent)
	}
}
