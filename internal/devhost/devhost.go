// Package devhost plays the Azure Functions host against an endpoint app
// running on this machine, for `nimbus-func invoke` and the demo: it POSTs
// invocation envelopes (built by package hostwire) as the host does, reads
// the answer, and reads what an app keeps for local runs when its Resolver
// sink is in memory (NimBus__Resolver__Sink=InMemory):
//
//   - GET /_nimbus/resolver: every message the endpoint sent, in order
//     ([SentResponse]);
//   - GET /_nimbus/invocations?id=ID: the lines the host logs for the
//     invocation ID ([InvocationLines]): the response's Logs when the
//     answer completed the message, the handler's stderr line when it
//     failed it (the host ignores the Logs of a non-2xx answer);
//   - POST /_nimbus/resolver/refuse: the sink refuses the next sends that
//     hold a message of a type ([Refusal]), as a broker refusing them
//     would, so that a local run shows what follows a failed send.
//
// The JSON shapes of these routes are defined here and served by
// internal/app. The package also words what the host does with an answer
// and describes a sent message on one line, so that the demo and invoke
// print a step the same way.
package devhost

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// The app's local routes, served only with the in-memory Resolver sink.
const (
	SentPath        = "/_nimbus/resolver"
	InvocationsPath = "/_nimbus/invocations"
	RefusePath      = "/_nimbus/resolver/refuse"
)

// Refusal asks the in-memory sink to refuse the next Count sends (a send
// of several messages counts once, and is refused whole) that hold a
// message whose MessageType is MessageType ("" for any); Count 0 ends a
// refusal under way.
type Refusal struct {
	MessageType string `json:"messageType"`
	Count       int    `json:"count"`
}

// SentResponse is how GET /_nimbus/resolver shows a message the in-memory
// sink kept: properties with their AMQP types.
type SentResponse struct {
	// MessageID is set for a message sent with its own MessageId (a
	// published event); the broker assigns the others one.
	MessageID     string                `json:"messageId,omitempty"`
	SessionID     string                `json:"sessionId"`
	CorrelationID *string               `json:"correlationId"`
	Properties    map[string]TypedValue `json:"applicationProperties"`
	Body          string                `json:"body"`
	// ScheduledEnqueueTime is set for a scheduled message (a RetryRequest).
	ScheduledEnqueueTime string `json:"scheduledEnqueueTime,omitempty"`
}

// TypedValue is a property value and its AMQP type name.
type TypedValue struct {
	Type  string `json:"type"`
	Value any    `json:"value"`
}

// InvocationLines is how GET /_nimbus/invocations?id=ID shows the lines
// the host logs for one invocation.
type InvocationLines struct {
	InvocationID string   `json:"invocationId"`
	Lines        []string `json:"lines"`
}

// ErrNotServed is returned when the app does not serve a local route: its
// Resolver sink is not in memory (or it is not this library's app).
var ErrNotServed = errors.New("the app does not serve it (it is served with NimBus__Resolver__Sink=InMemory)")

// Client talks to an app as the Functions host does.
type Client struct {
	// BaseURL is the app's address, such as http://127.0.0.1:8080.
	BaseURL string
	// HTTP is the client; nil means one with a 2-minute timeout (an
	// invocation answered after the redelivery pause takes that pause).
	HTTP *http.Client
}

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return &http.Client{Timeout: 2 * time.Minute}
}

// Answer is the app's answer to one invocation.
type Answer struct {
	// Status is the HTTP status; 2xx completes the trigger.
	Status int
	// Logs are the response's Logs, which the host logs under the
	// invocation when the answer is 2xx.
	Logs []string
}

// Invoke POSTs envelope to the function as the host does, with the
// invocation id invocationID, and returns the answer.
func (c *Client) Invoke(ctx context.Context, function, invocationID string, envelope []byte) (Answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+"/"+function, bytes.NewReader(envelope))
	if err != nil {
		return Answer{}, fmt.Errorf("build the request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "Azure-Functions-Host/devhost")
	req.Header.Set("X-Azure-Functions-InvocationId", invocationID)
	resp, err := c.http().Do(req)
	if err != nil {
		return Answer{}, err
	}
	defer resp.Body.Close()
	a := Answer{Status: resp.StatusCode}
	var body struct{ Logs []string }
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return a, fmt.Errorf("read the answer: %w", err)
	}
	if json.Unmarshal(b, &body) == nil {
		a.Logs = body.Logs
	}
	return a, nil
}

// Sent returns every message the app's in-memory sink kept, in order.
func (c *Client) Sent(ctx context.Context) ([]SentResponse, error) {
	var sent []SentResponse
	return sent, c.getJSON(ctx, SentPath, &sent)
}

// Refuse makes the app's in-memory sink refuse the sends r describes.
func (c *Client) Refuse(ctx context.Context, r Refusal) error {
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodPost, RefusePath, body, nil)
}

// InvocationLines returns the lines the host logs for the invocation id.
func (c *Client) InvocationLines(ctx context.Context, id string) ([]string, error) {
	var l InvocationLines
	err := c.getJSON(ctx, InvocationsPath+"?"+url.Values{"id": {id}}.Encode(), &l)
	return l.Lines, err
}

func (c *Client) getJSON(ctx context.Context, path string, v any) error {
	return c.do(ctx, http.MethodGet, path, nil, v)
}

// do sends a request to one of the app's local routes, with body as JSON
// when not nil, and decodes the answer into v when not nil. A route the app
// does not serve is ErrNotServed.
func (c *Client) do(ctx context.Context, method, path string, body []byte, v any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%s %s: %w", method, path, ErrNotServed)
	case resp.StatusCode/100 != 2:
		return fmt.Errorf("%s %s: HTTP %d", method, path, resp.StatusCode)
	}
	if v == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	return nil
}

