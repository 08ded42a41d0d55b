package servicebus

import (
	"context"
	"errors"
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
)

// ErrTooLargeForBatch is returned by [Client.SendBatch] for a message that
// does not fit in a batch of the entity even alone; nothing is sent.
var ErrTooLargeForBatch = errors.New("servicebus: the message does not fit in a batch of the entity")

// SendBatch sends ms to entity in their order, as AMQP batch transfers:
// every message that fits in one batch of the entity (the link's maximum
// batch size: 256 KB on Standard, 1 MB on Premium) goes in one round trip,
// which the broker accepts or refuses whole, and messages are enqueued in
// the order of ms. When they do not all fit, they are split into
// consecutive batches, filled in order, and each is sent after the broker
// accepted the previous one; an error then names the batch that failed,
// and the batches before it were sent. The checks of Send (property types)
// run on every message, and every batch is built (a message too large for
// a batch even alone fails with ErrTooLargeForBatch), before anything is
// sent. A message without MessageID gets one from the SDK, a random UUID
// (a single Send leaves that to the broker). Sending no message does
// nothing.
func (c *Client) SendBatch(ctx context.Context, entity string, ms []*Message) error {
	if len(ms) == 0 {
		return nil
	}
	ams := make([]*azservicebus.Message, len(ms))
	for i, m := range ms {
		am, err := m.toSDK()
		if err != nil {
			return fmt.Errorf("servicebus: message %d of %d: %w", i+1, len(ms), err)
		}
		ams[i] = am
	}
	s, err := c.sender(entity)
	if err != nil {
		return err
	}
	batches, ends, err := c.fill(ctx, s, entity, ams)
	if err != nil {
		return err
	}
	first := 1
	for i, b := range batches {
		if err := s.SendMessageBatch(ctx, b, nil); err != nil {
			op := fmt.Sprintf("send batch %d of %d (messages %d-%d of %d) to", i+1, len(batches), first, ends[i], len(ms))
			return c.sendErr(op, entity, err)
		}
		first = ends[i] + 1
	}
	return nil
}

// fill puts ams in order into as few batches as they fit in and returns
// them with the 1-based number of the last message of each.
func (c *Client) fill(ctx context.Context, s *azservicebus.Sender, entity string, ams []*azservicebus.Message) ([]*azservicebus.MessageBatch, []int, error) {
	var opts *azservicebus.MessageBatchOptions
	if c.batchMaxBytes > 0 {
		opts = &azservicebus.MessageBatchOptions{MaxBytes: c.batchMaxBytes}
	}
	var (
		batches []*azservicebus.MessageBatch
		ends    []int
		cur     *azservicebus.MessageBatch
	)
	for i, am := range ams {
		for {
			if cur == nil {
				b, err := s.NewMessageBatch(ctx, opts)
				if err != nil {
					return nil, nil, c.sendErr("open a batch for", entity, err)
				}
				cur = b
				batches = append(batches, b)
				ends = append(ends, i)
			}
			err := cur.AddMessage(am, nil)
			if err == nil {
				ends[len(ends)-1] = i + 1
				break
			}
			if !errors.Is(err, azservicebus.ErrMessageTooLarge) {
				return nil, nil, fmt.Errorf("servicebus: message %d of %d: %w", i+1, len(ams), err)
			}
			if cur.NumMessages() == 0 {
				return nil, nil, fmt.Errorf("%w: message %d of %d (%d body bytes), entity %q", ErrTooLargeForBatch, i+1, len(ams), len(am.Body), entity)
			}
			cur = nil
		}
	}
	return batches, ends, nil
}

var _ resolver.BatchPublisher = (*ResolverPublisher)(nil)

// PublishBatch sends ms to the endpoint topic with [Client.SendBatch]: in
// one round trip when they fit in one batch, in their order, with the
// property typing of Publish; each keeps its MessageID (a published
// event's) or gets a random UUID from the SDK (a response).
func (p *ResolverPublisher) PublishBatch(ctx context.Context, ms []*message.Outgoing) error {
	sms := make([]*Message, len(ms))
	for i, m := range ms {
		if m == nil {
			return fmt.Errorf("servicebus: message %d of %d of a batch is nil", i+1, len(ms))
		}
		sms[i] = fromOutgoing(m)
	}
	if err := p.c.SendBatch(ctx, p.topic, sms); err != nil {
		return fmt.Errorf("servicebus: publishing %d messages to topic %q: %w", len(ms), p.topic, err)
	}
	return nil
}
