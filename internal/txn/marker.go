package txn

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
)

// MarkerType is the "type" property of an inbox marker document, which
// tells markers apart from a container's business documents (a change-feed
// consumer of the container sees markers being created).
const MarkerType = "nimbus.inbox"

// markerFields are the properties a marker document sets itself.
var markerFields = map[string]bool{"id": true, "type": true, "endpointId": true, "messageId": true, "createdAtUtc": true, "ttl": true}

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
	// whole seconds, 1 s to about 68 years).
	Retention time.Duration
}

// MarkerID returns the marker document id of (endpointID, messageID): the
// inbox identity hash, the same id as the inbox document's.
func MarkerID(endpointID, messageID string) string { return inbox.IdentityHash(endpointID, messageID) }

// ttlSeconds returns the marker's item ttl.
func (m Marker) ttlSeconds() (int64, error) {
	if m.Retention <= 0 {
		return 0, fmt.Errorf("%w: marker retention %v is not positive", ErrInvalid, m.Retention)
	}
	s := int64((m.Retention + time.Second - 1) / time.Second)
	if s > math.MaxInt32 {
		return 0, fmt.Errorf("%w: marker retention %v exceeds the longest item ttl (%d s)", ErrInvalid, m.Retention, math.MaxInt32)
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
// createdAtUtc, ttl, and pk at the target's partition key path.
func markerDoc(t Target, pk string, m Marker, now time.Time) (Op, error) {
	if err := checkMarkerKey(m.EndpointID, m.MessageID); err != nil {
		return Op{}, err
	}
	ttl, err := m.ttlSeconds()
	if err != nil {
		return Op{}, err
	}
	doc := map[string]any{
		"id":           MarkerID(m.EndpointID, m.MessageID),
		"type":         MarkerType,
		"endpointId":   m.EndpointID,
		"messageId":    m.MessageID,
		"createdAtUtc": now.UTC().Truncate(100 * time.Nanosecond).Format(createdAtLayout),
		"ttl":          ttl,
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

// HasMarker reports whether the marker of (endpointID, messageID) exists
// in partition pk of target: the duplicate check before the handler runs.
// Only a clean "not found" answers false; any failure is an error. A
// partition key value Cosmos DB cannot take fails before any request
// (CheckPartitionKey). A document with the marker's id that is not that
// marker (its type, endpointId or messageId differ) is an error an
// operator must resolve, never a duplicate: the delivery's effects are not
// there, and its commit could never create the marker.
func HasMarker(ctx context.Context, s Store, target Target, pk, endpointID, messageID string) (bool, error) {
	if err := target.Validate(); err != nil {
		return false, err
	}
	if err := CheckPartitionKey(pk); err != nil {
		return false, err
	}
	if err := checkMarkerKey(endpointID, messageID); err != nil {
		return false, err
	}
	id := MarkerID(endpointID, messageID)
	body, _, found, err := s.Read(ctx, target, pk, id)
	if err != nil {
		return false, fmt.Errorf("txn: reading the inbox marker: %w", err)
	}
	if !found {
		return false, nil
	}
	var m struct {
		Type       string `json:"type"`
		EndpointID string `json:"endpointId"`
		MessageID  string `json:"messageId"`
	}
	if json.Unmarshal(body, &m) != nil || m.Type != MarkerType || m.EndpointID != endpointID || m.MessageID != messageID {
		return false, &operatorError{err: fmt.Errorf("%w: document %q in container %s, in the delivery's partition, has the id of the delivery's inbox marker but is not that marker (type %s with this endpoint and MessageId); move or delete it so the delivery can be processed",
			ErrNotMarker, id, target, MarkerType)}
	}
	return true, nil
}
