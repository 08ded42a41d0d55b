package txn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// The outbox fields of a marker document. A marker that holds published
// events has, instead of ttl:
//
//	"outbox": [{"messageId":"PaymentRecorded-P-1","message":{…message.Stored…}}, …],
//	"dispatchedAtUtc": null,
//	"response": {…message.Stored…}
//
// one outbox entry per event in publish order, each with its MessageId as
// a plain string and the event as message.Stored keeps it (sent again byte
// for byte), and the delivery's ResolutionResponse when the commit gave one.
// MarkDispatched turns it into
//
//	"outbox": [{"messageId":"PaymentRecorded-P-1"}, …],
//	"dispatchedAtUtc": "2030-01-02T03:04:05.1234567Z",
//	"ttl": <retention in seconds>
//
// keeping the ids, dropping the payloads and the response, and letting the
// marker expire like one without events.
const (
	fieldOutbox       = "outbox"
	fieldDispatchedAt = "dispatchedAtUtc"
	fieldResponse     = "response"
)

// outboxEntry is one event of a marker's outbox; Message is absent once
// dispatched.
type outboxEntry struct {
	MessageID string          `json:"messageId"`
	Message   *message.Stored `json:"message,omitempty"`
}

// outboxDoc is what a commit stores in the outbox marker: the encoded
// entries, and the encoded response (nil: none).
type outboxDoc struct {
	entries  []json.RawMessage
	response json.RawMessage
}

// ErrUnreadableOutbox: a marker's outbox or response does not decode, so
// its events cannot be sent again. ReadMarker fails with an operator error
// wrapping it; the sweep counts such markers and leaves them.
var ErrUnreadableOutbox = errors.New("txn: the marker's outbox cannot be read")

// Pending is a marker whose events are not yet dispatched: what to send,
// and what MarkDispatched needs. Commit returns it in its Receipt;
// ReadMarker and a PendingFinder return the ones they find.
type Pending struct {
	// Target and PartitionKey locate the marker.
	Target       Target
	PartitionKey string
	// EndpointID and MessageID are the marker's delivery.
	EndpointID string
	MessageID  string
	// CreatedAt is the marker's createdAtUtc: when the batch committed.
	CreatedAt time.Time
	// ETag is the marker's ETag when it was committed or read ("" when the
	// store did not report it).
	ETag string
	// Events are the published events, in publish order.
	Events []message.Stored
	// Response is the delivery's ResolutionResponse, nil when the commit
	// gave none.
	Response *message.Stored
	// Request: the marker is a request record (Marker.Request), whose
	// MessageID is the request's idempotency key.
	Request bool
}

// Messages returns what to send, in order: the events, then the response.
// Each is a fresh copy (message.Stored.Outgoing).
func (p *Pending) Messages() []*message.Outgoing {
	out := make([]*message.Outgoing, 0, len(p.Events)+1)
	for i := range p.Events {
		out = append(out, p.Events[i].Outgoing())
	}
	if p.Response != nil {
		out = append(out, p.Response.Outgoing())
	}
	return out
}

// DocumentID is the marker's document id (a hash of its endpoint and
// message id, or the request record's id): what MarkDispatched patches,
// and how a report names the marker without its content.
func (p *Pending) DocumentID() string { return markerDocID(p.EndpointID, p.MessageID, p.Request) }

// IDs returns the events' MessageIds, in order.
func (p *Pending) IDs() []string {
	ids := make([]string, len(p.Events))
	for i := range p.Events {
		ids[i] = p.Events[i].MessageID
	}
	return ids
}

// MarkerState is what ReadMarker found.
type MarkerState struct {
	// Found: the delivery's marker exists. Every other field is zero
	// without it.
	Found bool
	// CreatedAt is the marker's createdAtUtc.
	CreatedAt time.Time
	// OutboxIDs are the MessageIds of the events the marker holds or held
	// (dispatched), in publish order; nil for a marker without events.
	OutboxIDs []string
	// Dispatched reports that its events were dispatched (at
	// DispatchedAt); false for a marker without events.
	Dispatched   bool
	DispatchedAt time.Time
	// Pending is set when the marker holds events not yet dispatched:
	// send Pending.Messages(), then MarkDispatched.
	Pending *Pending
	// Request is what a request record keeps (ReadRequest); nil for an
	// inbox marker.
	Request *Request
}

