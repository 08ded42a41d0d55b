// Command standins starts the local stand-ins this repository ships, for
// running an endpoint app on this machine without Azure: the Cosmos DB
// stand-in (an account of Strong consistency, plain HTTP) and the Service
// Bus stand-in (AMQP, plain TCP) with NimBus's topology for the endpoints
// named, and the forwarding subscriptions asked for. It prints the app
// settings that point an app at them and runs until interrupted.
//
// With -deliver it also plays the Functions host's Service Bus triggers for
// an app running on this machine: it receives the endpoint's subscription
// (sessions on, the Subscriber function) and its DeferredProcessor
// subscription, and posts each message to the app as the host does,
// completing it on a 2xx answer and abandoning it otherwise.
//
//	go run ./scripts/standins [-cosmos-port 8081] [-servicebus-port 5672] [-consistency Strong]
//	    [-forward PRODUCER/EVENT-TYPE=CONSUMER]... [-deliver ENDPOINT=PORT]... ENDPOINT...
//
// The stand-ins are Node programs in scripts/testenv; install their
// packages first (npm ci --prefix scripts/testenv).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/dev/minihost"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the command's arguments.
type options struct {
	CosmosPort, ServiceBusPort int
	// Consistency is the Cosmos DB account's default consistency.
	Consistency string
	// Endpoints get NimBus's topology: their topics and subscriptions.
	Endpoints []string
	// Forwards are forwarding subscriptions on producers' topics.
	Forwards []forward
	// Deliver maps an endpoint to the port of the app that runs it.
	Deliver map[string]int
	// Resolver is the port of a Resolver app to deliver the Resolver
	// topic to; 0 for none.
	Resolver int
}

// forward is NimBus's forwarding subscription of a consumer on a producer's
// topic for one event type.
type forward struct{ Producer, EventTypeID, Consumer string }

// errUnavailable: the stand-ins cannot run on this machine.
var errUnavailable = errors.New("the stand-ins cannot run")

const usage = `usage: go run ./scripts/standins [-cosmos-port N] [-servicebus-port N] [-consistency LEVEL]
           [-forward PRODUCER/EVENT-TYPE=CONSUMER]... [-deliver ENDPOINT=PORT]... ENDPOINT...

Start the Cosmos DB stand-in and the Service Bus stand-in with NimBus's topology
for each ENDPOINT, print the app settings that point an endpoint app at them,
and run until interrupted (Ctrl-C).
`

// parse reads the arguments.
func parse(args []string, stderr io.Writer) (options, error) {
	o := options{Deliver: map[string]int{}}
	fs := flag.NewFlagSet("standins", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage+"\noptions:\n")
		fs.PrintDefaults()
	}
	fs.IntVar(&o.CosmosPort, "cosmos-port", 8081, "the Cosmos DB stand-in's port on 127.0.0.1 (0: a free one)")
	fs.IntVar(&o.ServiceBusPort, "servicebus-port", 5672, "the Service Bus stand-in's AMQP port on 127.0.0.1 (0: a free one)")
	fs.StringVar(&o.Consistency, "consistency", "Strong", "the Cosmos DB account's default consistency (an endpoint app refuses any other than Strong)")
	fs.Func("forward", "PRODUCER/EVENT-TYPE=CONSUMER: NimBus's forwarding subscription CONSUMER on topic PRODUCER for EVENT-TYPE (repeatable)", func(v string) error {
		pe, consumer, ok := strings.Cut(v, "=")
		producer, eventType, ok2 := strings.Cut(pe, "/")
		if !ok || !ok2 || producer == "" || eventType == "" || consumer == "" {
			return fmt.Errorf("%q is not PRODUCER/EVENT-TYPE=CONSUMER", v)
		}
		o.Forwards = append(o.Forwards, forward{Producer: producer, EventTypeID: eventType, Consumer: consumer})
		return nil
	})
	fs.Func("deliver", "ENDPOINT=PORT: deliver ENDPOINT's subscriptions to the app on 127.0.0.1:PORT as the Functions host does (repeatable)", func(v string) error {
		endpoint, p, ok := strings.Cut(v, "=")
		port, err := strconv.Atoi(p)
		if !ok || endpoint == "" || err != nil || port <= 0 || port > 65535 {
			return fmt.Errorf("%q is not ENDPOINT=PORT", v)
		}
		o.Deliver[endpoint] = port
		return nil
	})
	fs.IntVar(&o.Resolver, "resolver", 0, "deliver the Resolver topic's subscription to the Resolver app on 127.0.0.1:PORT as the Functions host does")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.Endpoints = fs.Args()
	if len(o.Endpoints) == 0 {
		fs.Usage()
		return o, errors.New("name at least one ENDPOINT")
	}
	for _, p := range []int{o.CosmosPort, o.ServiceBusPort, o.Resolver} {
		if p < 0 || p > 65535 {
			return o, fmt.Errorf("%d is not a port number", p)
		}
	}
	known := func(e string) bool { return slices.Contains(o.Endpoints, e) }
	for _, f := range o.Forwards {
		for _, e := range []string{f.Producer, f.Consumer} {
			if !known(e) {
				return o, fmt.Errorf("-forward %s/%s=%s: %s is not one of the endpoints named", f.Producer, f.EventTypeID, f.Consumer, e)
			}
		}
	}
	for e := range o.Deliver {
		if !known(e) {
			return o, fmt.Errorf("-deliver %s: it is not one of the endpoints named", e)
		}
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "standins:", err)
		return 2
	}
	s, err := start(o)
	if err != nil {
		fmt.Fprintln(stderr, "standins:", err)
		return 1
	}
	defer s.stop()
	s.describe(stdout)
	<-ctx.Done()
	fmt.Fprintln(stdout, "stopping")
	return 0
}

