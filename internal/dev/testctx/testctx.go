// Package testctx gives tests contexts bounded in time.
package testctx

import (
	"context"
	"testing"
	"time"
)

// Timeout returns a context that ends after d, or when tb's cleanups run if
// that is sooner. Its parent is context.Background rather than tb.Context,
// so a context made inside a Cleanup function (which runs after tb.Context
// is cancelled) still has its d to run.
func Timeout(tb testing.TB, d time.Duration) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}
