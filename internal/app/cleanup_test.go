package app

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testlog"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

func timerEnvelope() []byte {
	now := time.Now()
	return hostwire.BuildTimer(hostwire.Timer{FunctionName: FuncInboxCleanup, Last: now.Add(-time.Hour), Next: now, LastUpdated: now, UtcNow: now, RandGUID: "g"})
}

func newCleanupApp(t *testing.T, store inbox.Store, clk *clock, settings map[string]string) (*App, *testlog.Buffer) {
	t.Helper()
	m := map[string]string{
		config.KeyEndpoint: "billing", config.KeyInboxEnabled: "true", config.KeyInboxStore: "InMemory",
		config.KeyResolverSink: "InMemory", config.KeyRetention: "1.00:00:00", config.KeyRetryBaseDelay: "0",
	}
	for k, v := range settings {
		m[k] = v
	}
	cfg, err := config.Load(config.FromMap(m))
	if err != nil {
		t.Fatal(err)
	}
	logs := &testlog.Buffer{}
	reg := subscriber.NewRegistry()
	reg.Handle("OrderPlaced", func(context.Context, *subscriber.Event) (subscriber.Result, error) {
		return subscriber.Completed(), nil
	})
	a, err := New(cfg, Deps{Handlers: reg, Log: zerolog.New(logs), Now: clk.Now, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	return a, logs
}

func TestCleanupPurgesOnlyThisEndpointsExpiredRecords(t *testing.T) {
	clk := &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	mem, _ := inbox.NewMemoryStore(inbox.MemoryOptions{Now: clk.Now, PurgeBatchSize: 10})
	ctx := context.Background()
	for i := range 25 {
		_ = mem.RecordProcessed(ctx, inbox.NewKey("billing", "old-"+string(rune('a'+i))))
		_ = mem.RecordProcessed(ctx, inbox.NewKey("shipping", "old-"+string(rune('a'+i))))
	}
	clk.Advance(25 * time.Hour)
	_ = mem.RecordProcessed(ctx, inbox.NewKey("billing", "recent"))
	a, logs := newCleanupApp(t, mem, clk, nil)
	ta := &testApp{App: a, logs: logs}
	if status, _ := ta.post(t, FuncInboxCleanup, timerEnvelope()); status != 200 {
		t.Fatalf("status %d", status)
	}
	if mem.Len() != 26 { // 25 shipping + 1 recent billing
		t.Fatalf("records left %d, want 26", mem.Len())
	}
	lines := logs.Lines(t)
	if len(lines) != 1 {
		t.Fatalf("%d log lines", len(lines))
	}
	l := lines[0]
	if l["purged"] != float64(25) || l["batches"] != float64(4) || l["drained"] != true || l["outcome"] != "purged" || l["lagSeconds"] != float64(0) {
		t.Fatalf("log line = %v", l)
	}
	if a.Metrics().Get("nimbus.inbox.purged", "") != 25 {
		t.Fatal("purged counter")
	}
}

type failingPurge struct{ inbox.Store }

func (failingPurge) PurgeExpired(context.Context, string, time.Time) (int, error) {
	return 0, errors.New("cosmos 503 at https://acct.documents.azure.com AccountKey=abc")
}

func TestCleanupFailureFailsTheInvocationAndIsCounted(t *testing.T) {
	clk := &clock{now: time.Now()}
	mem, _ := inbox.NewMemoryStore(inbox.MemoryOptions{})
	a, logs := newCleanupApp(t, failingPurge{mem}, clk, nil)
	ta := &testApp{App: a, logs: logs}
	if status, _ := ta.post(t, FuncInboxCleanup, timerEnvelope()); status == 200 {
		t.Fatal("a failed purge answered 200")
	}
	if a.Metrics().Get("nimbus.inbox.operation.failed", "nimbus.store.operation=purge") != 1 {
		t.Fatal("purge failure not counted")
	}
	raw := logs.String()
	if strings.Contains(raw, "AccountKey") || !strings.Contains(raw, "purge_failed") {
		t.Fatalf("log = %s", raw)
	}
}

func TestCleanupWithInboxOffDoesNothing(t *testing.T) {
	a, logs := newCleanupApp(t, nil, &clock{now: time.Now()}, map[string]string{config.KeyInboxEnabled: "false"})
	ta := &testApp{App: a, logs: logs}
	if status, _ := ta.post(t, FuncInboxCleanup, timerEnvelope()); status != 200 {
		t.Fatal(status)
	}
	if l := logs.Lines(t); len(l) != 1 || l[0]["outcome"] != "inbox_off" {
		t.Fatalf("log = %v", l)
	}
}

func TestMalformedTimerEnvelopeFails(t *testing.T) {
	a, logs := newCleanupApp(t, nil, &clock{now: time.Now()}, nil)
	ta := &testApp{App: a, logs: logs}
	if status, _ := ta.post(t, FuncInboxCleanup, []byte(`{"Data":{"timer":[1]},"Metadata":{}}`)); status != 400 {
		t.Fatal(status)
	}
}

// Start-up builds the Azure-backed app without touching the network: the
// host's readiness probe must be answered at once.
func TestAzureBackedAppStartsWithoutNetwork(t *testing.T) {
	cfg, err := config.Load(config.FromMap(map[string]string{
		config.KeyEndpoint: "BillingEndpoint", config.KeyInboxEnabled: "true", config.KeyInboxStore: "Cosmos",
		config.KeyCosmosEndpoint: "https://unreachable.invalid:443/",
		config.KeyServiceBus:     "Endpoint=sb://unreachable.invalid/;SharedAccessKeyName=k;SharedAccessKey=v",
	}))
	if err != nil {
		t.Fatal(err)
	}
	// The hosts do not resolve: any request made here would fail New.
	a, err := New(cfg, Deps{Handlers: subscriber.NewRegistry(), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	if got := a.Functions(); len(got) != 5 {
		t.Fatalf("functions = %v", got)
	}
}

// blockingPurge blocks until its context is cancelled.
type blockingPurge struct {
	inbox.Store
	started chan struct{}
}

func (b blockingPurge) PurgeExpired(ctx context.Context, _ string, _ time.Time) (int, error) {
	close(b.started)
	<-ctx.Done()
	return 0, ctx.Err()
}

func TestShutdownCancelsARunningCleanup(t *testing.T) {
	mem, _ := inbox.NewMemoryStore(inbox.MemoryOptions{})
	store := blockingPurge{Store: mem, started: make(chan struct{})}
	a, logs := newCleanupApp(t, store, &clock{now: time.Now()}, nil)
	ta := &testApp{App: a, logs: logs}
	status := make(chan int, 1)
	go func() {
		s, _ := ta.post(t, FuncInboxCleanup, timerEnvelope())
		status <- s
	}()
	<-store.started
	a.BeginShutdown()
	if s := <-status; s == 200 {
		t.Fatal("a cancelled cleanup answered 200")
	}
	if l := logs.Lines(t); len(l) != 1 || l[0]["outcome"] != "canceled" {
		t.Fatalf("log = %v", l)
	}
}
