package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

// storedMessage is a message a marker keeps to send it again, as the
// marker document holds it (its format, read here independently of the
// code under test): an AMQP int property is {"int":n}, a long
// {"long":"n"}, a null JSON null.
type storedMessage struct {
	MessageID             string                     `json:"messageId"`
	SessionID             string                     `json:"sessionId"`
	CorrelationID         *string                    `json:"correlationId"`
	ApplicationProperties map[string]json.RawMessage `json:"applicationProperties"`
	Body                  string                     `json:"body"`
}

// properties decodes the stored application properties to the Go values
// azservicebus gives a receiver for their AMQP types.
func (m storedMessage) properties(tb testing.TB) map[string]any {
	tb.Helper()
	out := map[string]any{}
	for k, raw := range m.ApplicationProperties {
		var s *string
		if err := json.Unmarshal(raw, &s); err == nil {
			if s == nil {
				out[k] = nil
			} else {
				out[k] = *s
			}
			continue
		}
		var typed struct {
			Int  *int32  `json:"int"`
			Long *string `json:"long"`
		}
		if err := json.Unmarshal(raw, &typed); err != nil {
			tb.Fatalf("stored property %s: %s", k, raw)
		}
		switch {
		case typed.Int != nil:
			out[k] = *typed.Int
		case typed.Long != nil:
			n, err := strconv.ParseInt(*typed.Long, 10, 64)
			if err != nil {
				tb.Fatalf("stored property %s: %s", k, raw)
			}
			out[k] = n
		default:
			tb.Fatalf("stored property %s: %s", k, raw)
		}
	}
	return out
}

// sameAsStored describes how the received m differs from the stored s
// ("" when it is s, byte for byte), leaving out the application
// properties named in skip.
func sameAsStored(tb testing.TB, s storedMessage, m *azservicebus.ReceivedMessage, skip ...string) string {
	tb.Helper()
	var diffs []string
	if s.MessageID != "" && m.MessageID != s.MessageID {
		diffs = append(diffs, fmt.Sprintf("MessageId %q ≠ %q", m.MessageID, s.MessageID))
	}
	if deref(m.SessionID) != s.SessionID || deref(m.CorrelationID) != deref(s.CorrelationID) {
		diffs = append(diffs, fmt.Sprintf("SessionId/CorrelationId %q/%q ≠ %q/%q", deref(m.SessionID), deref(m.CorrelationID), s.SessionID, deref(s.CorrelationID)))
	}
	got, want := map[string]any{}, s.properties(tb)
	for k, v := range m.ApplicationProperties {
		got[k] = v
	}
	for _, k := range skip {
		delete(got, k)
		delete(want, k)
	}
	if !reflect.DeepEqual(got, want) {
		diffs = append(diffs, fmt.Sprintf("properties %#v ≠ %#v", got, want))
	}
	if string(m.Body) != s.Body {
		diffs = append(diffs, fmt.Sprintf("body %s ≠ %s", m.Body, s.Body))
	}
	return strings.Join(diffs, "; ")
}

// outboxMarker is an inbox marker with its outbox, as stored.
type outboxMarker struct {
	CreatedAtUTC string `json:"createdAtUtc"`
	Outbox       []struct {
		MessageID string         `json:"messageId"`
		Message   *storedMessage `json:"message"`
	} `json:"outbox"`
	DispatchedAtUTC *string        `json:"dispatchedAtUtc"`
	TTL             *int64         `json:"ttl"`
	Response        *storedMessage `json:"response"`
	raw             string
}

// readOutboxMarker reads the marker of messageID in customer's partition
// of the ledger, straight from Cosmos.
func readOutboxMarker(tb testing.TB, c *azcosmos.ContainerClient, customer, messageID string) outboxMarker {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.ReadItem(ctx, azcosmos.NewPartitionKeyString(customer), inboxID(endpointID, messageID), nil)
	if err != nil {
		tb.Fatalf("the marker of %s: %v", messageID, err)
	}
	var m outboxMarker
	if err := json.Unmarshal(resp.Value, &m); err != nil {
		tb.Fatal(err)
	}
	m.raw = string(resp.Value)
	return m
}

