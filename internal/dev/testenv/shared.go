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
	cosmos  map[CosmosOptions]*started[*Cosmos]
	hosts   map[string]*started[*nodeHost]
	stops   []func()
}

// started is a shared server or host: started once, or the reason it could
// not start.
type started[T any] struct {
	once sync.Once
	v    T
	err  error
}

// get starts the value with start on first use and has Main stop it with
// stop when the package's tests end.
func (e *started[T]) get(start func() (T, error), stop func(T)) (T, error) {
	e.once.Do(func() {
		e.v, e.err = start()
		if e.err == nil {
			addStop(func() { stop(e.v) })
		}
	})
	return e.v, e.err
}

// lookup returns the entry for k in m, made on first use, or nil when the
// package's TestMain does not run through Main (nothing would stop a
// shared stand-in).
func lookup[K comparable, T any](m *map[K]*started[T], k K) *started[T] {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.running {
		return nil
	}
	if *m == nil {
		*m = map[K]*started[T]{}
	}
	e := (*m)[k]
	if e == nil {
		e = &started[T]{}
		(*m)[k] = e
	}
	return e
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

// sharedCosmos returns the entry for opts (see lookup).
func sharedCosmos(opts CosmosOptions) *started[*Cosmos] { return lookup(&shared.cosmos, opts) }

// sharedNodeHost returns the package's host of script (sbfake.js,
// cosmos.js), starting it on first use, or nil when the package's TestMain
// does not run through Main.
func sharedNodeHost(script string) (*nodeHost, error) {
	e := lookup(&shared.hosts, script)
	if e == nil {
		return nil, nil
	}
	return e.get(func() (*nodeHost, error) { return startNodeHost(script) }, (*nodeHost).stop)
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
	c, err := e.get(func() (*Cosmos, error) { return startCosmos(opts) }, (*Cosmos).Stop)
	if err != nil {
		Unavailable(tb, "local Cosmos DB stand-in unavailable: %v", err)
	}
	return c
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
