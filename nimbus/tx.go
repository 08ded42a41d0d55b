package nimbus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmosid"
	"github.com/nimbus-go/functions-subscriber/internal/frontdoor"
	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// Container names the Cosmos DB container a transactional handler keeps
// its state in. It lives in the inbox's Cosmos account and is reached with
// the inbox's credentials, so the app needs the inbox on
// (NimBus__Inbox__Enabled=true); with NimBus__Inbox__Store=InMemory it is
// an in-memory container of the process. Its ids, after the settings are
// applied, must be ids Cosmos DB accepts, and one container has one
// PartitionKeyPath in every registration: Run checks both.
//
// The container must have time to live on without a default
// (DefaultTimeToLive -1), so that inbox markers expire while the handler's
// documents do not; a container without it is refused on first use. With
// the inbox's auto-create setting on, a missing container is created with
// PartitionKeyPath and DefaultTimeToLive -1.
type Container struct {
	// DatabaseID and ContainerID are the ids used when the settings below
	// are not set.
	DatabaseID, ContainerID string
	// DatabaseSetting and ContainerSetting, when not empty, name app
	// settings whose values, when set, replace the ids at Run. A name that
	// starts with NimBus__ becomes a known setting.
	DatabaseSetting, ContainerSetting string
	// PartitionKeyPath is the container's partition key path, such as
	// "/customerId". Every document the handler writes carries its
	// partition key value there.
	PartitionKeyPath string
}

// PartitionKeyFunc derives the partition key value of an event, the one
// partition its handler reads and writes. It runs before the duplicate
// check, so it must give every copy of a message the same value (derive it
// from the event's content, never from the delivery). An error or an empty
// value fails the event permanently.
type PartitionKeyFunc func(ev *Event) (string, error)

// TxHandlerFunc handles one event in a unit of work (see HandleTx). It
// returns as a HandlerFunc does; the queued writes are committed only when
// it returns Completed.
type TxHandlerFunc func(ctx context.Context, ev *Event, tx *Tx) (Result, error)

// HandleTx registers h for eventTypeID as a transactional handler on the
// container c: its effects on the container and the record that the
// message was handled commit together, all or nothing, so they are
// applied exactly once.
//
// For every delivery, pk derives the partition; a point read of the
// delivery's inbox marker in that partition runs alongside the inbox
// check, and a marker (or an inbox record) found is a duplicate: the
// handler does not run. The handler reads documents of the partition at
// once and queues writes on tx. When it returns Completed, the writes and
// the creation of the delivery's inbox marker are executed as one
// transactional batch; the inbox document is not written. When another
// copy of the message committed first, the batch fails on the marker and
// the delivery is a duplicate; when one of the writes fails its condition
// (the document exists, is missing, or its ETag changed), nothing is
// applied and h runs again within the invocation, with a new Tx on fresh
// reads, up to 5 times after short jittered waits; when the last run
// conflicts too, the broker redelivers the message after the redelivery
// pause. A failed event, a PendingHandoff or a panic commits nothing.
//
// Only the container's writes are exactly-once: HTTP calls, sends and
// other side effects of the handler stay at-least-once, and they happen
// again on each run after a conflict.
//
// The markers are the inbox's: an app with a transactional handler needs
// NimBus__Inbox__Enabled=true, and Run refuses to start without it. Run
// also refuses container and database ids Cosmos DB would refuse (after
// the settings are applied) and one container registered with two
// partition key paths, listing every problem at once.
//
// HandleTx panics as Handle does, and on a Container without ids or
// with an unusable partition key path, or a nil pk.
func (a *App) HandleTx(eventTypeID string, c Container, pk PartitionKeyFunc, h TxHandlerFunc) {
	a.handleTx("HandleTx", eventTypeID, c, pk, h, h == nil)
}

// HandleEventTx registers h for eventTypeID as HandleTx does, with the
// domain event decoded into a T: pk derives the partition key value from
// it, and h receives it as payload. An event that does not decode fails
// permanently with Event.Decode's error, and neither pk's value nor h is
// used. It panics as HandleTx does.
func HandleEventTx[T any](a *App, eventTypeID string, c Container, pk func(payload T) (string, error),
	h func(ctx context.Context, ev *Event, tx *Tx, payload T) (Result, error)) {
	var keyOf PartitionKeyFunc
	if pk != nil {
		keyOf = func(ev *Event) (string, error) {
			payload, err := decode[T](ev)
			if err != nil {
				return "", err
			}
			return pk(payload)
		}
	}
	a.handleTx("HandleEventTx", eventTypeID, c, keyOf, func(ctx context.Context, ev *Event, tx *Tx) (Result, error) {
		payload, err := decode[T](ev)
		if err != nil {
			return Result{}, err
		}
		return h(ctx, ev, tx, payload)
	}, h == nil)
}

