package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// memCosmos is a Cosmos DB account in memory, speaking as much of the REST
// API (gateway mode, plain HTTP) as azcosmos sends for the handler's
// delivery paths: the account read, database and container read and
// create, point read, create, upsert, replace and delete of documents
// (If-Match honoured) and the transactional batch (all or nothing, 207 and
// 424 as Cosmos DB answers; its patches too: the sample's balance
// increments and the marks of dispatched events). It is the latency
// injector too: every answer
// is held until the request's kind of delay has passed since the request
// arrived, so the delay stands for the service's latency and this server's
// own work hides inside it. It counts the TCP connections clients open.
//
// Anything else (queries, a patch outside a batch, stored procedures) is
// answered 501 and
// counted in Unsupported, so a run that needs more says so instead of
// measuring a failure path.
type memCosmos struct {
	URL   string
	delay Latency
	srv   *http.Server
	conns connCounter

	mu    sync.Mutex
	dbs   map[string]bool
	colls map[string]*collection // "db/coll"
	etag  uint64

	reads, writes, batches, meta, unsupported atomic.Int64
	lastUnsupported                           atomic.Value // string
	late                                      exchanges
}

// collection is one container: its properties as created and its
// documents by partition key (the header's JSON text) and id.
type collection struct {
	props  []byte
	pkPath []string
	docs   map[docKey]*document
}

type docKey struct{ pk, id string }

type document struct {
	body []byte // with the system properties
	etag string
}

// CosmosCounts are the requests a memCosmos answered, by kind.
type CosmosCounts struct {
	Reads, Writes, Batches, Meta, Unsupported int64
}

// startMemCosmos listens on a free loopback port.
func startMemCosmos(delay Latency) (*memCosmos, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("cosmos stand-in: %w", err)
	}
	c := &memCosmos{
		URL:   "http://" + ln.Addr().String() + "/",
		delay: delay,
		dbs:   map[string]bool{},
		colls: map[string]*collection{},
	}
	c.srv = &http.Server{Handler: c, ReadHeaderTimeout: 10 * time.Second, ConnState: c.conns.track}
	go func() { _ = c.srv.Serve(ln) }()
	return c, nil
}

// Close stops the server and closes its connections.
func (c *memCosmos) Close() { _ = c.srv.Close() }

// Counts returns the requests answered so far.
func (c *memCosmos) Counts() CosmosCounts {
	return CosmosCounts{c.reads.Load(), c.writes.Load(), c.batches.Load(), c.meta.Load(), c.unsupported.Load()}
}

// LastUnsupported is the last request answered 501, "" when none.
func (c *memCosmos) LastUnsupported() string {
	s, _ := c.lastUnsupported.Load().(string)
	return s
}

// Reset drops every document (the containers stay), so that a step's
// documents do not pile up across a run.
func (c *memCosmos) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, coll := range c.colls {
		coll.docs = map[docKey]*document{}
	}
}

// Documents returns the number of documents held.
func (c *memCosmos) Documents() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, coll := range c.colls {
		n += len(coll.docs)
	}
	return n
}

// answer is a response to write once the request's delay has passed.
type answer struct {
	status  int
	body    []byte
	etag    string
	charge  string
	subcode string
}

