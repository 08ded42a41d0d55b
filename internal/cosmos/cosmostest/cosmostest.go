// Package cosmostest is test support for Cosmos DB stores: an HTTP
// transport that records (and may intercept) every request an account
// sends, synthesized service answers, and Env, a database of the test's
// own on the package's shared local Cosmos server, with a recorded account. It is imported only by tests.
package cosmostest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

// Sent is what the recording transport saw of one request.
type Sent struct {
	Method, Path string
	// Adapter: sent by internal/cosmos's own account reader, not the SDK.
	Adapter    bool
	Auth, Date string
	// Query is the SQL text of a query; empty for other requests.
	Query          string
	MaxItemCount   string
	CrossPartition string
	IfMatch        string
	// Upsert: the x-ms-documentdb-is-upsert header was true.
	Upsert bool
	// Prefer is the Prefer header ("return=minimal" when the content
	// response is turned off).
	Prefer string
	// Body is the request body of a document write (not of queries).
	Body []byte
	// Status is the answer's status; 0 when the request failed without
	// one.
	Status int
}

// Recorder is a policy.Transporter that records every request and lets a
// test intercept them. Its hooks: before may answer a request itself
// (non-nil response or error); after runs once the real response is in.
type Recorder struct {
	client *http.Client

	mu     sync.Mutex
	log    []Sent
	before func(*http.Request) (*http.Response, error)
	after  func(*http.Request, *http.Response)
}

// NewRecorder returns a Recorder sending through its own HTTP client.
func NewRecorder() *Recorder {
	return &Recorder{client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
}

// Do implements policy.Transporter.
func (r *Recorder) Do(req *http.Request) (*http.Response, error) {
	s := Sent{
		Method:         req.Method,
		Path:           req.URL.Path,
		Adapter:        IsAdapterRequest(req),
		Auth:           req.Header.Get("Authorization"),
		Date:           req.Header.Get("x-ms-date"),
		MaxItemCount:   req.Header.Get("x-ms-max-item-count"),
		CrossPartition: req.Header.Get("x-ms-documentdb-query-enablecrosspartition"),
		IfMatch:        req.Header.Get("If-Match"),
		Upsert:         strings.EqualFold(req.Header.Get("x-ms-documentdb-is-upsert"), "true"),
		Prefer:         req.Header.Get("Prefer"),
	}
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(b))
		if strings.HasPrefix(req.Header.Get("Content-Type"), "application/query+json") {
			var q struct {
				Query string `json:"query"`
			}
			_ = json.Unmarshal(b, &q)
			s.Query = q.Query
		} else {
			s.Body = b
		}
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

// SetHooks replaces the interception hooks (nil removes one).
func (r *Recorder) SetHooks(before func(*http.Request) (*http.Response, error), after func(*http.Request, *http.Response)) {
	r.mu.Lock()
	r.before, r.after = before, after
	r.mu.Unlock()
}

// Sent returns the requests recorded so far.
func (r *Recorder) Sent() []Sent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Sent(nil), r.log...)
}

// Reset forgets the recorded requests.
func (r *Recorder) Reset() {
	r.mu.Lock()
	r.log = nil
	r.mu.Unlock()
}

// Count returns how many recorded requests match.
func (r *Recorder) Count(match func(Sent) bool) int {
	n := 0
	for _, s := range r.Sent() {
		if match(s) {
			n++
		}
	}
	return n
}

// IsAdapterRequest reports a request sent by internal/cosmos's account
// reader (its User-Agent names the "nimbus-cosmos" module), not by the SDK.
func IsAdapterRequest(req *http.Request) bool {
	return strings.Contains(req.Header.Get("User-Agent"), "nimbus-cosmos")
}

