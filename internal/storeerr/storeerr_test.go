package storeerr

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

type fixIt struct{ msg string }

func (e *fixIt) Error() string           { return "provider text naming acct.documents.azure.com: " + e.msg }
func (e *fixIt) OperatorMessage() string { return e.msg }

var errOwn = errors.New("the store's own kind")

func own(err error) string {
	if errors.Is(err, errOwn) {
		return "own"
	}
	return "default"
}

func TestClass(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{context.Canceled, "canceled"},
		{fmt.Errorf("read: %w", context.DeadlineExceeded), "timeout"},
		{fmt.Errorf("create: %w", &fixIt{"turn on time to live"}), "misconfigured: turn on time to live"},
		// The context's end decides before the store's own classes.
		{errors.Join(&fixIt{"x"}, context.Canceled), "canceled"},
		{errors.Join(errOwn, context.DeadlineExceeded), "timeout"},
		{fmt.Errorf("write: %w", errOwn), "own"},
		{errors.New("dial tcp: AccountKey=secret"), "default"},
	} {
		if got := Class(c.err, own); got != c.want {
			t.Errorf("Class(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