func (c *memCosmos) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	a, wait := c.route(r, body)
	if d := wait - time.Since(arrived); d > 0 {
		time.Sleep(d)
	}
	now := time.Now()
	c.late.add(arrived, now, now.Sub(arrived)-wait, 0)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("x-ms-request-charge", a.charge)
	h.Set("x-ms-activity-id", "00000000-0000-0000-0000-000000000000")
	if a.etag != "" {
		h.Set("etag", a.etag)
	}
	if a.subcode != "" {
		h.Set("x-ms-substatus", a.subcode)
	}
	h.Set("Content-Length", strconv.Itoa(len(a.body)))
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// route answers r and says how long after its arrival the answer is due.
func (c *memCosmos) route(r *http.Request, body []byte) (answer, time.Duration) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if r.URL.Path == "/" {
		parts = nil
	}
	switch {
	case len(parts) == 0 && r.Method == http.MethodGet:
		c.meta.Add(1)
		return c.account(), c.delay.Read
	case len(parts) == 1 && parts[0] == "dbs" && r.Method == http.MethodPost:
		c.meta.Add(1)
		return c.createDatabase(body), c.delay.Write
	case len(parts) == 2 && parts[0] == "dbs" && r.Method == http.MethodGet:
		c.meta.Add(1)
		return c.readDatabase(parts[1]), c.delay.Read
	case len(parts) == 3 && parts[0] == "dbs" && parts[2] == "colls" && r.Method == http.MethodPost:
		c.meta.Add(1)
		return c.createCollection(parts[1], body), c.delay.Write
	case len(parts) == 4 && parts[0] == "dbs" && parts[2] == "colls" && r.Method == http.MethodGet:
		c.meta.Add(1)
		return c.readCollection(parts[1], parts[3]), c.delay.Read
	case len(parts) == 5 && parts[0] == "dbs" && parts[2] == "colls" && parts[4] == "docs" && r.Method == http.MethodPost:
		pk := r.Header.Get("x-ms-documentdb-partitionkey")
		minimal := r.Header.Get("Prefer") == "return=minimal"
		switch {
		case strings.EqualFold(r.Header.Get("x-ms-cosmos-is-batch-request"), "true"):
			c.batches.Add(1)
			return c.batch(parts[1], parts[3], pk, body), c.delay.Batch
		case r.Header.Get("x-ms-documentdb-isquery") != "" || strings.HasPrefix(r.Header.Get("Content-Type"), "application/query+json"):
			return c.unsupportedRequest(r), c.delay.Read
		}
		c.writes.Add(1)
		op := opCreate
		if strings.EqualFold(r.Header.Get("x-ms-documentdb-is-upsert"), "true") {
			op = opUpsert
		}
		return c.single(parts[1], parts[3], pk, "", op, body, r.Header.Get("If-Match"), minimal), c.delay.Write
	case len(parts) == 6 && parts[0] == "dbs" && parts[2] == "colls" && parts[4] == "docs":
		pk := r.Header.Get("x-ms-documentdb-partitionkey")
		minimal := r.Header.Get("Prefer") == "return=minimal"
		switch r.Method {
		case http.MethodGet:
			c.reads.Add(1)
			return c.single(parts[1], parts[3], pk, parts[5], opRead, nil, "", false), c.delay.Read
		case http.MethodPut:
			c.writes.Add(1)
			return c.single(parts[1], parts[3], pk, parts[5], opReplace, body, r.Header.Get("If-Match"), minimal), c.delay.Write
		case http.MethodDelete:
			c.writes.Add(1)
			return c.single(parts[1], parts[3], pk, parts[5], opDelete, nil, r.Header.Get("If-Match"), true), c.delay.Write
		}
	}
	return c.unsupportedRequest(r), c.delay.Read
}

func (c *memCosmos) unsupportedRequest(r *http.Request) answer {
	c.unsupported.Add(1)
	c.lastUnsupported.Store(r.Method + " " + r.URL.Path)
	return fail(http.StatusNotImplemented, "NotImplemented", "the load run's Cosmos DB stand-in does not serve "+r.Method+" "+r.URL.Path)
}

func fail(status int, code, message string) answer {
	b, _ := json.Marshal(map[string]string{"code": code, "message": message})
	return answer{status: status, body: b, charge: "1"}
}

func (c *memCosmos) account() answer {
	loc := []map[string]string{{"name": "Load Region", "databaseAccountEndpoint": c.URL}}
	b, _ := json.Marshal(map[string]any{
		"id":                           "load",
		"_self":                        "",
		"writableLocations":            loc,
		"readableLocations":            loc,
		"enableMultipleWriteLocations": false,
		"userConsistencyPolicy":        map[string]string{"defaultConsistencyLevel": "Strong"},
		"systemReplicationPolicy":      map[string]int{"minReplicaSetSize": 3, "maxReplicasetSize": 4},
		"readPolicy":                   map[string]int{"primaryReadCoefficient": 1, "secondaryReadCoefficient": 1},
		"queryEngineConfiguration":     "{}",
	})
	return answer{status: http.StatusOK, body: b, charge: "0"}
}