// markerJSON is a marker document as read.
type markerJSON struct {
	Type         string          `json:"type"`
	EndpointID   string          `json:"endpointId"`
	MessageID    string          `json:"messageId"`
	CreatedAt    string          `json:"createdAtUtc"`
	Outbox       []outboxEntry   `json:"outbox"`
	DispatchedAt *string         `json:"dispatchedAtUtc"`
	Response     *message.Stored `json:"response"`
	Request      *Request        `json:"request"`
	ETag         string          `json:"_etag"`
}

// ReadMarker reads the marker of (endpointID, messageID) in partition pk
// of target: the duplicate check before the handler runs, which also says
// whether a copy of the delivery that committed left events to send (a
// crash or a failed send after the commit). Only a clean "not found"
// answers Found false; any failure is an error. A partition key value
// Cosmos DB cannot take fails before any request (CheckPartitionKey). A
// document with the marker's id that is not that marker (its type,
// endpointId or messageId differ) is an error an operator must resolve
// (wrapping ErrNotMarker), never a duplicate: the delivery's effects are
// not there, and its commit could never create the marker. A marker whose
// pending outbox does not decode is an operator error wrapping
// ErrUnreadableOutbox. Errors never quote a document's content.
func ReadMarker(ctx context.Context, s Store, target Target, pk, endpointID, messageID string) (MarkerState, error) {
	return readMarker(ctx, s, target, pk, endpointID, messageID, false)
}

// ReadRequest reads the request record of (endpointID, key) in partition
// pk of target, as ReadMarker reads a marker: Found false when there is
// none, its Request (fingerprint and answer) and, when its events were
// not all dispatched, Pending. A document with the record's id that is not
// that record is an operator error wrapping ErrNotMarker.
func ReadRequest(ctx context.Context, s Store, target Target, pk, endpointID, key string) (MarkerState, error) {
	return readMarker(ctx, s, target, pk, endpointID, key, true)
}

func readMarker(ctx context.Context, s Store, target Target, pk, endpointID, messageID string, request bool) (MarkerState, error) {
	if err := target.Validate(); err != nil {
		return MarkerState{}, err
	}
	if err := CheckPartitionKey(pk); err != nil {
		return MarkerState{}, err
	}
	if err := checkMarkerKey(endpointID, messageID); err != nil {
		return MarkerState{}, err
	}
	id := markerDocID(endpointID, messageID, request)
	body, etag, found, err := s.Read(ctx, target, pk, id)
	if err != nil {
		return MarkerState{}, fmt.Errorf("txn: reading the inbox marker: %w", err)
	}
	if !found {
		return MarkerState{}, nil
	}
	var m markerJSON
	decodeErr := json.Unmarshal(body, &m)
	if decodeErr != nil {
		// Not even the marker's head may decode: then it is no marker.
		m = markerJSON{}
		_ = json.Unmarshal(body, &struct {
			Type       *string `json:"type"`
			EndpointID *string `json:"endpointId"`
			MessageID  *string `json:"messageId"`
		}{&m.Type, &m.EndpointID, &m.MessageID})
	}
	if m.Type != MarkerType || m.EndpointID != endpointID || m.MessageID != messageID || (m.Request != nil) != request {
		return MarkerState{}, &operatorError{err: fmt.Errorf("%w: document %q in container %s, in the delivery's partition, has the id of the delivery's inbox marker but is not that marker (type %s with this endpoint and MessageId); move or delete it so the delivery can be processed",
			ErrNotMarker, id, target, MarkerType)}
	}
	if decodeErr != nil {
		return MarkerState{}, unreadable(target, id, logsafe.JSONError("the marker", decodeErr))
	}
	st, err := decodeMarker(target, pk, &m)
	if err != nil {
		return MarkerState{}, err
	}
	if st.Pending != nil && st.Pending.ETag == "" {
		st.Pending.ETag = etag
	}
	return st, nil
}

