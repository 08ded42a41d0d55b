// Package sleep waits for a duration or until a context ends.
package sleep

import (
	"context"
	"time"
)

// For returns after d, or as soon as ctx ends if that is sooner. It returns
// at once when d is not positive.
func For(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