func (c *memCosmos) createDatabase(body []byte) answer {
	var p struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(body, &p) != nil || p.ID == "" {
		return fail(http.StatusBadRequest, "BadRequest", "database without an id")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dbs[p.ID] {
		return fail(http.StatusConflict, "Conflict", "database exists")
	}
	c.dbs[p.ID] = true
	b, _ := json.Marshal(map[string]any{"id": p.ID, "_rid": p.ID, "_self": "dbs/" + p.ID + "/", "_etag": `"0"`, "_ts": time.Now().Unix()})
	return answer{status: http.StatusCreated, body: b, charge: "1"}
}

func (c *memCosmos) readDatabase(id string) answer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.dbs[id] {
		return fail(http.StatusNotFound, "NotFound", "database does not exist")
	}
	b, _ := json.Marshal(map[string]any{"id": id, "_rid": id, "_self": "dbs/" + id + "/", "_etag": `"0"`, "_ts": time.Now().Unix()})
	return answer{status: http.StatusOK, body: b, charge: "1"}
}

func (c *memCosmos) createCollection(db string, body []byte) answer {
	var props map[string]any
	if err := json.Unmarshal(body, &props); err != nil {
		return fail(http.StatusBadRequest, "BadRequest", "container properties are not JSON")
	}
	id, _ := props["id"].(string)
	pkDef, _ := props["partitionKey"].(map[string]any)
	paths, _ := pkDef["paths"].([]any)
	if id == "" || len(paths) != 1 {
		return fail(http.StatusBadRequest, "BadRequest", "a container needs an id and one partition key path")
	}
	path, _ := paths[0].(string)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.dbs[db] {
		return fail(http.StatusNotFound, "NotFound", "database does not exist")
	}
	key := db + "/" + id
	if c.colls[key] != nil {
		return fail(http.StatusConflict, "Conflict", "container exists")
	}
	props["_rid"] = id
	props["_self"] = "dbs/" + db + "/colls/" + id + "/"
	props["_etag"] = `"0"`
	props["_ts"] = time.Now().Unix()
	b, _ := json.Marshal(props)
	c.colls[key] = &collection{props: b, pkPath: strings.Split(strings.Trim(path, "/"), "/"), docs: map[docKey]*document{}}
	return answer{status: http.StatusCreated, body: b, charge: "1"}
}

func (c *memCosmos) readCollection(db, id string) answer {
	c.mu.Lock()
	defer c.mu.Unlock()
	coll := c.colls[db+"/"+id]
	if coll == nil {
		return answer{status: http.StatusNotFound, body: []byte(`{"code":"NotFound","message":"container does not exist"}`), charge: "1", subcode: "1003"}
	}
	return answer{status: http.StatusOK, body: coll.props, charge: "1"}
}

type opKind int

const (
	opRead opKind = iota
	opCreate
	opUpsert
	opReplace
	opDelete
)

// result is one operation's outcome, for a point request or a batch.
type result struct {
	status int
	doc    *document
}

// apply runs one operation on docs (the caller holds c.mu); commit false
// only checks it. For writes, body is the document as sent.
func (c *memCosmos) apply(coll *collection, docs map[docKey]*document, pk, id string, op opKind, body []byte, ifMatch string) (result, *document, error) {
	if op == opCreate || op == opUpsert || op == opReplace {
		var err error
		id, err = checkBody(coll, pk, id, body)
		if err != nil {
			return result{status: http.StatusBadRequest}, nil, err
		}
	}
	cur := docs[docKey{pk, id}]
	if ifMatch != "" && (op == opReplace || op == opDelete || op == opUpsert) {
		switch {
		case cur == nil && op != opUpsert:
			return result{status: http.StatusNotFound}, nil, nil
		case cur == nil || cur.etag != ifMatch:
			return result{status: http.StatusPreconditionFailed}, nil, nil
		}
	}
	switch op {
	case opRead:
		if cur == nil {
			return result{status: http.StatusNotFound}, nil, nil
		}
		return result{status: http.StatusOK, doc: cur}, cur, nil
	case opDelete:
		if cur == nil {
			return result{status: http.StatusNotFound}, nil, nil
		}
		return result{status: http.StatusNoContent}, nil, nil
	case opCreate:
		if cur != nil {
			return result{status: http.StatusConflict}, nil, nil
		}
	case opReplace:
		if cur == nil {
			return result{status: http.StatusNotFound}, nil, nil
		}
	}
	c.etag++
	etag := `"` + strconv.FormatUint(c.etag, 16) + `"`
	doc := &document{body: withSystemProperties(body, etag), etag: etag}
	status := http.StatusCreated
	if op == opReplace || (op == opUpsert && cur != nil) {
		status = http.StatusOK
	}
	return result{status: status, doc: doc}, doc, nil
}