// decodeMarker reads a decoded marker document of partition pk.
func decodeMarker(target Target, pk string, m *markerJSON) (MarkerState, error) {
	id := markerDocID(m.EndpointID, m.MessageID, m.Request != nil)
	st := MarkerState{Found: true, Request: m.Request}
	if t, err := time.Parse(time.RFC3339Nano, m.CreatedAt); err == nil {
		st.CreatedAt = t.UTC()
	}
	if m.Outbox == nil {
		return st, nil
	}
	st.OutboxIDs = make([]string, len(m.Outbox))
	for i, e := range m.Outbox {
		st.OutboxIDs[i] = e.MessageID
	}
	if m.DispatchedAt != nil {
		st.Dispatched = true
		if t, err := time.Parse(time.RFC3339Nano, *m.DispatchedAt); err == nil {
			st.DispatchedAt = t.UTC()
		}
		return st, nil
	}
	if st.CreatedAt.IsZero() {
		return MarkerState{}, unreadable(target, id, "its createdAtUtc is not a UTC timestamp")
	}
	p := &Pending{
		Target: target, PartitionKey: pk, EndpointID: m.EndpointID, MessageID: m.MessageID,
		CreatedAt: st.CreatedAt, ETag: m.ETag, Events: make([]message.Stored, len(m.Outbox)), Response: m.Response,
		Request: m.Request != nil,
	}
	for i, e := range m.Outbox {
		if e.Message == nil || e.MessageID == "" || e.Message.MessageID != e.MessageID {
			return MarkerState{}, unreadable(target, id, fmt.Sprintf("its outbox entry %d lacks the event or its message id", i))
		}
		p.Events[i] = *e.Message
	}
	st.Pending = p
	return st, nil
}

func unreadable(target Target, id, why string) error {
	which := "a marker"
	if id != "" {
		which = fmt.Sprintf("marker %q", bounded(id, MaxIDBytes))
	}
	return &operatorError{err: fmt.Errorf("%w: %s in container %s: %s; its events cannot be sent until it is repaired or removed",
		ErrUnreadableOutbox, which, target, why)}
}

// DecodePending reads a marker document of target as a PendingFinder's
// query returns it (system properties included): the Pending it holds,
// and ok false when it holds no events left to dispatch. The partition key
// value is read at the target's partition key path. An error wraps
// ErrUnreadableOutbox and never quotes the document.
func DecodePending(target Target, body []byte) (p Pending, ok bool, err error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return Pending{}, false, unreadable(target, "", logsafe.JSONError("the marker", err))
	}
	id, _ := lookupString(obj, []string{"id"})
	pk, found := lookupString(obj, target.segments())
	if !found {
		return Pending{}, false, unreadable(target, id, "it lacks a string partition key value at "+target.PartitionKeyPath)
	}
	var m markerJSON
	if err := json.Unmarshal(body, &m); err != nil {
		return Pending{}, false, unreadable(target, id, logsafe.JSONError("the marker", err))
	}
	st, err := decodeMarker(target, pk, &m)
	if err != nil || st.Pending == nil {
		return Pending{}, false, err
	}
	// A marker is marked dispatched by the id its endpoint and message id
	// give. One stored under another id (copied or restored, or a business
	// document shaped like a marker), or whose message id no marker can
	// have, could be sent but never marked: every run would send it
	// again. It is left for an operator instead.
	p = *st.Pending
	if err := checkMarkerKey(p.EndpointID, p.MessageID); err != nil {
		return Pending{}, false, unreadable(target, id, "its endpointId or messageId is blank or too long for a marker, so it could not be marked dispatched")
	}
	if want := markerDocID(p.EndpointID, p.MessageID, p.Request); id != want {
		return Pending{}, false, unreadable(target, id, "its document id is not the one its endpointId and messageId give, so it could not be marked dispatched")
	}
	return p, true, nil
}

// MarkResult is what MarkDispatched found.
type MarkResult int

const (
	// NotMarked is the result of a failed call: the marker is left as it
	// was.
	NotMarked MarkResult = iota
	// Marked: this call marked the marker dispatched.
	Marked
	// AlreadyMarked: the marker changed since p was committed or read
	// (412: another copy of the delivery, or the sweep, marked it first,
	// and its dispatchedAtUtc is kept), or, read without an ETag, it is
	// no longer pending.
	AlreadyMarked
	// MarkerGone: no document has the marker's id in its partition (404):
	// it was deleted, or it expired, between the read or commit that gave
	// p and the mark. p's events were sent, so nothing is left to send,
	// but no marker records it: the caller reports it.
	MarkerGone
)

var markResultNames = [...]string{"not marked", "marked", "already marked", "marker gone"}

func (r MarkResult) String() string {
	if r >= 0 && int(r) < len(markResultNames) {
		return markResultNames[r]
	}
	return fmt.Sprintf("MarkResult(%d)", int(r))
}

