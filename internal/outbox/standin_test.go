package outbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/outbox"
	"github.com/nimbus-go/functions-subscriber/internal/servicebus"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
	"github.com/nimbus-go/functions-subscriber/internal/txn/cosmostxn"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestSweepOnTheStandIns runs the sweep with the real SDKs: markers in a
// Cosmos DB container (several partitions, one of them beyond ASCII, read
// in pages across partitions) and sends through the Service Bus adapter to
// the endpoint topic, where each marker's events arrive in publish order
// followed by its response, byte for byte as stored.
func TestSweepOnTheStandIns(t *testing.T) {
	db := testenv.SharedCosmos(t, testenv.CosmosOptions{Consistency: "Strong"})
	tg := txn.Target{DatabaseID: db.Database(t), ContainerID: "ledger", PartitionKeyPath: "/customerId"}
	account, err := cosmos.NewAccount(cosmos.Config{ConnectionString: db.ConnectionString()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(account.Close)
	store, err := cosmostxn.New(account, cosmostxn.Options{})
	if err != nil {
		t.Fatal(err)
	}

	topo := testenv.NimBusTopology(endpoint)
	for i := range topo.Topics {
		if topo.Topics[i].Name == endpoint {
			topo.Topics[i].Subscriptions = append(topo.Topics[i].Subscriptions, testenv.Subscription{Name: "tap", RequiresSession: true})
		}
	}
	sb := testenv.StartServiceBus(t, topo)
	client, err := servicebus.New(servicebus.Options{ConnectionString: sb.ConnectionString, Retry: servicebus.DefaultRetry})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close(context.Background()) })
	pub, err := servicebus.NewResolverPublisher(client, endpoint)
	if err != nil {
		t.Fatal(err)
	}

	now := time.Now()
	w := newWorld(store, tg)
	customers := []string{"c-1", "c-2", "c-\U0001F642", "c-4", "c-5"}
	want := map[string][]message.Stored{}
	for i, c := range customers {
		msg := fmt.Sprintf("pay-%d", i)
		// Each marker's messages in a session of their own, to receive
		// them apart.
		w.session = "s-" + msg
		p := w.commit(t, tg, c, endpoint, msg, now.Add(-time.Hour), msg+"-recorded", msg+"-accepted")
		want[msg] = append(p.Events, *p.Response)
	}
	young := w.commit(t, tg, "c-1", endpoint, "young", now, "young-recorded")

	s := &outbox.Sweeper{Store: store, Targets: []txn.Target{tg}, EndpointID: endpoint, Publisher: pub, Retention: time.Hour, PageSize: 2}
	rep, err := s.Run(context.Background(), now)
	if err != nil {
		t.Fatalf("Run: %v (%+v)", err, rep)
	}
	if rep.Found != len(customers) || rep.Dispatched != len(customers) || rep.Events != 2*len(customers) || rep.Responses != len(customers) || !rep.Drained || rep.Pages < 3 {
		t.Errorf("report %+v", rep)
	}
	t.Logf("swept %d markers in %d pages of 2: %+v", rep.Dispatched, rep.Pages, rep)

	rc := sb.Client(t)
	for i, c := range customers {
		msg := fmt.Sprintf("pay-%d", i)
		got := testenv.ReceiveSession(t, rc, endpoint, "tap", "s-"+msg, 3, 20*time.Second)
		for j, m := range got {
			w := want[msg][j]
			if w.MessageID != "" && m.MessageID != w.MessageID {
				t.Errorf("%s: message %d is %s, want %s", msg, j, m.MessageID, w.MessageID)
			}
			if string(m.Body) != string(w.Body) {
				t.Errorf("%s: message %d body %q, want %q", msg, j, m.Body, w.Body)
			}
			for k, v := range w.ApplicationProperties {
				if m.ApplicationProperties[k] != v {
					t.Errorf("%s: message %d property %s = %#v, want %#v", msg, j, k, m.ApplicationProperties[k], v)
				}
			}
		}
		st, err := txn.ReadMarker(context.Background(), store, tg, c, endpoint, msg)
		if err != nil || !st.Dispatched || st.Pending != nil || len(st.OutboxIDs) != 2 {
			t.Errorf("%s: marker %+v, %v; want dispatched, ids kept", msg, st, err)
		}
	}
	if st, err := txn.ReadMarker(context.Background(), store, tg, "c-1", endpoint, "young"); err != nil || st.Pending == nil || st.Pending.ETag != young.ETag {
		t.Errorf("the young marker: %+v, %v; want it untouched", st, err)
	}
}