// checkBody returns the document's id and checks that its partition key
// value is the header's, as Cosmos DB does.
func checkBody(coll *collection, pk, id string, body []byte) (string, error) {
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); err != nil {
		return "", errors.New("the document is not a JSON object")
	}
	bodyID, _ := doc["id"].(string)
	if bodyID == "" {
		return "", errors.New("the document has no id")
	}
	if id != "" && id != bodyID {
		return "", errors.New("the document's id is not the one addressed")
	}
	var v any = doc
	for _, seg := range coll.pkPath {
		m, _ := v.(map[string]any)
		v = m[seg]
	}
	want, _ := json.Marshal([]any{v})
	if string(want) != pk {
		return "", fmt.Errorf("the document's partition key %s is not the header's %s", want, pk)
	}
	return bodyID, nil
}

// withSystemProperties returns body with _etag and _ts set.
func withSystemProperties(body []byte, etag string) []byte {
	var doc map[string]json.RawMessage
	_ = json.Unmarshal(body, &doc)
	e, _ := json.Marshal(etag)
	doc["_etag"] = e
	doc["_ts"] = json.RawMessage(strconv.FormatInt(time.Now().Unix(), 10))
	doc["_rid"] = json.RawMessage(`"AAAAAAAAAAA="`)
	out, _ := json.Marshal(doc)
	return out
}

// single answers a point operation.
func (c *memCosmos) single(db, collID, pk, id string, op opKind, body []byte, ifMatch string, minimal bool) answer {
	c.mu.Lock()
	defer c.mu.Unlock()
	coll := c.colls[db+"/"+collID]
	if coll == nil {
		return answer{status: http.StatusNotFound, body: []byte(`{"code":"NotFound","message":"container does not exist"}`), charge: "1", subcode: "1003"}
	}
	res, doc, err := c.apply(coll, coll.docs, pk, id, op, body, ifMatch)
	if err != nil {
		return fail(http.StatusBadRequest, "BadRequest", err.Error())
	}
	switch res.status {
	case http.StatusOK, http.StatusCreated:
		if op != opRead {
			coll.docs[docKey{pk, idOf(id, doc)}] = doc
		}
		a := answer{status: res.status, etag: doc.etag, charge: "1"}
		if !minimal {
			a.body = doc.body
		}
		return a
	case http.StatusNoContent:
		delete(coll.docs, docKey{pk, id})
		return answer{status: http.StatusNoContent, charge: "1"}
	case http.StatusNotFound:
		return fail(http.StatusNotFound, "NotFound", "Entity with the specified id does not exist in the system.")
	case http.StatusConflict:
		return fail(http.StatusConflict, "Conflict", "Entity with the specified id already exists in the system.")
	case http.StatusPreconditionFailed:
		return fail(http.StatusPreconditionFailed, "PreconditionFailed", "Operation cannot be performed because one of the specified precondition is not met.")
	}
	return fail(res.status, "BadRequest", "request refused")
}

// idOf is the id a written document is stored under.
func idOf(id string, doc *document) string {
	if id != "" {
		return id
	}
	var p struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(doc.body, &p)
	return p.ID
}