// running are the started stand-ins and delivering hosts.
type running struct {
	o                  options
	cosmos, servicebus *testenv.Process
	client             *azservicebus.Client
	hosts              []*minihost.Host
}

// topology is NimBus's topology for o's endpoints, with o's forwards.
func (o options) topology() testenv.Topology {
	t := testenv.NimBusTopology(o.Endpoints...)
	// One forwarding subscription per producer and consumer, with a rule
	// per event type.
	var pairs [][2]string
	types := map[[2]string][]string{}
	for _, f := range o.Forwards {
		k := [2]string{f.Producer, f.Consumer}
		if _, ok := types[k]; !ok {
			pairs = append(pairs, k)
		}
		if !slices.Contains(types[k], f.EventTypeID) {
			types[k] = append(types[k], f.EventTypeID)
		}
	}
	for _, k := range pairs {
		t = t.WithForwarder(k[0], k[1], types[k]...)
	}
	return t
}

// start starts the stand-ins and the delivering hosts o asks for.
func start(o options) (*running, error) {
	if err := available(); err != nil {
		return nil, err
	}
	topo, err := json.Marshal(o.topology())
	if err != nil {
		return nil, err
	}
	s := &running{o: o}
	if s.cosmos, err = testenv.StartNode("cosmos.js", "PORT="+strconv.Itoa(o.CosmosPort), "COSMOS_CONSISTENCY="+o.Consistency); err != nil {
		return nil, fmt.Errorf("the Cosmos DB stand-in: %w", err)
	}
	if s.servicebus, err = testenv.StartNode("sbfake.js", "PORT="+strconv.Itoa(o.ServiceBusPort), "TOPOLOGY="+string(topo)); err != nil {
		s.stop()
		return nil, fmt.Errorf("the Service Bus stand-in: %w", err)
	}
	if len(o.Deliver) == 0 && o.Resolver == 0 {
		return s, nil
	}
	if s.client, err = azservicebus.NewClientFromConnectionString(s.serviceBusConnection(), nil); err != nil {
		s.stop()
		return nil, err
	}
	var triggers []minihost.Config
	for _, e := range o.Endpoints {
		if port, ok := o.Deliver[e]; ok {
			inv := &minihost.Invoker{BaseURL: "http://127.0.0.1:" + strconv.Itoa(port)}
			triggers = append(triggers,
				minihost.Config{Topic: e, Subscription: e, Function: "Subscriber", Invoker: inv},
				minihost.Config{Topic: e, Subscription: testenv.DeferredProcessorSub, Function: "DeferredProcessor", NoSessions: true, Invoker: inv})
		}
	}
	if o.Resolver != 0 {
		triggers = append(triggers, minihost.Config{Topic: testenv.ResolverTopic, Subscription: testenv.ResolverSubscription, Function: "Resolver",
			Invoker: &minihost.Invoker{BaseURL: "http://127.0.0.1:" + strconv.Itoa(o.Resolver)}})
	}
	for _, c := range triggers {
		c.Client = s.client
		// The host's setting in host.json: a session stays with its
		// worker a second after its last message.
		c.SessionIdleTimeout = time.Second
		h, err := minihost.New(c)
		if err == nil {
			err = h.Start()
		}
		if err != nil {
			s.stop()
			return nil, fmt.Errorf("delivering %s/%s: %w", c.Topic, c.Subscription, err)
		}
		s.hosts = append(s.hosts, h)
	}
	return s, nil
}

