package txn

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// MarkerType is the "type" property of an inbox marker document, which
// tells markers apart from a container's business documents (a change-feed
// consumer of the container sees markers being created).
const MarkerType = "nimbus.inbox"

// markerFields are the properties a marker document sets itself.
var markerFields = map[string]bool{
	"id": true, "type": true, "endpointId": true, "messageId": true, "createdAtUtc": true, "ttl": true,
	fieldOutbox: true, fieldDispatchedAt: true, fieldResponse: true, fieldRequest: true,
}

// createdAtLayout is the inbox document's createdAtUtc format: UTC with a
// fixed seven-digit fraction (100 ns ticks, as .NET's "O" format).
const createdAtLayout = "2006-01-02T15:04:05.0000000Z"

// Marker is one delivery to record with a commit.
type Marker struct {
	// EndpointID is the configured endpoint; MessageID the delivery's
	// MessageId (or its stand-in). Neither may be blank or over the inbox
	// limits (inbox.BypassReason).
	EndpointID string
	MessageID  string
	// Retention is how long the marker lives (its item ttl, rounded up to
	// whole seconds, 1 s to about 68 years). A marker that holds events
	// not yet dispatched has no ttl: it lives until MarkDispatched sets
	// one.
	Retention time.Duration
	// Outbox makes this marker the one that holds the events the handler
	// published (Unit.Publish) and Response, when it published any. At
	// most one marker of a commit may have it; a commit whose unit
	// published events needs one. The pipeline sets it on the marker of
	// the delivery's own MessageId: a redelivery of this very message,
	// the copy the broker brings back after a send failed, reads that
	// marker before anything else, and the events' ParentMessageId is
	// that MessageId. A stand-in's other marker (its source MessageId)
	// stays a plain marker.
	Outbox bool
	// Response is the delivery's ResolutionResponse as it is to be sent,
	// kept in the outbox marker with the events so that a later send (the
	// OutboxSweep timer, which has no inbound message) can send it again
	// byte for byte. nil keeps none. It is stored only on the marker with
	// Outbox set, and only when the unit published events.
	Response *message.Stored
	// Request, when set, makes this marker a request record: the record of
	// a request that started a workflow outside any delivery, keyed by
	// (EndpointID, idempotency key) with the key as MessageID. Its id is
	// RequestID's, apart from every inbox marker's, and it keeps the
	// request's fingerprint and answer (see Request).
	Request *Request
}

// Request is what a request record keeps besides a marker's fields.
type Request struct {
	// Fingerprint identifies the request's content (a hash the caller
	// computed): a later request with the same key and another fingerprint
	// is another request that reuses the key.
	Fingerprint string `json:"fingerprint"`
	// Answer is what the caller answered the request with, kept so that a
	// retry is answered the same (a small JSON value; nil keeps none).
	Answer json.RawMessage `json:"answer,omitempty"`
}

// fieldRequest is the request record's property holding its Request.
const fieldRequest = "request"

// RequestID returns the document id of the request record of
// (endpointID, key): "request-" and the inbox identity hash of the pair,
// so no request record shares an id with an inbox marker.
func RequestID(endpointID, key string) string {
	return "request-" + inbox.IdentityHash(endpointID, key)
}

// markerDocID is the id of the marker of (endpointID, messageID), or of
// the request record of (endpointID, key) when request is set.
func markerDocID(endpointID, messageID string, request bool) string {
	if request {
		return RequestID(endpointID, messageID)
	}
	return MarkerID(endpointID, messageID)
}

// MarkerID returns the marker document id of (endpointID, messageID): the
// inbox identity hash, the same id as the inbox document's.
func MarkerID(endpointID, messageID string) string { return inbox.IdentityHash(endpointID, messageID) }

// ttlSeconds returns the marker's item ttl.
func (m Marker) ttlSeconds() (int64, error) { return ttlSeconds(m.Retention) }

// ttlSeconds returns the item ttl of a marker kept for retention.
func ttlSeconds(retention time.Duration) (int64, error) {
	if retention <= 0 {
		return 0, fmt.Errorf("%w: marker retention %v is not positive", ErrInvalid, retention)
	}
	s := int64((retention + time.Second - 1) / time.Second)
	if s > math.MaxInt32 {
		return 0, fmt.Errorf("%w: marker retention %v exceeds the longest item ttl (%d s)", ErrInvalid, retention, math.MaxInt32)
	}
	return s, nil
}

func checkMarkerKey(endpointID, messageID string) error {
	if why := inbox.BypassReason(endpointID, &messageID); why != inbox.BypassNone {
		return fmt.Errorf("%w: a marker needs an endpoint and a MessageId (%s)", ErrInvalid, why)
	}
	return nil
}

// markerDoc builds the marker document: id, type, endpointId, messageId,
// createdAtUtc, and pk at the target's partition key path; then either ttl
// (no events: out is nil) or the events not yet dispatched: outbox (the
// encoded entries, in order), dispatchedAtUtc null and, when given,
// response.
func markerDoc(t Target, pk string, m Marker, now time.Time, out *outboxDoc) (Op, error) {
	if err := checkMarkerKey(m.EndpointID, m.MessageID); err != nil {
		return Op{}, err
	}
	ttl, err := m.ttlSeconds()
	if err != nil {
		return Op{}, err
	}
	doc := map[string]any{
		"id":           markerDocID(m.EndpointID, m.MessageID, m.Request != nil),
		"type":         MarkerType,
		"endpointId":   m.EndpointID,
		"messageId":    m.MessageID,
		"createdAtUtc": formatTime(now),
	}
	if out == nil {
		doc["ttl"] = ttl
	} else {
		doc[fieldOutbox] = out.entries
		doc[fieldDispatchedAt] = nil
		if out.response != nil {
			doc[fieldResponse] = out.response
		}
	}
	if m.Request != nil {
		doc[fieldRequest] = m.Request
	}
	setPath(doc, t.segments(), pk)
	body, err := json.Marshal(doc)
	if err != nil {
		return Op{}, fmt.Errorf("%w: encoding the marker: %w", ErrInvalid, err)
	}
	return Op{Kind: OpCreate, ID: doc["id"].(string), Body: body}, nil
}

// setPath sets v at the property path segs of doc, creating objects.
func setPath(doc map[string]any, segs []string, v any) {
	for _, s := range segs[:len(segs)-1] {
		next, ok := doc[s].(map[string]any)
		if !ok {
			next = map[string]any{}
			doc[s] = next
		}
		doc = next
	}
	doc[segs[len(segs)-1]] = v
}

// formatTime renders t as a marker's createdAtUtc and dispatchedAtUtc.
func formatTime(t time.Time) string {
	return t.UTC().Truncate(100 * time.Nanosecond).Format(createdAtLayout)
}

// HasMarker reports whether the marker of (endpointID, messageID) exists
// in partition pk of target: the duplicate check before the handler runs.
// It is ReadMarker's Found; see ReadMarker for its errors.
func HasMarker(ctx context.Context, s Store, target Target, pk, endpointID, messageID string) (bool, error) {
	st, err := ReadMarker(ctx, s, target, pk, endpointID, messageID)
	return st.Found, err
}
