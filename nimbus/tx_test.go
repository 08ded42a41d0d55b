package nimbus

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

func nopTx(context.Context, *Event, *Tx) (Result, error) { return Completed(), nil }

func byFixedKey(*Event) (string, error) { return "k", nil }

var ledgerContainer = Container{DatabaseID: "Billing", ContainerID: "ledger", PartitionKeyPath: "/customerId"}

func TestHandleTxPanicsOnProgrammingErrors(t *testing.T) {
	cases := []struct {
		name  string
		setup func(a *App)
		c     Container
		pk    PartitionKeyFunc
		h     TxHandlerFunc
		want  string
	}{
		{"nil handler", nil, ledgerContainer, byFixedKey, nil, "nil handler for PaymentReceived"},
		{"nil partition key function", nil, ledgerContainer, nil, nopTx, "nil partition key function"},
		{"no container id", nil, Container{DatabaseID: "Billing", PartitionKeyPath: "/customerId"}, byFixedKey, nopTx, "needs a database and a container"},
		{"no partition key path", nil, Container{DatabaseID: "Billing", ContainerID: "ledger"}, byFixedKey, nopTx, "partition key path"},
		{"a marker property as the path", nil, Container{DatabaseID: "Billing", ContainerID: "ledger", PartitionKeyPath: "/id"}, byFixedKey, nopTx, "a property of the inbox marker"},
		{"registered plain before", func(a *App) { a.Handle("PaymentReceived", nopHandler) }, ledgerContainer, byFixedKey, nopTx, "PaymentReceived is already registered"},
		{"after start", func(a *App) { a.registry(func(string) string { return "" }) }, ledgerContainer, byFixedKey, nopTx, "after the app started"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := New()
			if c.setup != nil {
				c.setup(a)
			}
			wantPanic(t, c.want, func() { a.HandleTx("PaymentReceived", c.c, c.pk, c.h) })
		})
	}
}

// The settings a Container names replace its ids when set, and become
// known setting names.
func TestContainerSettingsReplaceTheIds(t *testing.T) {
	c := ledgerContainer
	c.DatabaseSetting, c.ContainerSetting = "NimBus__Ledger__Db", "NimBus__Ledger__Container"
	settings := map[string]string{"NimBus__Ledger__Db": "Payments"}
	a := New()
	a.HandleTx("PaymentReceived", c, byFixedKey, nopTx)
	if got := strings.Join(a.settingNames(), ","); got != "NimBus__Ledger__Db,NimBus__Ledger__Container" {
		t.Fatalf("setting names %s", got)
	}
	targets := a.registry(func(n string) string { return settings[n] }).Targets()
	if len(targets) != 1 || targets[0].DatabaseID != "Payments" || targets[0].ContainerID != "ledger" || targets[0].PartitionKeyPath != "/customerId" {
		t.Fatalf("targets %+v", targets)
	}
}

// ledgerDoc is a document of the ledger container in the tests.
type ledgerDoc struct {
	ID         string `json:"id"`
	CustomerID string `json:"customerId"`
	Cents      int64  `json:"cents"`
}

// testTx is a Tx on partition "k" of the ledger container of s, and its
// transaction.
func testTx(s txn.Store) (*Tx, *txn.Txn) {
	t := txn.Begin(s, txn.Target{DatabaseID: "Billing", ContainerID: "ledger", PartitionKeyPath: "/customerId"}, "k", nil)
	return &Tx{u: t.Unit()}, t
}

// commit commits t with a marker of msgID.
func commit(t *txn.Txn, msgID string) error {
	_, err := t.Commit(context.Background(), txn.Marker{EndpointID: "BillingEndpoint", MessageID: msgID, Retention: time.Hour})
	return err
}