// available says why the stand-ins cannot run here (errUnavailable), or
// nil.
func available() error {
	if _, err := exec.LookPath("node"); err != nil {
		return fmt.Errorf("%w: node is not on PATH", errUnavailable)
	}
	if _, err := os.Stat(filepath.Join(testenv.Dir(), "node_modules")); err != nil {
		return fmt.Errorf("%w: scripts/testenv/node_modules is missing: run npm ci --prefix scripts/testenv", errUnavailable)
	}
	return nil
}

// stop stops the hosts, then the stand-ins.
func (s *running) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, h := range s.hosts {
		_ = h.Stop(ctx)
	}
	if s.client != nil {
		_ = s.client.Close(ctx)
	}
	s.servicebus.Stop()
	s.cosmos.Stop()
}

func (s *running) cosmosConnection() string {
	return fmt.Sprintf("AccountEndpoint=http://127.0.0.1:%d/;AccountKey=%s;", s.cosmos.Port, testenv.CosmosEmulatorKey)
}

func (s *running) serviceBusConnection() string { return testenv.ConnectionString(s.servicebus.Port) }

// settings are the app settings that point an endpoint app at the
// stand-ins, in the order printed.
func (s *running) settings() [][2]string {
	return [][2]string{
		{"NimBus__Inbox__Enabled", "true"},
		{"NimBus__Inbox__Store", "Cosmos"},
		{"NimBus__Inbox__Cosmos__ConnectionString", s.cosmosConnection()},
		{"NimBus__Inbox__CleanupSchedule", "0 0 * * * *"},
		{"NimBus__Outbox__SweepSchedule", "0 */5 * * * *"},
		{"ServiceBusConnection", s.serviceBusConnection()},
	}
}

// resolverSettings are the app settings that point the Resolver app at
// the stand-ins.
func (s *running) resolverSettings() [][2]string {
	return [][2]string{
		{"NimBus__App", "Resolver"},
		{"NimBus__Cosmos__ConnectionString", s.cosmosConnection()},
		{"ServiceBusConnection", s.serviceBusConnection()},
	}
}

// describe prints the stand-ins, their entities and the settings.
func (s *running) describe(w io.Writer) {
	fmt.Fprintf(w, "Cosmos DB stand-in on 127.0.0.1:%d (consistency %s, key %s)\n", s.cosmos.Port, s.o.Consistency, testenv.CosmosEmulatorKey)
	fmt.Fprintf(w, "Service Bus stand-in on 127.0.0.1:%d (AMQP, plain TCP; any key)\n", s.servicebus.Port)
	for _, e := range s.o.Endpoints {
		fmt.Fprintf(w, "  topic %s: subscriptions %s (sessions), Resolver (forwards to topic Resolver), Deferred (sessions), DeferredProcessor", e, e)
		for _, f := range s.o.Forwards {
			if f.Producer == e {
				fmt.Fprintf(w, ", %s (forwards %s to topic %s)", f.Consumer, f.EventTypeID, f.Consumer)
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "  topic Resolver: subscription Resolver (sessions)")
	for _, e := range s.o.Endpoints {
		if port, ok := s.o.Deliver[e]; ok {
			fmt.Fprintf(w, "delivering %s/%s to 127.0.0.1:%d/Subscriber and %s/%s to 127.0.0.1:%d/DeferredProcessor\n",
				e, e, port, e, testenv.DeferredProcessorSub, port)
		}
	}
	if s.o.Resolver != 0 {
		fmt.Fprintf(w, "delivering Resolver/Resolver to 127.0.0.1:%d/Resolver\n", s.o.Resolver)
	}
	fmt.Fprintln(w, "\nSettings for an endpoint app (add NimBus__Endpoint and FUNCTIONS_CUSTOMHANDLER_PORT):")
	for _, kv := range s.settings() {
		fmt.Fprintf(w, "export %s='%s'\n", kv[0], kv[1])
	}
	fmt.Fprintln(w, "\nand for the Resolver app (add FUNCTIONS_CUSTOMHANDLER_PORT):")
	for _, kv := range s.resolverSettings() {
		fmt.Fprintf(w, "export %s='%s'\n", kv[0], kv[1])
	}
	fmt.Fprintln(w, "\nCtrl-C stops the stand-ins; what they hold is lost.")
}
