package cosmos

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// Cold start. An azcosmos v1.5.0 client reads the account's metadata
// (GET on the account endpoint: its regions) before its first request.
// When that read fails, the client keeps the error and answers every
// request with it, sending nothing, until its refresh interval (5 minutes)
// has passed: a few seconds of trouble at an instance's start (the
// metadata read refused or reset, file descriptors exhausted) would fail
// every Cosmos request for five minutes after the account is healthy
// again. Once a metadata read has succeeded, a later failed refresh does
// no such harm: the client keeps routing on the regions it knows.
//
// So each client of an Account is built with a policy that watches its
// metadata reads. While a client has had a metadata read fail and none
// succeed, the next use of the Account builds a fresh client (at most one
// per RebuildInterval), whose first request reads the metadata again: the
// instance recovers with the first request after the account does. The
// stores ask the Account for the client on every operation (Client,
// Container.Client), so they move to the new client at once.

// RebuildInterval is the least time between two clients an Account builds
// after failed metadata reads; while the account stays unreachable, it
// bounds the metadata reads to about one per interval.
const RebuildInterval = time.Second

// clientGen is one client of an Account and the watch of its metadata
// reads.
type clientGen struct {
	client *azcosmos.Client
	meta   *metadataWatch
	// containers caches the client's container clients by database and
	// container id.
	containers sync.Map
}

// clients builds and replaces an Account's SDK client.
type clients struct {
	// build returns a client with opts (which carry the watch).
	build func(opts *azcosmos.ClientOptions) (*azcosmos.Client, error)
	opts  azcosmos.ClientOptions
	now   func() time.Time

	cur      atomic.Pointer[clientGen]
	mu       sync.Mutex
	builtAt  time.Time
	rebuilds atomic.Int64
}

func newClients(opts azcosmos.ClientOptions, build func(*azcosmos.ClientOptions) (*azcosmos.Client, error)) (*clients, error) {
	c := &clients{build: build, opts: opts, now: time.Now}
	g, err := c.newGen()
	if err != nil {
		return nil, err
	}
	c.cur.Store(g)
	return c, nil
}

// newGen builds a client with a watch of its own.
func (c *clients) newGen() (*clientGen, error) {
	w := &metadataWatch{}
	o := c.opts
	o.PerCallPolicies = append(append([]policy.Policy(nil), o.PerCallPolicies...), w)
	cl, err := c.build(&o)
	if err != nil {
		return nil, err
	}
	return &clientGen{client: cl, meta: w}, nil
}

// current returns the client to use: the current one, or a fresh one when
// the current one's metadata reads have failed without a success and the
// last was built at least RebuildInterval ago.
func (c *clients) current() *clientGen {
	g := c.cur.Load()
	if !g.meta.broken() {
		return g
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	g = c.cur.Load()
	now := c.now()
	if !g.meta.broken() || now.Sub(c.builtAt) < RebuildInterval {
		return g
	}
	ng, err := c.newGen()
	if err != nil {
		// The options built a client before; keep the old one.
		return g
	}
	c.cur.Store(ng)
	c.builtAt = now
	c.rebuilds.Add(1)
	// Requests in flight on the old client finish: Close only releases
	// its share of the SDK's caches, which the new client shares.
	g.client.Close()
	return ng
}

// container returns g's client of one container.
func (g *clientGen) container(databaseID, containerID string) (*azcosmos.ContainerClient, error) {
	key := databaseID + "\x00" + containerID
	if cc, ok := g.containers.Load(key); ok {
		return cc.(*azcosmos.ContainerClient), nil
	}
	cc, err := g.client.NewContainer(databaseID, containerID)
	if err != nil {
		return nil, err
	}
	v, _ := g.containers.LoadOrStore(key, cc)
	return v.(*azcosmos.ContainerClient), nil
}

// metadataWatch is a per-call policy of one client that records the fate
// of its account metadata reads (GET on the account endpoint's root).
type metadataWatch struct {
	failed, succeeded atomic.Bool
}

func (w *metadataWatch) Do(req *policy.Request) (*http.Response, error) {
	r := req.Raw()
	if r.Method != http.MethodGet || (r.URL.Path != "/" && r.URL.Path != "") {
		return req.Next()
	}
	resp, err := req.Next()
	if err == nil && resp.StatusCode >= 200 && resp.StatusCode < 300 {
		w.succeeded.Store(true)
	} else {
		w.failed.Store(true)
	}
	return resp, err
}

// broken reports a client whose metadata reads failed and never
// succeeded: it answers every request with the kept error.
func (w *metadataWatch) broken() bool { return w.failed.Load() && !w.succeeded.Load() }
