package resolver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// The app settings the configuration comes from. They are the same ones the
// Functions Service Bus trigger reads, so the publisher and the trigger
// always talk to the same namespace.
const (
	SettingConnection = "ServiceBusConnection"
	SettingNamespace  = "ServiceBusConnection__fullyQualifiedNamespace"
	SettingClientID   = "ServiceBusConnection__clientId"
)

// ServiceBusConfig configures a ServiceBusPublisher. Set ConnectionString,
// or FullyQualifiedNamespace for a managed identity (ClientID selects a
// user-assigned identity; without it DefaultAzureCredential is used). When
// both are set the connection string wins, as it does for the Functions
// trigger.
type ServiceBusConfig struct {
	// ConnectionString is the ServiceBusConnection app setting.
	ConnectionString string
	// FullyQualifiedNamespace is ServiceBusConnection__fullyQualifiedNamespace,
	// e.g. "sb-x.servicebus.windows.net".
	FullyQualifiedNamespace string
	// ClientID is ServiceBusConnection__clientId (user-assigned identity).
	ClientID string
	// Topic is the endpoint's own topic; responses carry To=Resolver and the
	// topology forwards them.
	Topic string
	// Credential overrides the identity chosen from ClientID (optional).
	Credential azcore.TokenCredential
	// ClientOptions are passed to the SDK client (optional).
	ClientOptions *azservicebus.ClientOptions
}

// ErrClosed is returned by Publish after Close.
var ErrClosed = errors.New("resolver: the Service Bus publisher is closed")

// ErrUnsupportedProperty is returned for an application property value that
// is not a string, int32, int64 or nil: NimBus's wire types are exact and
// the SDK would silently pick another AMQP type for, say, an int.
var ErrUnsupportedProperty = errors.New("resolver: unsupported application property type")

// ServiceBusPublisher publishes responses to the endpoint topic with
// azservicebus. The client and its one sender are created on the first
// Publish (start-up never waits on Azure), shared by every caller, and
// re-attempted on a later Publish if creating them failed. It is safe for
// concurrent use.
type ServiceBusPublisher struct {
	cfg       ServiceBusConfig
	newClient func(ServiceBusConfig) (*azservicebus.Client, error)

	sender atomic.Pointer[azservicebus.Sender] // fast path once created

	mu     sync.Mutex // guards creation and Close
	client *azservicebus.Client
	closed bool
}

var _ Publisher = (*ServiceBusPublisher)(nil)

// NewServiceBusPublisher validates cfg and returns a publisher. It does no
// I/O: the connection is made by the first Publish.
func NewServiceBusPublisher(cfg ServiceBusConfig) (*ServiceBusPublisher, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &ServiceBusPublisher{cfg: cfg, newClient: newServiceBusClient}, nil
}

func (c *ServiceBusConfig) validate() error {
	var problems []string
	if strings.TrimSpace(c.Topic) == "" {
		problems = append(problems, "the endpoint topic is empty (it is the endpoint id)")
	}
	switch {
	case c.ConnectionString != "":
		if why := checkConnectionString(c.ConnectionString); why != "" {
			problems = append(problems, fmt.Sprintf("%s is not a usable Service Bus connection string: %s", SettingConnection, why))
		}
	case c.FullyQualifiedNamespace != "":
		ns := c.FullyQualifiedNamespace
		if strings.Contains(ns, "://") || strings.ContainsAny(ns, "/; ") {
			problems = append(problems, fmt.Sprintf("%s must be a host name such as sb-x.servicebus.windows.net (no scheme, path or spaces)", SettingNamespace))
		}
	default:
		problems = append(problems, fmt.Sprintf("set %s (a connection string) or %s (managed identity; %s for a user-assigned one)", SettingConnection, SettingNamespace, SettingClientID))
	}
	if len(problems) > 0 {
		return fmt.Errorf("resolver: Service Bus publisher configuration: %s", strings.Join(problems, "; "))
	}
	return nil
}

