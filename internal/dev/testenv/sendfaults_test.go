package testenv

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// TestSendFaultsRefuseASeededShare sends 200 messages to a topic with
// SEND_FAULTS at 30% on messages To=Resolver: about that share of those
// fails with a non-retried error and is never stored, every other message
// arrives, and the count of refusals the stand-in printed is the count of
// failed sends.
func TestSendFaultsRefuseASeededShare(t *testing.T) {
	t.Parallel()
	topo := Topology{Topics: []Topic{{Name: "T", Subscriptions: []Subscription{{Name: "all"}}}}}
	sb := StartServiceBusWithSendFaults(t, topo, SendFaults{Rate: 0.3, Seed: 11, Entities: []string{"t"},
		Match: []Rule{{Equals: map[string]string{"To": "Resolver"}}}})
	c := sb.Client(t)
	s, err := c.NewSender("T", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Concurrent sends: the stand-in must report each refusal on its own
	// delivery (rhea would otherwise merge it with a neighbour's outcome).
	var mu sync.Mutex
	failed, sent := 0, 0
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 200; i += 8 {
				to := "Resolver"
				if i%2 == 1 {
					to = "Elsewhere"
				}
				err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte(fmt.Sprint(i)), ApplicationProperties: map[string]any{"To": to}}, nil)
				var sbErr *azservicebus.Error
				mu.Lock()
				switch {
				case err == nil:
					sent++
				case to == "Elsewhere":
					t.Errorf("message %d (To=Elsewhere) refused: %v", i, err)
				case errors.As(err, &sbErr) && sbErr.Code == azservicebus.CodeConnectionLost:
					t.Errorf("a refusal must not look like a lost connection (the SDK would retry it): %v", err)
				default:
					failed++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if failed < 15 || failed > 50 {
		t.Errorf("%d of 100 eligible sends refused, want about 30", failed)
	}
	if got := sb.InjectedSendFaults()["Resolver"]; got != failed {
		t.Errorf("the stand-in reports %d refusals, the client saw %d", got, failed)
	}
	r, err := c.NewReceiverForSubscription("T", "all", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for got < sent {
		ms, err := r.ReceiveMessages(ctx, sent-got, nil)
		if err != nil {
			t.Fatalf("received %d of %d: %v", got, sent, err)
		}
		got += len(ms)
	}
	pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer pcancel()
	if more, _ := r.ReceiveMessages(pctx, 10, nil); len(more) > 0 {
		t.Errorf("%d messages stored beyond the %d sends that succeeded", len(more), sent)
	}
}
