package scaffold

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/nimbus-go/functions-subscriber/internal/devhost"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/message/nimbusmsg"
)

// subscriberFunction is the function (folder and route) that receives the
// endpoint's events.
const subscriberFunction = "Subscriber"

// Settings invoke reads to find the app and its endpoint.
const (
	portSetting     = "FUNCTIONS_CUSTOMHANDLER_PORT"
	endpointSetting = "NimBus__Endpoint"
	// defaultPort is the port the app listens on when the host gives none.
	defaultPort = 8080
)

// InvokeOptions are invoke's arguments.
type InvokeOptions struct {
	// Port is the app's port on 127.0.0.1.
	Port int
	// Event is the EventRequest to deliver; its Endpoint must be set.
	Event devhost.Event
	// ForwardFrom, when not "", is the address (http://host:port) of
	// another app on this machine: the event delivered is then the one it
	// published with MessageId Event.MessageID, read from its in-memory
	// sink, as NimBus's forwarder delivers it to Event.Endpoint (From =
	// Event.From, else the event's OriginatingFrom). Of Event, only
	// Endpoint, MessageID, From and DeliveryCount are used.
	ForwardFrom string
}

// ErrNotCompleted is returned by Invoke when the app's answer fails the
// invocation (anything but 2xx): the host would abandon the message.
var ErrNotCompleted = errors.New("the invocation failed")

// Invoke delivers opts.Event (or, with opts.ForwardFrom, the event another
// app published) to the Subscriber function of the app listening on
// 127.0.0.1:opts.Port, as the Functions host delivers a Service Bus
// message, and writes to out what the delivery was, the host's answer,
// the lines the host logs for the invocation and the messages the endpoint
// sent (those two from the app's local views, served with the in-memory
// Resolver sink). It returns ErrNotCompleted when the answer is not 2xx.
func Invoke(ctx context.Context, opts InvokeOptions, out io.Writer) error {
	c := &devhost.Client{BaseURL: "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(opts.Port))}
	before, sinkErr := c.Sent(ctx)
	if isRefused(sinkErr) {
		return fmt.Errorf("no app answers on 127.0.0.1:%d: start it first (go run . in the module, with the settings of the README's "+
			"\"Run it locally\"), or give the port it listens on (--port, or %s)", opts.Port, portSetting)
	}

	now := time.Now()
	seq := now.UnixNano() % 1e12
	e := opts.Event
	var m nimbusmsg.Message
	var env []byte
	via := ""
	if opts.ForwardFrom != "" {
		var err error
		if m, err = forwarded(ctx, opts); err != nil {
			return err
		}
		env = devhost.Invocation(subscriberFunction, m, e.DeliveryCount, seq, now)
		via = ", forwarded from the app on " + opts.ForwardFrom
	} else {
		m, env = devhost.EventInvocation(subscriberFunction, e, seq, now)
	}
	writeDelivery(out, m, max(e.DeliveryCount, 1), via)
	id := "nimbus-func-invoke-" + uuid.NewString()
	a, err := c.Invoke(ctx, subscriberFunction, id, env)
	if err != nil {
		return fmt.Errorf("invoking %s: %w", subscriberFunction, err)
	}
	logs := a.Logs
	if a.Status/100 != 2 {
		// The host ignores a failed answer's body and logs the handler's
		// stderr line instead: the app keeps it for local runs.
		lines, err := c.InvocationLines(ctx, id)
		switch {
		case err != nil:
			logs = []string{"not shown (" + err.Error() + "); the app's stderr has it"}
		case len(lines) > 0:
			logs = lines
		}
	}
	devhost.WriteAnswer(out, "", a.Status, false, logs...)

	after, err := c.Sent(ctx)
	switch {
	case sinkErr != nil:
		fmt.Fprintf(out, "messages sent: not shown (%v)\n", sinkErr)
	case err != nil:
		fmt.Fprintf(out, "messages sent: not shown (%v)\n", err)
	default:
		devhost.WriteSent(out, "", after[min(len(before), len(after)):], false)
	}
	if a.Status/100 != 2 {
		return ErrNotCompleted
	}
	return nil
}

// forwarded reads the messages the app at opts.ForwardFrom sent and
// returns its event opts.Event.MessageID as the forwarder delivers it to
// opts.Event.Endpoint.
func forwarded(ctx context.Context, opts InvokeOptions) (nimbusmsg.Message, error) {
	from := &devhost.Client{BaseURL: opts.ForwardFrom}
	sent, err := from.Sent(ctx)
	switch {
	case isRefused(err):
		return nimbusmsg.Message{}, fmt.Errorf("--forward-from: no app answers on %s: start the publishing app first, or give the address it listens on", opts.ForwardFrom)
	case errors.Is(err, devhost.ErrNotServed):
		return nimbusmsg.Message{}, fmt.Errorf("--forward-from: the app on %s does not show the messages it sent: run it with NimBus__Resolver__Sink=InMemory", opts.ForwardFrom)
	case err != nil:
		return nimbusmsg.Message{}, fmt.Errorf("--forward-from: reading the messages the app on %s sent: %w", opts.ForwardFrom, err)
	}
	m, err := devhost.Forward(sent, opts.Event.MessageID, opts.Event.From, opts.Event.Endpoint)
	if err != nil {
		return nimbusmsg.Message{}, fmt.Errorf("--forward-from %s --message-id %s: %w", opts.ForwardFrom, truncate(opts.Event.MessageID, 128), err)
	}
	return m, nil
}

// writeDelivery writes the delivery of m: its type, addresses and ids on
// one line, its lineage on the next.
func writeDelivery(out io.Writer, m nimbusmsg.Message, deliveryCount int, via string) {
	p := func(name string) any { return m.ApplicationProperties[name] }
	corr := "(none)"
	if m.CorrelationID != nil {
		corr = *m.CorrelationID
	}
	fmt.Fprintf(out, "%s ← EventRequest %v to %v from %v%s (MessageId %s, SessionId %s, DeliveryCount %d)\n",
		subscriberFunction, p(message.PropEventTypeID), p(message.PropTo), p(message.PropFrom), via, m.MessageID, m.SessionID, deliveryCount)
	fmt.Fprintf(out, "  CorrelationId %s, ParentMessageId %v, OriginatingMessageId %v, OriginatingFrom %v, EventId %v",
		corr, p(message.PropParentMessageID), p(message.PropOriginatingMessageID), p(message.PropOriginatingFrom), p(message.PropEventID))
	if tp, ok := m.ApplicationProperties[message.PropTraceParent]; ok {
		fmt.Fprintf(out, ", traceparent %v", tp)
	}
	fmt.Fprintln(out)
}

// isRefused reports whether err says nothing listens on the port.
func isRefused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}