// seedLedger commits docs to partition "k" of the ledger container of s.
func seedLedger(t *testing.T, s txn.Store, docs ...ledgerDoc) {
	t.Helper()
	tx := txn.Begin(s, txn.Target{DatabaseID: "Billing", ContainerID: "ledger", PartitionKeyPath: "/customerId"}, "k", nil)
	for _, d := range docs {
		if err := tx.Unit().Create(d); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// failingStore fails every request as an unavailable store does.
type failingStore struct{ txn.Store }

func (failingStore) Read(context.Context, txn.Target, string, string) ([]byte, string, bool, error) {
	return nil, "", false, errors.New("503 service unavailable")
}

// Read answers a missing document with ErrNotFound, a found one with its
// ETag; misuse and undecodable documents are Permanent (and the decode
// error quotes no value), an unavailable store Transient.
func TestTxRead(t *testing.T) {
	mem := txn.NewMemory(nil)
	seedLedger(t, mem, ledgerDoc{ID: "b", CustomerID: "k", Cents: 9007199254740993})
	tx, _ := testTx(mem)
	ctx := t.Context()

	var d ledgerDoc
	if etag, err := tx.Read(ctx, "b", &d); err != nil || etag == "" || d.Cents == 0 {
		t.Fatalf("Read of an existing document: %q %+v %v", etag, d, err)
	}
	if etag, err := tx.Read(ctx, "b", nil); err != nil || etag == "" {
		t.Fatalf("Read into nil: %q %v", etag, err)
	}
	if etag, err := tx.Read(ctx, "missing", &d); !errors.Is(err, ErrNotFound) || etag != "" || KindOf(err) != KindFailed {
		t.Fatalf("Read of a missing document: %q %v (kind %v), want ErrNotFound, a plain error", etag, err, KindOf(err))
	}
	var nilDoc *ledgerDoc
	for name, into := range map[string]any{"a struct value": ledgerDoc{}, "a nil pointer": nilDoc, "a map value": map[string]any{}} {
		if _, err := tx.Read(ctx, "b", into); KindOf(err) != KindPermanent {
			t.Errorf("Read into %s: %v (kind %v), want Permanent", name, err, KindOf(err))
		}
	}
	var wrong struct {
		Cents string `json:"cents"`
	}
	_, err := tx.Read(ctx, "b", &wrong)
	var typ *json.UnmarshalTypeError
	if KindOf(err) != KindPermanent || !errors.As(err, &typ) {
		t.Fatalf("Read of a document that does not fit: %v (kind %v)", err, KindOf(err))
	}
	if msg := err.Error(); strings.Contains(msg, "900719925474099") || !strings.Contains(msg, "field cents holds a JSON number, which does not fit string") {
		t.Fatalf("decode error text %q: it must name the field and quote no value", msg)
	}
	if _, err := tx.Read(ctx, "a/b", nil); KindOf(err) != KindPermanent {
		t.Errorf("Read of a bad id: %v (kind %v), want Permanent", err, KindOf(err))
	}
	failing, _ := testTx(failingStore{mem})
	if _, err := failing.Read(ctx, "b", &d); KindOf(err) != KindTransient {
		t.Errorf("Read from an unavailable store: %v (kind %v), want Transient", err, KindOf(err))
	}
}

// The writes queue with their conditions: a nil *WriteOptions is
// unconditional, IfMatch the ETag Read returned; the document's id is the
// one written. A stale ETag conflicts and nothing is applied.
func TestTxWrites(t *testing.T) {
	mem := txn.NewMemory(nil)
	seedLedger(t, mem, ledgerDoc{ID: "r", CustomerID: "k", Cents: 1}, ledgerDoc{ID: "p", CustomerID: "k", Cents: 1},
		ledgerDoc{ID: "d", CustomerID: "k"})
	tx, txt := testTx(mem)
	ctx := t.Context()
	etag, err := tx.Read(ctx, "r", nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"Create":  tx.Create(ledgerDoc{ID: "c", CustomerID: "k", Cents: 5}),
		"Upsert":  tx.Upsert(ledgerDoc{ID: "u", CustomerID: "k", Cents: 6}, nil),
		"Replace": tx.Replace(ledgerDoc{ID: "r", CustomerID: "k", Cents: 7}, &WriteOptions{IfMatch: etag}),
		"Patch":   tx.Patch("p", new(Patch).Increment("/cents", 2), nil),
		"Delete":  tx.Delete("d", &WriteOptions{}),
	} {
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if err := commit(txt, "m-1"); err != nil {
		t.Fatal(err)
	}
	after, _ := testTx(mem)
	for id, cents := range map[string]int64{"c": 5, "u": 6, "r": 7, "p": 3} {
		var d ledgerDoc
		if _, err := after.Read(ctx, id, &d); err != nil || d.Cents != cents {
			t.Errorf("%s after the commit: %+v %v, want %d cents", id, d, err, cents)
		}
	}
	if _, err := after.Read(ctx, "d", nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("d after the commit: %v, want deleted", err)
	}
	stale, staleTxn := testTx(mem)
	if err := stale.Replace(ledgerDoc{ID: "r", CustomerID: "k", Cents: 8}, &WriteOptions{IfMatch: etag}); err != nil {
		t.Fatal(err)
	}
	if err := commit(staleTxn, "m-2"); !errors.Is(err, txn.ErrConflict) {
		t.Fatalf("Replace under a stale ETag: %v, want a conflict", err)
	}
}

// Every registration problem is found at once, after the settings are
// applied: ids Cosmos DB refuses (from the Container or a setting), and
// one container with two partition key paths. A setting whose value the
// settings' own checks already refused is not reported twice.
func TestRegistrationProblems(t *testing.T) {
	a := New()
	a.HandleTx("A", Container{DatabaseID: "Billing", ContainerID: "ledger", PartitionKeyPath: "/customerId"}, byFixedKey, nopTx)
	a.HandleTx("B", Container{DatabaseID: "Billing", ContainerID: "accounts", ContainerSetting: "NimBus__B__Container", PartitionKeyPath: "/accountId"}, byFixedKey, nopTx)
	a.HandleTx("C", Container{DatabaseID: "Billing", ContainerID: "a/b", PartitionKeyPath: "/k"}, byFixedKey, nopTx)
	a.HandleTx("D", Container{DatabaseID: "Billing", DatabaseSetting: "NimBus__D__Db", ContainerID: "d", PartitionKeyPath: "/k"}, byFixedKey, nopTx)
	a.HandleTx("E", Container{DatabaseID: "Billing", ContainerID: "ledger", PartitionKeyPath: "/customerId"}, byFixedKey, nopTx)
	a.Handle("F", nopHandler)
	settings := map[string]string{"NimBus__B__Container": "ledger", "NimBus__D__Db": "x?y#"}
	cfg := inMemoryConfig(t)
	got := a.registrationProblems(cfg, func(n string) string { return settings[n] }, nil)
	want := []string{
		`transactional handler C: container id "a/b" (from its Container) is not a valid Cosmos DB resource id: contains /, \, ? or #`,
		`transactional handler D: database id "x?y#" (from NimBus__D__Db) is not a valid Cosmos DB resource id: contains /, \, ? or #`,
		`container Billing/ledger is registered with different partition key paths: /customerId (A), /accountId (B), /customerId (E); a container has one partition key path`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("problems\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
	reported := []string{`NimBus__D__Db="x?y#" is not usable`}
	if got := a.registrationProblems(cfg, func(n string) string { return settings[n] }, reported); len(got) != 2 || strings.Contains(strings.Join(got, "\n"), "NimBus__D__Db") {
		t.Fatalf("problems %q: the refused setting is reported again", got)
	}
}

// inMemoryConfig is the configuration of an endpoint with the inbox in
// memory.
func inMemoryConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Load(config.FromMap(map[string]string{config.KeyEndpoint: "BillingEndpoint", config.KeyResolverSink: "InMemory",
		config.KeyInboxEnabled: "true", config.KeyInboxStore: "InMemory"}))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// The inbox state comes from the configuration, or from the settings when
// they did not load.
func TestInboxState(t *testing.T) {
	cases := []struct {
		settings                 map[string]string
		endpoint, enabled, known bool
	}{
		{map[string]string{}, true, false, true},
		{map[string]string{"NimBus__Inbox__Enabled": " true "}, true, true, true},
		{map[string]string{"NimBus__Inbox__Enabled": "false"}, true, false, true},
		{map[string]string{"NimBus__Inbox__Enabled": "yes"}, true, false, false},
		{map[string]string{"NimBus__App": "resolver"}, false, false, true},
	}
	for _, c := range cases {
		endpoint, enabled, known := inboxState(nil, func(n string) string { return c.settings[n] })
		if endpoint != c.endpoint || enabled != c.enabled || known != c.known {
			t.Errorf("%v: endpoint %v enabled %v known %v", c.settings, endpoint, enabled, known)
		}
	}
	if endpoint, enabled, known := inboxState(inMemoryConfig(t), func(string) string { return "" }); !endpoint || !enabled || !known {
		t.Errorf("from the configuration: endpoint %v enabled %v known %v", endpoint, enabled, known)
	}
}

// HandleEventTx decodes the event for the partition key function and for
// the handler; an event that does not decode fails permanently with
// Decode's error, before the handler runs.
func TestHandleEventTx(t *testing.T) {
	type payment struct {
		CustomerID  string `json:"CustomerId"`
		AmountCents int64
	}
	var got []payment
	a := New()
	HandleEventTx(a, "PaymentReceived", ledgerContainer, func(p payment) (string, error) { return p.CustomerID, nil },
		func(ctx context.Context, ev *Event, tx *Tx, p payment) (Result, error) {
			got = append(got, p)
			return Completed(), tx.Create(ledgerDoc{ID: "p", CustomerID: tx.PartitionKey(), Cents: p.AmountCents})
		})
	reg := a.handlers["PaymentReceived"].tx
	ev := &Event{EventTypeID: "PaymentReceived", JSON: `{"CustomerId":"k","AmountCents":125}`}
	if pk, err := reg.pk(ev); err != nil || pk != "k" {
		t.Fatalf("partition key %q, %v", pk, err)
	}
	mem := txn.NewMemory(nil)
	tx, _ := testTx(mem)
	if _, err := reg.h(t.Context(), ev, tx); err != nil || len(got) != 1 || got[0] != (payment{"k", 125}) {
		t.Fatalf("handler got %+v, %v", got, err)
	}
	bad := &Event{EventTypeID: "PaymentReceived", JSON: `{"CustomerId":"k","AmountCents":"lots"}`}
	wantText := bad.Decode(&payment{}).Error()
	if _, err := reg.pk(bad); KindOf(err) != KindPermanent || err.Error() != wantText {
		t.Errorf("partition key of an undecodable event: %v, want Decode's %q", err, wantText)
	}
	if _, err := reg.h(t.Context(), bad, tx); KindOf(err) != KindPermanent || err.Error() != wantText || len(got) != 1 {
		t.Errorf("handler of an undecodable event: %v (ran %d times), want Decode's %q", err, len(got), wantText)
	}
	wantPanic(t, "HandleEventTx with a nil handler for X", func() {
		HandleEventTx[payment](New(), "X", ledgerContainer, func(payment) (string, error) { return "", nil }, nil)
	})
	wantPanic(t, "HandleEventTx with a nil partition key function for X", func() {
		HandleEventTx(New(), "X", ledgerContainer, nil, func(context.Context, *Event, *Tx, payment) (Result, error) { return Completed(), nil })
	})
}
