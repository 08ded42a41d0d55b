package cosmos_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

// An instance issues as many Cosmos DB requests at once as it has
// invocations in flight times the reads each makes at once (three for a
// transactional delivery): 32 sessions give 96. Every connection such a
// burst opens must stay in the pool for the next one; a pool that keeps
// fewer closes the rest after each request and opens new ones (each a
// TCP and TLS handshake in Azure) for as long as the load lasts.
func TestConnectionsOfAConcurrentBurstAreReusedByTheNext(t *testing.T) {
	t.Parallel()
	const concurrent = 150
	var (
		opened  atomic.Int64
		mu      sync.Mutex
		waiting int
		release = make(chan struct{})
	)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			// Hold every document read until the whole burst is in
			// flight, so that it needs `concurrent` connections at once.
			mu.Lock()
			waiting++
			if waiting == concurrent {
				close(release)
			}
			ch := release
			mu.Unlock()
			select {
			case <-ch:
			case <-time.After(10 * time.Second):
			}
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/" {
			_, _ = w.Write([]byte(`{"id":"acct","writableLocations":[],"readableLocations":[],"userConsistencyPolicy":{"defaultConsistencyLevel":"Strong"}}`))
			return
		}
		_, _ = w.Write([]byte(`{"id":"doc","_etag":"\"1\""}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)

	acct, err := cosmos.NewAccount(cosmos.Config{Endpoint: srv.URL + "/", Key: testenv.CosmosEmulatorKey, Retry: cosmos.DefaultRetry})
	if err != nil {
		t.Fatal(err)
	}
	db, _ := acct.Client().NewDatabase("db")
	c, _ := db.NewContainer("c")
	burst := func() {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, concurrent)
		for i := range concurrent {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if _, err := c.ReadItem(ctx, azcosmos.NewPartitionKeyString("p"), "doc-"+string(rune('a'+i%26)), nil); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	burst()
	first := opened.Load()
	if first < concurrent {
		t.Fatalf("the first burst opened %d connections for %d requests held at once", first, concurrent)
	}
	mu.Lock()
	waiting, release = 0, make(chan struct{})
	mu.Unlock()
	burst()
	if more := opened.Load() - first; more != 0 {
		t.Fatalf("the second burst of %d requests opened %d new connections (the first opened %d): the pool kept only %d of them",
			concurrent, more, first, first-more)
	}
}
