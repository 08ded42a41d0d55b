package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/app/apptest"
	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmosconn"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testlog"
	"github.com/nimbus-go/functions-subscriber/internal/devhost"
	"github.com/nimbus-go/functions-subscriber/internal/message/nimbusmsg"
)

// startOrSkip starts o's stand-ins; without Node it skips the test (fails
// it under NIMBUS_REQUIRE_EMULATORS=1).
func startOrSkip(t *testing.T, o options) *running {
	t.Helper()
	s, err := start(o)
	if errors.Is(err, errUnavailable) {
		testenv.Unavailable(t, "%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	return s
}

// The command as the docs run it (on free ports): it starts both stand-ins,
// prints the settings of an endpoint app and of the Resolver app, and
// stops on interrupt with exit code 0.
func TestRunPrintsTheSettingsAndStopsOnInterrupt(t *testing.T) {
	if err := available(); err != nil {
		testenv.Unavailable(t, "%v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut testlog.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"-cosmos-port", "0", "-servicebus-port", "0", "-forward", "Orders/OrderAccepted=Billing", "Orders", "Billing"}, &out, &errOut)
	}()
	testenv.WaitUntil(t, time.Minute, func() bool { return strings.Contains(out.String(), "Ctrl-C") || errOut.String() != "" },
		func() string { return "the settings: " + out.String() + errOut.String() })
	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("exit %d\n%s%s", c, out.String(), errOut.String())
	}
	got := out.String()
	for _, w := range []string{
		"(consistency Strong, key " + testenv.CosmosEmulatorKey + ")",
		"topic Orders: subscriptions Orders (sessions), Resolver (forwards to topic Resolver), Deferred (sessions), DeferredProcessor, Billing (forwards OrderAccepted to topic Billing)",
		"topic Billing: subscriptions Billing (sessions),",
		"export NimBus__Inbox__Store='Cosmos'",
		"export NimBus__App='Resolver'",
		"stopping",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("the output does not show %q:\n%s", w, got)
		}
	}
	for _, line := range strings.Split(got, "\n") {
		if v, ok := strings.CutPrefix(line, "export NimBus__Inbox__Cosmos__ConnectionString='"); ok {
			if _, err := cosmosconn.Parse(strings.TrimSuffix(v, "'")); err != nil {
				t.Errorf("the Cosmos DB connection string printed: %v", err)
			}
		}
	}
}

func TestParseRefusesWhatItCannotStart(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "name at least one ENDPOINT"},
		{[]string{"-forward", "Orders=Billing", "Orders", "Billing"}, `"Orders=Billing" is not PRODUCER/EVENT-TYPE=CONSUMER`},
		{[]string{"-forward", "Orders/OrderAccepted=Shipping", "Orders", "Billing"}, "Shipping is not one of the endpoints named"},
		{[]string{"-deliver", "Billing=x", "Billing"}, `"Billing=x" is not ENDPOINT=PORT`},
		{[]string{"-deliver", "Shipping=8080", "Billing"}, "-deliver Shipping: it is not one of the endpoints named"},
		{[]string{"-cosmos-port", "70000", "Billing"}, "70000 is not a port number"},
	} {
		if _, err := parse(c.args, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
	o, err := parse([]string{"-forward", "Orders/OrderAccepted=Billing", "-forward", "Orders/OrderCancelled=Billing", "-deliver", "Billing=8080", "Orders", "Billing"}, io.Discard)
	if err != nil || o.CosmosPort != 8081 || o.ServiceBusPort != 5672 || o.Consistency != "Strong" || o.Deliver["Billing"] != 8080 {
		t.Fatalf("defaults: %+v, %v", o, err)
	}
	// Two event types of one producer for one consumer are one forwarding
	// subscription with a rule each.
	var subs []string
	for _, topic := range o.topology().Topics {
		if topic.Name == "Orders" {
			for _, s := range topic.Subscriptions {
				if s.Name == "Billing" {
					subs = append(subs, s.ForwardTo+":"+strconv.Itoa(len(s.Rules)))
				}
			}
		}
	}
	if strings.Join(subs, ",") != "Billing:2" {
		t.Errorf("forwarding subscriptions of Orders: %v", subs)
	}
}

// A workflow on the stand-ins: an event Orders publishes to its topic is
// forwarded by NimBus's rule to Billing's topic and delivered, as the
// Functions host would, to the Billing app, which answers the Resolver with
// From = Orders as its OriginatingFrom; the Cosmos DB account is Strong.
func TestStandinsForwardAndDeliverAnEvent(t *testing.T) {
	billing := apptest.Serve(t, map[string]string{config.KeyEndpoint: "Billing"})
	s := startOrSkip(t, options{Consistency: "Strong", Endpoints: []string{"Orders", "Billing"},
		Forwards: []forward{{"Orders", "OrderAccepted", "Billing"}}, Deliver: map[string]int{"Billing": billing}})

	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(s.cosmos.Port) + "/")
	if err != nil {
		t.Fatal(err)
	}
	var account struct {
		UserConsistencyPolicy struct{ DefaultConsistencyLevel string } `json:"userConsistencyPolicy"`
	}
	err = json.NewDecoder(resp.Body).Decode(&account)
	resp.Body.Close()
	if err != nil || account.UserConsistencyPolicy.DefaultConsistencyLevel != "Strong" {
		t.Errorf("the account's consistency: %+v (%v)", account, err)
	}

	client, err := azservicebus.NewClientFromConnectionString(s.serviceBusConnection(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	sender, err := client.NewSender("Orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close(context.Background())
	m := nimbusmsg.Published(nimbusmsg.Event{Publisher: "Orders", EventTypeID: "OrderAccepted", EventJSON: `{"OrderId":"O-1"}`,
		MessageID: "OrderAccepted-O-1", SessionID: "customer-1", CorrelationID: "corr-1"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sender.SendMessage(ctx, &azservicebus.Message{MessageID: &m.MessageID, SessionID: &m.SessionID, CorrelationID: m.CorrelationID,
		ApplicationProperties: m.ApplicationProperties, Body: m.Body}, nil); err != nil {
		t.Fatal(err)
	}

	c := &devhost.Client{BaseURL: "http://127.0.0.1:" + strconv.Itoa(billing)}
	var sent []devhost.SentResponse
	testenv.WaitUntil(t, 30*time.Second, func() bool {
		sent, err = c.Sent(ctx)
		return err == nil && len(sent) > 0
	}, func() string { return "Billing's ResolutionResponse" })
	r := sent[0]
	if devhost.Label(r) != "ResolutionResponse" || r.Properties["OriginatingFrom"].Value != "Orders" || r.SessionID != "customer-1" ||
		r.CorrelationID == nil || *r.CorrelationID != "OrderAccepted-O-1" {
		t.Errorf("Billing sent %s", devhost.Describe(r))
	}
}
