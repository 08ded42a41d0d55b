package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

// ledgerID is an endpoint no Go endpoint serves: the test plays a NimBus
// (.NET) endpoint on its topic.
const ledgerID = "LedgerEndpoint"

// nbWire is one message as NimBus writes it on the bus. The builders below
// follow NimBus's writers (MessageHelper.ToServiceBusMessage typing: strings,
// RetryCount int32, QueueTimeMs and ProcessingTimeMs int64): the consumer
// forwarder's EventRequest copy, ResponseService.CreateResponse,
// ManagerClient.Resubmit, the subscriber's scheduled RetryRequest, the
// parked copy, ProcessDeferredRequest and the DeferredMessageProcessor's
// replay. NimBus leaves the MessageId of responses and control messages
// unset and the broker assigns one; the test assigns the GUID itself so it
// can name it. NimBus also sets ScheduledEnqueueTime = now on every send,
// which the Resolver never reads; it is left out.
type nbWire struct {
	typ, id, session, corr, eventID string
	to, from                        string // from "" = absent, for the fan-out to stamp
	orig, parent, origFrom          string
	retry                           int32
	errorText, errorType            string // "" = no ErrorContent
	noEvent                         bool
	extra                           map[string]any
}

func nbID(name string) string { return guidFor("lifecycle/" + name) }

func nbRequest(name, eventID, session string) *nbWire {
	id := nbID(name)
	return &nbWire{typ: "EventRequest", id: id, session: session, corr: guidFor("correlation/" + id), eventID: eventID,
		to: ledgerID, from: producerID, orig: "self", parent: "self", origFrom: "self"}
}

func nbResponse(typ, name string, in *nbWire) *nbWire {
	orig := in.orig
	if orig == "self" {
		orig = in.id
	}
	return &nbWire{typ: typ, id: nbID(name), session: in.session, corr: in.id, eventID: in.eventID, to: "Resolver",
		orig: orig, parent: in.id, origFrom: in.from, retry: in.retry,
		extra: map[string]any{"QueueTimeMs": int64(4), "ProcessingTimeMs": int64(57)}}
}

func (m *nbWire) with(f func(*nbWire)) *nbWire {
	c := *m
	f(&c)
	return &c
}

func (m *nbWire) message() *azservicebus.Message {
	props := map[string]any{
		"To": m.to, "MessageType": m.typ, "EventId": m.eventID, "OriginatingMessageId": m.orig,
		"ParentMessageId": m.parent, "RetryCount": m.retry, "OriginatingFrom": m.origFrom, "EventTypeId": orderPlaced,
	}
	if m.from != "" {
		props["From"] = m.from
	}
	for k, v := range m.extra {
		props[k] = v
	}
	ev := `{"EventTypeId":"OrderPlaced","EventJson":` + jsonString(`{"OrderId":"O-`+m.eventID[:8]+`"}`) + `}`
	if m.noEvent {
		ev = "null"
	}
	errc := "null"
	if m.errorText != "" {
		typ := "null"
		if m.errorType != "" {
			typ = jsonString(m.errorType)
		}
		errc = `{"ErrorText":` + jsonString(m.errorText) + `,"ErrorType":` + typ + `,"ExceptionStackTrace":null,"ExceptionSource":null}`
	}
	id, sid, corr := m.id, m.session, m.corr
	return &azservicebus.Message{MessageID: &id, SessionID: &sid, CorrelationID: &corr,
		Body: []byte(`{"EventContent":` + ev + `,"ErrorContent":` + errc + `}`), ApplicationProperties: props}
}

