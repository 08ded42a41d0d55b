package nimbustest

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/message/nimbusmsg"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/resolverapp"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
)

// Message is one message on a topic, as the topic holds it: the endpoint
// topics hold what the endpoint sent, the Manager's requests and the
// copies forwarded to it; the Resolver topic what the Resolver fan-out
// forwarded.
type Message struct {
	// Topic is the endpoint's name, or "Resolver".
	Topic string
	// MessageID is the broker MessageId: the sender's, else one the broker
	// assigned (a forwarded copy keeps it).
	MessageID string
	SessionID string
	// CorrelationID is "" when the message has none.
	CorrelationID string
	// Properties are the application properties (NimBus's: To, From,
	// MessageType, EventId, EventTypeId, ...), with their wire types.
	Properties map[string]any
	Body       []byte
	// EnqueuedAt is when the topic took it (a scheduled message's time).
	EnqueuedAt time.Time

	correlation *string
	seq         int64
}

// Prop returns the application property name as text ("" when absent or
// null).
func (m *Message) Prop(name string) string {
	v, ok := m.Properties[name]
	if !ok || v == nil {
		return ""
	}
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}

// Type is the message's MessageType (EventRequest, ResolutionResponse,
// ErrorResponse, ...).
func (m *Message) Type() string { return m.Prop(message.PropMessageType) }

// EventTypeID is the message's EventTypeId property.
func (m *Message) EventTypeID() string { return m.Prop(message.PropEventTypeID) }

// EventJSON is the event the body carries (EventContent.EventJson), ""
// when it carries none.
func (m *Message) EventJSON() string {
	c, err := message.ParseContent(m.Body)
	if err != nil || c.EventContent == nil || c.EventContent.EventJSON == nil {
		return ""
	}
	return *c.EventContent.EventJSON
}

func (m *Message) wire() nimbusmsg.Message {
	return nimbusmsg.Message{ApplicationProperties: m.Properties, MessageID: m.MessageID, SessionID: m.SessionID,
		CorrelationID: m.correlation, Body: m.Body}
}

// copyWith returns a copy of m with the properties set (a rule's action).
func (m *Message) copyWith(set ...any) *Message {
	c := *m
	c.Properties = make(map[string]any, len(m.Properties)+2)
	for k, v := range m.Properties {
		c.Properties[k] = v
	}
	for i := 0; i+1 < len(set); i += 2 {
		c.Properties[set[i].(string)] = set[i+1]
	}
	return &c
}

// Topic returns the messages of topic (an endpoint's name, or "Resolver"),
// in the order the topic took them. Their properties and bodies are the
// harness's own: read them, do not change them.
func (w *Workflow) Topic(topic string) []Message {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Message, 0, len(w.topics[topic]))
	for _, m := range w.topics[topic] {
		out = append(out, *m)
	}
	return out
}

// DeadLetters returns the messages dead-lettered on endpoint's
// subscriptions (its own, DeferredProcessor and Deferred), in order.
func (w *Workflow) DeadLetters(endpoint string) []Message {
	e := w.endpoint(endpoint)
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Message
	for _, m := range e.main.dead {
		out = append(out, *m)
	}
	for _, m := range e.processor.dead {
		out = append(out, *m)
	}
	for _, p := range e.parked {
		if p.dead {
			out = append(out, *p.msg)
		}
	}
	return out
}

// subscription is one session (or plain) subscription an app receives
// from.
type subscription struct {
	name        string
	receiver    string
	function    string
	sessions    bool
	maxDelivery int
	queue       []*queued
	dead        []*Message
}

type queued struct {
	msg        *Message
	deliveries int
	seq        int64
}

func (s *subscription) remove(q *queued) {
	for i, x := range s.queue {
		if x == q {
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			return
		}
	}
}

type scheduledMessage struct {
	topic string
	msg   *Message
	at    time.Time
	seq   int64
}

func (w *Workflow) addSubscription(topic, name, function string, sessions bool, maxDelivery int) *subscription {
	s := &subscription{name: topic + "/" + name, receiver: topic, function: function, sessions: sessions, maxDelivery: maxDelivery}
	w.subs = append(w.subs, s)
	return s
}

// next returns the message to deliver next: the one enqueued first among
// the heads of the subscriptions. A session's messages are taken in order
// and one at a time; an abandoned message stays at its session's head.
func (w *Workflow) next() (*queued, *subscription) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var best *queued
	var bestSub *subscription
	for _, s := range w.subs {
		if len(s.queue) > 0 && (best == nil || s.queue[0].seq < best.seq) {
			best, bestSub = s.queue[0], s
		}
	}
	return best, bestSub
}