// HostFields completes sb with what the host adds to every delivery: the
// lock token, sequence number, namespace, invocation time and random GUID
// (derived from seq, so that a run is reproducible) and, when unset, the
// content type NimBus's publisher writes.
func HostFields(sb *hostwire.ServiceBusMessage, seq int64, now time.Time) {
	sb.LockToken = fmt.Sprintf("5e3d6a39-8f6c-4f55-9c0e-%012d", seq)
	sb.SequenceNumber = 1000 + seq
	sb.Namespace = "sb-local.servicebus.windows.net"
	sb.UtcNow = now.UTC()
	sb.RandGUID = fmt.Sprintf("0f8fad5b-d9cb-469f-a165-%012d", seq)
	if sb.ContentType == nil {
		sb.ContentType = hostwire.S("application/json")
	}
}

// Verdict words what the host does with an answer of status; timer is a
// timer trigger's invocation, any other is a Service Bus message's.
func Verdict(status int, timer bool) string {
	switch {
	case timer && status/100 == 2:
		return "timer invocation succeeded"
	case timer:
		return "timer invocation failed; the next tick retries"
	case status/100 == 2:
		return "the host completes the message"
	case status == http.StatusServiceUnavailable:
		return "the host abandons the message; the broker redelivers it"
	default:
		return "the host abandons the message; redelivered at once, dead-lettered after MaxDeliveryCount"
	}
}

// WriteAnswer writes one step's answer: the status, the verdict and the
// first log line, then each further log line, every line after indent.
func WriteAnswer(w io.Writer, indent string, status int, timer bool, logs ...string) {
	fmt.Fprintf(w, "%s→ HTTP %d: %s", indent, status, Verdict(status, timer))
	if len(logs) > 0 {
		fmt.Fprintf(w, "; log: %s", logs[0])
	}
	fmt.Fprintln(w)
	for _, l := range logs[min(1, len(logs)):] {
		fmt.Fprintf(w, "%s  log: %s\n", indent, l)
	}
}

// WriteSent writes one line per sent message ("nothing sent" for none),
// each after indent; verbose adds every property with its type and the
// body.
func WriteSent(w io.Writer, indent string, sent []SentResponse, verbose bool) {
	if len(sent) == 0 {
		fmt.Fprintf(w, "%snothing sent\n", indent)
		return
	}
	for _, r := range sent {
		fmt.Fprintf(w, "%s%s\n", indent, Describe(r))
		if !verbose {
			continue
		}
		names := make([]string, 0, len(r.Properties))
		for k := range r.Properties {
			names = append(names, k)
		}
		sort.Strings(names)
		parts := make([]string, 0, len(names))
		for _, k := range names {
			parts = append(parts, fmt.Sprintf("%s=%v:%s", k, r.Properties[k].Value, r.Properties[k].Type))
		}
		fmt.Fprintf(w, "%s   properties: %s\n", indent, strings.Join(parts, ", "))
		fmt.Fprintf(w, "%s   body: %s\n", indent, r.Body)
	}
}

// Label is a sent message's MessageType, with "→To" when it is not
// addressed to the Resolver.
func Label(r SentResponse) string {
	mt := fmt.Sprint(r.Properties[message.PropMessageType].Value)
	if to := fmt.Sprint(r.Properties[message.PropTo].Value); to != message.ResolverID {
		return mt + "→" + to
	}
	return mt
}

// Describe is one line for a sent message: where it went, its type and
// the properties that tell it apart.
func Describe(r SentResponse) string {
	p := r.Properties
	to := fmt.Sprint(p[message.PropTo].Value)
	var b strings.Builder
	if to == message.ResolverID {
		fmt.Fprintf(&b, "Resolver ← %v", p[message.PropMessageType].Value)
	} else {
		fmt.Fprintf(&b, "topic ← %v To=%s", p[message.PropMessageType].Value, to)
	}
	corr := "(none)"
	if r.CorrelationID != nil {
		corr = *r.CorrelationID
	}
	b.WriteString(" (")
	if r.MessageID != "" {
		// A published event: its own MessageId, and the delivery it came
		// from.
		fmt.Fprintf(&b, "MessageId %s, ParentMessageId %v, ", r.MessageID, p[message.PropParentMessageID].Value)
	}
	fmt.Fprintf(&b, "SessionId %s, CorrelationId %s, EventId %v", r.SessionID, corr, p[message.PropEventID].Value)
	for _, k := range []string{message.PropRetryCount, message.PropOriginalSessionID, message.PropDeferralSequence, message.PropInboxMessageID,
		message.PropHandoffReason, message.PropExternalJobID, message.PropDeadLetterReason} {
		v, ok := p[k]
		if !ok || (k == message.PropRetryCount && fmt.Sprint(v.Value) == "0") {
			continue
		}
		fmt.Fprintf(&b, ", %s %v", k, v.Value)
	}
	if r.ScheduledEnqueueTime != "" {
		fmt.Fprintf(&b, ", scheduled for %s", r.ScheduledEnqueueTime)
	}
	b.WriteString(")")
	var c struct {
		ErrorContent *struct {
			ErrorText *string
			ErrorType *string
		}
	}
	if json.Unmarshal([]byte(r.Body), &c) == nil && c.ErrorContent != nil && c.ErrorContent.ErrorText != nil {
		fmt.Fprintf(&b, " ErrorText %q", *c.ErrorContent.ErrorText)
		if c.ErrorContent.ErrorType != nil {
			fmt.Fprintf(&b, " ErrorType %s", *c.ErrorContent.ErrorType)
		}
	}
	return b.String()
}
