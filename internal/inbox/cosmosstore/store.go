// Package cosmosstore is the Cosmos DB inbox provider, wire-compatible with
// NimBus's CosmosInboxStore: one document per (endpoint, MessageId) with
// id = the NimBus identity hash (also the partition key value), fields
// endpointId, messageId and createdAtUtc, in database "MessageDatabase",
// container "inbox", partition key path /id, no default TTL.
//
// A check is a point read (only a clean 404 means "not processed"); a
// record is a create (409 means someone recorded it first, which is
// success); nothing is ever upserted. Purges delete one bounded page of
// expired records with ETag-conditioned deletes, so a record recreated
// between the query and the delete survives.
//
// The account, its authentication, the Strong-consistency check, the
// container get-or-create and error classification are the shared adapter's
// (internal/cosmos); this package holds only the inbox's documents and
// queries. The first operation validates that the account's default
// consistency is Strong (unless AllowRelaxedConsistency) and ensures the
// container; that happens once, concurrent first uses share one attempt,
// and a failed attempt is retried by a later use.
package cosmosstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/inbox"
)

var (
	_ inbox.Store               = (*Store)(nil)
	_ inbox.OldestExpiredFinder = (*Store)(nil)
)

// Store is the Cosmos DB inbox. It is safe for concurrent use.
type Store struct {
	box  *cosmos.Container
	opts Options
}

// strongReason words the operator error of a relaxed account.
var strongReason = cosmos.StrongReason{
	Store:     "the inbox",
	Why:       "a duplicate check must see records other processes wrote, which only Strong guarantees",
	Accepting: "stale duplicate checks (a single consumer per endpoint, or local development)",
}

// document is the inbox document, field for field NimBus's InboxDocument.
type document struct {
	ID           string `json:"id"`
	EndpointID   string `json:"endpointId"`
	MessageID    string `json:"messageId"`
	CreatedAtUTC string `json:"createdAtUtc"`
}

