package servicebus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// Options configure a [Client]. Set ConnectionString, or
// FullyQualifiedNamespace for token authentication. When both are set the
// connection string wins, as it does for the Functions Service Bus trigger.
type Options struct {
	// ConnectionString is a Service Bus connection string
	// (Endpoint=sb://…;SharedAccessKeyName=…;SharedAccessKey=…). The caller
	// validates it; a string the SDK cannot parse fails the first use.
	ConnectionString string
	// FullyQualifiedNamespace is the namespace host name, e.g.
	// "sb-x.servicebus.windows.net", used with Credential, or with the
	// managed identity ManagedIdentityClientID, or with
	// DefaultAzureCredential when neither is set.
	FullyQualifiedNamespace string
	// ManagedIdentityClientID selects a user-assigned managed identity.
	ManagedIdentityClientID string
	// Credential overrides the identity chosen from ManagedIdentityClientID.
	Credential azcore.TokenCredential
	// Retry is the SDK retry setting of every operation. It must be set
	// (use DefaultRetry): a zero value would silently take the SDK's
	// defaults.
	Retry azservicebus.RetryOptions
}

// ErrClosed is returned by every operation after [Client.Close].
var ErrClosed = errors.New("servicebus: the client is closed")

// ErrNoSession is returned by [Client.AcceptNextSession] when no session
// became available before the ctx deadline.
var ErrNoSession = errors.New("servicebus: no session available")

// Client is the process's Service Bus client. The SDK client is created on
// first use and shared; senders are created per entity on first use and
// reused. It is safe for concurrent use.
type Client struct {
	opts      Options
	newClient func(Options) (*azservicebus.Client, error)

	// senders is an immutable map replaced on each new entity, so the send
	// path reads it without a lock or allocation.
	senders atomic.Pointer[map[string]*azservicebus.Sender]
	closed  atomic.Bool
	// sendersCreated counts sender creations (tests check that concurrent
	// first uses share one).
	sendersCreated atomic.Int32
	// batchMaxBytes, when not 0, caps every batch of SendBatch below the
	// link's size (tests split batches with it).
	batchMaxBytes uint64

	mu     sync.Mutex // guards creation and Close
	client *azservicebus.Client
}

// New checks opts and returns a client. It does no I/O and creates no SDK
// client: that happens on first use.
func New(opts Options) (*Client, error) {
	var problems []string
	if opts.ConnectionString == "" && strings.TrimSpace(opts.FullyQualifiedNamespace) == "" {
		problems = append(problems, "set Options.ConnectionString or Options.FullyQualifiedNamespace")
	}
	if opts.Retry == (azservicebus.RetryOptions{}) {
		problems = append(problems, "Options.Retry is not set (use servicebus.DefaultRetry)")
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("servicebus: %s", strings.Join(problems, "; "))
	}
	return &Client{opts: opts, newClient: newSDKClient}, nil
}

func newSDKClient(o Options) (*azservicebus.Client, error) {
	co := &azservicebus.ClientOptions{RetryOptions: o.Retry}
	if o.ConnectionString != "" {
		c, err := azservicebus.NewClientFromConnectionString(o.ConnectionString, co)
		if err != nil {
			// The SDK's parse errors do not echo the key.
			return nil, fmt.Errorf("servicebus: client from Options.ConnectionString: %w", err)
		}
		return c, nil
	}
	cred := o.Credential
	if cred == nil {
		var err error
		if o.ManagedIdentityClientID != "" {
			cred, err = azidentity.NewManagedIdentityCredential(&azidentity.ManagedIdentityCredentialOptions{ID: azidentity.ClientID(o.ManagedIdentityClientID)})
		} else {
			cred, err = azidentity.NewDefaultAzureCredential(nil)
		}
		if err != nil {
			return nil, fmt.Errorf("servicebus: credential for namespace %q: %w", o.FullyQualifiedNamespace, err)
		}
	}
	c, err := azservicebus.NewClient(o.FullyQualifiedNamespace, cred, co)
	if err != nil {
		return nil, fmt.Errorf("servicebus: client for namespace %q: %w", o.FullyQualifiedNamespace, err)
	}
	return c, nil
}

