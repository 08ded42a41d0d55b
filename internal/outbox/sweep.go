// Package outbox is the OutboxSweep: it finishes the dispatch of events
// that transactional handlers published and committed, when no delivery
// will finish it.
//
// A transactional delivery stores its published events, and its
// ResolutionResponse, in its inbox marker in the same batch as the
// handler's writes (package txn), then sends them and marks the marker
// dispatched. When the send or the mark fails, the broker redelivers the
// message and that copy finishes the job. Only when no copy comes back (the
// last delivery was dead-lettered after its commit, or the process stopped
// for good) do the events stay in the marker: the sweep finds them, sends
// them with the stored response in one send per marker where they fit,
// and marks the marker dispatched. An event keeps its MessageId on every
// send, so a re-send (the sweep and a late copy racing) is the same message
// for every downstream inbox and for the broker's duplicate detection.
//
// A run is bounded like the inbox cleanup: query pages of PageSize
// markers, a time budget checked between markers, and the caller's
// context (shutdown). A Sweeper kept across runs remembers the markers
// whose send or mark failed and takes them after the others of their
// container on the next run, so markers that keep failing do not spend
// every budget ahead of healthy ones. This package depends on the txn and
// resolver ports only.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// Defaults of a Sweeper.
const (
	// DefaultMinimumAge is how long a marker's events stay with the
	// deliveries before the sweep takes them: long enough for the
	// broker's redelivery of a failed send (whose pause is at most a
	// minute by default) to finish them first.
	DefaultMinimumAge = 5 * time.Minute
	// DefaultPageSize is the most markers one query page holds.
	DefaultPageSize = 100
	// DefaultBudget bounds one run. It leaves a minute of the Functions
	// host's default five-minute timeout.
	DefaultBudget = 4 * time.Minute
	// DefaultCallTimeout bounds each send, mark and query page of a run.
	DefaultCallTimeout = 30 * time.Second
	// maxDeferred bounds how many failed markers a Sweeper remembers
	// across runs; the ones beyond it are taken in query order.
	maxDeferred = 10000
)

// ErrInvalidSweeper reports a Sweeper that cannot run.
var ErrInvalidSweeper = errors.New("outbox: invalid sweeper")

// ErrIncomplete matches the error of a run that left markers pending
// because a send, a mark or a query failed; the report counts them.
var ErrIncomplete = errors.New("outbox: the sweep left markers pending")

// ErrMarkerGone matches the error of a run that sent the events of a
// marker it then found gone (deleted, or expired, between the query and
// the mark): nothing is left to send, but no marker records the dispatch.
// The report counts them (Gone) and names the first (FirstGone).
var ErrMarkerGone = errors.New("outbox: a marker was gone when its events had been sent")

// Sweeper sends the events of one endpoint's markers left undispatched in
// the containers of its transactional handlers. Keep one Sweeper for the
// runs of a process (by pointer): it remembers the markers a run failed on
// (see Run). Its exported fields must not change while a run is under way.
type Sweeper struct {
	// Store holds the markers and finds the pending ones.
	Store txn.PendingFinder
	// Targets are the containers transactional handlers are registered
	// on. None: the run does nothing.
	Targets []txn.Target
	// EndpointID is the endpoint whose markers are swept: its events go
	// out through its own topic only.
	EndpointID string
	// Publisher sends to the endpoint's topic (the sender the responses
	// use); a resolver.BatchPublisher sends a marker's messages in one
	// send where they fit.
	Publisher resolver.Publisher
	// MinimumAge: only markers created at least this long ago (from
	// their createdAtUtc); 0 means DefaultMinimumAge.
	MinimumAge time.Duration
	// Retention is the ttl a marker gets when marked dispatched: the
	// inbox retention, as the markers of deliveries without events have.
	// Required.
	Retention time.Duration
	// PageSize bounds a query page; 0 means DefaultPageSize.
	PageSize int
	// Budget bounds a run; 0 means DefaultBudget. It is checked before
	// each query page and each marker, so a send started in time runs to
	// its end, bounded by CallTimeout: a run ends within Budget plus one
	// bounded call, whatever the caller's context.
	Budget time.Duration
	// CallTimeout bounds each call of a run to the store or the
	// publisher (a query page, a send, a mark): one that takes longer
	// fails and leaves its markers pending. 0 means DefaultCallTimeout.
	CallTimeout time.Duration
	// Clock measures the budget and stamps dispatchedAtUtc; nil means
	// time.Now.
	Clock func() time.Time

	// mu guards deferred: the markers the last runs failed on.
	mu       sync.Mutex
	deferred map[markerKey]deferral
}