// MarkDispatched records that p's events (and its response) were sent,
// in one request: a batch of one patch of the marker, conditioned on
// p.ETag, that sets dispatchedAtUtc to now, sets the marker's ttl to
// retention (counted from now, so the marker then expires as one without
// events does) and clears the payloads, keeping every event's messageId:
// outbox becomes [{"messageId":…},…] and response is removed.
//
// It answers Marked when this call marked the marker, AlreadyMarked when
// another call marked it first, and MarkerGone when there is no marker to
// mark (404). Neither of the last two loses anything, so marking twice is
// harmless; MarkerGone tells the caller that the marker it sent from was
// removed. Without p.ETag (a store that reports none) the marker is read
// first and marked only if it is still pending.
//
// A failure (NotMarked) leaves the marker pending, so a later copy of the
// delivery or the OutboxSweep sends the events again with the same
// MessageIds: a *TransientError or *AmbiguousError, or a permanent error
// (ErrInvalid for an unusable p or retention, *RejectedError for a patch
// the service refused).
func MarkDispatched(ctx context.Context, s Store, p *Pending, retention time.Duration, now time.Time) (MarkResult, error) {
	if p == nil {
		return NotMarked, fmt.Errorf("%w: no pending outbox to mark", ErrInvalid)
	}
	ttl, err := ttlSeconds(retention)
	if err != nil {
		return NotMarked, err
	}
	if err := p.Target.Validate(); err != nil {
		return NotMarked, err
	}
	if err := CheckPartitionKey(p.PartitionKey); err != nil {
		return NotMarked, err
	}
	if err := checkMarkerKey(p.EndpointID, p.MessageID); err != nil {
		return NotMarked, err
	}
	if p.ETag == "" {
		st, err := readMarker(ctx, s, p.Target, p.PartitionKey, p.EndpointID, p.MessageID, p.Request)
		switch {
		case err != nil:
			return NotMarked, err
		case !st.Found:
			return MarkerGone, nil
		case st.Pending == nil || st.Pending.ETag == "":
			return AlreadyMarked, nil
		}
		p = st.Pending
	}
	ids := make([]outboxEntry, len(p.Events))
	for i := range p.Events {
		ids[i] = outboxEntry{MessageID: p.Events[i].MessageID}
	}
	at, _ := json.Marshal(formatTime(now))
	ttlJSON, _ := json.Marshal(ttl)
	idsJSON, err := json.Marshal(ids)
	if err != nil {
		return NotMarked, fmt.Errorf("%w: encoding the outbox ids: %w", ErrInvalid, err)
	}
	patch := []PatchOp{
		{Op: PatchSet, Path: "/" + fieldDispatchedAt, Value: at},
		{Op: PatchSet, Path: "/ttl", Value: ttlJSON},
		{Op: PatchSet, Path: "/" + fieldOutbox, Value: idsJSON},
	}
	if p.Response != nil {
		patch = append(patch, PatchOp{Op: PatchRemove, Path: "/" + fieldResponse})
	}
	ops := []Op{{Kind: OpPatch, ID: p.DocumentID(), Patch: patch, IfMatch: p.ETag}}
	if n := EstimateRequestBytes(ops); n > MaxRequestBytes {
		return NotMarked, &LimitError{Limit: LimitRequestBytes, Index: -1, Detail: fmt.Sprintf("marking %d events dispatched takes about %d bytes, over %d", len(ids), n, MaxRequestBytes)}
	}
	res, err := s.Execute(ctx, p.Target, p.PartitionKey, ops)
	if err != nil {
		return NotMarked, err
	}
	if len(res.Ops) != 1 {
		return NotMarked, &AmbiguousError{Err: fmt.Errorf("the answer has %d operation results for 1 operation", len(res.Ops))}
	}
	switch st := res.Ops[0].Status; {
	case res.Status != StatusMultiStatus && st < 300:
		return Marked, nil
	case st == http.StatusPreconditionFailed:
		return AlreadyMarked, nil
	case st == http.StatusNotFound:
		return MarkerGone, nil
	case TransientStatus(st):
		return NotMarked, &TransientError{Status: st}
	case st < 300 || st == StatusFailedDependency:
		return NotMarked, &AmbiguousError{Err: fmt.Errorf("batch status %d with an operation status %d", res.Status, st)}
	default:
		return NotMarked, &RejectedError{Index: 0, Kind: OpPatch, Marker: true, Status: st}
	}
}

// MaxPendingPageSize is the most markers one PendingFinder page holds.
const MaxPendingPageSize = 1000