// sdkClient returns the SDK client, creating it on first use. c.mu must be
// held. A failure is returned and the next call tries again.
func (c *Client) sdkClient() (*azservicebus.Client, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	if c.client != nil {
		return c.client, nil
	}
	sc, err := c.newClient(c.opts)
	if err != nil {
		return nil, err
	}
	c.client = sc
	return sc, nil
}

// sender returns the sender for entity, creating the client and the sender
// on first use. Concurrent first callers wait for one creation.
func (c *Client) sender(entity string) (*azservicebus.Sender, error) {
	if m := c.senders.Load(); m != nil {
		if s := (*m)[entity]; s != nil {
			return s, nil
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return nil, ErrClosed
	}
	var old map[string]*azservicebus.Sender
	if m := c.senders.Load(); m != nil {
		old = *m
		if s := old[entity]; s != nil {
			return s, nil
		}
	}
	if strings.TrimSpace(entity) == "" {
		return nil, errors.New("servicebus: empty entity name")
	}
	sc, err := c.sdkClient()
	if err != nil {
		return nil, err
	}
	s, err := sc.NewSender(entity, nil)
	if err != nil {
		return nil, fmt.Errorf("servicebus: sender for %q: %w", entity, err)
	}
	c.sendersCreated.Add(1)
	next := make(map[string]*azservicebus.Sender, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[entity] = s
	c.senders.Store(&next)
	return s, nil
}

// sendErr wraps an SDK failure, adding ErrClosed when Close ran meanwhile.
func (c *Client) sendErr(op, entity string, err error) error {
	if c.closed.Load() {
		return fmt.Errorf("servicebus: %s %q: %w (%w)", op, entity, ErrClosed, err)
	}
	return fmt.Errorf("servicebus: %s %q: %w", op, entity, err)
}

// Send sends m to entity (a topic or queue name). Application properties
// keep their exact types; anything but string, int32, int64 or nil is
// refused with ErrUnsupportedProperty before any I/O. A non-nil error means
// the message may not have been sent. The SDK retries transient failures
// as set by Options.Retry, within ctx. The message carries the trace
// context its properties hold: the sender adds it (telemetry.StartSend).
func (c *Client) Send(ctx context.Context, entity string, m *Message) error {
	am, err := m.toSDK()
	if err != nil {
		return err
	}
	s, err := c.sender(entity)
	if err != nil {
		return err
	}
	if err := s.SendMessage(ctx, am, nil); err != nil {
		return c.sendErr("send to", entity, err)
	}
	return nil
}

// Schedule sends m to entity for enqueueing at the time at and returns the
// broker's sequence number of the scheduled message. The checks and
// retries are those of Send.
func (c *Client) Schedule(ctx context.Context, entity string, m *Message, at time.Time) (int64, error) {
	am, err := m.toSDK()
	if err != nil {
		return 0, err
	}
	s, err := c.sender(entity)
	if err != nil {
		return 0, err
	}
	seqs, err := s.ScheduleMessages(ctx, []*azservicebus.Message{am}, at, nil)
	if err != nil {
		return 0, c.sendErr("schedule on", entity, err)
	}
	if len(seqs) != 1 {
		return 0, fmt.Errorf("servicebus: schedule on %q: the broker returned %d sequence numbers for one message", entity, len(seqs))
	}
	return seqs[0], nil
}

// Close closes every sender, then the SDK client (which also closes the
// session receivers still open). Every operation fails with ErrClosed
// afterwards. Closing an unused client does nothing; Close is idempotent.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed.Store(true)
	var senders map[string]*azservicebus.Sender
	if m := c.senders.Swap(nil); m != nil {
		senders = *m
	}
	sc := c.client
	c.client = nil
	var errs []error
	for entity, s := range senders {
		if err := s.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("servicebus: closing the sender for %q: %w", entity, err))
		}
	}
	if sc != nil {
		if err := sc.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("servicebus: closing the client: %w", err))
		}
	}
	return errors.Join(errs...)
}