// lcDoc is a tracking document as NimBus's Cosmos provider writes it.
type lcDoc struct {
	ID      string `json:"id"`
	Status  string `json:"status"`
	Deleted bool   `json:"deleted"`
	TTL     *int64 `json:"ttl"`
	Event   struct {
		ResolutionStatus string  `json:"ResolutionStatus"`
		MessageType      string  `json:"MessageType"`
		LastMessageID    *string `json:"LastMessageId"`
		ParentMessageID  *string `json:"ParentMessageId"`
		From             *string `json:"From"`
		EndpointID       string  `json:"EndpointId"`
		Reason           *string `json:"Reason"`
		MessageContent   *struct {
			ErrorContent *struct {
				ErrorText *string `json:"ErrorText"`
				ErrorType *string `json:"ErrorType"`
			} `json:"ErrorContent"`
		} `json:"MessageContent"`
	} `json:"event"`
}

func (d *lcDoc) errorText() string {
	if d.Event.MessageContent == nil || d.Event.MessageContent.ErrorContent == nil {
		return "<no ErrorContent>"
	}
	return strOf(d.Event.MessageContent.ErrorContent.ErrorText)
}

type lcHistory struct {
	ID         string `json:"id"`
	EventID    string `json:"eventId"`
	EndpointID string `json:"endpointId"`
	TTL        *int64 `json:"ttl"`
	Message    struct {
		MessageID   string  `json:"MessageId"`
		MessageType string  `json:"MessageType"`
		From        *string `json:"From"`
		EndpointID  string  `json:"EndpointId"`
		SessionID   *string `json:"SessionId"`
	} `json:"message"`
}

type lcAudit struct {
	EventID    string  `json:"eventId"`
	EndpointID *string `json:"endpointId"`
	TTL        *int64  `json:"ttl"`
	Audit      struct {
		AuditorName *string `json:"AuditorName"`
		AuditType   int     `json:"AuditType"`
		Data        *string `json:"Data"`
		EndpointID  *string `json:"EndpointId"`
	} `json:"audit"`
}

// lifecycle drives the Resolver stack with NimBus-built messages and reads
// the Cosmos documents back raw.
type lifecycle struct {
	t        *testing.T
	s        *resolverStack
	ledger   *azservicebus.Sender
	resolver *azservicebus.Sender
	cosmos   *azcosmos.Client
	db       *azcosmos.DatabaseClient
}

// publish sends m on the Ledger endpoint's topic, as the NimBus endpoint
// or the Manager sends it; the topology's Resolver fan-out copies requests
// addressed to the endpoint and responses addressed to the Resolver (with
// From stamped) to the Resolver topic.
func (l *lifecycle) publish(m *nbWire) { l.send(l.ledger, m) }

// direct sends m straight to the Resolver topic: a copy the fan-out does
// not make today (a legacy forward of a RetryRequest) or the Resolver's
// own scheduled same-MessageId re-send.
func (l *lifecycle) direct(m *nbWire) { l.send(l.resolver, m) }

func (l *lifecycle) send(s *azservicebus.Sender, m *nbWire) {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.SendMessage(ctx, m.message(), nil); err != nil {
		l.t.Fatalf("sending %s %s: %v", m.typ, m.id, err)
	}
}

// handled waits until the Resolver has logged n invocation lines for the
// message id with outcome, and returns the last.
func (l *lifecycle) handled(m *nbWire, outcome string, n int) map[string]any {
	l.t.Helper()
	var last map[string]any
	var seen []string
	testenv.WaitUntil(l.t, 30*time.Second, func() bool {
		count := 0
		seen = seen[:0]
		for _, f := range l.s.resolverLines() {
			if f["messageId"] == m.id {
				seen = append(seen, fmt.Sprint(f["outcome"]))
				if f["outcome"] == outcome {
					count++
					last = f
				}
			}
		}
		return count >= n
	}, func() string {
		return fmt.Sprintf("%d Resolver lines with outcome %s for %s %s (seen %v; Resolver host %+v)", n, outcome, m.typ, m.id, seen, l.s.resHost.Stats())
	})
	return last
}

