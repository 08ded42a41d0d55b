package testenv

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// A test package shares its Cosmos stand-ins: its TestMain calls Main, and
// each test asks SharedCosmos for the package's server, which starts on
// first use and stops when the package's tests end. Tests keep apart by
// naming their own database (Cosmos.Database, UniqueDatabase).
// When a shared server cannot start, every test that asks for it skips
// with the reason (fails under NIMBUS_REQUIRE_EMULATORS=1), one by one,
// and no test tries to start it again.

var shared struct {
	mu      sync.Mutex
	running bool // Main is running the package's tests
	cosmos  map[CosmosOptions]*sharedStart
	hosts   map[string]*sharedHost
	stops   []func()
}

// sharedHost is the package's host of one stand-in script: started once,
// or the reason it could not start.
type sharedHost struct {
	once sync.Once
	v    *nodeHost
	err  error
}

// sharedStart is one shared server: started once, or the reason it could
// not start.
type sharedStart struct {
	once sync.Once
	v    *Cosmos
	err  error
}

// Main runs the package's tests (and benchmarks) and then stops the
// stand-ins they shared. Use it as the package's TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
func Main(m *testing.M) {
	os.Exit(RunMain(m))
}

// RunMain is Main for a TestMain that has more to do: it returns the exit
// code instead of exiting.
func RunMain(m *testing.M) int {
	raiseParallel()
	shared.mu.Lock()
	shared.running = true
	shared.mu.Unlock()
	defer stopShared()
	return m.Run()
}

// ParallelTests is how many parallel tests a package run through Main runs
// at once when go test is not given -parallel. The tests of a stand-in
// package spend most of their time waiting on the stand-ins' timers and
// round trips rather than on the CPU, so the default of GOMAXPROCS would
// leave a 2-core machine idle.
const ParallelTests = 4

// raiseParallel sets -test.parallel to ParallelTests (or GOMAXPROCS when
// greater) unless the command line set it.
func raiseParallel() {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if given || flag.Lookup("test.parallel") == nil {
		return
	}
	_ = flag.Set("test.parallel", strconv.Itoa(max(ParallelTests, runtime.GOMAXPROCS(0))))
}

func stopShared() {
	shared.mu.Lock()
	stops := shared.stops
	shared.stops, shared.running = nil, false
	shared.cosmos = nil
	shared.hosts = nil
	shared.mu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- { // the hosts after their instances
		stops[i]()
	}
}

// sharedCosmos returns the entry for opts, or nil when the package's
// TestMain does not run through Main (nothing would stop a shared server).
func sharedCosmos(opts CosmosOptions) *sharedStart {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.running {
		return nil
	}
	return entry(&shared.cosmos, opts)
}

// entry returns (*m)[k], making the map and the entry when missing.
func entry[K comparable, V any](m *map[K]*V, k K) *V {
	if *m == nil {
		*m = map[K]*V{}
	}
	e := (*m)[k]
	if e == nil {
		e = new(V)
		(*m)[k] = e
	}
	return e
}

// sharedNodeHost returns the package's host of script (sbfake.js,
// cosmos.js), starting it on first use, or nil when the package's TestMain
// does not run through Main.
func sharedNodeHost(script string) (*nodeHost, error) {
	shared.mu.Lock()
	if !shared.running {
		shared.mu.Unlock()
		return nil, nil
	}
	e := entry(&shared.hosts, script)
	shared.mu.Unlock()
	e.once.Do(func() {
		e.v, e.err = startNodeHost(script)
		if e.err == nil {
			addStop(e.v.stop)
		}
	})
	return e.v, e.err
}

func addStop(stop func()) {
	shared.mu.Lock()
	shared.stops = append(shared.stops, stop)
	shared.mu.Unlock()
}

// SharedCosmos returns the package's Cosmos DB stand-in configured by opts
// (one per distinct opts), starting it on first use. Tests must not stop
// it; each keeps to its own database (Database). When it cannot start, tb
// skips (fails under NIMBUS_REQUIRE_EMULATORS=1) with the reason. In a
// package whose TestMain does not call Main, it is StartCosmos: a server
// of tb's own.
func SharedCosmos(tb testing.TB, opts CosmosOptions) *Cosmos {
	tb.Helper()
	e := sharedCosmos(opts)
	if e == nil {
		return StartCosmos(tb, opts)
	}
	e.once.Do(func() {
		e.v, e.err = startCosmos(opts)
		if e.err == nil {
			addStop(e.v.Stop)
		}
	})
	if e.err != nil {
		Unavailable(tb, "local Cosmos DB stand-in unavailable: %v", e.err)
	}
	return e.v
}

var uniqueSeq atomic.Int64

var notNameChars = regexp.MustCompile(`[^A-Za-z0-9-]+`)

// UniqueDatabase returns a Cosmos database id no other test of the process
// uses: the test's name (letters, digits and dashes, at most 180
// characters) and a sequence number.
func UniqueDatabase(tb testing.TB) string {
	name := strings.Trim(notNameChars.ReplaceAllString(tb.Name(), "-"), "-")
	if len(name) > 180 {
		name = name[:180]
	}
	return fmt.Sprintf("%s-%d", name, uniqueSeq.Add(1))
}
