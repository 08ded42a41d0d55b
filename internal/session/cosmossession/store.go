// Package cosmossession is the Cosmos DB session-state store: one document
// per (endpoint, SessionId) in its own container (partition key /id, no
// TTL), in the Strong account and database the inbox uses.
//
// The document:
//
//	{
//	  "id":           inbox identity hash of (endpoint, SessionId), also the partition key value,
//	  "endpointId":   the endpoint,
//	  "sessionId":    the SessionId,
//	  "updatedAtUtc": last write, UTC, 7-digit fraction,
//	  "state": {                          (NimBus's SessionState names, nulls written)
//	    "BlockedByEventId":     string|null,
//	    "BlockedByMessageId":   string|null,
//	    "NextDeferralSequence": int,
//	    "DeferredCount":        int,
//	    "LastParkedMessageId":  string|null,
//	    "LastParkedSequence":   int,
//	    "NextReplaySequence":   int,
//	    "DrainRequestedAtUtc":  string|null
//	  }
//	}
//
// A read is one point read; a clean 404 is the zero state, any other
// failure an error. A write is one request: a create when the caller read
// no document (409: someone created it first, ErrConflict), otherwise a
// replace with If-Match on the ETag read (412: changed since, ErrConflict;
// a clean 404: deleted since, ErrConflict). Writes turn the content
// response off; the new ETag comes back in the response headers. Nothing
// is ever upserted or deleted, so the sequences never restart.
package cosmossession

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/session"
)

var _ session.Store = (*Store)(nil)

// Store is the Cosmos DB session-state store. It is safe for concurrent
// use.
type Store struct {
	box  *cosmos.Container
	opts Options
}

var strongReason = cosmos.StrongReason{
	Store:     "the session-state store",
	Why:       "whether a session is blocked must be read as the last writer left it, even when another instance wrote it, which only Strong guarantees (writes stay safe either way: they are conditioned on ETags)",
	Accepting: "a delivery that may miss a block written moments ago by another instance and run out of order (a single instance per endpoint, or local development)",
}

