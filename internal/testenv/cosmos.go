package testenv

import (
	"fmt"
	"testing"
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
	proc *Process
}

// ConnectionString returns "AccountEndpoint=...;AccountKey=...;".
func (c *Cosmos) ConnectionString() string {
	return fmt.Sprintf("AccountEndpoint=%s;AccountKey=%s;", c.Endpoint, c.Key)
}

// Logs returns what the server printed so far.
func (c *Cosmos) Logs() string { return c.proc.Logs() }

// Stop stops the server; tb.Cleanup also does it.
func (c *Cosmos) Stop() { c.proc.Stop() }

// StartCosmos starts scripts/testenv/cosmos.js on a free port and stops it
// when tb ends. Without Node it skips tb (fails it under
// NIMBUS_REQUIRE_EMULATORS=1).
func StartCosmos(tb testing.TB, opts CosmosOptions) *Cosmos {
	tb.Helper()
	env := []string{"PORT=0"}
	if opts.Consistency != "" {
		env = append(env, "COSMOS_CONSISTENCY="+opts.Consistency)
	}
	p, err := StartNode("cosmos.js", env...)
	if err != nil {
		Unavailable(tb, "local Cosmos DB stand-in unavailable: %v", err)
		return nil
	}
	tb.Cleanup(p.Stop)
	return &Cosmos{
		Endpoint: fmt.Sprintf("http://127.0.0.1:%d/", p.Port),
		Key:      CosmosEmulatorKey,
		Port:     p.Port,
		proc:     p,
	}
}