// markerKey names a marker across runs.
type markerKey struct {
	target txn.Target
	pk, id string
}

func keyOf(p *txn.Pending) markerKey {
	return markerKey{target: p.Target, pk: p.PartitionKey, id: p.DocumentID()}
}

// deferral is what a run remembers of a marker it failed on: its ETag
// then, and whether its mark found no marker (txn.MarkerGone).
type deferral struct {
	etag string
	gone bool
}

// Report describes one run, as far as it got (also when Run returns an
// error). It holds counts, times and marker document ids (hashes of an
// endpoint and a message id), never a marker's content.
type Report struct {
	EndpointID string
	// Cutoff is now − MinimumAge: markers created before it were swept.
	Cutoff time.Time
	// Containers is the number of containers searched.
	Containers int
	// Pages is the number of query pages read.
	Pages int
	// Found is the number of pending markers found.
	Found int
	// Dispatched is the number of markers whose events this run sent and
	// marked dispatched.
	Dispatched int
	// AlreadyDone is the number of markers this run sent whose mark found
	// them marked (a late copy of the delivery finished them meanwhile).
	AlreadyDone int
	// Gone is the number of markers this run sent whose mark found no
	// marker (txn.MarkerGone): removed or expired since the query. Their
	// events went out; FirstGone is the document id of the first.
	Gone      int
	FirstGone string
	// Events and Responses are the events and ResolutionResponses sent.
	Events    int
	Responses int
	// SendFailed is the number of markers whose send failed; MarkFailed
	// of those sent whose mark failed (sent again by a later run). Both
	// stay pending.
	SendFailed int
	MarkFailed int
	// Unreadable is the number of markers whose outbox does not decode,
	// or that the sweep cannot mark (see txn.DecodePending), or whose mark
	// found no marker in an earlier run while the query still returns it
	// unchanged: left for an operator. FirstUnreadable names the first
	// (its document id and why, never its content).
	Unreadable      int
	FirstUnreadable string
	// Deferred is the number of markers whose send or mark failed in an
	// earlier run of this Sweeper, which this run took after the others
	// of their container, and left pending because it stopped (budget, a
	// failed query) before their turn.
	Deferred int
	// QueryFailed is the number of containers whose query failed.
	QueryFailed int
	// Left is the number of pending markers this run saw and left:
	// SendFailed + MarkFailed + Unreadable + Deferred. More may be left
	// unseen when the run stopped early (StoppedOnBudget, or a failed
	// query).
	Left int
	// OldestLeft is the creation time of the oldest marker this run saw
	// and left (zero when none).
	OldestLeft time.Time
	// Drained reports that every container's query ran to its end.
	Drained bool
	// StoppedOnBudget reports that the budget ran out first.
	StoppedOnBudget bool
	// Elapsed is the run's duration on Clock.
	Elapsed time.Duration
}

