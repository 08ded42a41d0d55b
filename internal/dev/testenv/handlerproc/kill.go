package handlerproc

import (
	"context"
	"fmt"
	"syscall"
)

// Kill sends SIGKILL, a crash: no shutdown code runs, in-flight requests
// are cut and nothing unflushed survives. It waits until the process has
// exited and its output is read. Killing a process that has already exited
// does nothing.
func (p *Proc) Kill(ctx context.Context) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		select {
		case <-p.done: // it exited meanwhile
			return nil
		default:
		}
		return fmt.Errorf("handlerproc: SIGKILL: %w", err)
	}
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("handlerproc: waiting for the killed handler to exit: %w", ctx.Err())
	}
}