// batchOp is one operation of a transactional batch as azcosmos writes it.
type batchOp struct {
	OperationType string          `json:"operationType"`
	ID            string          `json:"id"`
	IfMatch       string          `json:"ifMatch"`
	ResourceBody  json.RawMessage `json:"resourceBody"`
}

// patchBody returns the document cur patched by a batch operation's body
// ({"operations":[…]}), or the status Cosmos DB answers instead: 404 for a
// missing document, 400 for a patch that does not apply.
func patchBody(cur *document, body json.RawMessage) ([]byte, int) {
	if cur == nil {
		return nil, http.StatusNotFound
	}
	var p struct {
		Operations []txn.PatchOp `json:"operations"`
	}
	if err := json.Unmarshal(body, &p); err != nil || len(p.Operations) == 0 {
		return nil, http.StatusBadRequest
	}
	patched, err := txn.PatchDocument(cur.body, p.Operations)
	if err != nil {
		return nil, http.StatusBadRequest
	}
	return patched, 0
}

// batchResult is one operation's result as Cosmos DB writes it.
type batchResult struct {
	StatusCode    int             `json:"statusCode"`
	RequestCharge float64         `json:"requestCharge"`
	ETag          string          `json:"eTag,omitempty"`
	ResourceBody  json.RawMessage `json:"resourceBody,omitempty"`
}