// Run sweeps the markers created before now − MinimumAge, container by
// container and page by page, until every query has ended or the budget is
// spent. For each pending marker it sends the events, in publish order,
// then the stored response (resolver.PublishAll), and marks the marker
// dispatched. A failed send or mark leaves the marker pending and the run
// goes on; a failed query ends that container's search. The error is nil
// when nothing was left for a failure, otherwise it matches ErrIncomplete
// and wraps the first failure; a run that left nothing but found markers
// gone at their mark matches ErrMarkerGone.
//
// Runs of one Sweeper resume rather than repeat: a marker whose send or
// mark failed is remembered (up to 10,000), and the next run sends it only
// after the other markers its container's query returns, when the budget
// still allows. A marker whose mark found no marker is not sent again
// while the query returns it with the same ETag: it is counted unreadable. A cancelled ctx stops the run between (and
// inside) sends with ctx's error.
func (s *Sweeper) Run(ctx context.Context, now time.Time) (Report, error) {
	rep := Report{EndpointID: s.EndpointID}
	minAge, pageSize, budget, callTimeout := s.MinimumAge, s.PageSize, s.Budget, s.CallTimeout
	if minAge == 0 {
		minAge = DefaultMinimumAge
	}
	if pageSize == 0 {
		pageSize = DefaultPageSize
	}
	if budget == 0 {
		budget = DefaultBudget
	}
	if callTimeout == 0 {
		callTimeout = DefaultCallTimeout
	}
	switch {
	case s.Store == nil:
		return rep, fmt.Errorf("%w: no store", ErrInvalidSweeper)
	case s.Publisher == nil:
		return rep, fmt.Errorf("%w: no publisher", ErrInvalidSweeper)
	case strings.TrimSpace(s.EndpointID) == "":
		return rep, fmt.Errorf("%w: blank endpoint", ErrInvalidSweeper)
	case s.Retention <= 0:
		return rep, fmt.Errorf("%w: retention %v is not positive", ErrInvalidSweeper, s.Retention)
	case minAge < 0:
		return rep, fmt.Errorf("%w: negative minimum age %v", ErrInvalidSweeper, minAge)
	case pageSize < 1 || pageSize > txn.MaxPendingPageSize:
		return rep, fmt.Errorf("%w: page size %d is not 1 to %d", ErrInvalidSweeper, pageSize, txn.MaxPendingPageSize)
	case budget < 0:
		return rep, fmt.Errorf("%w: negative budget %v", ErrInvalidSweeper, budget)
	case callTimeout < 0:
		return rep, fmt.Errorf("%w: negative call timeout %v", ErrInvalidSweeper, callTimeout)
	}
	clock := s.Clock
	if clock == nil {
		clock = time.Now
	}
	start := clock()
	rep.Cutoff = now.Add(-minAge)
	r := run{s: s, rep: &rep, clock: clock, start: start, budget: budget, callTimeout: callTimeout, pageSize: pageSize,
		prev: s.takeDeferred(), next: map[markerKey]deferral{}, seen: map[markerKey]bool{}, drained: map[txn.Target]bool{}}
	defer r.keepDeferred()
	drained := true
	for _, t := range s.Targets {
		done, err := r.container(ctx, t)
		if err != nil {
			rep.Elapsed = clock().Sub(start)
			return rep, err
		}
		if !done {
			drained = false
		}
		if rep.StoppedOnBudget {
			break
		}
	}
	rep.Drained = drained && !rep.StoppedOnBudget
	if rep.Deferred > 0 {
		r.fail(fmt.Errorf("%d markers whose send or mark failed in an earlier run were left for the next run", rep.Deferred))
	}
	rep.Left = rep.SendFailed + rep.MarkFailed + rep.Unreadable + rep.Deferred
	rep.Elapsed = clock().Sub(start)
	if r.first != nil {
		return rep, fmt.Errorf("%w: %w", ErrIncomplete, r.first)
	}
	if rep.Gone > 0 {
		return rep, fmt.Errorf("%w: %d markers of %s, the first %q, were removed after the run found them and before it marked them dispatched; their events were sent",
			ErrMarkerGone, rep.Gone, s.EndpointID, rep.FirstGone)
	}
	return rep, nil
}

// run is the state of one Run.
type run struct {
	s      *Sweeper
	rep    *Report
	clock  func() time.Time
	start  time.Time
	budget time.Duration
	// callTimeout bounds each store or publisher call.
	callTimeout time.Duration
	pageSize    int
	// first is the first failure that left markers pending.
	first error
	// prev are the markers earlier runs failed on; next the ones to
	// remember after this run; seen the ones this run's queries returned.
	prev, next map[markerKey]deferral
	seen       map[markerKey]bool
	// drained holds the containers whose query this run read to its end.
	drained map[txn.Target]bool
}

// takeDeferred returns the markers the last run remembered.
func (s *Sweeper) takeDeferred() map[markerKey]deferral {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deferred
}

// keepDeferred remembers, for the next run, the markers this run failed
// on or did not reach: every earlier one it did not see again is kept
// too, unless this run saw every marker of its container.
func (r *run) keepDeferred() {
	for k, d := range r.prev {
		if !r.seen[k] && !r.drained[k.target] {
			r.remember(k, d)
		}
	}
	r.s.mu.Lock()
	r.s.deferred = r.next
	r.s.mu.Unlock()
}

// remember keeps k for the next run, up to maxDeferred markers.
func (r *run) remember(k markerKey, d deferral) {
	if len(r.next) < maxDeferred {
		r.next[k] = d
	}
}

// fail records err as the run's first failure.
func (r *run) fail(err error) {
	if r.first == nil {
		r.first = err
	}
}

// call bounds one store or publisher call by the run's call timeout,
// under ctx (whose own end is still told apart by ctx.Err()).
func (r *run) call(ctx context.Context, f func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, r.callTimeout)
	defer cancel()
	return f(cctx)
}

// spent reports (and records) that the budget ran out.
func (r *run) spent() bool {
	if r.clock().Sub(r.start) >= r.budget {
		r.rep.StoppedOnBudget = true
	}
	return r.rep.StoppedOnBudget
}

