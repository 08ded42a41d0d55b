package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

func TestMain(m *testing.M) { Main(m) }

// Tests that ask for the same options get the same server; each database
// is the test's own and is gone when the test ends.
func TestSharedCosmosIsOneServerAndDatabasesAreDropped(t *testing.T) {
	var first *Cosmos
	var dbs []string
	for _, name := range []string{"a", "b"} {
		t.Run(name, func(t *testing.T) {
			c := SharedCosmos(t, CosmosOptions{Consistency: "Strong"})
			if first == nil {
				first = c
			} else if c != first {
				t.Fatalf("second test got server on port %d, want the first one's (%d)", c.Port, first.Port)
			}
			db := c.Database(t)
			dbs = append(dbs, db)
			client := c.Client(t)
			if _, err := client.CreateDatabase(context.Background(), azcosmos.DatabaseProperties{ID: db}, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
	if t.Failed() {
		return
	}
	if dbs[0] == dbs[1] {
		t.Fatalf("both tests got database %q", dbs[0])
	}
	client := first.Client(t)
	for _, db := range dbs {
		d, err := client.NewDatabase(db)
		if err != nil {
			t.Fatal(err)
		}
		_, err = d.Read(context.Background(), nil)
		var re *azcore.ResponseError
		if !errors.As(err, &re) || re.StatusCode != http.StatusNotFound {
			t.Errorf("database %s after its test: err %v, want 404", db, err)
		}
	}
}

// A shared server that cannot start is tried once; every test asking for
// it skips with the reason, or fails under NIMBUS_REQUIRE_EMULATORS=1.
func TestSharedCosmosUnavailableSkipsOrFailsEachTest(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no node
	for _, required := range []string{"", "1"} {
		t.Run("required="+required, func(t *testing.T) {
			t.Setenv(RequireEnv, required)
			asideShared(t)
			// An options value no other test uses, so the start is this
			// test's.
			opts := CosmosOptions{Consistency: "ConsistentPrefix-" + required}
			for i := range 2 {
				r := runTB(func(tb testing.TB) { SharedCosmos(tb, opts) })
				if !strings.Contains(r.msg, "node is not on PATH") {
					t.Errorf("call %d: message %q lacks the reason", i, r.msg)
				}
				if required == "1" && (!r.failed || r.skipped) {
					t.Errorf("call %d: failed=%v skipped=%v, want a failure", i, r.failed, r.skipped)
				}
				if required == "" && (!r.skipped || r.failed) {
					t.Errorf("call %d: failed=%v skipped=%v, want a skip", i, r.failed, r.skipped)
				}
			}
		})
	}
}

// Without Main (another package's TestMain), each test gets a server of
// its own, stopped when the test ends.
func TestSharedCosmosWithoutMainIsPrivate(t *testing.T) {
	withoutMain(t)
	var c *Cosmos
	t.Run("private", func(t *testing.T) {
		c = SharedCosmos(t, CosmosOptions{Consistency: "Strong"})
		if s := sharedCosmos(CosmosOptions{Consistency: "Strong"}); s != nil {
			t.Fatal("a shared entry was made without Main")
		}
	})
	if c == nil {
		t.Fatal("no server")
	}
	p, ok := c.proc.(*Process)
	if !ok {
		t.Fatalf("the private server is a %T, want a process of its own", c.proc)
	}
	select {
	case <-p.done:
	default:
		t.Fatal("the private server still runs after its test")
	}
}

// recordTB records a test's end (skip or failure) instead of reporting it.
type recordTB struct {
	testing.TB
	mu              sync.Mutex
	failed, skipped bool
	msg             string
}

func (r *recordTB) Helper() {}

func (r *recordTB) Fatalf(format string, args ...any) {
	r.end(&r.failed, format, args...)
}

func (r *recordTB) Fatal(args ...any) { r.end(&r.failed, "%v", args...) }

func (r *recordTB) Skipf(format string, args ...any) {
	r.end(&r.skipped, format, args...)
}

func (r *recordTB) end(flag *bool, format string, args ...any) {
	r.mu.Lock()
	*flag = true
	r.msg = strings.TrimSpace(strings.Join([]string{r.msg, fmt.Sprintf(format, args...)}, " "))
	r.mu.Unlock()
	runtime.Goexit()
}

// runTB runs f with a recordTB in a goroutine of its own (Goexit ends it
// as a skip or failure ends a test).
func runTB(f func(testing.TB)) *recordTB {
	r := &recordTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

// Without Main (another package's TestMain), each Service Bus stand-in is
// a process of its own, and no host is started.
func TestServiceBusWithoutMainIsAProcessOfItsOwn(t *testing.T) {
	withoutMain(t)
	var sb *ServiceBus
	t.Run("private", func(t *testing.T) {
		sb = StartServiceBus(t, Topology{Queues: []Queue{{Name: "q"}}})
		if _, ok := sb.proc.(*Process); !ok {
			t.Fatalf("the stand-in is a %T, want a process of its own", sb.proc)
		}
		if h, err := sharedNodeHost("sbfake.js"); h != nil || err != nil {
			t.Fatalf("a shared host without Main: %v, %v", h, err)
		}
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", sb.Port))
		if err != nil {
			t.Fatalf("the stand-in does not listen: %v", err)
		}
		c.Close()
	})
	if sb == nil {
		t.Fatal("no stand-in")
	}
	if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", sb.Port)); err == nil {
		c.Close()
		t.Fatal("the stand-in still listens after its test")
	}
}

// withoutMain makes the package's tests run as if its TestMain did not
// call Main, until t ends.
func withoutMain(t *testing.T) {
	shared.mu.Lock()
	shared.running = false
	shared.mu.Unlock()
	t.Cleanup(func() {
		shared.mu.Lock()
		shared.running = true
		shared.mu.Unlock()
	})
}

// asideShared sets the package's shared hosts and servers aside until t
// ends, so that what t starts is its own.
func asideShared(t *testing.T) {
	shared.mu.Lock()
	hosts, cosmos := shared.hosts, shared.cosmos
	shared.hosts, shared.cosmos = nil, nil
	shared.mu.Unlock()
	t.Cleanup(func() {
		shared.mu.Lock()
		shared.hosts, shared.cosmos = hosts, cosmos
		shared.mu.Unlock()
	})
}

// The Cosmos servers of a package are accounts of one Node process, each
// on its own port and reporting its own consistency level.
func TestCosmosServersOfAPackageShareAProcessButNotTheirAccount(t *testing.T) {
	t.Parallel()
	strong := SharedCosmos(t, CosmosOptions{Consistency: "Strong"})
	session := SharedCosmos(t, CosmosOptions{Consistency: "Session"})
	private := StartCosmos(t, CosmosOptions{Consistency: "Eventual"})
	var pid int
	for _, c := range []*Cosmos{strong, session, private} {
		i, ok := c.proc.(*hostedInstance)
		if !ok {
			t.Fatalf("server on %d is a %T, want an instance of the package's host", c.Port, c.proc)
		}
		if pid == 0 {
			pid = i.host.cmd.Process.Pid
		} else if i.host.cmd.Process.Pid != pid {
			t.Fatalf("servers in processes %d and %d, want one", pid, i.host.cmd.Process.Pid)
		}
	}
	for c, want := range map[*Cosmos]string{strong: "Strong", session: "Session", private: "Eventual"} {
		resp, err := http.Get(c.Endpoint)
		if err != nil {
			t.Fatal(err)
		}
		var acct struct {
			Policy struct {
				Level string `json:"defaultConsistencyLevel"`
			} `json:"userConsistencyPolicy"`
			Writable []struct {
				Endpoint string `json:"databaseAccountEndpoint"`
			} `json:"writableLocations"`
		}
		err = json.NewDecoder(resp.Body).Decode(&acct)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if acct.Policy.Level != want || len(acct.Writable) != 1 || acct.Writable[0].Endpoint != c.Endpoint {
			t.Errorf("account on %d: %+v, want %s at %s", c.Port, acct, want, c.Endpoint)
		}
	}
	private.Stop()
	if _, err := http.Get(private.Endpoint); err == nil {
		t.Fatal("a stopped server still answers")
	}
	if _, err := http.Get(strong.Endpoint); err != nil {
		t.Fatalf("stopping one server stopped another: %v", err)
	}
}