// batch runs a transactional batch: every operation on a working copy of
// the partition, committed only when all succeed; otherwise 207 with the
// failing operation's status and 424 for every other one.
func (c *memCosmos) batch(db, collID, pk string, body []byte) answer {
	var ops []batchOp
	if err := json.Unmarshal(body, &ops); err != nil || len(ops) == 0 {
		return fail(http.StatusBadRequest, "BadRequest", "the batch is not a JSON array of operations")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	coll := c.colls[db+"/"+collID]
	if coll == nil {
		return answer{status: http.StatusNotFound, body: []byte(`{"code":"NotFound","message":"container does not exist"}`), charge: "1", subcode: "1003"}
	}
	work := map[docKey]*document{}
	lookup := func(k docKey) *document {
		if d, ok := work[k]; ok {
			return d
		}
		return coll.docs[k]
	}
	results := make([]batchResult, len(ops))
	failed := -1
	for i, o := range ops {
		var kind opKind
		switch o.OperationType {
		case "Create":
			kind = opCreate
		case "Upsert":
			kind = opUpsert
		case "Replace":
			kind = opReplace
		case "Read":
			kind = opRead
		case "Delete":
			kind = opDelete
		case "Patch":
			// A patch replaces the document with the patched one.
			kind = opReplace
			patched, status := patchBody(lookup(docKey{pk, o.ID}), o.ResourceBody)
			if status != 0 {
				results[i] = batchResult{StatusCode: status}
				failed = i
			}
			o.ResourceBody = patched
		default:
			results[i] = batchResult{StatusCode: http.StatusBadRequest}
			failed = i
		}
		if failed >= 0 {
			break
		}
		view := map[docKey]*document{}
		id := o.ID
		if kind == opCreate || kind == opUpsert || kind == opReplace {
			var err error
			if id, err = checkBody(coll, pk, o.ID, o.ResourceBody); err != nil {
				results[i] = batchResult{StatusCode: http.StatusBadRequest}
				failed = i
				break
			}
		}
		if d := lookup(docKey{pk, id}); d != nil {
			view[docKey{pk, id}] = d
		}
		res, doc, err := c.apply(coll, view, pk, id, kind, o.ResourceBody, o.IfMatch)
		if err != nil || res.status >= 300 {
			results[i] = batchResult{StatusCode: res.status}
			failed = i
			break
		}
		r := batchResult{StatusCode: res.status, RequestCharge: 1}
		switch kind {
		case opRead:
			r.ETag, r.ResourceBody = doc.etag, doc.body
		case opDelete:
			work[docKey{pk, id}] = nil
		default:
			work[docKey{pk, id}] = doc
			r.ETag = doc.etag
		}
		results[i] = r
	}
	status := http.StatusOK
	if failed >= 0 {
		status = http.StatusMultiStatus
		for i := range results {
			if i != failed {
				results[i] = batchResult{StatusCode: http.StatusFailedDependency}
			}
		}
	} else {
		for k, d := range work {
			if d == nil {
				delete(coll.docs, k)
			} else {
				coll.docs[k] = d
			}
		}
	}
	b, _ := json.Marshal(results)
	return answer{status: status, body: b, charge: strconv.Itoa(len(ops))}
}

// connCounter counts the TCP connections a server accepted: opened since
// start, open now and the most open at once.
type connCounter struct {
	opened, open, peak atomic.Int64
}

// track is an http.Server ConnState hook.
func (c *connCounter) track(_ net.Conn, s http.ConnState) {
	switch s {
	case http.StateNew:
		c.opened.Add(1)
		n := c.open.Add(1)
		for {
			p := c.peak.Load()
			if n <= p || c.peak.CompareAndSwap(p, n) {
				break
			}
		}
	case http.StateClosed, http.StateHijacked:
		c.open.Add(-1)
	}
}

// ConnStats is a snapshot of a connCounter.
type ConnStats struct{ Opened, Open, Peak int64 }

func (c *connCounter) stats() ConnStats {
	return ConnStats{c.opened.Load(), c.open.Load(), c.peak.Load()}
}

// resetPeak starts a new peak from the connections open now.
func (c *connCounter) resetPeak() { c.peak.Store(c.open.Load()) }

// exchanges records, for each request an injector answered (or send it
// passed on), how much later than its delay the injector itself acted
// (late: a timer fired or a goroutine waited for a core, the machine's
// scheduling delay, which the model does not count and the handler does
// not cause) and how long the server behind it took to answer beyond that
// (service: zero where the server answers from memory inside the delay; the
// Node stand-ins' processing where they sit behind a delay line or proxy).
type exchanges struct {
	mu   sync.Mutex
	late []time.Duration
	svc  []time.Duration
	// spans are when each exchange began (the request reached the
	// injector) and ended (its answer left for the client).
	spans []span
}

// span is a stretch of time.
type span struct{ from, to time.Time }

// add records an exchange of the span from–to.
func (x *exchanges) add(from, to time.Time, late, service time.Duration) {
	x.mu.Lock()
	x.late = append(x.late, max(late, 0))
	x.svc = append(x.svc, max(service, 0))
	x.spans = append(x.spans, span{from, to})
	x.mu.Unlock()
}

// spansOf returns the spans of the exchanges from mark from to mark to.
func (x *exchanges) spansOf(from, to int) []span {
	x.mu.Lock()
	defer x.mu.Unlock()
	to = min(to, len(x.spans))
	if from >= to {
		return nil
	}
	return append([]span(nil), x.spans[from:to]...)
}

// mark is the number of exchanges recorded so far, for since.
func (x *exchanges) mark() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.late)
}

// reset drops what was recorded (between steps).
func (x *exchanges) reset() {
	x.mu.Lock()
	x.late, x.svc, x.spans = x.late[:0], x.svc[:0], x.spans[:0]
	x.mu.Unlock()
}

// ExchangeStats summarises the exchanges of a window: the mean lateness
// and service time, and the 99th percentile of their sum (the jitter an
// exchange adds beyond its delay).
type ExchangeStats struct {
	N                  int
	Late, Service, P99 time.Duration
}

// since summarises the exchanges recorded from mark from to mark to.
func (x *exchanges) since(from, to int) ExchangeStats {
	x.mu.Lock()
	defer x.mu.Unlock()
	to = min(to, len(x.late))
	if from >= to {
		return ExchangeStats{}
	}
	st := ExchangeStats{N: to - from}
	sum := make([]time.Duration, 0, st.N)
	var late, svc time.Duration
	for i := from; i < to; i++ {
		late += x.late[i]
		svc += x.svc[i]
		sum = append(sum, x.late[i]+x.svc[i])
	}
	slices.Sort(sum)
	st.Late, st.Service = late/time.Duration(st.N), svc/time.Duration(st.N)
	st.P99 = percentile(sum, 99)
	return st
}