// container sweeps one container page by page, then the markers earlier
// runs failed on. done reports that its query ran to its end; an error
// (only ctx's) ends the run.
func (r *run) container(ctx context.Context, t txn.Target) (done bool, err error) {
	r.rep.Containers++
	var later []txn.Pending
	defer func() {
		// The failed markers not reached wait for the next run.
		for i := range later {
			r.rep.Found++
			r.rep.Deferred++
			r.left(&later[i])
			r.remember(keyOf(&later[i]), r.prev[keyOf(&later[i])])
		}
	}()
	q := txn.PendingQuery{EndpointID: r.s.EndpointID, OlderThan: r.rep.Cutoff, PageSize: r.pageSize}
	for {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if r.spent() {
			return false, nil
		}
		var page txn.PendingPage
		err := r.call(ctx, func(ctx context.Context) (err error) {
			page, err = r.s.Store.FindPending(ctx, t, q)
			return err
		})
		if err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return false, err
			}
			r.rep.QueryFailed++
			r.fail(fmt.Errorf("finding the pending markers of %s: %w", t, err))
			return false, nil
		}
		r.rep.Pages++
		if page.Unreadable > 0 {
			first := page.FirstUnreadable
			if first == nil {
				first = txn.ErrUnreadableOutbox
			}
			r.unreadable(page.Unreadable, fmt.Errorf("%d unreadable markers of %s, the first: %w", page.Unreadable, t, first))
		}
		for i := range page.Pending {
			p := &page.Pending[i]
			k := keyOf(p)
			r.seen[k] = true
			if d, ok := r.prev[k]; ok {
				if d.gone && d.etag != "" && d.etag == p.ETag {
					// Its mark found no marker, and the query returns
					// it unchanged: sending it again would repeat that.
					r.rep.Found++
					r.left(p)
					r.remember(k, d)
					r.unreadable(1, fmt.Errorf("%w: marker %q in container %s: an earlier run sent its events and its mark found no document at its id; it is left unsent until it is repaired or removed",
						txn.ErrUnreadableOutbox, k.id, t))
					continue
				}
				later = append(later, *p)
				continue
			}
			if err := ctx.Err(); err != nil {
				return false, err
			}
			if r.spent() {
				return false, nil
			}
			if err := r.marker(ctx, p); err != nil {
				return false, err
			}
		}
		if page.Next == "" {
			break
		}
		q.Cursor = page.Next
	}
	r.drained[t] = true
	// The healthy markers had their turn: now the ones that failed before.
	for len(later) > 0 {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if r.spent() {
			return false, nil
		}
		p := later[0]
		later = later[1:]
		if err := r.marker(ctx, &p); err != nil {
			return false, err
		}
	}
	return true, nil
}

// unreadable counts n unreadable markers, err naming the first.
func (r *run) unreadable(n int, err error) {
	r.rep.Unreadable += n
	if r.rep.FirstUnreadable == "" {
		r.rep.FirstUnreadable = err.Error()
	}
	r.fail(err)
}

// marker sends p's messages and marks p dispatched. A failure is counted
// and leaves p pending; only ctx's error is returned.
func (r *run) marker(ctx context.Context, p *txn.Pending) error {
	r.rep.Found++
	if err := r.call(ctx, func(ctx context.Context) error {
		return resolver.PublishAll(ctx, r.s.Publisher, p.Messages())
	}); err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return err
		}
		r.rep.SendFailed++
		r.left(p)
		r.remember(keyOf(p), deferral{etag: p.ETag})
		r.fail(fmt.Errorf("sending the events of a marker in %s: %w", p.Target, err))
		return nil
	}
	r.rep.Events += len(p.Events)
	if p.Response != nil {
		r.rep.Responses++
	}
	var marked txn.MarkResult
	err := r.call(ctx, func(ctx context.Context) (err error) {
		marked, err = txn.MarkDispatched(ctx, r.s.Store, p, r.s.Retention, r.clock())
		return err
	})
	switch {
	case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return err
	case err != nil:
		r.rep.MarkFailed++
		r.left(p)
		r.remember(keyOf(p), deferral{etag: p.ETag})
		r.fail(fmt.Errorf("marking a marker of %s dispatched: %w", p.Target, err))
	case marked == txn.Marked:
		r.rep.Dispatched++
	case marked == txn.MarkerGone:
		r.rep.Gone++
		if r.rep.FirstGone == "" {
			r.rep.FirstGone = p.DocumentID()
		}
		r.remember(keyOf(p), deferral{etag: p.ETag, gone: true})
	default:
		r.rep.AlreadyDone++
	}
	return nil
}

// left records p as seen and left pending.
func (r *run) left(p *txn.Pending) {
	if r.rep.OldestLeft.IsZero() || p.CreatedAt.Before(r.rep.OldestLeft) {
		r.rep.OldestLeft = p.CreatedAt
	}
}