// enqueueDue sends the scheduled messages whose time has come.
func (w *Workflow) enqueueDue() {
	w.mu.Lock()
	defer w.mu.Unlock()
	sort.SliceStable(w.scheduled, func(i, j int) bool {
		if !w.scheduled[i].at.Equal(w.scheduled[j].at) {
			return w.scheduled[i].at.Before(w.scheduled[j].at)
		}
		return w.scheduled[i].seq < w.scheduled[j].seq
	})
	n := 0
	for _, s := range w.scheduled {
		if s.at.After(w.now) {
			break
		}
		s.msg.EnqueuedAt = s.at
		w.sendLocked(s.topic, s.msg, s.at)
		n++
	}
	w.scheduled = w.scheduled[n:]
}

func (w *Workflow) newID(kind string) string {
	w.ids++
	return uuid.NewSHA1(uuid.NameSpaceOID, fmt.Appendf(nil, "nimbustest/%s/%d", kind, w.ids)).String()
}

func (w *Workflow) enqueue(s *subscription, m *Message) {
	w.seq++
	s.queue = append(s.queue, &queued{msg: m, seq: w.seq})
}

// sendLocked puts m on topic at time at and routes it through the topic's
// subscriptions, as NimBus's topology declares them. w.mu is held.
func (w *Workflow) sendLocked(topic string, m *Message, at time.Time) {
	if m.MessageID == "" {
		m.MessageID = w.newID("message")
	}
	w.seq++
	m.Topic, m.EnqueuedAt, m.seq = topic, at, w.seq
	w.topics[topic] = append(w.topics[topic], m)
	if topic == message.ResolverID {
		w.enqueue(w.resolver.sub, m)
		return
	}
	e := w.endpoints[topic]
	to := m.Prop(message.PropTo)
	switch to {
	case e.name:
		w.enqueue(e.main, m)
		// The Resolver fan-out's to-<endpoint> rule: an audit copy.
		w.sendLocked(message.ResolverID, m.copyWith(), at)
	case message.RetryAddress, message.ContinuationAddress:
		w.enqueue(e.main, m.copyWith(message.PropTo, e.name, message.PropFrom, to))
	case message.ResolverID:
		w.sendLocked(message.ResolverID, m.copyWith(message.PropFrom, e.name), at)
	case message.DeferredAddress:
		if m.Prop(message.PropOriginalSessionID) != "" {
			e.parked = append(e.parked, &parkedCopy{msg: m})
		}
	case message.DeferredProcessorAddress:
		w.enqueue(e.processor, m)
	}
	// The forwarding subscriptions: EventTypeId = '<type>' AND From IS
	// NULL → SET From, EventId = newid(), To.
	if v, ok := m.Properties[message.PropFrom]; ok && v != nil {
		return
	}
	typ, ok := m.Properties[message.PropEventTypeID].(string)
	if !ok {
		return
	}
	for _, c := range e.publishes[typ] {
		if c == e.name {
			continue
		}
		w.sendLocked(c, m.copyWith(message.PropFrom, e.name, message.PropEventID, uuid.MustParse(w.newID("event")), message.PropTo, c), at)
	}
}

// fromOutgoing is the message a sender puts on the wire for o.
func fromOutgoing(o *message.Outgoing) *Message {
	m := &Message{MessageID: o.MessageID, SessionID: o.SessionID, correlation: o.CorrelationID, Body: o.Body}
	if o.CorrelationID != nil {
		m.CorrelationID = *o.CorrelationID
	}
	m.Properties = make(map[string]any, len(o.ApplicationProperties))
	for k, v := range o.ApplicationProperties {
		m.Properties[k] = v
	}
	return m
}

// topicPublisher is an endpoint app's sender to its own topic.
type topicPublisher struct {
	w        *Workflow
	endpoint string
}

var (
	_ resolver.BatchPublisher = (*topicPublisher)(nil)
	_ subscriber.Scheduler    = (*topicPublisher)(nil)
)

func (p *topicPublisher) Publish(ctx context.Context, m *message.Outgoing) error {
	return p.PublishBatch(ctx, []*message.Outgoing{m})
}

// PublishBatch sends ms together or, when a send fault is injected,
// refuses them all, as the broker does a batch.
func (p *topicPublisher) PublishBatch(ctx context.Context, ms []*message.Outgoing) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	if err := p.w.faultLocked(p.endpoint, FaultSend); err != nil {
		return err
	}
	for _, o := range ms {
		p.w.sendLocked(p.endpoint, fromOutgoing(o), p.w.now)
	}
	return nil
}

