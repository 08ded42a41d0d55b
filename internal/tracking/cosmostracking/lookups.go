package cosmostracking

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/tracking"
)

// pageSize bounds one page of a query.
const pageSize = 100

// query drains a query, calling each for every item. pk nil means across
// partitions.
func query(ctx context.Context, c *azcosmos.ContainerClient, pk *azcosmos.PartitionKey, sql string, params []azcosmos.QueryParameter, each func([]byte) error) error {
	key := azcosmos.NewPartitionKey()
	if pk != nil {
		key = *pk
	}
	pager := c.NewQueryItemsPager(sql, key, &azcosmos.QueryOptions{QueryParameters: params, PageSizeHint: pageSize})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return err
		}
		for _, it := range page.Items {
			if err := each(it); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Store) getStatus(ctx context.Context, op string, status tracking.ResolutionStatus, key tracking.Key) (*tracking.UnresolvedEvent, error) {
	c, err := s.endpoint(ctx, op, key.EndpointID)
	if err != nil {
		return nil, err
	}
	r, err := readRow(ctx, c, key.StoredID())
	if err != nil {
		return nil, s.fail(op, err)
	}
	if r == nil || r.Status != status.String() || r.deleted() {
		return nil, nil
	}
	e, err := r.hydrate()
	if err != nil {
		return nil, s.fail(op, err)
	}
	return e, nil
}

// GetPendingEvent implements tracking.Reader.
func (s *Store) GetPendingEvent(ctx context.Context, key tracking.Key) (*tracking.UnresolvedEvent, error) {
	return s.getStatus(ctx, "GetPendingEvent", tracking.Pending, key)
}

// GetFailedEvent implements tracking.Reader.
func (s *Store) GetFailedEvent(ctx context.Context, key tracking.Key) (*tracking.UnresolvedEvent, error) {
	return s.getStatus(ctx, "GetFailedEvent", tracking.Failed, key)
}

// GetDeferredEvent implements tracking.Reader.
func (s *Store) GetDeferredEvent(ctx context.Context, key tracking.Key) (*tracking.UnresolvedEvent, error) {
	return s.getStatus(ctx, "GetDeferredEvent", tracking.Deferred, key)
}

// GetDeadletteredEvent implements tracking.Reader.
func (s *Store) GetDeadletteredEvent(ctx context.Context, key tracking.Key) (*tracking.UnresolvedEvent, error) {
	return s.getStatus(ctx, "GetDeadletteredEvent", tracking.DeadLettered, key)
}

// GetUnsupportedEvent implements tracking.Reader.
func (s *Store) GetUnsupportedEvent(ctx context.Context, key tracking.Key) (*tracking.UnresolvedEvent, error) {
	return s.getStatus(ctx, "GetUnsupportedEvent", tracking.Unsupported, key)
}

// visibleFilter keeps rows that are not soft-deleted, and Completed and
// Skipped rows, which are soft-deleted by design.
const visibleFilter = `(NOT IS_DEFINED(c.deleted) OR c.deleted != true OR c.status = "Completed" OR c.status = "Skipped")`

// GetEvent implements tracking.Reader: a filter-only query across the
// endpoint's partitions, newest UpdatedAt picked in Go.
func (s *Store) GetEvent(ctx context.Context, event tracking.EventKey) (*tracking.UnresolvedEvent, error) {
	const op = "GetEvent"
	c, err := s.endpoint(ctx, op, event.EndpointID)
	if err != nil {
		return nil, err
	}
	var best *tracking.UnresolvedEvent
	err = query(ctx, c, nil, "SELECT * FROM c WHERE c.event.EventId = @eventId AND "+visibleFilter,
		[]azcosmos.QueryParameter{{Name: "@eventId", Value: event.EventID}}, func(b []byte) error {
			var r storedRow
			if err := json.Unmarshal(b, &r); err != nil {
				return fmt.Errorf("decoding row: %w", err)
			}
			if !r.visible() {
				return nil
			}
			e, err := r.hydrate()
			if err != nil {
				return err
			}
			if best == nil || e.UpdatedAt.After(best.UpdatedAt) {
				best = e
			}
			return nil
		})
	if err != nil {
		return nil, s.fail(op, err)
	}
	return best, nil
}