// checkConnectionString reports what is wrong with s without ever echoing
// its content (it holds a key).
func checkConnectionString(s string) string {
	fields := map[string]string{}
	for _, part := range strings.Split(s, ";") {
		k, v, ok := strings.Cut(part, "=")
		if ok {
			fields[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
		}
	}
	ep := fields["endpoint"]
	switch {
	case ep == "":
		return "it has no Endpoint="
	case !strings.HasPrefix(strings.ToLower(ep), "sb://") || len(ep) <= len("sb://"):
		return "its Endpoint is not an sb:// address"
	case fields["sharedaccesssignature"] == "" && (fields["sharedaccesskeyname"] == "" || fields["sharedaccesskey"] == ""):
		return "it needs SharedAccessKeyName and SharedAccessKey (or SharedAccessSignature)"
	}
	return ""
}

func newServiceBusClient(cfg ServiceBusConfig) (*azservicebus.Client, error) {
	if cfg.ConnectionString != "" {
		c, err := azservicebus.NewClientFromConnectionString(cfg.ConnectionString, cfg.ClientOptions)
		if err != nil {
			// The SDK's parse errors do not include the key, but say which setting failed.
			return nil, fmt.Errorf("resolver: client from %s: %w", SettingConnection, err)
		}
		return c, nil
	}
	cred := cfg.Credential
	if cred == nil {
		var err error
		if cfg.ClientID != "" {
			cred, err = azidentity.NewManagedIdentityCredential(&azidentity.ManagedIdentityCredentialOptions{ID: azidentity.ClientID(cfg.ClientID)})
		} else {
			cred, err = azidentity.NewDefaultAzureCredential(nil)
		}
		if err != nil {
			return nil, fmt.Errorf("resolver: credential for %s: %w", SettingNamespace, err)
		}
	}
	c, err := azservicebus.NewClient(cfg.FullyQualifiedNamespace, cred, cfg.ClientOptions)
	if err != nil {
		return nil, fmt.Errorf("resolver: client for %s: %w", SettingNamespace, err)
	}
	return c, nil
}

// getSender returns the shared sender, creating the client and sender on
// first use. Concurrent first callers wait for one creation; a failure is
// returned to the callers of that attempt and the next call tries again.
func (p *ServiceBusPublisher) getSender() (*azservicebus.Sender, error) {
	if s := p.sender.Load(); s != nil {
		return s, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if s := p.sender.Load(); s != nil {
		return s, nil
	}
	client, err := p.newClient(p.cfg)
	if err != nil {
		return nil, err
	}
	s, err := client.NewSender(p.cfg.Topic, nil)
	if err != nil {
		_ = client.Close(context.Background())
		return nil, fmt.Errorf("resolver: sender for topic %q: %w", p.cfg.Topic, err)
	}
	p.client = client
	p.sender.Store(s)
	return s, nil
}

// Publish sends m to the endpoint topic: application properties with their
// exact Go types (string → AMQP string, int32 → int, int64 → long, nil →
// null), SessionID, CorrelationID when set, the body, and no MessageID (the
// broker assigns one). A non-nil error means the response may not have been
// sent.
func (p *ServiceBusPublisher) Publish(ctx context.Context, m *message.Outgoing) error {
	if m == nil {
		return errors.New("resolver: publish of a nil message")
	}
	for k, v := range m.ApplicationProperties {
		switch v.(type) {
		case string, int32, int64, nil:
		default:
			return fmt.Errorf("%w: %s is %T", ErrUnsupportedProperty, k, v)
		}
	}
	s, err := p.getSender()
	if err != nil {
		return err
	}
	msg := &azservicebus.Message{
		Body:                  m.Body,
		ApplicationProperties: m.ApplicationProperties, // the SDK copies the map
		CorrelationID:         m.CorrelationID,
	}
	if m.SessionID != "" {
		sid := m.SessionID
		msg.SessionID = &sid
	}
	if err := s.SendMessage(ctx, msg, nil); err != nil {
		return fmt.Errorf("resolver: sending %s to topic %q: %w", m.Type(), p.cfg.Topic, err)
	}
	return nil
}

// Close closes the sender and the client. Publish fails with ErrClosed
// afterwards. Closing an unused publisher does nothing; Close is idempotent.
func (p *ServiceBusPublisher) Close(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	s, c := p.sender.Swap(nil), p.client
	p.client = nil
	var errs []error
	if s != nil {
		if err := s.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("resolver: closing sender: %w", err))
		}
	}
	if c != nil {
		if err := c.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("resolver: closing client: %w", err))
		}
	}
	return errors.Join(errs...)
}
