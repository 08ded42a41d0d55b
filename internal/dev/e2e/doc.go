// Package e2e holds the end-to-end tests and benchmark of the subscriber: the
// real ./handler binary (built once per test run, by the first test that
// needs it), started the way the Functions host starts it, fed by the mini
// host (internal/dev/minihost) from the local Service Bus stand-in, with its
// inbox in the package's shared local Cosmos DB stand-in (Strong
// consistency, a database per test, optionally behind the fault proxy) and
// its Resolver responses read back from the Resolver topic of the NimBus
// topology. One harness (harness_test.go) starts all of it.
//
// The transactional tests drive the sample's PaymentReceived handler, whose
// payments, balances and inbox markers commit in one batch per customer in
// the ledger container, and read that container straight from Cosmos:
// concurrent copies of one message (delivered straight to the binary, as a
// host does after losing a session lock) and a stream of payments through
// SIGKILLs of the binary around the batch and faults injected into the batch
// requests (skipped with -short).
//
// Everything runs on 127.0.0.1. Without Node the tests skip; with
// NIMBUS_REQUIRE_EMULATORS=1 they fail instead.
//
// Run the tests (-race also builds the handler with -race and fails a test
// when the handler process reports a data race; -short leaves the long runs
// to the full suite):
//
//	go test -race -count=1 ./internal/dev/e2e
//
// Run the benchmark (1,000 messages over 16 sessions per iteration; without
// -race, whose instrumentation would dominate the figures):
//
//	go test -run '^$' -bench BenchmarkEndToEnd -benchtime 1x -count 1 ./internal/dev/e2e
//
// It reports msgs/s, the p50/p99 latency from send to the Resolver response,
// the p50/p99 invocation duration the handler logged, the Resolver responses
// per message and the Cosmos requests per message (counted by the fault
// proxy with faults disabled).
//
// The package has no non-test code.
package e2e