func (l *lifecycle) row(eventID, session string) *lcDoc {
	l.t.Helper()
	ct, err := l.db.NewContainer(ledgerID)
	if err != nil {
		l.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id := eventID + "_" + session
	resp, err := ct.ReadItem(ctx, azcosmos.NewPartitionKeyString(id), id, nil)
	if err != nil {
		l.t.Fatalf("reading the tracking row %s: %v", id, err)
	}
	var d lcDoc
	if err := json.Unmarshal(resp.Value, &d); err != nil {
		l.t.Fatal(err)
	}
	return &d
}

// expectRow checks the row of m's event: status, the message type and id
// that last wrote it, and the document's soft-delete flag and ttl.
func (l *lifecycle) expectRow(step string, m *nbWire, status, writtenBy string, lastID string) *lcDoc {
	l.t.Helper()
	d := l.row(m.eventID, m.session)
	terminal := status == "Completed" || status == "Skipped"
	wantTTL := int64(-1)
	if terminal {
		wantTTL = 2592000
	}
	if d.Status != status || d.Event.ResolutionStatus != status || d.Event.MessageType != writtenBy || strOf(d.Event.LastMessageID) != lastID ||
		d.Event.EndpointID != ledgerID || d.Deleted != terminal || d.TTL == nil || *d.TTL != wantTTL {
		ttl := "<nil>"
		if d.TTL != nil {
			ttl = fmt.Sprint(*d.TTL)
		}
		l.t.Fatalf("%s: row %s status %s/%s written by %s %s (deleted %v, ttl %s); want %s written by %s %s",
			step, d.ID, d.Status, d.Event.ResolutionStatus, d.Event.MessageType, strOf(d.Event.LastMessageID), d.Deleted, ttl, status, writtenBy, lastID)
	}
	return d
}

func (l *lifecycle) query(container, eventID string, out func([]byte) error) {
	l.t.Helper()
	ct, err := l.db.NewContainer(container)
	if err != nil {
		l.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := ct.NewQueryItemsPager("SELECT * FROM c WHERE c.eventId = @e", azcosmos.NewPartitionKeyString(eventID),
		&azcosmos.QueryOptions{QueryParameters: []azcosmos.QueryParameter{{Name: "@e", Value: eventID}}})
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			l.t.Fatalf("querying %s for %s: %v", container, eventID, err)
		}
		for _, it := range page.Items {
			if err := out(it); err != nil {
				l.t.Fatal(err)
			}
		}
	}
}

func (l *lifecycle) history(eventID string) map[string]lcHistory {
	out := map[string]lcHistory{}
	l.query("messages", eventID, func(b []byte) error {
		var h lcHistory
		if err := json.Unmarshal(b, &h); err != nil {
			return err
		}
		out[h.Message.MessageID] = h
		return nil
	})
	return out
}

func (l *lifecycle) audits(eventID string) []lcAudit {
	var out []lcAudit
	l.query("audits", eventID, func(b []byte) error {
		var a lcAudit
		if err := json.Unmarshal(b, &a); err != nil {
			return err
		}
		out = append(out, a)
		return nil
	})
	return out
}

