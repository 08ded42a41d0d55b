package resolverapp

import (
	"context"
	"sync"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/tracking"
)

// fakeStore is a tracking.Writer for the Service's tests: rows keyed by
// endpoint and stored id, written through the real stale-write guard
// (tracking.Allows), history and audits kept in order, and a hook that can
// fail any call.
type fakeStore struct {
	mu      sync.Mutex
	rows    map[[2]string]tracking.UnresolvedEvent
	history []tracking.MessageEntity
	audits  []fakeAudit
	calls   []string
	// fail, when set, is asked before each call; a non-nil error is
	// returned and nothing is written.
	fail func(op string) error
}

type fakeAudit struct {
	EventID, EndpointID, EventTypeID string
	Audit                            tracking.MessageAudit
}

var _ tracking.Writer = (*fakeStore)(nil)

func newFakeStore() *fakeStore {
	return &fakeStore{rows: map[[2]string]tracking.UnresolvedEvent{}}
}

func (f *fakeStore) enter(op string) error {
	f.calls = append(f.calls, op)
	if f.fail != nil {
		return f.fail(op)
	}
	return nil
}

func (f *fakeStore) StoreMessage(ctx context.Context, m tracking.MessageEntity) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("StoreMessage"); err != nil {
		return err
	}
	for i, h := range f.history {
		if h.EventID == m.EventID && h.MessageID == m.MessageID {
			f.history[i] = m
			return nil
		}
	}
	f.history = append(f.history, m)
	return nil
}

// Upload records its call as the store method NimBus names for status.
func (f *fakeStore) Upload(_ context.Context, k tracking.Key, status tracking.ResolutionStatus, row tracking.UnresolvedEvent) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("Upload" + status.String() + "Message"); err != nil {
		return false, err
	}
	if err := tracking.CheckUploadStatus(status); err != nil {
		return false, err
	}
	if err := tracking.CheckEndpointID(k.EndpointID); err != nil {
		return false, err
	}
	key := [2]string{k.EndpointID, k.StoredID()}
	var cur *tracking.UnresolvedEvent
	if c, ok := f.rows[key]; ok {
		cur = &c
	}
	if !tracking.Allows(status, &row, cur) {
		return false, nil
	}
	row.ResolutionStatus = status
	f.rows[key] = row
	return true, nil
}

func (f *fakeStore) StoreMessageAudit(_ context.Context, event tracking.EventKey, a tracking.MessageAudit, eventTypeID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("StoreMessageAudit"); err != nil {
		return err
	}
	f.audits = append(f.audits, fakeAudit{event.EventID, event.EndpointID, eventTypeID, a})
	return nil
}

func (f *fakeStore) GetEventHistory(_ context.Context, eventID string) ([]tracking.MessageEntity, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("GetEventHistory"); err != nil {
		return nil, err
	}
	var out []tracking.MessageEntity
	// Newest first: the order a store returns is unspecified, and the
	// override must not depend on it.
	for i := len(f.history) - 1; i >= 0; i-- {
		if f.history[i].EventID == eventID {
			out = append(out, f.history[i])
		}
	}
	return out, nil
}

func (f *fakeStore) row(endpointID, eventID, sessionID string) (tracking.UnresolvedEvent, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.rows[[2]string{endpointID, tracking.StoredID(eventID, sessionID)}]
	return r, ok
}

// fakeScheduler records scheduled re-sends.
type fakeScheduler struct {
	mu    sync.Mutex
	sent  []scheduled
	fail  error
	ctxOK bool
}

type scheduled struct {
	R  *Redelivery
	At time.Time
}

func (s *fakeScheduler) ScheduleRedelivery(ctx context.Context, r *Redelivery, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctxOK = ctx.Err() == nil
	if s.fail != nil {
		return s.fail
	}
	s.sent = append(s.sent, scheduled{r, at})
	return nil
}
