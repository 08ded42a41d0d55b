// Package cosmostxn is the Cosmos DB txn.Store: point reads and
// transactional batches through azcosmos, on any container a target names.
//
// Each container is initialized once, on first use, through the shared
// adapter (internal/cosmos): the account's Strong check (unless
// AllowRelaxedConsistency), then the container: created when missing (with
// AutoCreateContainer) with the target's partition key path and time to
// live on without a default (-1), so that markers' item ttl takes effect;
// an existing container must have the target's partition key path and
// time to live on without a default. A container with time to live off
// (a marker there would live for ever) or with a default time to live (the
// handler's documents would expire while their markers live on) is
// refused: every read and commit fails transiently with an operator error
// (wrapping txn.ErrTTLOff or txn.ErrTTLDefault) that names the database,
// the container, its time to live and the setting to make, and nothing is
// written. A failed initialization is retried by the next use, so the
// operator's fix is picked up without a restart.
//
// A batch the service answered is a txn.Result (a 207 is not an error in
// azcosmos: the per-operation results say which one failed). A 408, 429,
// 449 or 5xx answer is a *txn.TransientError; so is a 401 or 403, whose
// error is an operator error naming the role the identity lacks
// (cosmos.Explain). A transport failure, a timeout or an unreadable answer
// after the request was sent is a *txn.AmbiguousError, since the batch may
// have committed. The account's client sends the partition key value as
// ASCII-only JSON, whatever characters it holds (internal/cosmos).
//
// FindPending, the OutboxSweep's search for markers whose events were not
// dispatched, is a cross-partition query the gateway serves (filters only:
// no TOP, ORDER BY, DISTINCT, GROUP BY or aggregates, which the Go SDK
// cannot run across partitions), bounded by its page size and resumed by
// the service's continuation token.
package cosmostxn

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

var _ txn.PendingFinder = (*Store)(nil)

// strongReason words the operator error of a relaxed account.
var strongReason = cosmos.StrongReason{
	Store:     "a transactional handler's container",
	Why:       "the duplicate check before the handler must see markers other processes committed, which only Strong guarantees (the commit itself stays exactly-once)",
	Accepting: "that a copy of a delivery may run its handler before its commit is refused as a duplicate",
}

// Options configures a Store. Its StoreOptions apply to every container
// (AutoCreateContainer, AllowRelaxedConsistency, RelaxAs, InitTimeout);
// the database is the target's, so DatabaseID is not used.
type Options struct {
	cosmos.StoreOptions
}

// Store is the Cosmos DB transactional store. It is safe for concurrent
// use.
type Store struct {
	account *cosmos.Account
	opts    Options

	mu         sync.Mutex
	containers map[string]*cosmos.Container
}

// New returns a store on account's client. It does no I/O.
func New(account *cosmos.Account, opts Options) (*Store, error) {
	if account == nil {
		return nil, errors.New("cosmostxn: account is required")
	}
	if errs := opts.ApplyDefaults("MessageDatabase"); len(errs) > 0 {
		return nil, fmt.Errorf("cosmostxn: invalid options: %w", errors.Join(errs...))
	}
	return &Store{account: account, opts: opts, containers: map[string]*cosmos.Container{}}, nil
}

// container returns target's container, ready for use.
func (s *Store) container(ctx context.Context, t txn.Target) (*cosmos.Container, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	box := s.containers[t.String()]
	if box == nil {
		o := s.opts.StoreOptions
		o.DatabaseID = t.DatabaseID
		var err error
		box, err = s.account.Container(o.ContainerOptions(cosmos.ContainerSpec{
			ContainerID:      t.ContainerID,
			PartitionKeyPath: t.PartitionKeyPath,
			DefaultTTL:       cosmos.TTLOnNoDefault,
			ExactTTL:         true,
		}, strongReason))
		if err != nil {
			s.mu.Unlock()
			return nil, fmt.Errorf("%w: %w", txn.ErrInvalid, err)
		}
		s.containers[t.String()] = box
	}
	s.mu.Unlock()
	if box.Spec().PartitionKeyPath != t.PartitionKeyPath {
		return nil, fmt.Errorf("%w: container %s is used with partition key paths %s and %s", txn.ErrInvalid, t, box.Spec().PartitionKeyPath, t.PartitionKeyPath)
	}
	if err := box.Ready(ctx); err != nil {
		return nil, s.initError(ctx, t, err)
	}
	return box, nil
}

