package testenv

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// CosmosEmulatorKey is the well-known Azure Cosmos DB emulator key. The local
// stand-in accepts any key; this one keeps clients configured like they
// would be against the emulator.
const CosmosEmulatorKey = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="

// CosmosOptions configures StartCosmos. The zero value starts a Session
// account on a free port.
type CosmosOptions struct {
	// Consistency is the default consistency level the account reports
	// (e.g. "Strong"); empty means "Session".
	Consistency string
}

// Cosmos is a running local Cosmos DB stand-in (plain HTTP on 127.0.0.1).
type Cosmos struct {
	// Endpoint is the account endpoint, "http://127.0.0.1:PORT/".
	Endpoint string
	// Key is an account key clients may use.
	Key  string
	Port int
	proc standIn
}

// ConnectionString returns "AccountEndpoint=...;AccountKey=...;".
func (c *Cosmos) ConnectionString() string {
	return fmt.Sprintf("AccountEndpoint=%s;AccountKey=%s;", c.Endpoint, c.Key)
}

// Logs returns what the server printed so far.
func (c *Cosmos) Logs() string { return c.proc.Logs() }

// Stop stops the server; tb.Cleanup also does it for StartCosmos.
func (c *Cosmos) Stop() { c.proc.Stop() }

// Database returns a database id of tb's own (UniqueDatabase) and deletes
// that database from c when tb ends, so a package's run does not pile
// documents up in a shared server. Register it before what writes there,
// so that the deletion runs after it stopped.
func (c *Cosmos) Database(tb testing.TB) string {
	tb.Helper()
	name := UniqueDatabase(tb)
	tb.Cleanup(func() {
		if err := c.dropDatabase(name); err != nil {
			tb.Errorf("testenv: dropping database %s: %v", name, err)
		}
	})
	return name
}

// Client returns a client of the server with its account key, closed
// when tb ends.
func (c *Cosmos) Client(tb testing.TB) *azcosmos.Client {
	tb.Helper()
	client, err := c.newClient()
	if err != nil {
		tb.Fatalf("testenv: Cosmos DB client: %v", err)
	}
	tb.Cleanup(client.Close)
	return client
}

func (c *Cosmos) newClient() (*azcosmos.Client, error) {
	cred, err := azcosmos.NewKeyCredential(c.Key)
	if err != nil {
		return nil, err
	}
	return azcosmos.NewClientWithKey(c.Endpoint, cred, nil)
}

func (c *Cosmos) dropDatabase(name string) error {
	client, err := c.newClient()
	if err != nil {
		return err
	}
	defer client.Close()
	db, err := client.NewDatabase(name)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var re *azcore.ResponseError
	if _, err := db.Delete(ctx, nil); err != nil && !(errors.As(err, &re) && re.StatusCode == http.StatusNotFound) {
		return err
	}
	return nil
}

// StartCosmos starts a private Cosmos DB stand-in on a free port and stops
// it when tb ends; tests that stop or break the server use it, the others
// SharedCosmos. In a package whose TestMain calls Main it is an account of
// the package's one cosmos.js process, otherwise a process of its own. Without Node it skips tb (fails it under
// NIMBUS_REQUIRE_EMULATORS=1).
func StartCosmos(tb testing.TB, opts CosmosOptions) *Cosmos {
	tb.Helper()
	c, err := startCosmos(opts)
	if err != nil {
		Unavailable(tb, "local Cosmos DB stand-in unavailable: %v", err)
		return nil
	}
	tb.Cleanup(c.Stop)
	return c
}

func startCosmos(opts CosmosOptions) (*Cosmos, error) {
	env := []string{"PORT=0"}
	if opts.Consistency != "" {
		env = append(env, "COSMOS_CONSISTENCY="+opts.Consistency)
	}
	proc, port, err := startStandIn("cosmos.js", env)
	if err != nil {
		return nil, err
	}
	return &Cosmos{
		Endpoint: fmt.Sprintf("http://127.0.0.1:%d/", port),
		Key:      CosmosEmulatorKey,
		Port:     port,
		proc:     proc,
	}, nil
}