// New returns a store on account's client. It validates a copy of opts and
// does no I/O; the first operation initializes. A relaxed account fails
// every operation with cosmos.ErrRelaxedConsistency, a missing or wrongly
// partitioned container with cosmos.ErrContainer.
func New(account *cosmos.Account, opts Options) (*Store, error) {
	if account == nil {
		return nil, errors.New("cosmosstore: account is required")
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	box, err := account.Container(o.ContainerOptions(cosmos.ContainerSpec{
		ContainerID:      o.ContainerID,
		PartitionKeyPath: PartitionKeyPath,
		IndexingPolicy:   IndexingPolicy(),
		DefaultTTL:       cosmos.TTLOff,
	}, strongReason))
	if err != nil {
		return nil, fmt.Errorf("cosmosstore: %w", err)
	}
	return &Store{box: box, opts: o}, nil
}

// HasProcessed implements inbox.Store with a point read. Only a clean 404
// (document not found) answers false; any other failure is an error.
func (s *Store) HasProcessed(ctx context.Context, key inbox.Key) (bool, error) {
	if err := s.begin(ctx, key); err != nil {
		return false, err
	}
	_, err := s.box.Client().ReadItem(ctx, azcosmos.NewPartitionKeyString(key.ID), key.ID, nil)
	switch {
	case err == nil:
		return true, nil
	case cosmos.IsNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("cosmosstore: %s: %w", inbox.OpCheck, cosmos.Explain(err))
}

// RecordProcessed implements inbox.Store with a create; a 409 (already
// recorded) is success and keeps the first createdAtUtc.
func (s *Store) RecordProcessed(ctx context.Context, key inbox.Key) error {
	if err := s.begin(ctx, key); err != nil {
		return err
	}
	body, err := json.Marshal(document{
		ID:           key.ID,
		EndpointID:   key.EndpointID,
		MessageID:    key.MessageID,
		CreatedAtUTC: formatCreatedAt(s.opts.Now()),
	})
	if err != nil {
		return fmt.Errorf("cosmosstore: %s: %w", inbox.OpRecord, err)
	}
	_, err = s.box.Client().CreateItem(ctx, azcosmos.NewPartitionKeyString(key.ID), body, nil)
	if err == nil || cosmos.Classify(err).Kind == cosmos.KindConflict {
		return nil
	}
	return fmt.Errorf("cosmosstore: %s: %w", inbox.OpRecord, cosmos.Explain(err))
}

// purgeRow is one row of the purge query.
type purgeRow struct {
	ID           string `json:"id"`
	ETag         string `json:"_etag"`
	CreatedAtUTC string `json:"createdAtUtc"`
}

// PurgeExpired implements inbox.Store. It queries endpointID's records
// created before olderThan (exact at the stored 100 ns resolution, for the
// fixed and the trimmed timestamp forms) with a cross-partition
// query the gateway serves (filters only: no TOP, ORDER BY, DISTINCT,
// GROUP BY or aggregates), takes the first non-empty page of at most
// PurgeBatchSize rows (a cross-partition query may answer empty pages
// before a partition with matches), and deletes each row with If-Match on
// its _etag, PurgeDeleteConcurrency at a time. 404 and 412 are benign: the
// record is gone or was recreated and survives. It returns the number
// deleted; on error, the number deleted before it.
func (s *Store) PurgeExpired(ctx context.Context, endpointID string, olderThan time.Time) (int, error) {
	if err := s.beginEndpoint(ctx, endpointID); err != nil {
		return 0, err
	}
	where, params := expiredFilter(endpointID, olderThan)
	var rows []purgeRow
	err := s.firstPage(ctx, "SELECT c.id, c._etag, c.createdAtUtc FROM c WHERE "+where, params, s.opts.PurgeBatchSize, func(items [][]byte) error {
		rows = make([]purgeRow, 0, len(items))
		for _, it := range items {
			var r purgeRow
			if err := json.Unmarshal(it, &r); err != nil {
				return fmt.Errorf("decoding purge row: %w", err)
			}
			rows = append(rows, r)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("cosmosstore: %s: %w", inbox.OpPurge, err)
	}
	n, err := s.deleteRows(ctx, rows, cutoffTick(olderThan))
	if err != nil {
		return n, fmt.Errorf("cosmosstore: %s: %w", inbox.OpPurge, err)
	}
	return n, nil
}

// deleteRows deletes the rows that are verifiably older than cutoff (a
// defensive re-check of the query), with bounded concurrency. The first
// failure other than 404/412 cancels the rest and is returned.
func (s *Store) deleteRows(parent context.Context, rows []purgeRow, cutoff time.Time) (int, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	var (
		deleted  atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
		sem      = make(chan struct{}, s.opts.PurgeDeleteConcurrency)
	)
	for _, r := range rows {
		created, err := parseCreatedAt(r.CreatedAtUTC)
		if err != nil || !created.Before(cutoff) || r.ID == "" {
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func(r purgeRow) {
			defer wg.Done()
			defer func() { <-sem }()
			etag := azcore.ETag(r.ETag)
			_, err := s.box.Client().DeleteItem(ctx, azcosmos.NewPartitionKeyString(r.ID), r.ID, &azcosmos.ItemOptions{IfMatchEtag: &etag})
			switch {
			case err == nil:
				deleted.Add(1)
			case cosmos.IsNotFound(err), cosmos.Classify(err).Kind == cosmos.KindPreconditionFailed:
				// Gone already, or recreated since the query: spared.
			default:
				errOnce.Do(func() { firstErr = err; cancel() })
			}
		}(r)
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = parent.Err()
	}
	return int(deleted.Load()), firstErr
}

// OldestExpired implements inbox.OldestExpiredFinder: the creation time of
// endpointID's oldest record created before olderThan.
//
// Without ORDER BY or MIN (which the gateway cannot serve cross-partition)
// it searches time: existence probes ("is there a record older than t?",
// one row, filters only) step back from olderThan by doubling intervals
// from one minute, bisect the bracket to one second, then read one page
// of the records in that second and take the earliest. Cost: at most
// 2·⌈log2(age/1 min)⌉+9 small queries (about 25 for a day's lag, 35 for a
// month's), each one request per physical partition searched until a
// match; the backlog is never scanned. The answer is exact to within one
// second (exact when that second holds at most 1,000 records).
func (s *Store) OldestExpired(ctx context.Context, endpointID string, olderThan time.Time) (time.Time, bool, error) {
	if err := s.beginEndpoint(ctx, endpointID); err != nil {
		return time.Time{}, false, err
	}
	exists := func(t time.Time) (bool, error) {
		where, params := expiredFilter(endpointID, t)
		found := false
		err := s.firstPage(ctx, "SELECT c.id FROM c WHERE "+where, params, 1, func(items [][]byte) error {
			found = len(items) > 0
			return nil
		})
		return found, err
	}
	fail := func(err error) (time.Time, bool, error) {
		return time.Time{}, false, fmt.Errorf("cosmosstore: oldest expired: %w", err)
	}
	ok, err := exists(olderThan)
	if err != nil {
		return fail(err)
	}
	if !ok {
		return time.Time{}, false, nil
	}
	// hi: a record exists before it; lo: none exists before it.
	hi, lo := olderThan, time.Time{}
	const maxStep = 100 * 365 * 24 * time.Hour
	for step := time.Minute; ; step *= 2 {
		if step > maxStep {
			return fail(errors.New("a record is over 100 years older than the cutoff"))
		}
		t := olderThan.Add(-step)
		ok, err := exists(t)
		if err != nil {
			return fail(err)
		}
		if !ok {
			lo = t
			break
		}
		hi = t
	}
	for hi.Sub(lo) > time.Second {
		mid := lo.Add(hi.Sub(lo) / 2)
		ok, err := exists(mid)
		if err != nil {
			return fail(err)
		}
		if ok {
			hi = mid
		} else {
			lo = mid
		}
	}
	// Every record before hi is at or after lo: take the earliest of one page.
	where, params := expiredFilter(endpointID, hi)
	var oldest time.Time
	err = s.firstPage(ctx, "SELECT c.createdAtUtc FROM c WHERE "+where, params, MaxPurgeBatchSize, func(items [][]byte) error {
		for _, it := range items {
			var r purgeRow
			if err := json.Unmarshal(it, &r); err != nil {
				return err
			}
			if t, err := parseCreatedAt(r.CreatedAtUTC); err == nil && (oldest.IsZero() || t.Before(oldest)) {
				oldest = t
			}
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	if oldest.IsZero() {
		oldest = lo // records vanished meanwhile; lo bounds the answer
	}
	return oldest, true, nil
}

// firstPage runs a cross-partition query and hands the first non-empty page
// (at most pageSize items) to fn; fn is not called if no page has items.
func (s *Store) firstPage(ctx context.Context, query string, params []azcosmos.QueryParameter, pageSize int, fn func(items [][]byte) error) error {
	pager := s.box.Client().NewQueryItemsPager(query, azcosmos.NewPartitionKey(), &azcosmos.QueryOptions{
		QueryParameters: params,
		PageSizeHint:    int32(pageSize),
	})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return err
		}
		if len(page.Items) > 0 {
			return fn(page.Items)
		}
	}
	return nil
}

// begin checks ctx and key, then initializes the store if needed.
func (s *Store) begin(ctx context.Context, key inbox.Key) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if key.ID == "" || inbox.BypassReason(key.EndpointID, &key.MessageID) == inbox.BypassMissing {
		return inbox.ErrInvalidKey
	}
	return s.box.Ready(ctx)
}

func (s *Store) beginEndpoint(ctx context.Context, endpointID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if blankEndpoint(endpointID) {
		return inbox.ErrInvalidKey
	}
	return s.box.Ready(ctx)
}

// blankEndpoint reports an endpoint id that is empty or white space.
func blankEndpoint(endpointID string) bool {
	probe := "m"
	return inbox.BypassReason(endpointID, &probe) == inbox.BypassMissing
}