// GetEventByID implements tracking.Reader with a point read.
func (s *Store) GetEventByID(ctx context.Context, endpointID, id string) (*tracking.UnresolvedEvent, error) {
	const op = "GetEventByID"
	c, err := s.endpoint(ctx, op, endpointID)
	if err != nil {
		return nil, err
	}
	r, err := readRow(ctx, c, id)
	if err != nil {
		return nil, s.fail(op, err)
	}
	if r == nil || !r.visible() {
		return nil, nil
	}
	e, err := r.hydrate()
	if err != nil {
		return nil, s.fail(op, err)
	}
	return e, nil
}

const handoffFilter = `c.status = "Pending" AND c.event.PendingSubStatus = "Handoff" AND (NOT IS_DEFINED(c.deleted) OR c.deleted != true)`

func (s *Store) handoffs(ctx context.Context, op, endpointID, extra string, params []azcosmos.QueryParameter, each func(*tracking.UnresolvedEvent)) error {
	c, err := s.endpoint(ctx, op, endpointID)
	if err != nil {
		return err
	}
	err = query(ctx, c, nil, "SELECT * FROM c WHERE "+handoffFilter+extra, params, func(b []byte) error {
		var r storedRow
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("decoding row: %w", err)
		}
		if r.deleted() || r.Status != "Pending" {
			return nil
		}
		e, err := r.hydrate()
		if err != nil {
			return err
		}
		if e.PendingSubStatus != nil && *e.PendingSubStatus == tracking.PendingSubStatusHandoff {
			each(e)
		}
		return nil
	})
	if err != nil {
		return s.fail(op, err)
	}
	return nil
}

// GetPendingHandoffByExternalJobID implements tracking.Reader.
func (s *Store) GetPendingHandoffByExternalJobID(ctx context.Context, endpointID, jobID string) (*tracking.UnresolvedEvent, error) {
	const op = "GetPendingHandoffByExternalJobID"
	if jobID == "" {
		if err := tracking.CheckEndpointID(endpointID); err != nil {
			return nil, fmt.Errorf("cosmostracking: %s: %w", op, err)
		}
		return nil, nil
	}
	var found *tracking.UnresolvedEvent
	err := s.handoffs(ctx, op, endpointID, " AND c.event.ExternalJobId = @job", []azcosmos.QueryParameter{{Name: "@job", Value: jobID}}, func(e *tracking.UnresolvedEvent) {
		if found == nil && e.ExternalJobID != nil && *e.ExternalJobID == jobID {
			found = e
		}
	})
	return found, err
}

// GetNextPendingHandoffEvent implements tracking.Reader.
func (s *Store) GetNextPendingHandoffEvent(ctx context.Context, endpointID string, eventTypeIDs []string) (*tracking.UnresolvedEvent, error) {
	var best *tracking.UnresolvedEvent
	err := s.handoffs(ctx, "GetNextPendingHandoffEvent", endpointID, "", nil, func(e *tracking.UnresolvedEvent) {
		best = tracking.EarlierHandoff(best, e, eventTypeIDs)
	})
	return best, err
}

// DownloadEndpointStateCount implements tracking.Reader: one filter-only
// query over the five unresolved statuses, counted in Go.
func (s *Store) DownloadEndpointStateCount(ctx context.Context, endpointID string) (tracking.EndpointStateCount, error) {
	const op = "DownloadEndpointStateCount"
	out := tracking.EndpointStateCount{EndpointID: endpointID}
	c, err := s.endpoint(ctx, op, endpointID)
	if err != nil {
		return out, err
	}
	err = query(ctx, c, nil,
		`SELECT c.status, c.deleted, c.event.UpdatedAt AS updatedAt FROM c WHERE c.status IN ("Pending", "Deferred", "Failed", "DeadLettered", "Unsupported") AND (NOT IS_DEFINED(c.deleted) OR c.deleted != true)`,
		nil, func(b []byte) error {
			var r struct {
				Status    string    `json:"status"`
				Deleted   *bool     `json:"deleted"`
				UpdatedAt time.Time `json:"updatedAt"`
			}
			if err := json.Unmarshal(b, &r); err != nil {
				return fmt.Errorf("decoding count row: %w", err)
			}
			if r.Deleted != nil && *r.Deleted {
				return nil
			}
			if st, ok := tracking.ParseResolutionStatus(r.Status); ok {
				out.Add(st, r.UpdatedAt)
			}
			return nil
		})
	if err != nil {
		return tracking.EndpointStateCount{EndpointID: endpointID}, s.fail(op, err)
	}
	return out, nil
}

