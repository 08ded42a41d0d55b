package cosmosstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmostest"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/inbox/cosmosstore"
	"github.com/nimbus-go/functions-subscriber/internal/inbox/inboxtest"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
)

// faultEnv is a store reaching the local server through a fault proxy,
// with SDK retries on (short delays) so errors are what is left after them.
type faultEnv struct {
	proxy *testenv.FaultProxy
	store *cosmosstore.Store
	clock *inboxtest.Clock
	seen  inbox.Key // recorded before faults start
}

func newFaultEnv(t *testing.T, opts testenv.FaultProxyOptions) *faultEnv {
	t.Helper()
	// The faults are the proxy's; the package's server behind it stays
	// sound, and the test keeps to a database of its own.
	srv := testenv.SharedCosmos(t, testenv.CosmosOptions{Consistency: "Strong"})
	opts.Disabled = true
	proxy := testenv.StartFaultProxy(t, srv.Endpoint, opts)
	acct, err := cosmos.NewAccount(cosmos.Config{
		Endpoint: proxy.URL,
		Key:      srv.Key,
		Retry:    policy.RetryOptions{MaxRetries: 2, RetryDelay: 5 * time.Millisecond, MaxRetryDelay: 20 * time.Millisecond},
		ClientOptions: &azcosmos.ClientOptions{ClientOptions: azcore.ClientOptions{
			Transport: &http.Client{Timeout: 10 * time.Second},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(acct.Close)
	clock := inboxtest.NewClock(inboxtest.Epoch)
	s, err := cosmosstore.New(acct, cosmosstore.Options{StoreOptions: cosmos.StoreOptions{DatabaseID: srv.Database(t), Now: clock.Now}})
	if err != nil {
		t.Fatal(err)
	}
	seen := inbox.NewKey("billing", "seen")
	if err := s.RecordProcessed(context.Background(), seen); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	return &faultEnv{proxy: proxy, store: s, clock: clock, seen: seen}
}

// Every kind of injected fault surfaces as an error from every operation:
// never as "processed" or "not processed".
func TestInjectedFaultsSurfaceAsErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("the SDK's retries against every fault kind take about 17 s: the full suite (without -short) runs it")
	}
	for _, kind := range []testenv.FaultKind{testenv.FaultUnavailable, testenv.FaultThrottle, testenv.FaultDrop} {
		t.Run(kind.String(), func(t *testing.T) {
			t.Parallel()
			fe := newFaultEnv(t, testenv.FaultProxyOptions{Seed: 1, Rate: 1, Kinds: []testenv.FaultKind{kind}})
			fe.proxy.SetEnabled(true)
			ctx := context.Background()
			unseen := inbox.NewKey("billing", "unseen")
			if ok, err := fe.store.HasProcessed(ctx, fe.seen); err == nil {
				t.Errorf("check of a recorded key answered %v without error", ok)
			}
			if ok, err := fe.store.HasProcessed(ctx, unseen); err == nil {
				t.Errorf("check of an unrecorded key answered %v without error", ok)
			}
			if err := fe.store.RecordProcessed(ctx, unseen); err == nil {
				t.Error("record succeeded")
			}
			if n, err := fe.store.PurgeExpired(ctx, "billing", fe.clock.Now()); err == nil {
				t.Errorf("purge deleted %d without error", n)
			}
			if _, _, err := fe.store.OldestExpired(ctx, "billing", fe.clock.Now()); err == nil {
				t.Error("oldest-expired answered without error")
			}
			c := fe.proxy.Counts()
			if c.Injected() < 5 || c.Forwarded != c.Requests-c.Injected() {
				t.Fatalf("proxy counts %+v", c)
			}
			if kind == testenv.FaultThrottle && c.Throttled < 5*3 {
				t.Errorf("%d throttles: SDK retries did not run", c.Throttled)
			}
			// Faults off: the data is as before.
			fe.proxy.SetEnabled(false)
			if ok, err := fe.store.HasProcessed(ctx, fe.seen); err != nil || !ok {
				t.Fatalf("recorded key: %v, %v", ok, err)
			}
			if ok, err := fe.store.HasProcessed(ctx, unseen); err != nil || ok {
				t.Fatalf("unrecorded key: %v, %v", ok, err)
			}
		})
	}
}

// A create whose response is lost may have been applied; recording again
// succeeds (409 is success) and the first timestamp stays.
func TestLostCreateResponseThenRetryIsIdempotent(t *testing.T) {
	t.Parallel()
	fe := newFaultEnv(t, testenv.FaultProxyOptions{Seed: 1, Rate: 1, Kinds: []testenv.FaultKind{testenv.FaultDropAfterForward},
		Match: func(r *http.Request) bool { return r.Method == http.MethodPost }})
	ctx := context.Background()
	k := inbox.NewKey("billing", "ambiguous")
	fe.proxy.SetEnabled(true)
	if err := fe.store.RecordProcessed(ctx, k); err == nil {
		t.Fatal("record with a lost response succeeded")
	}
	fe.proxy.SetEnabled(false)
	if ok, err := fe.store.HasProcessed(ctx, k); err != nil || !ok {
		t.Fatalf("the create was applied upstream: HasProcessed = %v, %v", ok, err)
	}
	fe.clock.Advance(time.Hour)
	if err := fe.store.RecordProcessed(ctx, k); err != nil {
		t.Fatal(err)
	}
	// The first timestamp stayed: a cutoff between the two instants purges it.
	if n, err := fe.store.PurgeExpired(ctx, "billing", fe.clock.Now().Add(-time.Minute)); err != nil || n != 2 {
		t.Fatalf("purge = %d, %v; want the two records created before the cutoff", n, err)
	}
}

// Under a random share of faults, every answer is correct or an error.
func TestRandomFaultsNeverGiveAWrongAnswer(t *testing.T) {
	t.Parallel()
	fe := newFaultEnv(t, testenv.FaultProxyOptions{Seed: 99, Rate: 0.4, Kinds: []testenv.FaultKind{testenv.FaultUnavailable, testenv.FaultThrottle},
		Match: func(r *http.Request) bool { return strings.Contains(r.URL.Path, "/docs") }})
	ctx := context.Background()
	var recorded []inbox.Key
	for i := range 20 {
		k := inbox.NewKey("billing", fmt.Sprint("r", i))
		if err := fe.store.RecordProcessed(ctx, k); err != nil {
			t.Fatal(err)
		}
		recorded = append(recorded, k)
	}
	fe.proxy.SetEnabled(true)
	var answers, failures int
	for i := range 200 {
		k, want := recorded[i%len(recorded)], true
		if i%2 == 1 {
			k, want = inbox.NewKey("billing", fmt.Sprint("u", i)), false
		}
		ok, err := fe.store.HasProcessed(ctx, k)
		if err != nil {
			failures++
			continue
		}
		answers++
		if ok != want {
			t.Fatalf("HasProcessed(%q) = %v under faults, want %v", k.MessageID, ok, want)
		}
	}
	c := fe.proxy.Counts()
	t.Logf("%d answers, %d errors; proxy %+v", answers, failures, c)
	if c.Injected() == 0 || answers == 0 {
		t.Fatalf("the test exercised nothing: %+v", c)
	}
}

// Failures the proxy cannot produce, answered at the transport: each is an
// error, never a verdict. Only a clean 404 on a read means "not processed".
func TestResponseFailuresAreErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		status  int
		headers map[string]string
	}{
		{"unauthorized", http.StatusUnauthorized, nil},
		{"forbidden", http.StatusForbidden, nil},
		{"container gone (404/1003)", http.StatusNotFound, map[string]string{"x-ms-substatus": "1003"}},
		{"read session unavailable (404/1002)", http.StatusNotFound, map[string]string{"x-ms-substatus": "1002"}},
		{"request timeout", http.StatusRequestTimeout, nil},
		{"internal error", http.StatusInternalServerError, nil},
		{"unavailable", http.StatusServiceUnavailable, nil},
		{"throttled", http.StatusTooManyRequests, map[string]string{"x-ms-retry-after-ms": "1"}},
	}
	e := newEnv(t, "Strong")
	clock := inboxtest.NewClock(inboxtest.Epoch)
	s := e.store(t, cosmosstore.Options{StoreOptions: cosmos.StoreOptions{Now: clock.Now}})
	ctx := context.Background()
	seen := inbox.NewKey("billing", "seen")
	if err := s.RecordProcessed(ctx, seen); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fail := func(req *http.Request) (*http.Response, error) {
				if strings.Contains(req.URL.Path, "/docs") {
					return cosmostest.Synth(req, tc.status, tc.headers, `{"code":"Injected","message":"injected"}`), nil
				}
				return nil, nil
			}
			e.Rec.SetHooks(fail, nil)
			defer e.Rec.SetHooks(nil, nil)
			for _, k := range []inbox.Key{seen, inbox.NewKey("billing", "unseen")} {
				if ok, err := s.HasProcessed(ctx, k); err == nil {
					t.Errorf("HasProcessed(%q) = %v without error", k.MessageID, ok)
				} else if !strings.Contains(err.Error(), "check") {
					t.Errorf("error %q does not name the operation", err)
				}
			}
			if err := s.RecordProcessed(ctx, inbox.NewKey("billing", "new")); err == nil {
				t.Error("RecordProcessed succeeded")
			}
			if n, err := s.PurgeExpired(ctx, "billing", clock.Now()); err == nil {
				t.Errorf("PurgeExpired = %d without error", n)
			}
		})
	}
}

func TestTimeoutsAndFailedDeletesAreErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Strong")
	clock := inboxtest.NewClock(inboxtest.Epoch)
	s := e.store(t, cosmosstore.Options{StoreOptions: cosmos.StoreOptions{Now: clock.Now}, PurgeDeleteConcurrency: 1})
	ctx := context.Background()
	recordMany(t, s, "billing", "m", 5)
	clock.Advance(time.Hour)

	t.Run("slow read past the deadline", func(t *testing.T) {
		e.Rec.SetHooks(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/docs/") {
				select {
				case <-req.Context().Done():
					return nil, req.Context().Err()
				case <-time.After(2 * time.Second):
				}
			}
			return nil, nil
		}, nil)
		defer e.Rec.SetHooks(nil, nil)
		tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		ok, err := s.HasProcessed(tctx, inbox.NewKey("billing", "m-0"))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("HasProcessed = %v, %v; want DeadlineExceeded", ok, err)
		}
	})

	t.Run("delete failing mid-purge", func(t *testing.T) {
		deletes := 0
		e.Rec.SetHooks(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodDelete {
				deletes++
				if deletes == 3 {
					return cosmostest.Synth(req, http.StatusInternalServerError, nil, `{"code":"InternalServerError"}`), nil
				}
			}
			return nil, nil
		}, nil)
		defer e.Rec.SetHooks(nil, nil)
		n, err := s.PurgeExpired(ctx, "billing", clock.Now())
		if err == nil || n != 2 {
			t.Fatalf("PurgeExpired = %d, %v; want 2 and an error", n, err)
		}
		if deletes != 3 {
			t.Fatalf("%d deletes attempted; the failure should stop the rest", deletes)
		}
	})
}