// initError explains a failed initialization. A container whose time to
// live is off, or on with a default, gets its own operator error; every
// other failure (transport, a relaxed account, a missing or wrongly
// partitioned container, a refused request) is transient: nothing was
// written, and a later use retries.
func (s *Store) initError(ctx context.Context, t txn.Target, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var te *cosmos.TTLError
	if errors.As(err, &te) {
		if te.Have == nil {
			return &txn.TransientError{Err: cosmos.OperatorErrorf(
				"%w: container %q in database %q: inbox markers there would never expire; turn time to live on without a default (%s)",
				txn.ErrTTLOff, t.ContainerID, t.DatabaseID, ttlFix)}
		}
		return &txn.TransientError{Err: cosmos.OperatorErrorf(
			"%w: container %q in database %q has a default time to live of %d s: the handler's documents without a ttl property would expire after it while their inbox markers live on, and a redelivery would find a marker for effects that are gone; set time to live on without a default (%s)",
			txn.ErrTTLDefault, t.ContainerID, t.DatabaseID, int32(*te.Have), ttlFix)}
	}
	return &txn.TransientError{Err: err}
}

// ttlFix says how to set a container's time to live on without a default.
const ttlFix = "DefaultTimeToLive -1: az cosmosdb sql container update --ttl -1, or defaultTtl: -1 in Bicep; items without a ttl property then live for ever, markers expire by their own ttl"

// Read implements txn.Store with a point read.
func (s *Store) Read(ctx context.Context, t txn.Target, pk, id string) ([]byte, string, bool, error) {
	box, err := s.container(ctx, t)
	if err != nil {
		return nil, "", false, err
	}
	resp, err := box.Client().ReadItem(ctx, azcosmos.NewPartitionKeyString(pk), id, nil)
	switch {
	case err == nil:
		return resp.Value, string(resp.ETag), true, nil
	case cosmos.IsNotFound(err):
		return nil, "", false, nil
	}
	return nil, "", false, readError(err, "read")
}

// Execute implements txn.Store with one transactional batch.
func (s *Store) Execute(ctx context.Context, t txn.Target, pk string, ops []txn.Op) (txn.Result, error) {
	box, err := s.container(ctx, t)
	if err != nil {
		return txn.Result{}, err
	}
	b := box.Client().NewTransactionalBatch(azcosmos.NewPartitionKeyString(pk))
	for _, op := range ops {
		var o *azcosmos.TransactionalBatchItemOptions
		if op.IfMatch != "" {
			etag := azcore.ETag(op.IfMatch)
			o = &azcosmos.TransactionalBatchItemOptions{IfMatchETag: &etag}
		}
		switch op.Kind {
		case txn.OpCreate:
			b.CreateItem(op.Body, nil)
		case txn.OpUpsert:
			b.UpsertItem(op.Body, o)
		case txn.OpReplace:
			b.ReplaceItem(op.ID, op.Body, o)
		case txn.OpPatch:
			b.PatchItem(op.ID, patchOf(op.Patch), o)
		case txn.OpDelete:
			b.DeleteItem(op.ID, o)
		default:
			return txn.Result{}, fmt.Errorf("%w: operation kind %v", txn.ErrInvalid, op.Kind)
		}
	}
	resp, err := box.Client().ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil {
		return txn.Result{}, batchError(err)
	}
	res := txn.Result{Status: resp.RawResponse.StatusCode, Charge: float64(resp.RequestCharge), Ops: make([]txn.OpResult, len(resp.OperationResults))}
	for i, r := range resp.OperationResults {
		res.Ops[i] = txn.OpResult{Status: int(r.StatusCode), ETag: string(r.ETag)}
	}
	return res, nil
}

// batchError classifies a batch that got no verdict.
func batchError(err error) error {
	status := cosmos.StatusCode(err)
	switch {
	case status == 0 || status < 300 || status == txn.StatusMultiStatus:
		// No answer (transport, timeout, cancellation after sending) or
		// an answer that could not be read: the batch may have committed.
		return &txn.AmbiguousError{Err: err}
	case txn.TransientStatus(status) || status == http.StatusNotFound:
		// Throttled, unavailable, or the container vanished: not applied.
		return &txn.TransientError{Status: status, Err: err}
	}
	if e := cosmos.Explain(err); errors.Is(e, cosmos.ErrAccessDenied) {
		// The identity may not write (a read-only role or key): an
		// operator's fix, not the message's fault.
		return &txn.TransientError{Status: status, Err: e}
	}
	return &txn.RejectedError{Index: -1, Status: status}
}