// messageDoc is the per-message history document.
type messageDoc struct {
	ID         string                  `json:"id"`
	EventID    string                  `json:"eventId"`
	EndpointID string                  `json:"endpointId"`
	Message    *tracking.MessageEntity `json:"message"`
	TTL        *int                    `json:"ttl,omitempty"`
}

// StoreMessage implements tracking.Writer with one upsert (idempotent per
// event and MessageId).
func (s *Store) StoreMessage(ctx context.Context, m tracking.MessageEntity) error {
	const op = "StoreMessage"
	if m.EventID == "" || m.MessageID == "" {
		return fmt.Errorf("cosmostracking: %s: %w: a history message needs an event id and a message id", op, tracking.ErrInvalidArgument)
	}
	c, err := s.shared(ctx, op, s.messages)
	if err != nil {
		return err
	}
	m.EnqueuedTimeUtc = tracking.NormalizeTime(m.EnqueuedTimeUtc)
	if m.ExpectedBy != nil {
		t := tracking.NormalizeTime(*m.ExpectedBy)
		m.ExpectedBy = &t
	}
	ttl := MessageTTL
	b, err := json.Marshal(&messageDoc{ID: m.MessageID, EventID: m.EventID, EndpointID: m.EndpointID, Message: &m, TTL: &ttl})
	if err != nil {
		return s.fail(op, err)
	}
	if _, err := c.UpsertItem(ctx, azcosmos.NewPartitionKeyString(m.EventID), b, noContent); err != nil {
		return s.fail(op, err)
	}
	return nil
}

