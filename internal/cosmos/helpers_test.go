package cosmos_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/testenv"
)

// sent is what the recording transport saw of one request.
type sent struct {
	Method, Path string
	Adapter      bool // sent by the adapter's own account reader
	Auth, Date   string
	Status       int
}

// recorder is a policy.Transporter that records every request.
type recorder struct {
	client *http.Client

	mu  sync.Mutex
	log []sent
}

func newRecorder() *recorder {
	return &recorder{client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}}
}

func (r *recorder) Do(req *http.Request) (*http.Response, error) {
	s := sent{
		Method:  req.Method,
		Path:    req.URL.Path,
		Adapter: isAdapterRead(req),
		Auth:    req.Header.Get("Authorization"),
		Date:    req.Header.Get("x-ms-date"),
	}
	resp, err := r.client.Do(req)
	if resp != nil {
		s.Status = resp.StatusCode
	}
	r.mu.Lock()
	r.log = append(r.log, s)
	r.mu.Unlock()
	return resp, err
}

func (r *recorder) sent() []sent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sent(nil), r.log...)
}

func (r *recorder) count(match func(sent) bool) int {
	n := 0
	for _, s := range r.sent() {
		if match(s) {
			n++
		}
	}
	return n
}

// isAdapterRead reports a request sent by the adapter's account reader
// (User-Agent "azsdk-go-nimbus-cosmos/…"), not by the SDK.
func isAdapterRead(req *http.Request) bool {
	return strings.Contains(req.Header.Get("User-Agent"), "nimbus-cosmos")
}

func isAccountRead(s sent) bool { return s.Method == http.MethodGet && s.Path == "/" && s.Adapter }

// synth builds a response to req.
func synth(req *http.Request, status int, headers map[string]string, body string) *http.Response {
	h := http.Header{"Content-Type": []string{"application/json"}}
	for k, v := range headers {
		h.Set(k, v)
	}
	return &http.Response{
		StatusCode:    status,
		Status:        http.StatusText(status),
		Header:        h,
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
		Proto:         "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
	}
}

// clientOptions routes through rec.
func clientOptions(rec policy.Transporter) *azcosmos.ClientOptions {
	return &azcosmos.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: rec}}
}

// noRetry turns SDK retries off.
var noRetry = policy.RetryOptions{MaxRetries: -1}

// env is a local Cosmos server plus an account whose requests go through a
// recorder.
type env struct {
	srv     *testenv.Cosmos
	rec     *recorder
	account *cosmos.Account
}

func newEnv(t testing.TB, consistency string) *env {
	t.Helper()
	srv := testenv.StartCosmos(t, testenv.CosmosOptions{Consistency: consistency})
	rec := newRecorder()
	acct, err := cosmos.NewAccount(cosmos.Config{ConnectionString: srv.ConnectionString(), Retry: noRetry, ClientOptions: clientOptions(rec)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(acct.Client.Close)
	return &env{srv: srv, rec: rec, account: acct}
}

// exercise makes a Strong-checked container and runs a create, a point
// read, a cross-partition query and a delete on it.
func exercise(t *testing.T, acct *cosmos.Account, containerID string) {
	t.Helper()
	ctx := context.Background()
	c, err := acct.Container(cosmos.ContainerOptions{Spec: cosmos.ContainerSpec{
		DatabaseID: "authdb", ContainerID: containerID, PartitionKeyPath: "/id", AutoCreate: true,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	pk := azcosmos.NewPartitionKeyString("doc")
	if _, err := c.Client.CreateItem(ctx, pk, []byte(`{"id":"doc","v":1}`), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.ReadItem(ctx, pk, "doc", nil); err != nil {
		t.Fatal(err)
	}
	pager := c.Client.NewQueryItemsPager("SELECT c.id FROM c WHERE c.v = 1", azcosmos.NewPartitionKey(), nil)
	n := 0
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n += len(page.Items)
	}
	if n != 1 {
		t.Fatalf("query found %d items", n)
	}
	if _, err := c.Client.DeleteItem(ctx, pk, "doc", nil); err != nil {
		t.Fatal(err)
	}
}
