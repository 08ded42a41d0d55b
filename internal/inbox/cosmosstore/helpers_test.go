package cosmosstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/inbox/cosmosstore"
	"github.com/nimbus-go/functions-subscriber/internal/testenv"
)

// sent is what the recording transport saw of one request.
type sent struct {
	Method, Path   string
	Store          bool // sent by the adapter's own account reader
	Auth, Date     string
	Query          string // SQL text of a query
	MaxItemCount   string
	CrossPartition string
	IfMatch        string
	Status         int
}

// recorder is a policy.Transporter that records every request and lets a
// test intercept them. before may answer a request itself (non-nil
// response or error); after runs once the real response is in.
type recorder struct {
	client *http.Client

	mu     sync.Mutex
	log    []sent
	before func(*http.Request) (*http.Response, error)
	after  func(*http.Request, *http.Response)
}

func newRecorder() *recorder {
	return &recorder{client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
}

func (r *recorder) Do(req *http.Request) (*http.Response, error) {
	s := sent{
		Method:         req.Method,
		Path:           req.URL.Path,
		Store:          isAdapterRead(req),
		Auth:           req.Header.Get("Authorization"),
		Date:           req.Header.Get("x-ms-date"),
		MaxItemCount:   req.Header.Get("x-ms-max-item-count"),
		CrossPartition: req.Header.Get("x-ms-documentdb-query-enablecrosspartition"),
		IfMatch:        req.Header.Get("If-Match"),
	}
	if strings.HasPrefix(req.Header.Get("Content-Type"), "application/query+json") && req.Body != nil {
		b, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(b))
		var q struct {
			Query string `json:"query"`
		}
		_ = json.Unmarshal(b, &q)
		s.Query = q.Query
	}
	r.mu.Lock()
	before, after := r.before, r.after
	r.mu.Unlock()
	var (
		resp *http.Response
		err  error
	)
	if before != nil {
		resp, err = before(req)
	}
	if resp == nil && err == nil {
		resp, err = r.client.Do(req)
		if err == nil && after != nil {
			after(req, resp)
		}
	}
	if resp != nil {
		s.Status = resp.StatusCode
	}
	r.mu.Lock()
	r.log = append(r.log, s)
	r.mu.Unlock()
	return resp, err
}

// isAdapterRead reports a request sent by internal/cosmos's account reader
// (its User-Agent names the "nimbus-cosmos" module), not by the SDK.
func isAdapterRead(req *http.Request) bool {
	return strings.Contains(req.Header.Get("User-Agent"), "nimbus-cosmos")
}

// setHooks replaces the interception hooks.
func (r *recorder) setHooks(before func(*http.Request) (*http.Response, error), after func(*http.Request, *http.Response)) {
	r.mu.Lock()
	r.before, r.after = before, after
	r.mu.Unlock()
}

// sent returns the requests recorded so far.
func (r *recorder) sent() []sent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sent(nil), r.log...)
}

func (r *recorder) reset() {
	r.mu.Lock()
	r.log = nil
	r.mu.Unlock()
}

// count returns how many recorded requests match.
func (r *recorder) count(match func(sent) bool) int {
	n := 0
	for _, s := range r.sent() {
		if match(s) {
			n++
		}
	}
	return n
}

func isAccountRead(s sent) bool { return s.Method == http.MethodGet && s.Path == "/" && s.Store }
func isQuery(s sent) bool       { return s.Query != "" }
func isDocRead(s sent) bool     { return s.Method == http.MethodGet && strings.Contains(s.Path, "/docs/") }
func isDocCreate(s sent) bool {
	return s.Method == http.MethodPost && strings.HasSuffix(s.Path, "/docs") && s.Query == ""
}
func isDocDelete(s sent) bool {
	return s.Method == http.MethodDelete && strings.Contains(s.Path, "/docs/")
}
func isStoreTraffic(s sent) bool   { return isAccountRead(s) || strings.HasPrefix(s.Path, "/dbs") }
func isContainerTouch(s sent) bool { return strings.HasPrefix(s.Path, "/dbs") }

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

// env is a local Cosmos server plus an account whose requests go through
// a recorder.
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

// store returns a store on e's account; opts.Now defaults to now.
func (e *env) store(t testing.TB, opts cosmosstore.Options) *cosmosstore.Store {
	t.Helper()
	s, err := cosmosstore.New(e.account, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// raw returns a container client that bypasses the recorder (for test
// setup and inspection).
func (e *env) raw(t testing.TB, db, container string) *azcosmos.ContainerClient {
	t.Helper()
	acct, err := cosmos.NewAccount(cosmos.Config{ConnectionString: e.srv.ConnectionString()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(acct.Client.Close)
	c, err := acct.Client.NewContainer(db, container)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// rawDoc reads a document as a JSON object.
func rawDoc(t testing.TB, c *azcosmos.ContainerClient, id string) map[string]any {
	t.Helper()
	resp, err := c.ReadItem(context.Background(), azcosmos.NewPartitionKeyString(id), id, nil)
	if err != nil {
		t.Fatalf("reading raw document %s: %v", id, err)
	}
	var m map[string]any
	if err := json.Unmarshal(resp.Value, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// putRaw creates a document with the given fields directly.
func putRaw(t testing.TB, c *azcosmos.ContainerClient, doc map[string]any) {
	t.Helper()
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	id := doc["id"].(string)
	if _, err := c.CreateItem(context.Background(), azcosmos.NewPartitionKeyString(id), b, nil); err != nil {
		t.Fatalf("creating raw document: %v", err)
	}
}

// countEndpoint counts an endpoint's documents with a full paged query.
func countEndpoint(t testing.TB, c *azcosmos.ContainerClient, endpointID string) int {
	t.Helper()
	pager := c.NewQueryItemsPager("SELECT c.id FROM c WHERE c.endpointId = @e", azcosmos.NewPartitionKey(), &azcosmos.QueryOptions{
		QueryParameters: []azcosmos.QueryParameter{{Name: "@e", Value: endpointID}},
		PageSizeHint:    1000,
	})
	n := 0
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n += len(page.Items)
	}
	return n
}

// fixedClock returns a clock reading t.
func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

func boolPtr(b bool) *bool { return &b }
