package tracking

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// Memory is the in-memory store, for the demo and tests. It keeps the same
// document model as the Cosmos provider: Completed and Skipped rows are
// soft-deleted (visible to GetEvent, GetEventByID and the guard, invisible
// to the status lookups and counts), RemoveMessage and ArchiveFailedEvent
// soft-delete, and the guard sees soft-deleted rows. Nothing expires.
// Every value is copied in and out, so callers never share its rows. The
// zero value is ready to use.
type Memory struct {
	mu       sync.Mutex
	rows     map[rowKey]*memRow
	messages map[string]map[string][]byte // eventID → messageID → JSON
	audits   map[string][]memAudit        // eventID → in write order
	now      func() time.Time
}

var _ Store = (*Memory)(nil)

type rowKey struct{ endpoint, id string }

type memRow struct {
	status  ResolutionStatus
	deleted bool
	event   []byte // the row as JSON
	last    *string
	updated time.Time
}

type memAudit struct {
	createdAt time.Time
	audit     []byte
}

func (m *Memory) init() {
	if m.rows == nil {
		m.rows = map[rowKey]*memRow{}
		m.messages = map[string]map[string][]byte{}
		m.audits = map[string][]memAudit{}
	}
}

func (m *Memory) clock() time.Time {
	if m.now != nil {
		return m.now()
	}
	return time.Now()
}

func encodeRow(r UnresolvedEvent) ([]byte, error) {
	r = NormalizeRow(r)
	b, err := json.Marshal(&r)
	if err != nil {
		return nil, fmt.Errorf("tracking: encoding row: %w", err)
	}
	return b, nil
}

func decodeRow(r *memRow) (*UnresolvedEvent, error) {
	var e UnresolvedEvent
	if err := json.Unmarshal(r.event, &e); err != nil {
		return nil, fmt.Errorf("tracking: decoding row: %w", err)
	}
	e.ResolutionStatus = r.status // reads report the status written
	return &e, nil
}

func checkRowArgs(key Key) error {
	if err := CheckEndpointID(key.EndpointID); err != nil {
		return err
	}
	if key.EventID == "" {
		return fmt.Errorf("%w: event id is empty", ErrInvalidArgument)
	}
	return nil
}

// Upload implements Writer. A guarded write consults Allows against the
// stored row under the lock, so the decision is atomic with the write.
func (m *Memory) Upload(ctx context.Context, key Key, status ResolutionStatus, row UnresolvedEvent) (bool, error) {
	if err := CheckUploadStatus(status); err != nil {
		return false, err
	}
	return m.writeRow(ctx, key, status, WrittenDeleted(status), row, func(cur *memRow) (bool, error) {
		if cur == nil || !IsGuarded(status, row.MessageType) {
			return true, nil
		}
		stored, err := decodeRow(cur)
		if err != nil {
			return false, err
		}
		return Allows(status, &row, stored), nil
	})
}

// TryCompletePendingMessage implements Store.
func (m *Memory) TryCompletePendingMessage(ctx context.Context, key Key, expected *string, content UnresolvedEvent) (bool, error) {
	return m.writeRow(ctx, key, Completed, true, content, func(cur *memRow) (bool, error) {
		return cur != nil && CanCompletePending(cur.status, cur.deleted, cur.last, expected), nil
	})
}

// writeRow replaces the row of key with row, as status and deleted, when
// allow, called under the lock with the stored row (nil when none), says
// so; it reports whether it wrote.
func (m *Memory) writeRow(ctx context.Context, key Key, status ResolutionStatus, deleted bool, row UnresolvedEvent, allow func(cur *memRow) (bool, error)) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := checkRowArgs(key); err != nil {
		return false, err
	}
	b, err := encodeRow(row)
	if err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	k := rowKey{key.EndpointID, key.StoredID()}
	if ok, err := allow(m.rows[k]); !ok || err != nil {
		return false, err
	}
	m.rows[k] = &memRow{status: status, deleted: deleted, event: b, last: row.LastMessageID, updated: NormalizeTime(row.UpdatedAt)}
	return true, nil
}

// RemoveMessage implements Store.
func (m *Memory) RemoveMessage(ctx context.Context, key Key) (bool, error) {
	return m.softDelete(ctx, key)
}

// ArchiveFailedEvent implements Store.
func (m *Memory) ArchiveFailedEvent(ctx context.Context, key Key) error {
	_, err := m.softDelete(ctx, key)
	return err
}

func (m *Memory) softDelete(ctx context.Context, key Key) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := checkRowArgs(key); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	cur := m.rows[rowKey{key.EndpointID, key.StoredID()}]
	if cur == nil {
		return false, nil
	}
	cur.deleted = true
	return true, nil
}

// visible reports a row GetEvent and GetEventByID may return (Visible).
func (r *memRow) visible() bool { return Visible(r.status, r.deleted) }

func (m *Memory) getStatus(ctx context.Context, status ResolutionStatus, key Key) (*UnresolvedEvent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := CheckEndpointID(key.EndpointID); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	cur := m.rows[rowKey{key.EndpointID, key.StoredID()}]
	if cur == nil || cur.status != status || cur.deleted {
		return nil, nil
	}
	return decodeRow(cur)
}

