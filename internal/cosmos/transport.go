package cosmos

import (
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// IdleConnsPerHost is how many idle connections to one Cosmos DB endpoint
// the process keeps for reuse. It must cover the requests an instance
// sends at once (invocations in flight × the requests each makes at
// once, three for a transactional delivery), or every burst above it
// closes the surplus after use and opens new connections, each a TCP and
// TLS handshake, for as long as the load lasts. azcosmos's own transport
// keeps 100, which 34 transactional deliveries in flight already exceed.
// Connections are opened only as requests need them, so the bound costs
// nothing below it; an idle one closes after 90 s.
const IdleConnsPerHost = 1024

// sharedHTTPClient is the HTTP client of every account the process opens
// without a Transport of its own: one connection pool per process, as
// azcosmos shares its default client.
var sharedHTTPClient = sync.OnceValue(newHTTPClient)

// newHTTPClient mirrors azcosmos's default client (5 s connect timeout,
// 65 s per attempt, HTTP/2 where the endpoint offers it, with a ping after
// 2 s of silence) with an idle pool of IdleConnsPerHost.
func newHTTPClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          IdleConnsPerHost,
			MaxIdleConnsPerHost:   IdleConnsPerHost,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
			TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12, Renegotiation: tls.RenegotiateFreelyAsClient},
			HTTP2:                 &http.HTTP2Config{SendPingTimeout: 2 * time.Second, PingTimeout: time.Second},
		},
		Timeout: 65 * time.Second,
	}
}

// withSharedTransport gives opts the process's shared HTTP client unless
// it names a Transport of its own.
func withSharedTransport(opts *azcosmos.ClientOptions) {
	if opts.Transport == nil {
		opts.Transport = sharedHTTPClient()
	}
}
