// Package cosmostracking is the Cosmos DB message-tracking store, on
// NimBus's documents:
//
//   - one tracking container per endpoint (container id = endpoint id,
//     partition key /id, TTL on without a default, -1), holding one row per
//     event and session: id "{EventId}_{SessionId}" (also the partition key
//     value), status, eventType, sessionId, event (the UnresolvedEvent,
//     PascalCase), deleted and ttl;
//   - the "messages" container (partition key /eventId): one history
//     document per message, id = MessageId, with eventId, endpointId,
//     message and ttl 90 days;
//   - the "audits" container (partition key /eventId): one document per
//     audit, id a fresh GUID, with eventId, endpointId and eventTypeId
//     (left out when empty), audit (AuditType numeric), createdAt and ttl
//     one year.
//
// Every guarded write (Pending or Deferred by a request copy, a handoff
// park or a control request) is a point read then a create (no row) or a
// replace conditioned on the read ETag, with tracking.Allows decided
// between them; a lost race (412 on the replace, 409 on the create, 404
// because the row vanished) is re-read, and after MaxGuardAttempts losses
// the write fails with tracking.ErrConcurrentUpdate, never a refusal.
// Unguarded writes are one upsert. TryCompletePendingMessage is a point
// read then one replace conditioned on its ETag; a 412 is a refusal.
// Writes turn the content response off.
//
// Queries across an endpoint container's partitions use filters only (no
// TOP, ORDER BY, DISTINCT, GROUP BY or aggregates, which the SDK's gateway
// mode cannot serve) and pick the newest or count in Go.
//
// Endpoint ids naming the store's own containers are refused before any
// request (tracking.CheckEndpointID).
package cosmostracking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/tracking"
)

var _ tracking.Store = (*Store)(nil)

// Store is the Cosmos DB tracking store. It is safe for concurrent use.
type Store struct {
	account  *cosmos.Account
	opts     Options
	ttl      int // ttl of unresolved rows
	strong   cosmos.Lazy
	reason   cosmos.StrongReason
	messages *cosmos.Container
	audits   *cosmos.Container

	mu        sync.Mutex
	endpoints map[string]*cosmos.Container
}

var strongReason = cosmos.StrongReason{
	Store:     "the message-tracking store",
	Why:       "lookups must see rows other Resolver instances just wrote, which only Strong guarantees (the guarded writes stay safe either way: they are conditioned on ETags)",
	Accepting: "lookups that may miss a write made moments ago by another instance",
}