// GetPendingEvent implements Reader.
func (m *Memory) GetPendingEvent(ctx context.Context, key Key) (*UnresolvedEvent, error) {
	return m.getStatus(ctx, Pending, key)
}

// GetFailedEvent implements Reader.
func (m *Memory) GetFailedEvent(ctx context.Context, key Key) (*UnresolvedEvent, error) {
	return m.getStatus(ctx, Failed, key)
}

// GetDeferredEvent implements Reader.
func (m *Memory) GetDeferredEvent(ctx context.Context, key Key) (*UnresolvedEvent, error) {
	return m.getStatus(ctx, Deferred, key)
}

// GetDeadletteredEvent implements Reader.
func (m *Memory) GetDeadletteredEvent(ctx context.Context, key Key) (*UnresolvedEvent, error) {
	return m.getStatus(ctx, DeadLettered, key)
}

// GetUnsupportedEvent implements Reader.
func (m *Memory) GetUnsupportedEvent(ctx context.Context, key Key) (*UnresolvedEvent, error) {
	return m.getStatus(ctx, Unsupported, key)
}

// GetEvent implements Reader.
func (m *Memory) GetEvent(ctx context.Context, event EventKey) (*UnresolvedEvent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := CheckEndpointID(event.EndpointID); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	var best *memRow
	for k, r := range m.rows {
		if k.endpoint != event.EndpointID || !r.visible() {
			continue
		}
		e, err := decodeRow(r)
		if err != nil {
			return nil, err
		}
		if e.EventID != event.EventID {
			continue
		}
		if best == nil || r.updated.After(best.updated) {
			best = r
		}
	}
	if best == nil {
		return nil, nil
	}
	return decodeRow(best)
}

// GetEventByID implements Reader.
func (m *Memory) GetEventByID(ctx context.Context, endpointID, id string) (*UnresolvedEvent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := CheckEndpointID(endpointID); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	r := m.rows[rowKey{endpointID, id}]
	if r == nil || !r.visible() {
		return nil, nil
	}
	return decodeRow(r)
}

// pendingHandoffs returns the endpoint's parked handoffs.
func (m *Memory) pendingHandoffs(endpointID string) ([]*UnresolvedEvent, error) {
	var out []*UnresolvedEvent
	for k, r := range m.rows {
		if k.endpoint != endpointID || r.status != Pending || r.deleted {
			continue
		}
		e, err := decodeRow(r)
		if err != nil {
			return nil, err
		}
		if e.PendingSubStatus != nil && *e.PendingSubStatus == PendingSubStatusHandoff {
			out = append(out, e)
		}
	}
	return out, nil
}

