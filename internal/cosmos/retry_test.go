package cosmos_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmostest"
)

// fakeAccount answers the account reads with a single-region Strong
// account and every other request with answer, counting the requests on
// documents.
type fakeAccount struct {
	answer func(req *http.Request) (*http.Response, error)

	mu      sync.Mutex
	docs    int
	adapter int
}

const fakeAccountJSON = `{"id":"acct","writableLocations":[{"name":"Local","databaseAccountEndpoint":"http://127.0.0.1:1/"}],` +
	`"readableLocations":[{"name":"Local","databaseAccountEndpoint":"http://127.0.0.1:1/"}],"enableMultipleWriteLocations":false,` +
	`"userConsistencyPolicy":{"defaultConsistencyLevel":"Strong"}}`

func (f *fakeAccount) Do(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet && req.URL.Path == "/" {
		if cosmostest.IsAdapterRequest(req) {
			f.mu.Lock()
			f.adapter++
			f.mu.Unlock()
			return f.answer(req)
		}
		return cosmostest.Synth(req, 200, nil, fakeAccountJSON), nil
	}
	if strings.Contains(req.URL.Path, "/docs") {
		f.mu.Lock()
		f.docs++
		f.mu.Unlock()
		return f.answer(req)
	}
	return cosmostest.Synth(req, 404, nil, `{"code":"NotFound"}`), nil
}

func (f *fakeAccount) counts() (docs, adapter int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.docs, f.adapter
}

// fastRetry is DefaultRetry with short waits, so the test measures counts,
// not time.
var fastRetry = policy.RetryOptions{MaxRetries: 3, RetryDelay: time.Millisecond, MaxRetryDelay: 20 * time.Millisecond, TryTimeout: 10 * time.Second}

// The retry behaviour DefaultRetry's documentation states, measured on the
// SDK: how many times one point read, create or account read is sent for a
// given answer.
func TestSDKRetriesAsDocumented(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		status   int
		headers  map[string]string
		write    bool
		account  bool // the adapter's account read instead of a document request
		retry    policy.RetryOptions
		wantSent int
		wantKind cosmos.Kind
	}{
		{"429 read: azcore retries MaxRetries times", 429, map[string]string{"x-ms-retry-after-ms": "1"}, false, false, fastRetry, 4, cosmos.KindThrottled},
		{"429 create: azcore retries MaxRetries times", 429, map[string]string{"x-ms-retry-after-ms": "1"}, true, false, fastRetry, 4, cosmos.KindThrottled},
		{"429 with Retry-After above MaxRetryDelay: not retried", 429, map[string]string{"x-ms-retry-after-ms": "5000"}, false, false, fastRetry, 1, cosmos.KindThrottled},
		{"503 read, single region: not retried", 503, nil, false, false, fastRetry, 1, cosmos.KindTransient},
		{"503 create: not retried", 503, nil, true, false, fastRetry, 1, cosmos.KindTransient},
		{"500 read: one in-region retry", 500, nil, false, false, fastRetry, 2, cosmos.KindTransient},
		{"500 create: not retried", 500, nil, true, false, fastRetry, 1, cosmos.KindTransient},
		{"449 read: not retried", 449, nil, false, false, fastRetry, 1, cosmos.KindTransient},
		{"410 read: not retried", 410, nil, false, false, fastRetry, 1, cosmos.KindTransient},
		{"404/1002 read: one retry", 404, map[string]string{"x-ms-substatus": "1002"}, false, false, fastRetry, 2, cosmos.KindTransient},
		{"408 read: one retry after 1 s", 408, nil, false, false, fastRetry, 2, cosmos.KindTransient},
		{"408 create: not retried", 408, nil, true, false, fastRetry, 1, cosmos.KindTransient},
		{"403 read: not retried", 403, nil, false, false, fastRetry, 1, cosmos.KindPermanent},
		{"503 account read: azcore retries MaxRetries times", 503, nil, false, true, fastRetry, 4, cosmos.KindTransient},
		{"503 account read, MaxRetries 1", 503, nil, false, true, policy.RetryOptions{MaxRetries: 1, RetryDelay: time.Millisecond}, 2, cosmos.KindTransient},
		{"429 account read, no retries", 429, nil, false, true, cosmostest.NoRetry, 1, cosmos.KindThrottled},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeAccount{answer: func(req *http.Request) (*http.Response, error) {
				return cosmostest.Synth(req, tc.status, tc.headers, `{"code":"x","message":"injected"}`), nil
			}}
			acct, err := cosmos.NewAccount(cosmos.Config{Endpoint: "http://127.0.0.1:1/", Key: testenvKey, Retry: tc.retry, ClientOptions: cosmostest.ClientOptions(f)})
			if err != nil {
				t.Fatal(err)
			}
			defer acct.Close()
			ctx := context.Background()
			if tc.account {
				_, err = acct.DefaultConsistency(ctx)
			} else {
				c, cerr := acct.Client().NewContainer("d", "c")
				if cerr != nil {
					t.Fatal(cerr)
				}
				pk := azcosmos.NewPartitionKeyString("x")
				if tc.write {
					_, err = c.CreateItem(ctx, pk, []byte(`{"id":"x"}`), nil)
				} else {
					_, err = c.ReadItem(ctx, pk, "x", nil)
				}
			}
			docs, adapter := f.counts()
			sent := docs
			if tc.account {
				sent = adapter
			}
			if sent != tc.wantSent {
				t.Errorf("sent %d times, want %d", sent, tc.wantSent)
			}
			if got := cosmos.Classify(err); got.Kind != tc.wantKind || got.Status != tc.status {
				t.Errorf("Classify(%v) = %+v, want kind %v status %d", err, got, tc.wantKind, tc.status)
			}
		})
	}
}