// New returns a store on account. It validates a copy of opts and does no
// I/O: each container is checked (and created when AutoCreateContainer)
// on first use, after a once-per-store Strong check unless
// AllowRelaxedConsistency.
func New(account *cosmos.Account, opts Options) (*Store, error) {
	if account == nil {
		return nil, errors.New("cosmostracking: account is required")
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Store{account: account, opts: o, ttl: RetentionTTL(o.UnresolvedRetentionDays), reason: strongReason, endpoints: map[string]*cosmos.Container{}}
	s.reason.RelaxAs = o.RelaxAs
	s.strong.Timeout = o.InitTimeout
	if s.messages, err = s.container(MessagesContainerID, "/eventId"); err != nil {
		return nil, err
	}
	if s.audits, err = s.container(AuditsContainerID, "/eventId"); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Store) container(id, pk string) (*cosmos.Container, error) {
	c, err := s.account.Container(s.containerOptions(id, pk))
	if err != nil {
		return nil, fmt.Errorf("cosmostracking: %w", err)
	}
	return c, nil
}

// containerOptions returns the options of container id, partitioned on
// pk, with TTL on without a default. The Strong check runs once per store
// (ready), not per container.
func (s *Store) containerOptions(id, pk string) cosmos.ContainerOptions {
	o := s.opts.ContainerOptions(cosmos.ContainerSpec{
		ContainerID:      id,
		PartitionKeyPath: pk,
		DefaultTTL:       cosmos.TTLOnNoDefault,
	}, strongReason)
	o.AllowRelaxedConsistency = true
	return o
}

// ready runs the once-per-store Strong check, then c's first-use
// initialization.
func (s *Store) ready(ctx context.Context, c *cosmos.Container) error {
	if !s.opts.AllowRelaxedConsistency {
		if err := s.strong.Do(ctx, func(ctx context.Context) error { return s.account.RequireStrong(ctx, s.reason) }); err != nil {
			return err
		}
	}
	return c.Ready(ctx)
}

// endpoint returns endpointID's ready tracking container. A reserved or
// empty id is refused before any request.
func (s *Store) endpoint(ctx context.Context, op, endpointID string) (*azcosmos.ContainerClient, error) {
	if err := tracking.CheckEndpointID(endpointID); err != nil {
		return nil, fmt.Errorf("cosmostracking: %s: %w", op, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	c := s.endpoints[endpointID]
	if c == nil {
		var err error
		c, err = s.account.Container(s.containerOptions(endpointID, "/id"))
		if err != nil {
			s.mu.Unlock()
			return nil, fmt.Errorf("cosmostracking: %s: endpoint %q: %w: %w", op, endpointID, tracking.ErrInvalidArgument, err)
		}
		s.endpoints[endpointID] = c
	}
	s.mu.Unlock()
	if err := s.ready(ctx, c); err != nil {
		return nil, s.fail(op, err)
	}
	return c.Client(), nil
}

func (s *Store) shared(ctx context.Context, op string, c *cosmos.Container) (*azcosmos.ContainerClient, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.ready(ctx, c); err != nil {
		return nil, s.fail(op, err)
	}
	return c.Client(), nil
}

// fail wraps a provider error as a *tracking.StoreError classified by
// cosmos.Classify, a refused request worded by cosmos.Explain (a 403 names
// the role to assign); cancellation stays recognizable with errors.Is.
func (s *Store) fail(op string, err error) error {
	c := cosmos.Classify(err)
	kind := tracking.FailurePermanent
	switch c.Kind {
	case cosmos.KindThrottled:
		kind = tracking.FailureThrottled
	case cosmos.KindTransient:
		kind = tracking.FailureTransient
	}
	if errors.Is(err, tracking.ErrConcurrentUpdate) {
		kind = tracking.FailureTransient
	}
	return &tracking.StoreError{Op: op, Kind: kind, RetryAfter: c.RetryAfter, Err: cosmos.Explain(err)}
}

// rowDoc is the tracking document as written.
type rowDoc struct {
	ID        string                    `json:"id"`
	Status    string                    `json:"status"`
	EventType *string                   `json:"eventType"`
	SessionID string                    `json:"sessionId"`
	Event     *tracking.UnresolvedEvent `json:"event"`
	Deleted   bool                      `json:"deleted"`
	TTL       *int                      `json:"ttl,omitempty"`
}

// storedRow is the tracking document as read.
type storedRow struct {
	ID        string          `json:"id"`
	Status    string          `json:"status"`
	SessionID string          `json:"sessionId"`
	Event     json.RawMessage `json:"event"`
	Deleted   *bool           `json:"deleted"`
	ETag      azcore.ETag     `json:"_etag"`
}

func (r *storedRow) deleted() bool { return r.Deleted != nil && *r.Deleted }

// visible reports a row GetEvent and GetEventByID may return
// (tracking.Visible); the status as stored decides.
func (r *storedRow) visible() bool {
	st, _ := tracking.ParseResolutionStatus(r.Status)
	return tracking.Visible(st, r.deleted())
}

// hydrate decodes the embedded row and sets its status from the
// top-level status, the write-side authority.
func (r *storedRow) hydrate() (*tracking.UnresolvedEvent, error) {
	st, ok := tracking.ParseResolutionStatus(r.Status)
	if !ok {
		return nil, fmt.Errorf("row %q has unparseable status %q", r.ID, r.Status)
	}
	if len(r.Event) == 0 || string(r.Event) == "null" {
		return nil, fmt.Errorf("row %q has no event", r.ID)
	}
	var e tracking.UnresolvedEvent
	if err := json.Unmarshal(r.Event, &e); err != nil {
		return nil, fmt.Errorf("row %q: decoding event: %w", r.ID, err)
	}
	e.ResolutionStatus = st
	return &e, nil
}

// document builds the tracking document status writes.
func (s *Store) document(status tracking.ResolutionStatus, key tracking.Key, row tracking.UnresolvedEvent) ([]byte, error) {
	row = tracking.NormalizeRow(row)
	d := rowDoc{
		ID:        key.StoredID(),
		Status:    status.String(),
		EventType: row.EventTypeID,
		SessionID: key.SessionID,
		Event:     &row,
	}
	ttl := s.ttl
	if tracking.WrittenDeleted(status) {
		d.Deleted, ttl = true, TerminalTTL
	}
	d.TTL = &ttl
	b, err := json.Marshal(&d)
	if err != nil {
		return nil, fmt.Errorf("encoding row: %w", err)
	}
	return b, nil
}

var noContent = &azcosmos.ItemOptions{EnableContentResponseOnWrite: false}

func ifMatch(etag azcore.ETag) *azcosmos.ItemOptions {
	return &azcosmos.ItemOptions{IfMatchEtag: &etag, EnableContentResponseOnWrite: false}
}

// read point-reads a tracking row; (nil, nil) when it does not exist.
func readRow(ctx context.Context, c *azcosmos.ContainerClient, id string) (*storedRow, error) {
	resp, err := c.ReadItem(ctx, azcosmos.NewPartitionKeyString(id), id, nil)
	if err != nil {
		if cosmos.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	var r storedRow
	if err := json.Unmarshal(resp.Value, &r); err != nil {
		return nil, fmt.Errorf("decoding row %q: %w", id, err)
	}
	if r.ETag == "" {
		r.ETag = resp.ETag
	}
	return &r, nil
}

// uploadOps name each upload as NimBus's store names it, in errors.
var uploadOps = map[tracking.ResolutionStatus]string{
	tracking.Pending:      "UploadPendingMessage",
	tracking.Deferred:     "UploadDeferredMessage",
	tracking.Failed:       "UploadFailedMessage",
	tracking.DeadLettered: "UploadDeadletteredMessage",
	tracking.Unsupported:  "UploadUnsupportedMessage",
	tracking.Skipped:      "UploadSkippedMessage",
	tracking.Completed:    "UploadCompletedMessage",
}

// Upload implements tracking.Writer: an unguarded write is one upsert; a
// guarded one reads the row, asks tracking.Allows, and creates it or
// replaces it conditioned on the read ETag, re-reading after a lost race
// up to MaxGuardAttempts times.
func (s *Store) Upload(ctx context.Context, key tracking.Key, status tracking.ResolutionStatus, row tracking.UnresolvedEvent) (bool, error) {
	if err := tracking.CheckUploadStatus(status); err != nil {
		return false, fmt.Errorf("cosmostracking: Upload: %w", err)
	}
	op := uploadOps[status]
	if key.EventID == "" {
		return false, fmt.Errorf("cosmostracking: %s: %w: event id is empty", op, tracking.ErrInvalidArgument)
	}
	c, err := s.endpoint(ctx, op, key.EndpointID)
	if err != nil {
		return false, err
	}
	doc, err := s.document(status, key, row)
	if err != nil {
		return false, s.fail(op, err)
	}
	id := key.StoredID()
	pk := azcosmos.NewPartitionKeyString(id)
	if !tracking.IsGuarded(status, row.MessageType) {
		if _, err := c.UpsertItem(ctx, pk, doc, noContent); err != nil {
			return false, s.fail(op, err)
		}
		return true, nil
	}
	for attempt := 0; attempt < s.opts.MaxGuardAttempts; attempt++ {
		cur, err := readRow(ctx, c, id)
		if err != nil {
			return false, s.fail(op, err)
		}
		if cur == nil {
			_, err := c.CreateItem(ctx, pk, doc, noContent)
			if err == nil {
				return true, nil
			}
			if cosmos.Classify(err).Kind == cosmos.KindConflict {
				continue // created concurrently: re-read and decide again
			}
			return false, s.fail(op, err)
		}
		stored, err := cur.hydrate()
		if err != nil {
			// Fail closed, as NimBus: a row the guard cannot read is not
			// overwritten by a request-stage copy.
			return false, nil
		}
		if !tracking.Allows(status, &row, stored) {
			return false, nil
		}
		_, err = c.ReplaceItem(ctx, pk, id, doc, ifMatch(cur.ETag))
		if err == nil {
			return true, nil
		}
		switch cosmos.Classify(err).Kind {
		case cosmos.KindPreconditionFailed, cosmos.KindNotFound:
			continue // lost the race (or the row vanished): re-read
		}
		return false, s.fail(op, err)
	}
	return false, s.fail(op, fmt.Errorf("row %q: %w (%d attempts)", id, tracking.ErrConcurrentUpdate, s.opts.MaxGuardAttempts))
}

// TryCompletePendingMessage implements tracking.Store: one point read, then
// one replace conditioned on the read ETag. 404 and a lost race (412, or
// 404 on the replace) are refusals; nothing is retried or created.
func (s *Store) TryCompletePendingMessage(ctx context.Context, key tracking.Key, expected *string, content tracking.UnresolvedEvent) (bool, error) {
	const op = "TryCompletePendingMessage"
	c, err := s.endpoint(ctx, op, key.EndpointID)
	if err != nil {
		return false, err
	}
	id := key.StoredID()
	cur, err := readRow(ctx, c, id)
	if err != nil {
		return false, s.fail(op, err)
	}
	if cur == nil {
		return false, nil
	}
	var last struct {
		LastMessageID *string `json:"LastMessageId"`
	}
	if err := json.Unmarshal(cur.Event, &last); err != nil {
		return false, nil // an unreadable row is not completed blindly
	}
	st, ok := tracking.ParseResolutionStatus(cur.Status)
	if !ok || !tracking.CanCompletePending(st, cur.deleted(), last.LastMessageID, expected) {
		return false, nil
	}
	doc, err := s.document(tracking.Completed, key, content)
	if err != nil {
		return false, s.fail(op, err)
	}
	_, err = c.ReplaceItem(ctx, azcosmos.NewPartitionKeyString(id), id, doc, ifMatch(cur.ETag))
	if err == nil {
		return true, nil
	}
	switch cosmos.Classify(err).Kind {
	case cosmos.KindPreconditionFailed, cosmos.KindNotFound:
		return false, nil
	}
	return false, s.fail(op, err)
}

// RemoveMessage implements tracking.Store: the row is soft-deleted and
// expires in 60 s.
func (s *Store) RemoveMessage(ctx context.Context, key tracking.Key) (bool, error) {
	return s.softDelete(ctx, "RemoveMessage", key, SoftDeletedTTL)
}

// ArchiveFailedEvent implements tracking.Store: the row is soft-deleted
// and expires in 30 days; a missing row is not an error.
func (s *Store) ArchiveFailedEvent(ctx context.Context, key tracking.Key) error {
	_, err := s.softDelete(ctx, "ArchiveFailedEvent", key, ArchivedTTL)
	return err
}

// softDelete sets deleted and ttl on the row with one patch, as NimBus
// does; a missing row answers false.
func (s *Store) softDelete(ctx context.Context, op string, key tracking.Key, ttl int) (bool, error) {
	c, err := s.endpoint(ctx, op, key.EndpointID)
	if err != nil {
		return false, err
	}
	id := key.StoredID()
	var patch azcosmos.PatchOperations
	patch.AppendSet("/deleted", true)
	patch.AppendSet("/ttl", ttl)
	_, err = c.PatchItem(ctx, azcosmos.NewPartitionKeyString(id), id, patch, noContent)
	switch {
	case err == nil:
		return true, nil
	case cosmos.IsNotFound(err):
		return false, nil
	}
	return false, s.fail(op, err)
}

func newGUID() string { return uuid.NewString() }

// timeNow returns the store clock's time, normalized.
func (s *Store) timeNow() time.Time { return tracking.NormalizeTime(s.opts.Now()) }
