package subscriber

import (
	"context"
	"sync"

	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// send publishes m to the endpoint topic within SettleTimeout. Its error
// is a *sendError.
func (p *Pipeline) send(ctx context.Context, m *message.Outgoing) error {
	sctx, cancel := context.WithTimeout(ctx, p.o.SettleTimeout)
	defer cancel()
	if err := p.o.Publisher.Publish(sctx, m); err != nil {
		return &sendError{verb: "send", messageType: m.Type(), err: err, canceled: sctx.Err() != nil}
	}
	return nil
}

// sendAll publishes ms concurrently, within one SettleTimeout. It fails
// with the first failed send (in the order of ms) if any fails.
func (p *Pipeline) sendAll(ctx context.Context, ms ...*message.Outgoing) error {
	if len(ms) == 1 {
		return p.send(ctx, ms[0])
	}
	sctx, cancel := context.WithTimeout(ctx, p.o.SettleTimeout)
	defer cancel()
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() { errs[i] = p.o.Publisher.Publish(sctx, m) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return &sendError{verb: "send", messageType: ms[i].Type(), err: err, canceled: sctx.Err() != nil}
		}
	}
	return nil
}

// respond sends the Resolver response out.
func (j *job) respond(ctx context.Context, out *message.Outgoing) error {
	if err := j.p.send(ctx, out); err != nil {
		return err
	}
	j.did.responded = true
	return nil
}

// respondAll sends ms out at once (see sendAll), a Resolver response
// among them.
func (j *job) respondAll(ctx context.Context, ms ...*message.Outgoing) error {
	if err := j.p.sendAll(ctx, ms...); err != nil {
		return err
	}
	j.did.responded = true
	return nil
}