// TestResolverTracksNimBusFailedDeferredCompleted plays a NimBus (.NET)
// endpoint and the NimBus Manager on the Service Bus stand-in, with the
// real binary deployed as the Resolver: event E1 fails on the endpoint
// (ErrorResponse), its scheduled retry fails again, E2 on the same session
// is deferred (DeferralResponse, parked copy), the Manager resubmits E1
// (ResubmissionRequest From=Manager To=endpoint, copied to the Resolver by
// the fan-out), the endpoint answers it with a ResolutionResponse, drains
// the session, and the replayed E2 is answered with a ResolutionResponse.
// The tracking rows read back raw from Cosmos go E1 Failed (with the
// ErrorText) → Pending (retry) → Failed → Pending (resubmission) →
// Completed and E2 Pending → Deferred → Pending (replay) → Completed; every
// message has its history document; the RetryRequest copy writes the Retry
// audit. Late copies of E1's request and of the resubmission (a
// same-MessageId re-send) are refused as stale with a Comment audit and
// the row stays Completed; a late copy of E1's ErrorResponse is a terminal
// write and, as the spec and NimBus have it, applies (last-writer-wins).
func TestResolverTracksNimBusFailedDeferredCompleted(t *testing.T) {
	t.Parallel()
	s := startResolverStack(t, resolverStackConfig{nimbusEndpoints: []string{ledgerID}})
	l := &lifecycle{t: t, s: s, cosmos: s.rows.(cosmosRows).client}
	var err error
	if l.ledger, err = s.client.NewSender(ledgerID, nil); err != nil {
		t.Fatal(err)
	}
	if l.resolver, err = s.client.NewSender(testenv.ResolverTopic, nil); err != nil {
		t.Fatal(err)
	}
	if l.db, err = l.cosmos.NewDatabase(s.database); err != nil {
		t.Fatal(err)
	}
	const session = "ledger-customer-1"

	// E1 reaches the endpoint (the fan-out copies the request) and fails.
	e1 := nbRequest("e1", guidFor("lifecycle/E1"), session)
	l.publish(e1)
	l.handled(e1, "written", 1)
	l.expectRow("E1 request", e1, "Pending", "EventRequest", e1.id)
	er1 := nbResponse("ErrorResponse", "er1", e1).with(func(m *nbWire) {
		m.errorText, m.errorType = "Ledger period 2026-11 is closed", "InvalidOperationException"
	})
	l.publish(er1)
	l.handled(er1, "written", 1)
	d := l.expectRow("E1 failed", e1, "Failed", "ErrorResponse", er1.id)
	if d.errorText() != er1.errorText || strOf(d.Event.From) != ledgerID || strOf(d.Event.ParentMessageID) != e1.id || d.Event.Reason != nil {
		t.Fatalf("Failed row: ErrorText %q From %s Parent %s Reason %s", d.errorText(), strOf(d.Event.From), strOf(d.Event.ParentMessageID), strOf(d.Event.Reason))
	}

	// The endpoint's scheduled RetryRequest goes To=Retry on its own topic,
	// which the Resolver fan-out does not copy; a namespace that forwards
	// it delivers the endpoint's view (To=endpoint, From=Retry).
	rt1 := &nbWire{typ: "RetryRequest", id: nbID("rt1"), session: session, corr: e1.id, eventID: e1.eventID,
		to: "Retry", orig: e1.id, parent: e1.id, origFrom: producerID, retry: 1}
	l.publish(rt1)
	l.direct(rt1.with(func(m *nbWire) { m.to, m.from = ledgerID, "Retry" }))
	l.handled(rt1, "written", 1)
	l.expectRow("E1 retry", e1, "Pending", "RetryRequest", rt1.id)
	er2 := nbResponse("ErrorResponse", "er2", rt1.with(func(m *nbWire) { m.to, m.from = ledgerID, "Retry" })).with(func(m *nbWire) {
		m.errorText, m.errorType = "Ledger period 2026-11 is still closed", "InvalidOperationException"
	})
	l.publish(er2)
	l.handled(er2, "written", 1)
	d = l.expectRow("E1 retry failed", e1, "Failed", "ErrorResponse", er2.id)
	if d.errorText() != er2.errorText {
		t.Fatalf("Failed row after the retry: ErrorText %q", d.errorText())
	}

	// E2 on the blocked session is deferred and parked.
	e2 := nbRequest("e2", guidFor("lifecycle/E2"), session)
	l.publish(e2)
	l.handled(e2, "written", 1)
	df2 := nbResponse("DeferralResponse", "df2", e2).with(func(m *nbWire) {
		m.errorText, m.errorType = "Session "+session+" is blocked by "+e1.eventID, "SessionBlockedException"
	})
	l.publish(df2)
	parked := e2.with(func(m *nbWire) {
		m.id, m.to, m.parent = nbID("parked-e2"), "Deferred", e2.id
		m.extra = map[string]any{"OriginalSessionId": session, "DeferralSequence": int32(0)}
	})
	l.publish(parked)
	l.handled(df2, "written", 1)
	d = l.expectRow("E2 deferred", e2, "Deferred", "DeferralResponse", df2.id)
	if d.errorText() != df2.errorText {
		t.Fatalf("Deferred row: ErrorText %q", d.errorText())
	}

	// The Manager resubmits E1 (ManagerClient.Resubmit of the latest
	// ErrorResponse); the fan-out copies it to the Resolver.
	rs1 := &nbWire{typ: "ResubmissionRequest", id: nbID("rs1"), session: session, corr: er2.corr, eventID: e1.eventID,
		to: ledgerID, from: "Manager", orig: er2.orig, parent: er2.id, origFrom: "self"}
	l.publish(rs1)
	l.handled(rs1, "written", 1)
	d = l.expectRow("E1 resubmitted", e1, "Pending", "ResubmissionRequest", rs1.id)
	if strOf(d.Event.From) != "Manager" || strOf(d.Event.ParentMessageID) != er2.id {
		t.Fatalf("resubmission row: From %s Parent %s", strOf(d.Event.From), strOf(d.Event.ParentMessageID))
	}
	rr1 := nbResponse("ResolutionResponse", "rr1", rs1)
	l.publish(rr1)
	l.handled(rr1, "written", 1)
	d = l.expectRow("E1 completed", e1, "Completed", "ResolutionResponse", rr1.id)
	if strOf(d.Event.ParentMessageID) != rs1.id {
		t.Fatalf("Completed row: Parent %s", strOf(d.Event.ParentMessageID))
	}

	// The drain: ProcessDeferredRequest to the endpoint's DeferredProcessor
	// (not copied to the Resolver), then the replay of the parked E2.
	l.publish(&nbWire{typ: "ProcessDeferredRequest", id: nbID("pd"), session: session, corr: rs1.id, eventID: e1.eventID,
		to: "DeferredProcessor", orig: rs1.orig, parent: rs1.id, origFrom: "Manager", noEvent: true})
	e2r := e2.with(func(m *nbWire) { m.id, m.parent = nbID("e2-replay"), e2.id })
	l.publish(e2r)
	l.handled(e2r, "written", 1)
	l.expectRow("E2 replayed", e2, "Pending", "EventRequest", e2r.id)
	rr2 := nbResponse("ResolutionResponse", "rr2", e2r)
	l.publish(rr2)
	l.handled(rr2, "written", 1)
	l.expectRow("E2 completed", e2, "Completed", "ResolutionResponse", rr2.id)

	// Late copies: E1's request copy from a lagging forward, and the
	// Resolver's own same-MessageId re-send of the resubmission.
	l.publish(e1)
	if f := l.handled(e1, "stale", 1); f["status"] != "Pending" || f["level"] != "warn" {
		t.Errorf("stale line %v", f)
	}
	l.expectRow("after the late E1 request copy", e1, "Completed", "ResolutionResponse", rr1.id)
	l.direct(rs1.with(func(m *nbWire) { m.extra = map[string]any{"ThrottleRetryCount": "1"} }))
	l.handled(rs1, "stale", 1)
	l.expectRow("after the late resubmission re-send", e1, "Completed", "ResolutionResponse", rr1.id)

	// History: one document per message, stale copies included, each
	// attributed to the endpoint; responses carry the From the fan-out
	// stamped.
	wantFrom := map[string]string{e1.id: producerID, er1.id: ledgerID, rt1.id: "Retry", er2.id: ledgerID, rs1.id: "Manager", rr1.id: ledgerID,
		e2.id: producerID, df2.id: ledgerID, e2r.id: producerID, rr2.id: ledgerID}
	wantType := map[string]string{e1.id: "EventRequest", er1.id: "ErrorResponse", rt1.id: "RetryRequest", er2.id: "ErrorResponse",
		rs1.id: "ResubmissionRequest", rr1.id: "ResolutionResponse", e2.id: "EventRequest", df2.id: "DeferralResponse",
		e2r.id: "EventRequest", rr2.id: "ResolutionResponse"}
	h1, h2 := l.history(e1.eventID), l.history(e2.eventID)
	if len(h1) != 6 || len(h2) != 4 {
		t.Fatalf("history: %d documents for E1 (want 6), %d for E2 (want 4)", len(h1), len(h2))
	}
	for _, h := range []map[string]lcHistory{h1, h2} {
		for id, doc := range h {
			if doc.ID != id || doc.EndpointID != ledgerID || doc.Message.EndpointID != ledgerID || doc.Message.MessageType != wantType[id] ||
				strOf(doc.Message.From) != wantFrom[id] || strOf(doc.Message.SessionID) != session || doc.TTL == nil || *doc.TTL != 7776000 {
				t.Errorf("history document %s: %+v", id, doc)
			}
		}
	}

	// Audits: the Retry audit (Manager, no endpoint) and a Comment per
	// stale copy (Resolver, the endpoint); none for E2.
	a1 := l.audits(e1.eventID)
	var retries, comments []lcAudit
	for _, a := range a1 {
		switch a.Audit.AuditType {
		case 3:
			retries = append(retries, a)
		case 4:
			comments = append(comments, a)
		}
	}
	if len(a1) != 3 || len(retries) != 1 || len(comments) != 2 {
		t.Fatalf("E1 audits %+v: want one Retry and two Comments", a1)
	}
	if r := retries[0]; strOf(r.Audit.AuditorName) != "Manager" || r.EndpointID != nil || r.Audit.EndpointID != nil || r.TTL == nil || *r.TTL != 31536000 {
		t.Errorf("Retry audit %+v", r)
	}
	wantData := map[string]bool{
		"Ignored stale EventRequest " + e1.id + ": the audit row already holds a later outcome.":         true,
		"Ignored stale ResubmissionRequest " + rs1.id + ": the audit row already holds a later outcome.": true,
	}
	for _, c := range comments {
		if strOf(c.Audit.AuditorName) != "Resolver" || strOf(c.Audit.EndpointID) != ledgerID || !wantData[strOf(c.Audit.Data)] {
			t.Errorf("Comment audit %+v", c)
		}
		delete(wantData, strOf(c.Audit.Data))
	}
	if a2 := l.audits(e2.eventID); len(a2) != 0 {
		t.Errorf("E2 audits %+v, want none", a2)
	}

	// A late copy of E1's ErrorResponse: terminal over terminal is
	// last-writer-wins, so it applies (not stale).
	l.publish(er2)
	l.handled(er2, "written", 2)
	l.expectRow("after the late ErrorResponse copy", e1, "Failed", "ErrorResponse", er2.id)

	// Every message the Resolver saw is one of the above: the To=Retry
	// original, the parked copy and the ProcessDeferredRequest were not
	// copied to it (a message of the same session published after them was
	// handled after them). No invocation failed.
	counts := map[string]int{}
	for _, f := range s.resolverLines() {
		counts[fmt.Sprint(f["outcome"])]++
		if id := fmt.Sprint(f["messageId"]); id == parked.id || id == nbID("pd") {
			t.Errorf("the Resolver handled %v", f)
		}
	}
	if counts["written"] != 11 || counts["stale"] != 2 || len(counts) != 2 {
		t.Errorf("Resolver outcomes %v, want 11 written and 2 stale", counts)
	}
	if st := s.resHost.Stats(); st.Abandons != 0 || st.Failures != 0 {
		t.Errorf("Resolver host %+v", st)
	}
}