// New returns a store on account's client. It validates a copy of opts and
// does no I/O; the first operation checks the account's consistency
// (unless AllowRelaxedConsistency) and ensures the container, once, shared
// by concurrent first uses and retried after a failure.
func New(account *cosmos.Account, opts Options) (*Store, error) {
	if account == nil {
		return nil, errors.New("cosmossession: account is required")
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	box, err := account.Container(o.ContainerOptions(cosmos.ContainerSpec{
		ContainerID:      o.ContainerID,
		PartitionKeyPath: PartitionKeyPath,
		DefaultTTL:       cosmos.TTLOff,
	}, strongReason))
	if err != nil {
		return nil, fmt.Errorf("cosmossession: %w", err)
	}
	return &Store{box: box, opts: o}, nil
}

// timeLayout writes times in UTC with a fixed seven-digit fraction (.NET's
// "O" format).
const timeLayout = "2006-01-02T15:04:05.0000000Z"

// tick is the stored time resolution (one .NET tick).
const tick = 100 * time.Nanosecond

func formatTime(t time.Time) string { return t.UTC().Truncate(tick).Format(timeLayout) }

func normalize(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(tick)
}

// document is the stored document.
type document struct {
	ID           string    `json:"id"`
	EndpointID   string    `json:"endpointId"`
	SessionID    string    `json:"sessionId"`
	UpdatedAtUTC string    `json:"updatedAtUtc"`
	State        *docState `json:"state"`
}

type docState struct {
	BlockedByEventID     *string `json:"BlockedByEventId"`
	BlockedByMessageID   *string `json:"BlockedByMessageId"`
	BlockKind            *string `json:"BlockKind"`
	NextDeferralSequence int64   `json:"NextDeferralSequence"`
	DeferredCount        int64   `json:"DeferredCount"`
	LastParkedMessageID  *string `json:"LastParkedMessageId"`
	LastParkedSequence   int64   `json:"LastParkedSequence"`
	NextReplaySequence   int64   `json:"NextReplaySequence"`
	DrainRequestedAtUTC  *string `json:"DrainRequestedAtUtc"`
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func value(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func encode(k session.Key, s session.State, now time.Time) ([]byte, error) {
	d := document{
		ID:           k.ID,
		EndpointID:   k.EndpointID,
		SessionID:    k.SessionID,
		UpdatedAtUTC: formatTime(now),
		State: &docState{
			BlockedByEventID:     optional(s.BlockedByEventID),
			BlockedByMessageID:   optional(s.BlockedByMessageID),
			BlockKind:            optional(s.BlockKind),
			NextDeferralSequence: s.NextDeferralSequence,
			DeferredCount:        s.DeferredCount,
			LastParkedMessageID:  optional(s.LastParkedMessageID),
			LastParkedSequence:   s.LastParkedSequence,
			NextReplaySequence:   s.NextReplaySequence,
		},
	}
	if !s.DrainRequestedAt.IsZero() {
		v := formatTime(s.DrainRequestedAt)
		d.State.DrainRequestedAtUTC = &v
	}
	return json.Marshal(&d)
}

func parseTime(field string, s *string) (time.Time, error) {
	if s == nil {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %s is not an ISO 8601 timestamp", session.ErrCorrupt, field)
	}
	return t.UTC(), nil
}

func decode(k session.Key, body []byte, etag azcore.ETag) (session.State, error) {
	var d document
	if err := json.Unmarshal(body, &d); err != nil {
		return session.State{}, fmt.Errorf("%w: the document is not JSON of the session-state shape: %w", session.ErrCorrupt, err)
	}
	if d.State == nil || d.ID != k.ID || d.EndpointID != k.EndpointID || d.SessionID != k.SessionID {
		return session.State{}, fmt.Errorf("%w: document %s is not this session's state (is the container shared with another store?)", session.ErrCorrupt, k.ID)
	}
	st := d.State
	s := session.State{
		BlockedByEventID:     value(st.BlockedByEventID),
		BlockedByMessageID:   value(st.BlockedByMessageID),
		BlockKind:            value(st.BlockKind),
		NextDeferralSequence: st.NextDeferralSequence,
		DeferredCount:        st.DeferredCount,
		LastParkedMessageID:  value(st.LastParkedMessageID),
		LastParkedSequence:   st.LastParkedSequence,
		NextReplaySequence:   st.NextReplaySequence,
		Version:              string(etag),
	}
	var err error
	if s.DrainRequestedAt, err = parseTime("DrainRequestedAtUtc", st.DrainRequestedAtUTC); err != nil {
		return session.State{}, err
	}
	if s.UpdatedAt, err = parseTime("updatedAtUtc", &d.UpdatedAtUTC); err != nil {
		return session.State{}, err
	}
	if s.Version == "" {
		return session.State{}, errors.New("the read answered no ETag")
	}
	if err := s.Check(); err != nil {
		return session.State{}, err
	}
	return s, nil
}

func (s *Store) begin(ctx context.Context, key session.Key) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return key.Check()
}

// Read implements session.Store with one point read.
func (s *Store) Read(ctx context.Context, key session.Key) (session.State, error) {
	if err := s.begin(ctx, key); err != nil {
		return session.State{}, err
	}
	if err := s.box.Ready(ctx); err != nil {
		return session.State{}, &session.StoreError{Op: session.OpRead, Err: err}
	}
	resp, err := s.box.Client().ReadItem(ctx, azcosmos.NewPartitionKeyString(key.ID), key.ID, nil)
	switch {
	case err == nil:
	case cosmos.IsNotFound(err):
		return session.State{}, nil
	default:
		return session.State{}, &session.StoreError{Op: session.OpRead, Err: cosmos.Explain(err)}
	}
	st, err := decode(key, resp.Value, resp.ETag)
	if err != nil {
		return session.State{}, &session.StoreError{Op: session.OpRead, Err: err}
	}
	return st, nil
}

// Write implements session.Store with one create (next.Version "") or one
// replace If-Match next.Version.
func (s *Store) Write(ctx context.Context, key session.Key, next session.State) (session.State, error) {
	if err := s.begin(ctx, key); err != nil {
		return session.State{}, err
	}
	if err := next.Check(); err != nil {
		return session.State{}, fmt.Errorf("%w: %w", session.ErrInvalidArgument, err)
	}
	if err := s.box.Ready(ctx); err != nil {
		return session.State{}, &session.StoreError{Op: session.OpWrite, Err: err}
	}
	now := s.opts.Now()
	body, err := encode(key, next, now)
	if err != nil {
		return session.State{}, &session.StoreError{Op: session.OpWrite, Err: err}
	}
	pk := azcosmos.NewPartitionKeyString(key.ID)
	var resp azcosmos.ItemResponse
	if next.Version == "" {
		resp, err = s.box.Client().CreateItem(ctx, pk, body, nil)
	} else {
		etag := azcore.ETag(next.Version)
		resp, err = s.box.Client().ReplaceItem(ctx, pk, key.ID, body, &azcosmos.ItemOptions{IfMatchEtag: &etag})
	}
	if err != nil {
		switch c := cosmos.Classify(err); {
		case c.Kind == cosmos.KindConflict, c.Kind == cosmos.KindPreconditionFailed, c.Kind == cosmos.KindNotFound && next.Version != "":
			return session.State{}, fmt.Errorf("cosmossession: write: %w (%d)", session.ErrConflict, c.Status)
		}
		return session.State{}, &session.StoreError{Op: session.OpWrite, Err: cosmos.Explain(err)}
	}
	if resp.ETag == "" {
		return session.State{}, &session.StoreError{Op: session.OpWrite, Err: errors.New("the write answered no ETag")}
	}
	next.Version = string(resp.ETag)
	next.UpdatedAt = normalize(now)
	next.DrainRequestedAt = normalize(next.DrainRequestedAt)
	return next, nil
}