func patchOf(ops []txn.PatchOp) azcosmos.PatchOperations {
	var p azcosmos.PatchOperations
	for _, o := range ops {
		switch o.Op {
		case txn.PatchSet:
			p.AppendSet(o.Path, o.Value)
		case txn.PatchAdd:
			p.AppendAdd(o.Path, o.Value)
		case txn.PatchReplace:
			p.AppendReplace(o.Path, o.Value)
		case txn.PatchRemove:
			p.AppendRemove(o.Path)
		case txn.PatchIncrement:
			var by int64
			_, _ = fmt.Sscan(string(o.Value), &by)
			p.AppendIncrement(o.Path, by)
		}
	}
	return p
}

// pendingQuery selects an endpoint's markers created before a cutoff whose
// events were not dispatched: those with an outbox whose dispatchedAtUtc
// is not a string (a commit writes null, the mark a timestamp; a marker
// without events has neither property, and a redelivery's read takes a
// missing one as pending). createdAtUtc is always written in the fixed
// seven-digit form, so the string comparison is exact; a marker whose
// createdAtUtc is not in that form is selected whatever its age, for
// txn.PendingPage.Add to place or count unreadable.
const pendingQuery = "SELECT * FROM c WHERE c.type = @type AND c.endpointId = @endpointId" +
	" AND IS_DEFINED(c.outbox) AND NOT IS_STRING(c.dispatchedAtUtc)" +
	" AND (c.createdAtUtc < @olderThan OR NOT IS_STRING(c.createdAtUtc) OR NOT RegexMatch(c.createdAtUtc, @createdAtForm))"

// FindPending implements txn.PendingFinder. It reads pages of the query
// until one holds markers (a cross-partition query may answer empty pages
// before a partition with matches) or the query ends, and returns that
// page with the continuation token as the cursor.
func (s *Store) FindPending(ctx context.Context, t txn.Target, q txn.PendingQuery) (txn.PendingPage, error) {
	if err := txn.CheckPendingQuery(q); err != nil {
		return txn.PendingPage{}, err
	}
	box, err := s.container(ctx, t)
	if err != nil {
		return txn.PendingPage{}, err
	}
	opts := &azcosmos.QueryOptions{
		QueryParameters: []azcosmos.QueryParameter{
			{Name: "@type", Value: txn.MarkerType},
			{Name: "@endpointId", Value: q.EndpointID},
			{Name: "@olderThan", Value: txn.PendingCutoff(q)},
			{Name: "@createdAtForm", Value: txn.CreatedAtPattern},
		},
		PageSizeHint: int32(q.PageSize),
	}
	if q.Cursor != "" {
		cursor := q.Cursor
		opts.ContinuationToken = &cursor
	}
	pager := box.Client().NewQueryItemsPager(pendingQuery, azcosmos.NewPartitionKey(), opts)
	var page txn.PendingPage
	for pager.More() {
		resp, err := pager.NextPage(ctx)
		if err != nil {
			return txn.PendingPage{}, readError(err, "finding pending markers")
		}
		page.Next = ""
		if resp.ContinuationToken != nil {
			page.Next = *resp.ContinuationToken
		}
		if len(resp.Items) == 0 {
			continue
		}
		for _, it := range resp.Items {
			page.Add(t, q, it)
		}
		break
	}
	return page, nil
}

// readError classifies a failed read or query page: transient when the
// service was throttled or unavailable (or the identity may not read, an
// operator's fix), otherwise explained.
func readError(err error, what string) error {
	switch c := cosmos.Classify(err); {
	case c.Kind == cosmos.KindCanceled:
		return err
	case c.Transient():
		return &txn.TransientError{Status: c.Status, Err: err}
	case errors.Is(cosmos.Explain(err), cosmos.ErrAccessDenied):
		return &txn.TransientError{Status: c.Status, Err: cosmos.Explain(err)}
	}
	return fmt.Errorf("cosmostxn: %s: %w", what, cosmos.Explain(err))
}