// Request classes.
func IsAccountRead(s Sent) bool { return s.Method == http.MethodGet && s.Path == "/" && s.Adapter }
func IsQuery(s Sent) bool       { return s.Query != "" }
func IsDocRead(s Sent) bool     { return s.Method == http.MethodGet && strings.Contains(s.Path, "/docs/") }
func IsDocCreate(s Sent) bool {
	return s.Method == http.MethodPost && strings.HasSuffix(s.Path, "/docs") && s.Query == "" && !s.Upsert
}
func IsDocUpsert(s Sent) bool {
	return s.Method == http.MethodPost && strings.HasSuffix(s.Path, "/docs") && s.Query == "" && s.Upsert
}
func IsDocReplace(s Sent) bool {
	return s.Method == http.MethodPut && strings.Contains(s.Path, "/docs/")
}
func IsDocPatch(s Sent) bool {
	return s.Method == http.MethodPatch && strings.Contains(s.Path, "/docs/")
}
func IsDocDelete(s Sent) bool {
	return s.Method == http.MethodDelete && strings.Contains(s.Path, "/docs/")
}
func IsStoreTraffic(s Sent) bool   { return IsAccountRead(s) || strings.HasPrefix(s.Path, "/dbs") }
func IsContainerTouch(s Sent) bool { return strings.HasPrefix(s.Path, "/dbs") }

// IsDocRequest reports a request on a document (read, write, query) as
// opposed to account, database or container metadata.
func IsDocRequest(s Sent) bool { return strings.Contains(s.Path, "/docs") }

// Synth builds a response to req.
func Synth(req *http.Request, status int, headers map[string]string, body string) *http.Response {
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

// ClientOptions routes an account's requests through t.
func ClientOptions(t policy.Transporter) *azcosmos.ClientOptions {
	return &azcosmos.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: t}}
}

// NoRetry turns SDK retries off.
var NoRetry = policy.RetryOptions{MaxRetries: -1}

// Env is the package's shared local Cosmos server, a database of the
// test's own and an account whose requests go through a Recorder.
type Env struct {
	Srv *testenv.Cosmos
	// DB is the test's database: stores and raw clients use it so tests
	// sharing the server never see each other's documents.
	DB      string
	Rec     *Recorder
	Account *cosmos.Account
}

// NewEnv returns an Env on the package's shared Cosmos server reporting
// consistency ("" for the server's default), with SDK retries off. The
// package's TestMain calls testenv.Main (otherwise each test starts a
// server of its own). The test's database is deleted when the test ends.
func NewEnv(t testing.TB, consistency string) *Env {
	t.Helper()
	srv := testenv.SharedCosmos(t, testenv.CosmosOptions{Consistency: consistency})
	rec := NewRecorder()
	acct, err := cosmos.NewAccount(cosmos.Config{ConnectionString: srv.ConnectionString(), Retry: NoRetry, ClientOptions: ClientOptions(rec)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(acct.Close)
	return &Env{Srv: srv, DB: srv.Database(t), Rec: rec, Account: acct}
}

// Raw returns a container client that bypasses the recorder (for test
// setup and inspection).
func (e *Env) Raw(t testing.TB, db, container string) *azcosmos.ContainerClient {
	t.Helper()
	acct, err := cosmos.NewAccount(cosmos.Config{ConnectionString: e.Srv.ConnectionString()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(acct.Close)
	c, err := acct.Client().NewContainer(db, container)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// RawDoc reads the document id from a container partitioned on /id, as a
// JSON object.
func RawDoc(t testing.TB, c *azcosmos.ContainerClient, id string) map[string]any {
	t.Helper()
	return RawDocPK(t, c, id, id)
}

// RawDocPK reads the document id with partition key value pk.
func RawDocPK(t testing.TB, c *azcosmos.ContainerClient, pk, id string) map[string]any {
	t.Helper()
	resp, err := c.ReadItem(context.Background(), azcosmos.NewPartitionKeyString(pk), id, nil)
	if err != nil {
		t.Fatalf("reading raw document %s: %v", id, err)
	}
	var m map[string]any
	if err := json.Unmarshal(resp.Value, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// PutRaw creates a document with the given fields directly in a container
// partitioned on /id.
func PutRaw(t testing.TB, c *azcosmos.ContainerClient, doc map[string]any) {
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
