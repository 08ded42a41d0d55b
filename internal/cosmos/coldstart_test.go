package cosmos_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmostest"
)

// sdkAccountRead reports the SDK's read of the account's metadata (not the
// adapter's consistency read).
func sdkAccountRead(req *http.Request) bool {
	return req.Method == http.MethodGet && req.URL.Path == "/" && !cosmostest.IsAdapterRequest(req)
}

// A cold account whose client's first metadata reads fail for about three
// seconds (refused with 503, the connection reset, file descriptors
// exhausted) while the consistency read succeeds serves requests again
// within seconds of the fault ending. azcosmos alone keeps the first
// failure for its 5-minute refresh interval.
func TestColdStartRecoversFromFailedMetadataReads(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Strong")
	const faultFor = 3 * time.Second
	var first atomic.Int64 // unix nanoseconds of the first metadata read
	var metadataReads, faulted atomic.Int64
	failures := []error{
		nil, // a 503 answer
		&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)},
		&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.EMFILE)},
	}
	e.Rec.SetHooks(func(req *http.Request) (*http.Response, error) {
		if !sdkAccountRead(req) {
			return nil, nil
		}
		n := metadataReads.Add(1)
		now := time.Now().UnixNano()
		first.CompareAndSwap(0, now)
		if time.Duration(now-first.Load()) >= faultFor {
			return nil, nil
		}
		faulted.Add(1)
		if err := failures[int(n-1)%len(failures)]; err != nil {
			return nil, err
		}
		return cosmostest.Synth(req, http.StatusServiceUnavailable, nil, `{"code":"ServiceUnavailable"}`), nil
	}, nil)

	c, err := e.Account.Container(cosmos.ContainerOptions{Spec: cosmos.ContainerSpec{
		DatabaseID: e.DB, ContainerID: "cold", PartitionKeyPath: "/id", AutoCreate: true,
	}})
	if err != nil {
		t.Fatal(err)
	}
	// A delivery's Cosmos work, every 50 ms: the first use's checks, then a
	// point read (404: the document does not exist).
	use := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Ready(ctx); err != nil {
			return err
		}
		_, err := c.Client().ReadItem(ctx, azcosmos.NewPartitionKeyString("x"), "x", nil)
		if cosmos.IsNotFound(err) {
			return nil
		}
		return err
	}
	start := time.Now()
	var lastErr error
	failed := 0
	// The SDK would recover after 5 minutes; a bound far below that, and
	// far above what a loaded machine needs, tells the two apart.
	const bound = 90 * time.Second
	for {
		err := use()
		if err == nil {
			break
		}
		lastErr = err
		failed++
		if f := first.Load(); f != 0 && time.Since(time.Unix(0, f)) > faultFor+bound {
			t.Fatalf("still failing %v after the fault ended (%d failed uses, %d rebuilt clients): %v", bound, failed, e.Account.Rebuilds(), lastErr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	f := time.Unix(0, first.Load())
	recovered := time.Since(f) - faultFor
	if faulted.Load() == 0 || failed == 0 {
		t.Fatalf("the fault never hit: %d metadata reads, %d failed uses", metadataReads.Load(), failed)
	}
	if e.Account.Rebuilds() == 0 {
		t.Error("recovered without rebuilding the client")
	}
	// One client per RebuildInterval while the fault lasts, each reading
	// the metadata once (the SDK keeps its failure): a bounded load on an
	// account in trouble.
	if max := int64(faultFor/cosmos.RebuildInterval) + 2; faulted.Load() > max {
		t.Errorf("%d metadata reads during the %v fault, want at most %d", faulted.Load(), faultFor, max)
	}
	t.Logf("fault %v from the first metadata read: %d metadata reads failed, %d uses failed (last: %v), %d clients rebuilt; served again %v after the fault ended (%v after the first use)",
		faultFor, faulted.Load(), failed, lastErr, e.Account.Rebuilds(), recovered.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}