// A store error is reported by the pipeline with a class: a 401 or 403
// names the data-plane role to assign, a 400 says it was refused; neither
// is "unavailable", and neither carries the service's own text.
func TestRefusalsAreWordedForOperators(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Strong")
	s := e.store(t, cosmosstore.Options{})
	ctx := context.Background()
	if _, err := s.HasProcessed(ctx, inbox.NewKey("billing", "warm")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		status int
		sub    string
		want   string
	}{
		{http.StatusForbidden, "5301", cosmos.DataContributorRole},
		{http.StatusUnauthorized, "", "401 Unauthorized"},
		{http.StatusBadRequest, "", "refused the request with 400 Bad Request"},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			e.Rec.SetHooks(func(req *http.Request) (*http.Response, error) {
				if strings.Contains(req.URL.Path, "/docs") {
					return cosmostest.Synth(req, tc.status, map[string]string{"x-ms-substatus": tc.sub}, `{"code":"x","message":"the service's own words"}`), nil
				}
				return nil, nil
			}, nil)
			defer e.Rec.SetHooks(nil, nil)
			_, cerr := s.HasProcessed(ctx, inbox.NewKey("billing", "m"))
			rerr := s.RecordProcessed(ctx, inbox.NewKey("billing", "m"))
			for op, err := range map[string]error{inbox.OpCheck: cerr, inbox.OpRecord: rerr} {
				line := subscriber.NewStoreError(op, err).Error()
				if !strings.Contains(line, "misconfigured") || !strings.Contains(line, tc.want) || strings.Contains(line, "own words") || strings.Contains(line, "unavailable") {
					t.Errorf("%s: the pipeline reports %q", op, line)
				}
			}
		})
	}
}