func (a *App) handleTx(fn, eventTypeID string, c Container, pk PartitionKeyFunc, h TxHandlerFunc, nilHandler bool) {
	checkRegistration(fn, eventTypeID, nilHandler)
	if pk == nil {
		panic("nimbus: " + fn + " with a nil partition key function for " + eventTypeID)
	}
	t := txn.Target{DatabaseID: c.DatabaseID, ContainerID: c.ContainerID, PartitionKeyPath: c.PartitionKeyPath}
	if err := t.Validate(); err != nil {
		panic("nimbus: " + fn + " for " + eventTypeID + ": " + err.Error())
	}
	a.register(eventTypeID, registration{tx: &txRegistration{c: c, pk: pk, h: h}})
}

// txRegistration is a transactional handler as registered.
type txRegistration struct {
	c  Container
	pk PartitionKeyFunc
	h  TxHandlerFunc
}

// settings returns the app setting names the registration reads.
func (r *txRegistration) settings() []string {
	var out []string
	for _, s := range []string{r.c.DatabaseSetting, r.c.ContainerSetting} {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// target is r's container with its ids read from settings; dbFrom and
// containerFrom name the setting each id came from ("" for the
// Container's own id).
func (r *txRegistration) target(setting func(string) string) (t txn.Target, dbFrom, containerFrom string) {
	t = txn.Target{DatabaseID: r.c.DatabaseID, ContainerID: r.c.ContainerID, PartitionKeyPath: r.c.PartitionKeyPath}
	if v := setting(r.c.DatabaseSetting); r.c.DatabaseSetting != "" && v != "" {
		t.DatabaseID, dbFrom = v, r.c.DatabaseSetting
	}
	if v := setting(r.c.ContainerSetting); r.c.ContainerSetting != "" && v != "" {
		t.ContainerID, containerFrom = v, r.c.ContainerSetting
	}
	return t, dbFrom, containerFrom
}

// binding is the pipeline's binding of r, its ids read from settings.
func (r *txRegistration) binding(setting func(string) string) subscriber.TxBinding {
	t, _, _ := r.target(setting)
	pk := r.pk
	return subscriber.TxBinding{Target: t, PartitionKey: func(in *subscriber.Event) (string, error) { return pk(newEvent(in)) }}
}

// registrationProblems returns what keeps the transactional registrations
// from running under the settings (setting reads one; cfg is nil when the
// settings did not load), one problem per entry: a database or container
// id Cosmos DB refuses, unless reported (settingProblems mentions its
// setting already); a container registered with two partition key paths;
// transactional handlers in an endpoint app whose inbox is off, since
// their markers are the inbox's and their containers would otherwise be
// kept in process memory.
func (a *App) registrationProblems(cfg *config.Config, setting func(string) string, settingProblems []string) []string {
	a.mu.Lock()
	ids := make([]string, 0, len(a.handlers))
	for id, reg := range a.handlers {
		if reg.tx != nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	regs := make([]*txRegistration, len(ids))
	for i, id := range ids {
		regs[i] = a.handlers[id].tx
	}
	doors := len(a.frontDoors)
	a.mu.Unlock()
	if len(ids) == 0 {
		if endpoint, enabled, known := inboxState(cfg, setting); doors > 0 && endpoint && known && !enabled {
			return []string{fmt.Sprintf("%s is not true, but the app's front doors commit their requests with outbox records, which need the inbox's store; "+
				"set %s=true with %s=%s (or %s for local runs and tests)",
				config.KeyInboxEnabled, config.KeyInboxEnabled, config.KeyInboxStore, config.StoreCosmos, config.StoreInMemory)}
		}
		return nil
	}

	var problems []string
	reported := func(name string) bool {
		return slices.ContainsFunc(settingProblems, func(p string) bool { return strings.Contains(p, name+"=") })
	}
	badID := func(eventTypeID, what, id, from string) {
		err := cosmosid.Check(id)
		if err == nil || (from != "" && reported(from)) {
			return
		}
		src := "its Container"
		if from != "" {
			src = from
		}
		problems = append(problems, fmt.Sprintf("transactional handler %s: %s id %s (from %s) is %v", eventTypeID, what, strconv.Quote(logsafe.BoundTo(id, 64)), src, err))
	}
	type use struct{ eventTypeID, path string }
	uses := map[[2]string][]use{}
	var containers [][2]string
	for i, r := range regs {
		t, dbFrom, containerFrom := r.target(setting)
		badID(ids[i], "database", t.DatabaseID, dbFrom)
		badID(ids[i], "container", t.ContainerID, containerFrom)
		k := [2]string{t.DatabaseID, t.ContainerID}
		if _, seen := uses[k]; !seen {
			containers = append(containers, k)
		}
		uses[k] = append(uses[k], use{ids[i], t.PartitionKeyPath})
	}
	for _, k := range containers {
		us := uses[k]
		if !slices.ContainsFunc(us, func(u use) bool { return u.path != us[0].path }) {
			continue
		}
		list := make([]string, len(us))
		for i, u := range us {
			list[i] = u.path + " (" + u.eventTypeID + ")"
		}
		problems = append(problems, fmt.Sprintf("container %s/%s is registered with different partition key paths: %s; a container has one partition key path",
			logsafe.BoundTo(k[0], 64), logsafe.BoundTo(k[1], 64), strings.Join(list, ", ")))
	}
	if endpoint, enabled, known := inboxState(cfg, setting); endpoint && known && !enabled {
		problems = append(problems, fmt.Sprintf("%s is not true, but the transactional handlers (%s) commit with inbox markers, which need the inbox: "+
			"without it their containers would be kept in process memory, a redelivery would apply an event again and a restart would lose them; "+
			"set %s=true with %s=%s (or %s for local runs and tests)",
			config.KeyInboxEnabled, strings.Join(ids, ", "), config.KeyInboxEnabled, config.KeyInboxStore, config.StoreCosmos, config.StoreInMemory))
	}
	return problems
}

// inboxState reports whether the app is an endpoint and whether its inbox
// is enabled, from cfg or, when the settings did not load, from the two
// settings themselves; known is false when they could not be read (the
// settings' problems then say why).
func inboxState(cfg *config.Config, setting func(string) string) (endpoint, enabled, known bool) {
	if cfg != nil {
		return cfg.App == config.AppEndpoint, cfg.Inbox.Enabled, true
	}
	endpoint = !strings.EqualFold(strings.TrimSpace(setting(config.KeyApp)), string(config.AppResolver))
	raw := strings.TrimSpace(setting(config.KeyInboxEnabled))
	if raw == "" {
		return endpoint, false, true
	}
	enabled, err := strconv.ParseBool(raw)
	return endpoint, enabled, err == nil
}

// adaptTx turns h into the pipeline's transactional handler.
func adaptTx(h TxHandlerFunc) subscriber.TxHandlerFunc {
	return func(ctx context.Context, in *subscriber.Event, u *txn.Unit) (subscriber.Result, error) {
		ev := newEvent(in)
		res, err := h(eventLogContext(ctx, in), ev, &Tx{u: u, ev: ev})
		return toResult(res, err)
	}
}

// Tx is a transactional handler's unit of work, bound to one container and
// one partition of it. Reads run at once; Create, Upsert, Replace, Patch
// and Delete are queued and applied together, all or nothing, after the
// handler returns Completed, and the events Publish queues are committed
// with them. Reads do not see queued writes. The handler
// never executes the batch. A Tx is safe for concurrent use by the
// handler's goroutines while the handler runs.
//
// A Tx is sealed when the handler returns, whatever it returned: every
// later call fails with a Permanent error and does no I/O, and nothing
// queued after the handler returned is ever committed. Once a queuing
// call has failed, the batch can only fail: later reads answer the same
// error without I/O.
//
// A write that carries a document (Create, Upsert, Replace) takes the id
// from the document; a write without one (Patch, Delete) takes the id.
// Conditions go in a *WriteOptions, nil meaning unconditional: an ETag is
// its own type, so it cannot be passed where an id is expected.
//
// A document is a value that encodes as a JSON object with a string "id"
// and the partition key value at the container's partition key path. The
// batch's limits are checked as operations are queued and before the
// batch is sent: at most 99 operations (the inbox markers take the rest
// of Cosmos DB's 100), at most 2 MB of request, ids of at most 255 bytes
// without /, \, ?, #, " or control characters, every document in the
// bound partition. A broken limit is returned as a Permanent error, and
// the batch fails permanently even if the handler ignores it.
//
// When a condition does not hold (an ETag that does not match, a Create
// that meets an existing document, a Replace, Patch or Delete of a missing
// one), nothing is applied and the handler runs again with a new Tx (a
// conflict; see HandleTx).
//
// Cosmos DB stores every JSON number as a double: integers beyond 2^53
// (9007199254740992) lose precision there, so keep amounts within it.
type Tx struct {
	u *txn.Unit
	// ev is the delivered event, through which Publish queues; req, for a
	// front door's unit, the request that Publish queues into; err why a
	// front door's unit could not begin.
	ev  *Event
	req *frontdoor.Request
	err error
}

// ETag is the version of a document as Read returned it, for the IfMatch
// condition of a later write.
type ETag string

// WriteOptions are the conditions of a write. A nil *WriteOptions means
// unconditional.
type WriteOptions struct {
	// IfMatch, when not empty, is the ETag the document must still have
	// when the batch is applied.
	IfMatch ETag
}

// ifMatch is o's ETag condition, "" when there is none.
func (o *WriteOptions) ifMatch() string {
	if o == nil {
		return ""
	}
	return string(o.IfMatch)
}

// ErrNotFound is the error Tx.Read returns for a document that does not
// exist (or has expired). Test for it with errors.Is. Returned by a
// handler unchanged, it fails the event as any plain error does.
var ErrNotFound = errors.New("nimbus: document not found")

// PartitionKey returns the partition key value the unit is bound to.
func (tx *Tx) PartitionKey() string { return tx.u.PartitionKey() }

// Read point-reads document id in the unit's partition, decodes it into
// into (a non-nil pointer, or nil to read only the ETag; system properties
// such as _etag are in the document too), and returns its ETag.
//
// A missing document returns ErrNotFound. An unavailable store gives a
// Transient error; a bad id, an into that is not a pointer, a document
// that does not decode into it, or a Tx that is sealed or has failed give a
// Permanent one. A decode error says where the document did not fit (a
// field and the Go type) without quoting any of its values, so it is safe
// to log, as Event.Decode's.
func (tx *Tx) Read(ctx context.Context, id string, into any) (ETag, error) {
	found, etag, err := tx.u.Read(ctx, id, into)
	var de *txn.DecodeError
	switch {
	case err == nil && !found:
		return "", ErrNotFound
	case err == nil:
		return ETag(etag), nil
	case errors.Is(err, txn.ErrLimit), errors.Is(err, txn.ErrInvalid), errors.Is(err, txn.ErrDone), errors.As(err, &de):
		return "", Permanent(err)
	case ctx.Err() != nil:
		return "", err
	}
	return "", Transient(err)
}

// Create queues the creation of doc; the commit fails as a conflict when
// a document with its id exists.
func (tx *Tx) Create(doc any) error { return queued(tx.u.Create(doc)) }

// Upsert queues the creation of doc, or the replacement of the document
// with its id.
func (tx *Tx) Upsert(doc any, o *WriteOptions) error {
	return queued(tx.u.Upsert(doc, o.ifMatch()))
}

// Replace queues the replacement of the document with doc's id by doc;
// the commit fails as a conflict when it does not exist.
func (tx *Tx) Replace(doc any, o *WriteOptions) error {
	return queued(tx.u.Replace(doc, o.ifMatch()))
}

// Patch queues the patch p of document id; the commit fails as a conflict
// when it does not exist. A patch may not change the partition key.
func (tx *Tx) Patch(id string, p *Patch, o *WriteOptions) error {
	if p == nil {
		p = &Patch{}
	}
	return queued(tx.u.Patch(id, p.p, o.ifMatch()))
}

// Delete queues the deletion of document id; the commit fails as a
// conflict when it does not exist.
func (tx *Tx) Delete(id string, o *WriteOptions) error {
	return queued(tx.u.Delete(id, o.ifMatch()))
}

// queued marks a queuing failure Permanent: a retry queues the same.
func queued(err error) error { return Permanent(err) }

// Patch is a list of at most 10 patch operations on one document, applied
// in order. Paths are JSON pointers such as "/balance" or "/tags/-".
type Patch struct{ p txn.Patch }

// Set sets the value at path, creating the last property.
func (p *Patch) Set(path string, v any) *Patch { p.p.Set(path, v); return p }

// Add inserts v at path: a property, or an array index ("-" appends).
func (p *Patch) Add(path string, v any) *Patch { p.p.Add(path, v); return p }

// Replace replaces the existing value at path by v.
func (p *Patch) Replace(path string, v any) *Patch { p.p.Replace(path, v); return p }

// Remove removes the existing value at path.
func (p *Patch) Remove(path string) *Patch { p.p.Remove(path); return p }

// Increment adds by to the number at path (a missing property is set to
// by).
func (p *Patch) Increment(path string, by int64) *Patch { p.p.Increment(path, by); return p }
