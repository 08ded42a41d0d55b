package app

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/funchost"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/retrypolicy"
	"github.com/nimbus-go/functions-subscriber/internal/session"
	"github.com/nimbus-go/functions-subscriber/internal/session/cosmossession"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
)

// FuncDeferredProcessor replays the parked messages of a session: its
// trigger is the endpoint topic's DeferredProcessor subscription.
const FuncDeferredProcessor = "DeferredProcessor"

// buildSessions creates the session-state store the settings select. No
// request is sent here.
func (a *endpointApp) buildSessions() (session.Store, error) {
	switch a.cfg.Session.Store {
	case config.StoreInMemory, "":
		return session.NewMemory(session.MemoryOptions{Now: a.now}), nil
	case config.StoreCosmos:
		c := a.cfg.Inbox.Cosmos
		account, err := a.sharedCosmosAccount(c)
		if err != nil {
			return nil, err
		}
		return cosmossession.New(account, cosmossession.Options{
			StoreOptions: a.inboxStoreOptions(),
			ContainerID:  c.SessionContainerID,
		})
	}
	return nil, fmt.Errorf("app: session-state store %q is not available", a.cfg.Session.Store)
}

// sharedCosmosAccount opens the inbox's account once for every store of
// the endpoint app (inbox and session state share one client).
func (a *endpointApp) sharedCosmosAccount(c config.Cosmos) (*cosmos.Account, error) {
	if a.account != nil {
		return a.account, nil
	}
	acct, err := a.cosmosAccount(c)
	if err != nil {
		return nil, err
	}
	a.account = acct
	return acct, nil
}

// invokeDeferredProcessor handles a replay request: it replays the
// session's parked messages in order and logs one line for the request and
// one per replayed message.
func (a *endpointApp) invokeDeferredProcessor(ctx context.Context, inv *funchost.Invocation) error {
	return a.invokeDelivery(ctx, inv, a.pipeline.Drain)
}

// memDeferred serves parked copies from the in-memory sink (local demos):
// every message kept with To=Deferred, in the order it was sent, until it
// is completed or dead-lettered.
type memDeferred struct {
	sink *resolver.Memory

	mu      sync.Mutex
	done    map[*message.Outgoing]bool
	locked  map[string]bool
	counts  map[*message.Outgoing]int
	letters []*message.Outgoing
}

func newMemDeferred(sink *resolver.Memory) *memDeferred {
	return &memDeferred{sink: sink, done: map[*message.Outgoing]bool{}, locked: map[string]bool{}, counts: map[*message.Outgoing]int{}}
}

func (m *memDeferred) Accept(_ context.Context, sessionID string) (subscriber.DeferredSession, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.locked[sessionID] {
		return nil, subscriber.ErrSessionLocked
	}
	m.locked[sessionID] = true
	return &memDeferredSession{m: m, sid: sessionID, held: map[*message.Outgoing]bool{}}, nil
}

type memDeferredSession struct {
	m    *memDeferred
	sid  string
	held map[*message.Outgoing]bool
}

func (s *memDeferredSession) Next(ctx context.Context) (*subscriber.Parked, error) {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	for i, o := range s.m.sink.Sent() {
		if o.SessionID != s.sid || s.m.done[o] || s.held[o] {
			continue
		}
		if to, _ := o.ApplicationProperties[message.PropTo].(string); to != message.DeferredAddress {
			continue
		}
		s.held[o] = true
		s.m.counts[o]++
		id := fmt.Sprintf("parked-%d", i)
		sid := s.sid
		return &subscriber.Parked{
			Delivery: subscriber.Delivery{
				Broker:     message.Broker{MessageID: &id, SessionID: &sid, CorrelationID: o.CorrelationID, DeliveryCount: s.m.counts[o]},
				Properties: o.ApplicationProperties,
				Body:       o.Body,
			},
			Handle: o,
		}, nil
	}
	return nil, fmt.Errorf("%w in session %q", subscriber.ErrNoParked, s.sid)
}

func (s *memDeferredSession) settle(p *subscriber.Parked, done bool) error {
	o, ok := p.Handle.(*message.Outgoing)
	if !ok {
		return errors.New("app: a parked message not from the in-memory sink")
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	delete(s.held, o)
	if done {
		s.m.done[o] = true
	}
	return nil
}

func (s *memDeferredSession) Complete(_ context.Context, p *subscriber.Parked) error {
	return s.settle(p, true)
}

func (s *memDeferredSession) Abandon(_ context.Context, p *subscriber.Parked) error {
	return s.settle(p, false)
}

func (s *memDeferredSession) DeadLetter(_ context.Context, p *subscriber.Parked, _, _ string) error {
	if err := s.settle(p, true); err != nil {
		return err
	}
	s.m.mu.Lock()
	s.m.letters = append(s.m.letters, p.Handle.(*message.Outgoing))
	s.m.mu.Unlock()
	return nil
}

func (s *memDeferredSession) RenewLock(context.Context) error { return nil }

func (s *memDeferredSession) Close(context.Context) error {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	delete(s.m.locked, s.sid)
	s.held = map[*message.Outgoing]bool{}
	return nil
}

// retryPolicies adapts the configured retry policies to the pipeline: a
// RetryRequest when a policy applies and its retries are not spent, at the
// policy's delay.
type retryPolicies struct{ set *retrypolicy.Set }

func (r retryPolicies) RetryDelay(eventTypeID, errText, endpoint string, retryCount int, rnd float64) (time.Duration, bool) {
	p, ok := r.set.For(eventTypeID, errText, endpoint)
	if !ok || !p.Retries(retryCount) {
		return 0, false
	}
	return p.Delay(retryCount, rnd), true
}