func decodeMessage(b []byte) (*tracking.MessageEntity, error) {
	var d struct {
		Message *tracking.MessageEntity `json:"message"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("decoding message: %w", err)
	}
	if d.Message == nil {
		return nil, fmt.Errorf("history document without a message")
	}
	return d.Message, nil
}

// GetEventHistory implements tracking.Writer: a single-partition query.
func (s *Store) GetEventHistory(ctx context.Context, eventID string) ([]tracking.MessageEntity, error) {
	return s.history(ctx, "GetEventHistory", eventID)
}

func (s *Store) history(ctx context.Context, op, eventID string) ([]tracking.MessageEntity, error) {
	c, err := s.shared(ctx, op, s.messages)
	if err != nil {
		return nil, err
	}
	pk := azcosmos.NewPartitionKeyString(eventID)
	out := []tracking.MessageEntity{}
	err = query(ctx, c, &pk, "SELECT * FROM c WHERE c.eventId = @eventId", []azcosmos.QueryParameter{{Name: "@eventId", Value: eventID}}, func(b []byte) error {
		m, err := decodeMessage(b)
		if err != nil {
			return err
		}
		out = append(out, *m)
		return nil
	})
	if err != nil {
		return nil, s.fail(op, err)
	}
	return out, nil
}

// GetMessage implements tracking.Reader with a point read.
func (s *Store) GetMessage(ctx context.Context, eventID, messageID string) (*tracking.MessageEntity, error) {
	const op = "GetMessage"
	c, err := s.shared(ctx, op, s.messages)
	if err != nil {
		return nil, err
	}
	resp, err := c.ReadItem(ctx, azcosmos.NewPartitionKeyString(eventID), messageID, nil)
	if cosmos.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, s.fail(op, err)
	}
	m, err := decodeMessage(resp.Value)
	if err != nil {
		return nil, s.fail(op, err)
	}
	return m, nil
}

// GetLatestEventRequestMessage implements tracking.Reader.
func (s *Store) GetLatestEventRequestMessage(ctx context.Context, eventID string) (*tracking.MessageEntity, error) {
	h, err := s.history(ctx, "GetLatestEventRequestMessage", eventID)
	if err != nil {
		return nil, err
	}
	return tracking.Newest(h, tracking.IsLatestRequestCandidate), nil
}

// GetFailedMessage implements tracking.Reader.
func (s *Store) GetFailedMessage(ctx context.Context, event tracking.EventKey) (*tracking.MessageEntity, error) {
	h, err := s.history(ctx, "GetFailedMessage", event.EventID)
	if err != nil {
		return nil, err
	}
	return tracking.NewestFailedMessage(h, event), nil
}

// GetDeadletteredMessage implements tracking.Reader.
func (s *Store) GetDeadletteredMessage(ctx context.Context, event tracking.EventKey) (*tracking.MessageEntity, error) {
	h, err := s.history(ctx, "GetDeadletteredMessage", event.EventID)
	if err != nil {
		return nil, err
	}
	return tracking.NewestEndpointMessage(h, event), nil
}

// auditDoc is the audit document.
type auditDoc struct {
	ID          string                 `json:"id"`
	EventID     string                 `json:"eventId"`
	EndpointID  string                 `json:"endpointId,omitempty"`
	EventTypeID string                 `json:"eventTypeId,omitempty"`
	Audit       *tracking.MessageAudit `json:"audit"`
	CreatedAt   time.Time              `json:"createdAt"`
	TTL         *int                   `json:"ttl,omitempty"`
}

// StoreMessageAudit implements tracking.Writer with one create under a
// fresh GUID.
func (s *Store) StoreMessageAudit(ctx context.Context, event tracking.EventKey, audit tracking.MessageAudit, eventTypeID string) error {
	const op = "StoreMessageAudit"
	eventID, endpointID := event.EventID, event.EndpointID
	if eventID == "" {
		return fmt.Errorf("cosmostracking: %s: %w: event id is empty", op, tracking.ErrInvalidArgument)
	}
	c, err := s.shared(ctx, op, s.audits)
	if err != nil {
		return err
	}
	audit.AuditTimestamp = tracking.NormalizeTime(audit.AuditTimestamp)
	ttl := AuditTTL
	b, err := json.Marshal(&auditDoc{ID: s.opts.NewID(), EventID: eventID, EndpointID: endpointID, EventTypeID: eventTypeID, Audit: &audit, CreatedAt: s.timeNow(), TTL: &ttl})
	if err != nil {
		return s.fail(op, err)
	}
	if _, err := c.CreateItem(ctx, azcosmos.NewPartitionKeyString(eventID), b, noContent); err != nil {
		return s.fail(op, err)
	}
	return nil
}

// GetMessageAudits implements tracking.Reader: a single-partition query,
// newest createdAt first.
func (s *Store) GetMessageAudits(ctx context.Context, eventID string) ([]tracking.MessageAudit, error) {
	const op = "GetMessageAudits"
	c, err := s.shared(ctx, op, s.audits)
	if err != nil {
		return nil, err
	}
	type row struct {
		created time.Time
		audit   tracking.MessageAudit
	}
	var rows []row
	pk := azcosmos.NewPartitionKeyString(eventID)
	err = query(ctx, c, &pk, "SELECT * FROM c WHERE c.eventId = @eventId", []azcosmos.QueryParameter{{Name: "@eventId", Value: eventID}}, func(b []byte) error {
		var d struct {
			Audit     *tracking.MessageAudit `json:"audit"`
			CreatedAt time.Time              `json:"createdAt"`
		}
		if err := json.Unmarshal(b, &d); err != nil {
			return fmt.Errorf("decoding audit: %w", err)
		}
		if d.Audit != nil {
			rows = append(rows, row{d.CreatedAt, *d.Audit})
		}
		return nil
	})
	if err != nil {
		return nil, s.fail(op, err)
	}
	slices.SortStableFunc(rows, func(a, b row) int { return b.created.Compare(a.created) })
	out := make([]tracking.MessageAudit, len(rows))
	for i, r := range rows {
		out[i] = r.audit
	}
	return out, nil
}