// TestDeadLetteredPaymentIsAnnouncedBySweep delivers a payment whose
// PaymentRecorded the broker refuses on every send (the stand-in refuses
// each message with that event type and the payment's MessageId as
// ParentMessageId, and with it the batch that carries the event and the
// ResolutionResponse), followed by a second payment of the same customer.
// The first delivery commits the payment with its event and response in
// the marker; every delivery fails its send (outbox_send_failed) until the
// broker dead-letters the message after its 10 deliveries, the last of
// which tells the Resolver with the dead-letter ErrorResponse. The second
// payment is then applied on top of the first and announced with the
// balance both left. The first is not announced, and its marker, read from
// Cosmos, holds the event and the response, undispatched, without a ttl.
//
// With the refusals ended, the OutboxSweep timer function, invoked as the
// host invokes it with NimBus__Outbox__MinimumAge at one second, finds that
// one marker and sends the stored PaymentRecorded, byte for byte as the
// marker holds it (and as NimBus's PublishFromContext writes it), exactly
// once, and the stored ResolutionResponse; the marker is marked dispatched:
// dispatchedAtUtc set, a ttl, the event's id kept, its payload and the
// response cleared. A second sweep finds nothing and sends nothing.
func TestDeadLetteredPaymentIsAnnouncedBySweep(t *testing.T) {
	t.Parallel()
	const (
		customer      = "cust-doomed"
		maxDeliveries = 10 // NimBus's subscription MaxDeliveryCount
	)
	container := ledgerContainerFor(t)
	settings := ledgerSettings(container)
	settings["NimBus__Outbox__MinimumAge"] = "00:00:01"
	s := startStack(t, stackConfig{settings: settings, topology: withRecordedTap})
	doomed := payment("PaymentReceived-doomed", customer, "P-doomed", customer, 4200, "")
	after := payment("PaymentReceived-after", customer, "P-after", customer, 800, "")
	s.sb.SetSendFaults(t, &testenv.SendFaults{Rate: 1, Seed: 1, Entities: []string{endpointID},
		Match: []testenv.Rule{{Equals: map[string]string{"EventTypeId": "PaymentRecorded", "ParentMessageId": doomed.MessageID}}}})
	s.send(doomed, after)

	// The doomed payment goes to the dead-letter queue, and the next one
	// of the session is completed.
	s.waitUntil(2*time.Minute, "the payment dead-lettered and the next one answered", func() bool {
		return len(s.resolver.responsesByRequest()[after.MessageID]) > 0 && len(s.deadLettered()) > 0
	})
	dl := s.deadLettered()
	if len(dl) != 1 || dl[0].MessageID != doomed.MessageID {
		t.Fatalf("dead-lettered %d messages, want only %s", len(dl), doomed.MessageID)
	}
	outcomes := map[string]int{}
	for _, l := range byMessage(s.handler.invocations())[doomed.MessageID] {
		outcomes[l.Outcome]++
	}
	refused := s.sb.InjectedSendFaults()["PaymentRecorded"]
	if outcomes["outbox_send_failed"] != maxDeliveries || len(outcomes) != 1 || refused != maxDeliveries {
		t.Errorf("deliveries of %s: outcomes %v, %d sends refused; want %d outbox_send_failed deliveries, each refused", doomed.MessageID, outcomes, refused, maxDeliveries)
	}
	before := byMessageID(drainRecorded(t, s.sb.Client(t), 500*time.Millisecond))
	if len(before) != 1 || len(before["PaymentRecorded-P-after"]) != 1 {
		t.Errorf("before the sweep the topic has the announcements %v, want one copy of PaymentRecorded-P-after", sortedKeys(before))
	} else {
		checkAnnounced(t, before["PaymentRecorded-P-after"], after, "P-after", customer, 800, 5000)
	}
	var dlNotice *received
	for _, r := range s.resolver.responsesByRequest()[doomed.MessageID] {
		switch r.messageType() {
		case "ErrorResponse":
			dlNotice = &r
		default:
			t.Errorf("before the sweep the Resolver heard a %s for %s", r.messageType(), doomed.MessageID)
		}
	}
	if dlNotice == nil {
		t.Errorf("the Resolver was not told that %s was dead-lettered", doomed.MessageID)
	}

	c, err := s.cosmosClient(t).NewContainer(ledgerDatabase, container)
	if err != nil {
		t.Fatal(err)
	}
	pending := readOutboxMarker(t, c, customer, doomed.MessageID)
	if len(pending.Outbox) != 1 || pending.Outbox[0].MessageID != "PaymentRecorded-P-doomed" || pending.Outbox[0].Message == nil ||
		pending.DispatchedAtUTC != nil || pending.TTL != nil || pending.Response == nil {
		t.Fatalf("the marker of %s before the sweep: %s", doomed.MessageID, pending.raw)
	}
	created, err := time.Parse(time.RFC3339Nano, pending.CreatedAtUTC)
	if err != nil {
		t.Fatal(err)
	}
	if wait := time.Until(created.Add(time.Second + 100*time.Millisecond)); wait > 0 {
		// The sweep takes markers older than its minimum age.
		time.Sleep(wait)
	}

	// The refusals end; the sweep runs.
	s.sb.SetSendFaults(t, nil)
	rep := runSweep(t, s.handler.base, s.handler.Lines)
	if rep.Outcome != "swept" || rep.Found != 1 || rep.Dispatched != 1 || rep.Events != 1 || rep.Responses != 1 || rep.Left != 0 {
		t.Errorf("the sweep reported %+v, want one marker found and dispatched, one event and one response sent, none left", rep)
	}
	announced := byMessageID(drainRecorded(t, s.sb.Client(t), 500*time.Millisecond))
	cs := announced["PaymentRecorded-P-doomed"]
	if len(announced) != 1 || len(cs) != 1 {
		t.Fatalf("the sweep sent the announcements %v (%d copies of PaymentRecorded-P-doomed), want one copy of PaymentRecorded-P-doomed", sortedKeys(announced), len(cs))
	}
	checkAnnounced(t, cs, doomed, "P-doomed", customer, 4200, 4200)
	if d := sameAsStored(t, *pending.Outbox[0].Message, cs[0]); d != "" {
		t.Errorf("the sweep's PaymentRecorded is not the stored event: %s", d)
	}
	s.waitUntil(30*time.Second, "the stored ResolutionResponse", func() bool {
		for _, r := range s.resolver.responsesByRequest()[doomed.MessageID] {
			if r.messageType() == "ResolutionResponse" {
				return true
			}
		}
		return false
	})
	var resolutions []received
	for _, r := range s.resolver.responsesByRequest()[doomed.MessageID] {
		if r.messageType() == "ResolutionResponse" {
			resolutions = append(resolutions, r)
		}
	}
	if len(resolutions) != 1 {
		t.Errorf("%d ResolutionResponses for %s, want 1", len(resolutions), doomed.MessageID)
	}
	checkResponse(t, resolutions[0], doomed, "ResolutionResponse", doomed.body(), nil, time.Time{})
	// The Resolver topology stamps From on its copy, and each send of a
	// response carries the trace context of the span that sends it;
	// everything else is the stored response.
	stored := *pending.Response
	stored.ApplicationProperties = map[string]json.RawMessage{}
	for k, v := range pending.Response.ApplicationProperties {
		stored.ApplicationProperties[k] = v
	}
	stored.ApplicationProperties["From"] = json.RawMessage(strconv.Quote(endpointID))
	if d := sameAsStored(t, stored, resolutions[0].msg, "traceparent", "tracestate"); d != "" {
		t.Errorf("the sweep's ResolutionResponse is not the stored one: %s", d)
	}

	done := readOutboxMarker(t, c, customer, doomed.MessageID)
	if len(done.Outbox) != 1 || done.Outbox[0].MessageID != "PaymentRecorded-P-doomed" || done.Outbox[0].Message != nil ||
		done.DispatchedAtUTC == nil || done.TTL == nil || *done.TTL <= 0 || done.Response != nil {
		t.Errorf("the marker of %s after the sweep: %s", doomed.MessageID, done.raw)
	}

	// A second sweep: nothing left, nothing sent. The sweep sends before it
	// answers, and the stand-in routes a message when it is sent: what
	// the topic holds now is all it sent.
	again := runSweep(t, s.handler.base, s.handler.Lines)
	if again.Outcome != "swept" || again.Found != 0 || again.Dispatched != 0 || again.Events != 0 || again.Responses != 0 {
		t.Errorf("the second sweep reported %+v, want nothing found or sent", again)
	}
	if more := drainRecorded(t, s.sb.Client(t), 500*time.Millisecond); len(more) > 0 {
		t.Errorf("the second sweep sent %d announcements", len(more))
	}
	n := 0
	for _, r := range s.resolver.responsesByRequest()[doomed.MessageID] {
		if r.messageType() == "ResolutionResponse" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d ResolutionResponses for %s after the second sweep, want 1", n, doomed.MessageID)
	}
	checkLedger(t, openLedger(t, s.cosmos, container), []ledgerWant{{customer: customer, payments: []paymentWant{
		{"P-doomed", 4200, []string{doomed.MessageID}}, {"P-after", 800, []string{after.MessageID}},
	}}})
	t.Logf("%s: %d deliveries, each send refused (%v), dead-lettered; the sweep: %+v; a second sweep: %+v", doomed.MessageID, maxDeliveries, outcomes, rep, again)
}