// A try cut off by TryTimeout is not retried: the operation ends with a
// deadline error after one try, classified transient.
func TestTryTimeoutEndsTheOperation(t *testing.T) {
	t.Parallel()
	f := &fakeAccount{answer: func(req *http.Request) (*http.Response, error) {
		<-req.Context().Done()
		return nil, req.Context().Err()
	}}
	retry := fastRetry
	retry.TryTimeout = 50 * time.Millisecond
	acct, err := cosmos.NewAccount(cosmos.Config{Endpoint: "http://127.0.0.1:1/", Key: testenvKey, Retry: retry, ClientOptions: cosmostest.ClientOptions(f)})
	if err != nil {
		t.Fatal(err)
	}
	defer acct.Close()
	c, _ := acct.Client().NewContainer("d", "c")
	_, err = c.ReadItem(context.Background(), azcosmos.NewPartitionKeyString("x"), "x", nil)
	if !errors.Is(err, context.DeadlineExceeded) || cosmos.Classify(err).Kind != cosmos.KindTransient {
		t.Fatalf("err %v (%v)", err, cosmos.Classify(err))
	}
	if docs, _ := f.counts(); docs != 1 {
		t.Fatalf("sent %d times, want 1", docs)
	}
}

// 403 with sub-status 3 (write forbidden) makes azcosmos resend every
// second, up to 120 times; only TryTimeout ends it.
func TestTryTimeoutBoundsTheWriteForbiddenLoop(t *testing.T) {
	t.Parallel()
	f := &fakeAccount{answer: func(req *http.Request) (*http.Response, error) {
		return cosmostest.Synth(req, http.StatusForbidden, map[string]string{"x-ms-substatus": "3"}, `{"code":"Forbidden"}`), nil
	}}
	retry := cosmostest.NoRetry
	retry.TryTimeout = 1500 * time.Millisecond
	acct, err := cosmos.NewAccount(cosmos.Config{Endpoint: "http://127.0.0.1:1/", Key: testenvKey, Retry: retry, ClientOptions: cosmostest.ClientOptions(f)})
	if err != nil {
		t.Fatal(err)
	}
	defer acct.Close()
	c, _ := acct.Client().NewContainer("d", "c")
	start := time.Now()
	_, err = c.ReadItem(context.Background(), azcosmos.NewPartitionKeyString("x"), "x", nil)
	elapsed := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
	if docs, _ := f.counts(); docs != 2 || elapsed > 3*time.Second {
		t.Fatalf("sent %d times in %v, want 2 (at 0 s and 1 s) before the 1.5 s try timeout", docs, elapsed)
	}
}

// The documented worst case follows from DefaultRetry's values.
func TestDefaultRetryWorstCase(t *testing.T) {
	t.Parallel()
	r := cosmos.DefaultRetry
	if r.MaxRetries != 3 || r.RetryDelay != 200*time.Millisecond || r.MaxRetryDelay != 2*time.Second || r.TryTimeout != 10*time.Second {
		t.Fatalf("DefaultRetry = %+v; update its documentation with it", r)
	}
	worst := time.Duration(r.MaxRetries+1)*r.TryTimeout + time.Duration(r.MaxRetries)*r.MaxRetryDelay
	if worst != 46*time.Second {
		t.Fatalf("worst case %v, documented 46s", worst)
	}
	// Without Retry-After: (2^n-1)·RetryDelay·1.3 at most, capped.
	var waits time.Duration
	for n := 1; n <= int(r.MaxRetries); n++ {
		w := time.Duration(float64(time.Duration(1<<n-1)*r.RetryDelay) * 1.3)
		waits += min(w, r.MaxRetryDelay)
	}
	if waits != 2860*time.Millisecond {
		t.Fatalf("waits without Retry-After %v, documented 2.86s", waits)
	}
}