// Schedule enqueues m on the topic at the time at.
func (p *topicPublisher) Schedule(ctx context.Context, m *message.Outgoing, at time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	if err := p.w.faultLocked(p.endpoint, FaultSend); err != nil {
		return err
	}
	p.w.scheduleLocked(p.endpoint, fromOutgoing(m), at)
	return nil
}

func (w *Workflow) scheduleLocked(topic string, m *Message, at time.Time) {
	if !at.After(w.now) {
		w.sendLocked(topic, m, w.now)
		return
	}
	w.seq++
	m.Topic = topic
	w.scheduled = append(w.scheduled, &scheduledMessage{topic: topic, msg: m, at: at, seq: w.seq})
}

// resolverScheduler schedules the Resolver's re-sends on its topic.
type resolverScheduler struct{ w *Workflow }

func (s resolverScheduler) ScheduleRedelivery(ctx context.Context, r *resolverapp.Redelivery, at time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m := &Message{MessageID: r.MessageID, SessionID: r.SessionID, correlation: r.CorrelationID, Body: r.Body, Properties: map[string]any{}}
	if r.CorrelationID != nil {
		m.CorrelationID = *r.CorrelationID
	}
	for k, v := range r.Properties {
		m.Properties[k] = v
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	s.w.scheduleLocked(message.ResolverID, m, at)
	return nil
}

// parkedCopy is a message on an endpoint's Deferred subscription.
type parkedCopy struct {
	msg        *Message
	count      int
	held, done bool
	dead       bool
}

// deferredPort is the Deferred subscription the DeferredProcessor
// replays from: the parked copies of a session, in the order they were
// parked, one replay at a time per session.
type deferredPort struct{ e *endpoint }

func (d deferredPort) Accept(_ context.Context, sessionID string) (subscriber.DeferredSession, error) {
	w := d.e.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if d.e.locked[sessionID] {
		return nil, subscriber.ErrSessionLocked
	}
	d.e.locked[sessionID] = true
	return &deferredSession{e: d.e, sid: sessionID}, nil
}

type deferredSession struct {
	e   *endpoint
	sid string
}

// Next returns the session's next parked copy, or at once ErrNoParked:
// nothing else can park while the replay runs, the harness delivering one
// message at a time.
func (s *deferredSession) Next(ctx context.Context) (*subscriber.Parked, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", subscriber.ErrNoParked, err)
	}
	w := s.e.w
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range s.e.parked {
		if p.msg.SessionID != s.sid || p.done || p.held {
			continue
		}
		p.held = true
		p.count++
		id, sid := p.msg.MessageID, p.sid()
		return &subscriber.Parked{
			Delivery: subscriber.Delivery{
				Broker:     message.Broker{MessageID: &id, SessionID: &sid, CorrelationID: p.msg.correlation, DeliveryCount: p.count, EnqueuedTime: p.msg.EnqueuedAt},
				Properties: p.msg.Properties,
				Body:       p.msg.Body,
			},
			Handle: p,
		}, nil
	}
	return nil, fmt.Errorf("%w in session %q", subscriber.ErrNoParked, s.sid)
}

func (p *parkedCopy) sid() string { return p.msg.SessionID }

func (s *deferredSession) settle(p *subscriber.Parked, done, dead bool) error {
	c, ok := p.Handle.(*parkedCopy)
	if !ok {
		return fmt.Errorf("nimbustest: a parked message not from the Deferred subscription (%T)", p.Handle)
	}
	w := s.e.w
	w.mu.Lock()
	defer w.mu.Unlock()
	c.held = false
	c.done = c.done || done
	c.dead = c.dead || dead
	return nil
}

func (s *deferredSession) Complete(_ context.Context, p *subscriber.Parked) error {
	return s.settle(p, true, false)
}

func (s *deferredSession) Abandon(_ context.Context, p *subscriber.Parked) error {
	return s.settle(p, false, false)
}

func (s *deferredSession) DeadLetter(_ context.Context, p *subscriber.Parked, _, _ string) error {
	return s.settle(p, true, true)
}

func (s *deferredSession) RenewLock(context.Context) error { return nil }

func (s *deferredSession) Close(context.Context) error {
	w := s.e.w
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(s.e.locked, s.sid)
	for _, p := range s.e.parked {
		if p.msg.SessionID == s.sid {
			p.held = false
		}
	}
	return nil
}

// Parked returns endpoint's copies on its Deferred subscription that were
// not replayed yet, in the order they were parked.
func (w *Workflow) Parked(endpoint string) []Message {
	e := w.endpoint(endpoint)
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Message
	for _, p := range e.parked {
		if !p.done {
			out = append(out, *p.msg)
		}
	}
	return out
}