// PendingQuery asks a PendingFinder for markers with events not yet
// dispatched.
type PendingQuery struct {
	// EndpointID is the endpoint whose markers are wanted (an endpoint's
	// events go out through its own topic only).
	EndpointID string
	// OlderThan: only markers created before it (createdAtUtc, exact at
	// its 100 ns resolution).
	OlderThan time.Time
	// PageSize bounds the page: 1 to MaxPendingPageSize.
	PageSize int
	// Cursor is "" for the first page, then the previous page's Next.
	Cursor string
}

// check validates q.
func (q PendingQuery) check() error {
	switch {
	case q.PageSize < 1 || q.PageSize > MaxPendingPageSize:
		return fmt.Errorf("%w: a page of pending markers holds 1 to %d, not %d", ErrInvalid, MaxPendingPageSize, q.PageSize)
	case strings.TrimSpace(q.EndpointID) == "":
		return fmt.Errorf("%w: finding pending markers needs an endpoint", ErrInvalid)
	case q.OlderThan.IsZero():
		return fmt.Errorf("%w: finding pending markers needs a cutoff", ErrInvalid)
	}
	return nil
}

// CheckPendingQuery validates q for a PendingFinder implementation.
func CheckPendingQuery(q PendingQuery) error { return q.check() }

// CreatedAtPattern is the regular expression (in the syntax Cosmos DB's
// RegexMatch and Go's regexp share) of the createdAtUtc every commit
// writes: UTC with a fixed seven-digit fraction. A PendingFinder also
// returns the markers with an outbox whose createdAtUtc does not have
// this form (not a string, missing, or another text), whatever their
// age: the cutoff's string comparison cannot place them, and a
// redelivery's read would still find them pending. PendingPage.Add counts
// those that are not timestamps unreadable and leaves out the ones a
// timestamp of another form places after the cutoff.
const CreatedAtPattern = `^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}[.][0-9]{7}Z$`

var createdAtForm = regexp.MustCompile(CreatedAtPattern)

// PendingCutoff is q.OlderThan as a createdAtUtc value: markers created
// before q.OlderThan are exactly those whose createdAtUtc (always written
// in the fixed seven-digit form) sorts before it as a string.
func PendingCutoff(q PendingQuery) string {
	t := q.OlderThan.UTC()
	c := t.Truncate(100 * time.Nanosecond)
	if c.Before(t) {
		c = c.Add(100 * time.Nanosecond)
	}
	return formatTime(c)
}

// PendingPage is one page of a PendingFinder's answer.
type PendingPage struct {
	// Pending are the page's markers with events not yet dispatched.
	Pending []Pending
	// Unreadable counts the page's markers whose outbox does not decode
	// (ErrUnreadableOutbox): left as they are, for an operator.
	Unreadable int
	// FirstUnreadable is the error of the page's first unreadable marker
	// (nil when none): it names the marker's document id and the reason,
	// never its content.
	FirstUnreadable error
	// Next is the Cursor of the following page; "" after the last page.
	Next string
}

// Add puts a document of target the query q returned (body, with its
// system properties) on the page: a pending marker created before q's
// cutoff goes to Pending; one that does not decode, or that could not be
// marked (DecodePending), is counted Unreadable, the first with its
// error; a marker with nothing left to dispatch, or whose createdAtUtc,
// a timestamp in another form than a commit writes, is not before the
// cutoff, is left out.
func (pg *PendingPage) Add(target Target, q PendingQuery, body []byte) {
	p, ok, err := DecodePending(target, body)
	switch {
	case err != nil:
		pg.Unreadable++
		if pg.FirstUnreadable == nil {
			pg.FirstUnreadable = err
		}
	case ok && p.CreatedAt.Before(q.OlderThan):
		pg.Pending = append(pg.Pending, p)
	}
}

// PendingFinder is a Store that also finds, across the partitions of a
// container, the markers of an endpoint created before a cutoff whose
// events were not dispatched: the OutboxSweep's query. A marker is taken
// as not dispatched when it has an outbox and its dispatchedAtUtc is not
// a string (null, missing, or another value), as a redelivery's read
// takes it; one whose createdAtUtc is not in the form CreatedAtPattern
// gives is returned whatever its age, for PendingPage.Add to place or
// count unreadable. Markers without events, and dispatched ones, are
// never returned. Markers dispatched while the pages are read do not
// disturb the cursor: the following pages hold the markers after the
// last one returned. An implementation builds its pages with
// PendingPage.Add.
type PendingFinder interface {
	Store
	FindPending(ctx context.Context, target Target, q PendingQuery) (PendingPage, error)
}