// GetPendingHandoffByExternalJobID implements Reader.
func (m *Memory) GetPendingHandoffByExternalJobID(ctx context.Context, endpointID, jobID string) (*UnresolvedEvent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := CheckEndpointID(endpointID); err != nil {
		return nil, err
	}
	if jobID == "" {
		return nil, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	hs, err := m.pendingHandoffs(endpointID)
	if err != nil {
		return nil, err
	}
	for _, e := range hs {
		if e.ExternalJobID != nil && *e.ExternalJobID == jobID {
			return e, nil
		}
	}
	return nil, nil
}

// GetNextPendingHandoffEvent implements Reader.
func (m *Memory) GetNextPendingHandoffEvent(ctx context.Context, endpointID string, eventTypeIDs []string) (*UnresolvedEvent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := CheckEndpointID(endpointID); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	hs, err := m.pendingHandoffs(endpointID)
	if err != nil {
		return nil, err
	}
	var best *UnresolvedEvent
	for _, e := range hs {
		best = EarlierHandoff(best, e, eventTypeIDs)
	}
	return best, nil
}

// DownloadEndpointStateCount implements Reader.
func (m *Memory) DownloadEndpointStateCount(ctx context.Context, endpointID string) (EndpointStateCount, error) {
	c := EndpointStateCount{EndpointID: endpointID}
	if err := ctx.Err(); err != nil {
		return c, err
	}
	if err := CheckEndpointID(endpointID); err != nil {
		return c, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	for k, r := range m.rows {
		if k.endpoint != endpointID || r.deleted {
			continue
		}
		c.add(r.status, r.updated)
	}
	return c, nil
}

// add counts one unresolved row; providers share it.
func (c *EndpointStateCount) add(s ResolutionStatus, updated time.Time) {
	switch s {
	case Pending:
		c.PendingCount++
	case Deferred:
		c.DeferredCount++
	case Failed:
		c.FailedCount++
	case DeadLettered:
		c.DeadletteredCount++
	case Unsupported:
		c.UnsupportedCount++
	}
	if s == Failed || s == DeadLettered {
		if c.OldestFailureAt == nil || updated.Before(*c.OldestFailureAt) {
			u := updated.UTC()
			c.OldestFailureAt = &u
		}
	}
}

// Add counts one unresolved row of status s last updated at updated; a
// provider that counts in Go uses it so every provider counts alike.
func (c *EndpointStateCount) Add(s ResolutionStatus, updated time.Time) { c.add(s, updated) }

// StoreMessage implements Writer.
func (m *Memory) StoreMessage(ctx context.Context, e MessageEntity) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if e.EventID == "" || e.MessageID == "" {
		return fmt.Errorf("%w: history message needs an event id and a message id", ErrInvalidArgument)
	}
	e.EnqueuedTimeUtc = NormalizeTime(e.EnqueuedTimeUtc)
	if e.ExpectedBy != nil {
		t := NormalizeTime(*e.ExpectedBy)
		e.ExpectedBy = &t
	}
	b, err := json.Marshal(&e)
	if err != nil {
		return fmt.Errorf("tracking: encoding message: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	if m.messages[e.EventID] == nil {
		m.messages[e.EventID] = map[string][]byte{}
	}
	m.messages[e.EventID][e.MessageID] = b
	return nil
}

func (m *Memory) history(eventID string) ([]MessageEntity, error) {
	out := make([]MessageEntity, 0, len(m.messages[eventID]))
	for _, b := range m.messages[eventID] {
		var e MessageEntity
		if err := json.Unmarshal(b, &e); err != nil {
			return nil, fmt.Errorf("tracking: decoding message: %w", err)
		}
		out = append(out, e)
	}
	return out, nil
}

// GetEventHistory implements Writer.
func (m *Memory) GetEventHistory(ctx context.Context, eventID string) ([]MessageEntity, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	return m.history(eventID)
}

// GetMessage implements Reader.
func (m *Memory) GetMessage(ctx context.Context, eventID, messageID string) (*MessageEntity, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	b, ok := m.messages[eventID][messageID]
	if !ok {
		return nil, nil
	}
	var e MessageEntity
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("tracking: decoding message: %w", err)
	}
	return &e, nil
}

// GetLatestEventRequestMessage implements Reader.
func (m *Memory) GetLatestEventRequestMessage(ctx context.Context, eventID string) (*MessageEntity, error) {
	h, err := m.GetEventHistory(ctx, eventID)
	if err != nil {
		return nil, err
	}
	return Newest(h, IsLatestRequestCandidate), nil
}

// GetFailedMessage implements Reader.
func (m *Memory) GetFailedMessage(ctx context.Context, event EventKey) (*MessageEntity, error) {
	h, err := m.GetEventHistory(ctx, event.EventID)
	if err != nil {
		return nil, err
	}
	return NewestFailedMessage(h, event), nil
}

// GetDeadletteredMessage implements Reader.
func (m *Memory) GetDeadletteredMessage(ctx context.Context, event EventKey) (*MessageEntity, error) {
	h, err := m.GetEventHistory(ctx, event.EventID)
	if err != nil {
		return nil, err
	}
	return NewestEndpointMessage(h, event), nil
}

// IsLatestRequestCandidate reports a history message GetLatestEventRequestMessage
// considers: an EventRequest or ResubmissionRequest with a non-empty EventJson.
func IsLatestRequestCandidate(e *MessageEntity) bool {
	if e.MessageType != message.EventRequest && e.MessageType != message.ResubmissionRequest {
		return false
	}
	c := e.MessageContent
	return c != nil && c.EventContent != nil && c.EventContent.EventJSON != nil && *c.EventContent.EventJSON != ""
}

// Newest returns a copy of the message with the latest EnqueuedTimeUtc
// among those keep accepts (the first of equals in h's order), or nil.
func Newest(h []MessageEntity, keep func(*MessageEntity) bool) *MessageEntity {
	var best *MessageEntity
	for i := range h {
		if !keep(&h[i]) {
			continue
		}
		if best == nil || h[i].EnqueuedTimeUtc.After(best.EnqueuedTimeUtc) {
			best = &h[i]
		}
	}
	if best == nil {
		return nil
	}
	c := *best
	return &c
}

// StoreMessageAudit implements Writer.
func (m *Memory) StoreMessageAudit(ctx context.Context, event EventKey, audit MessageAudit, _ string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	eventID := event.EventID
	if eventID == "" {
		return fmt.Errorf("%w: event id is empty", ErrInvalidArgument)
	}
	audit.AuditTimestamp = NormalizeTime(audit.AuditTimestamp)
	b, err := json.Marshal(&audit)
	if err != nil {
		return fmt.Errorf("tracking: encoding audit: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	m.audits[eventID] = append(m.audits[eventID], memAudit{createdAt: m.clock(), audit: b})
	return nil
}

// GetMessageAudits implements Reader.
func (m *Memory) GetMessageAudits(ctx context.Context, eventID string) ([]MessageAudit, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	list := m.audits[eventID]
	out := make([]MessageAudit, 0, len(list))
	for i := len(list) - 1; i >= 0; i-- { // newest first
		var a MessageAudit
		if err := json.Unmarshal(list[i].audit, &a); err != nil {
			return nil, fmt.Errorf("tracking: decoding audit: %w", err)
		}
		out = append(out, a)
	}
	return out, nil
}
