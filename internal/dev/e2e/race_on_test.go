//go:build race

package e2e

// raceEnabled builds the handler with -race too, so its data races fail the
// tests.
const raceEnabled = true