// invokeDefaults fills the port and endpoint invoke was not given: the
// port from FUNCTIONS_CUSTOMHANDLER_PORT, else the app's default 8080; the
// endpoint from NimBus__Endpoint, else from the module's local settings
// (local.settings.json, then local.settings.sample.json, which init
// writes).
func invokeDefaults(opts *InvokeOptions, dir string) error {
	if opts.Port == 0 {
		opts.Port = defaultPort
		if v := os.Getenv(portSetting); v != "" {
			p, err := strconv.Atoi(v)
			if err != nil || p <= 0 || p > 65535 {
				return fmt.Errorf("%s is %q, want a port number", portSetting, truncate(v, 20))
			}
			opts.Port = p
		}
	}
	if opts.Event.Endpoint != "" {
		return nil
	}
	if v := os.Getenv(endpointSetting); v != "" {
		opts.Event.Endpoint = v
		return nil
	}
	if dir == "" {
		var err error
		if dir, err = defaultDir(""); err != nil {
			return fmt.Errorf("--endpoint is not given and there is no module to read it from: %w", err)
		}
	}
	for _, name := range settingsFiles {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		var s struct{ Values map[string]any }
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if v, _ := s.Values[endpointSetting].(string); v != "" {
			opts.Event.Endpoint = v
			return nil
		}
	}
	return fmt.Errorf("--endpoint is not given, %s is not set, and neither %s nor %s in %s names it", endpointSetting, settingsFiles[0], settingsFiles[1], dir)
}
