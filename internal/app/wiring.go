package app

import (
	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/inbox/cosmosstore"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/servicebus"
)

// buildCosmosStore creates the Cosmos inbox. No request is sent here: the
// consistency check and container ensure run on first use.
func (a *endpointApp) buildCosmosStore() (inbox.Store, error) {
	c := a.cfg.Inbox.Cosmos
	account, err := a.sharedCosmosAccount(c)
	if err != nil {
		return nil, err
	}
	return cosmosstore.New(account, cosmosstore.Options{
		StoreOptions:           a.inboxStoreOptions(),
		ContainerID:            c.ContainerID,
		PurgeBatchSize:         a.cfg.Inbox.PurgeBatchSize,
		PurgeDeleteConcurrency: a.cfg.Inbox.CleanupConcurrency,
	})
}

// inboxStoreOptions are the options every store in the inbox's account
// shares (the inbox and the session state).
func (a *endpointApp) inboxStoreOptions() cosmos.StoreOptions {
	c := a.cfg.Inbox.Cosmos
	auto := c.AutoCreateContainer
	return cosmos.StoreOptions{
		DatabaseID:              c.DatabaseID,
		AutoCreateContainer:     &auto,
		AllowRelaxedConsistency: c.AllowRelaxedConsistency,
		RelaxAs:                 config.KeyCosmosRelaxed,
		Now:                     a.now,
	}
}

// cosmosAccount opens the account c names (no request is sent), the way
// every account of the app is opened: the SDK retries set explicitly
// (cosmos.DefaultRetry). cosmos.NewAccount adds the request-charge policy.
//
// The client gets no tracing provider: with one, azcosmos v1.5.0's
// background refresh of the account's regions runs on the triggering
// request's context and writes the same trace-state value as that request
// from another goroutine, a data race. The pipeline's own spans
// (nimbus.inbox.check, nimbus.session.read, nimbus.txn.commit, ...) time
// every Cosmos call.
func (h *host) cosmosAccount(c config.Cosmos) (*cosmos.Account, error) {
	return cosmos.NewAccount(cosmos.Config{
		ConnectionString:        c.ConnectionString,
		Endpoint:                c.AccountEndpoint,
		ManagedIdentityClientID: c.ClientID,
		Retry:                   cosmos.DefaultRetry,
	})
}

// serviceBusClient returns a client on the connection the Service Bus
// triggers use (ServiceBusConnection), the way every client of the app is
// made: the SDK retries set explicitly (servicebus.DefaultRetry). The
// client sends messages as given; their senders add the trace context
// (resolver.Traced, servicebus.ResolverScheduler). No connection is made
// here.
func (h *host) serviceBusClient() (*servicebus.Client, error) {
	r := h.cfg.Resolver
	return servicebus.New(servicebus.Options{
		ConnectionString:        r.ConnectionString,
		FullyQualifiedNamespace: r.FullyQualifiedNamespace,
		ManagedIdentityClientID: r.ClientID,
		Retry:                   servicebus.DefaultRetry,
	})
}

// buildServiceBusPublisher creates the Resolver publisher on the same
// connection setting the Subscriber trigger uses. The Service Bus client and
// its sender are created on the first publish.
func (a *endpointApp) buildServiceBusPublisher() (resolver.Publisher, error) {
	c, err := a.serviceBusClient()
	if err != nil {
		return nil, err
	}
	p, err := servicebus.NewResolverPublisher(c, a.cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, c.Close)
	a.sbClient = c
	return p, nil
}
