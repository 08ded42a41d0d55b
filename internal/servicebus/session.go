package servicebus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
)

// SessionReceiver holds the lock of one session on a topic subscription
// (peek-lock mode). Receive messages one at a time, settle each with
// Complete or Abandon, and Close the receiver to release the session; its
// unsettled messages then return to the subscription. It is not meant for
// concurrent Receive calls.
type SessionReceiver struct {
	r     *azservicebus.SessionReceiver
	where string // "topic/subscription", for errors
}

// AcceptSession locks session sessionID on topic/subscription. It fails if
// another receiver holds the session.
func (c *Client) AcceptSession(ctx context.Context, topic, subscription, sessionID string) (*SessionReceiver, error) {
	sc, err := c.clientForReceive()
	if err != nil {
		return nil, err
	}
	where := topic + "/" + subscription
	r, err := sc.AcceptSessionForSubscription(ctx, topic, subscription, sessionID, nil)
	if err != nil {
		return nil, c.sendErr(fmt.Sprintf("accept session %q on", sessionID), where, err)
	}
	return &SessionReceiver{r: r, where: where}, nil
}

// AcceptNextSession locks the next session on topic/subscription that has
// messages and no other receiver. It waits until ctx's deadline for one
// (the SDK passes the remaining time to the broker) and returns an error
// wrapping ErrNoSession if none became available by then, whether the
// broker said so or the deadline passed first. Give ctx a deadline; without
// one the broker's own limit (one minute on Service Bus) applies.
func (c *Client) AcceptNextSession(ctx context.Context, topic, subscription string) (*SessionReceiver, error) {
	sc, err := c.clientForReceive()
	if err != nil {
		return nil, err
	}
	where := topic + "/" + subscription
	r, err := sc.AcceptNextSessionForSubscription(ctx, topic, subscription, nil)
	if err != nil {
		// The broker answers "timeout" a little before the deadline; when
		// the deadline passes first (a slow round trip), the answer is the
		// same: nothing was available in time.
		var sbErr *azservicebus.Error
		if (errors.As(err, &sbErr) && sbErr.Code == azservicebus.CodeTimeout) ||
			(errors.Is(err, context.DeadlineExceeded) && errors.Is(ctx.Err(), context.DeadlineExceeded)) {
			return nil, fmt.Errorf("servicebus: accept next session on %q: %w (%w)", where, ErrNoSession, err)
		}
		return nil, c.sendErr("accept next session on", where, err)
	}
	return &SessionReceiver{r: r, where: where}, nil
}

func (c *Client) clientForReceive() (*azservicebus.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sdkClient()
}

// SessionID returns the id of the locked session.
func (r *SessionReceiver) SessionID() string { return r.r.SessionID() }

// LockedUntil returns when the session lock expires, as the broker
// reported it when the session was accepted (zero if it did not).
func (r *SessionReceiver) LockedUntil() time.Time { return r.r.LockedUntil() }

// Receive waits for the next message of the session and returns it
// locked. It returns an error wrapping ctx.Err() when ctx ends first: a
// caller learns that the session holds no more messages by waiting with a
// deadline.
//
// Messages are received one at a time on purpose: asking the SDK for
// several lets it release in-flight messages while later ones stay
// buffered, which breaks the session's order.
func (r *SessionReceiver) Receive(ctx context.Context) (*Received, error) {
	for {
		ms, err := r.r.ReceiveMessages(ctx, 1, nil)
		if err != nil {
			return nil, fmt.Errorf("servicebus: receive from session %q on %q: %w", r.SessionID(), r.where, err)
		}
		if len(ms) > 0 {
			return fromSDK(ms[0]), nil
		}
		// The SDK returns nothing and no error after a recoverable link
		// failure; try again until ctx ends.
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("servicebus: receive from session %q on %q: %w", r.SessionID(), r.where, err)
		}
	}
}

// Complete settles m as processed: the broker removes it.
func (r *SessionReceiver) Complete(ctx context.Context, m *Received) error {
	if m == nil || m.raw == nil {
		return errors.New("servicebus: complete of a message not received by this package")
	}
	if err := r.r.CompleteMessage(ctx, m.raw, nil); err != nil {
		return fmt.Errorf("servicebus: complete message %d of session %q on %q: %w", m.SequenceNumber, r.SessionID(), r.where, err)
	}
	return nil
}

// Abandon returns m to the session for redelivery; its delivery count goes
// up, and the broker dead-letters it after the entity's maximum.
func (r *SessionReceiver) Abandon(ctx context.Context, m *Received) error {
	if m == nil || m.raw == nil {
		return errors.New("servicebus: abandon of a message not received by this package")
	}
	if err := r.r.AbandonMessage(ctx, m.raw, nil); err != nil {
		return fmt.Errorf("servicebus: abandon message %d of session %q on %q: %w", m.SequenceNumber, r.SessionID(), r.where, err)
	}
	return nil
}

// Close releases the session lock; unsettled messages return to the
// subscription.
func (r *SessionReceiver) Close(ctx context.Context) error {
	if err := r.r.Close(ctx); err != nil {
		return fmt.Errorf("servicebus: closing the receiver of session %q on %q: %w", r.SessionID(), r.where, err)
	}
	return nil
}

// DeadLetter moves m to the subscription's dead-letter queue with reason
// and description (each cut to the broker's limit of 4,096 characters).
func (r *SessionReceiver) DeadLetter(ctx context.Context, m *Received, reason, description string) error {
	if m == nil || m.raw == nil {
		return errors.New("servicebus: dead-letter of a message not received by this package")
	}
	reason, description = cutUTF16(reason, maxDeadLetterText), cutUTF16(description, maxDeadLetterText)
	if err := r.r.DeadLetterMessage(ctx, m.raw, &azservicebus.DeadLetterOptions{Reason: &reason, ErrorDescription: &description}); err != nil {
		return fmt.Errorf("servicebus: dead-letter message %d of session %q on %q: %w", m.SequenceNumber, r.SessionID(), r.where, err)
	}
	return nil
}

// maxDeadLetterText is the broker's limit on a dead-letter reason and
// description, in characters (UTF-16 code units).
const maxDeadLetterText = 4096

func cutUTF16(s string, n int) string {
	units := 0
	for i, c := range s {
		w := 1
		if c >= 0x10000 {
			w = 2
		}
		if units+w > n {
			return s[:i]
		}
		units += w
	}
	return s
}

// RenewLock extends the session lock (and with it the locks of the
// session's received messages).
func (r *SessionReceiver) RenewLock(ctx context.Context) error {
	if err := r.r.RenewSessionLock(ctx, nil); err != nil {
		return fmt.Errorf("servicebus: renew the lock of session %q on %q: %w", r.SessionID(), r.where, err)
	}
	return nil
}

// IsSessionLocked reports whether err says that the session is locked by
// another receiver (AMQP condition com.microsoft:session-cannot-be-locked).
func IsSessionLocked(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Condition == "com.microsoft:session-cannot-be-locked"
}
