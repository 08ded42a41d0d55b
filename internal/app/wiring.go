package app

import (
	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/Azure/azure-sdk-for-go/sdk/tracing/azotel"

	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/inbox/cosmosstore"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/servicebus"
)

// buildCosmosStore creates the Cosmos inbox. No request is sent here: the
// consistency check and container ensure run on first use.
func (a *App) buildCosmosStore() (inbox.Store, error) {
	c := a.cfg.Inbox.Cosmos
	account, err := cosmos.NewAccount(cosmos.Config{
		ConnectionString:        c.ConnectionString,
		Endpoint:                c.AccountEndpoint,
		ManagedIdentityClientID: c.ClientID,
		Retry:                   cosmos.DefaultRetry,
		ClientOptions:           a.cosmosClientOptions(),
	})
	if err != nil {
		return nil, err
	}
	auto := c.AutoCreateContainer
	return cosmosstore.New(account, cosmosstore.Options{
		StoreOptions: cosmos.StoreOptions{
			DatabaseID:              c.DatabaseID,
			AutoCreateContainer:     &auto,
			AllowRelaxedConsistency: c.AllowRelaxedConsistency,
			RelaxAs:                 config.KeyCosmosRelaxed,
			Now:                     a.now,
		},
		ContainerID:            c.ContainerID,
		PurgeBatchSize:         a.cfg.Inbox.PurgeBatchSize,
		PurgeDeleteConcurrency: a.cfg.Inbox.CleanupConcurrency,
	})
}

// cosmosClientOptions are the Cosmos client options of every account the
// app opens: azcosmos's spans join the invocation's trace. (The request
// charge policy is added by cosmos.NewAccount to every account.)
func (a *App) cosmosClientOptions() *azcosmos.ClientOptions {
	return &azcosmos.ClientOptions{ClientOptions: azcore.ClientOptions{
		TracingProvider: azotel.NewTracingProvider(a.tp, nil),
	}}
}

// buildServiceBusPublisher creates the Resolver publisher on the same
// connection setting the Subscriber trigger uses. The Service Bus client and
// its sender are created on the first publish.
func (a *App) buildServiceBusPublisher() (resolver.Publisher, error) {
	r := a.cfg.Resolver
	c, err := servicebus.New(servicebus.Options{
		ConnectionString:        r.ConnectionString,
		FullyQualifiedNamespace: r.FullyQualifiedNamespace,
		ManagedIdentityClientID: r.ClientID,
		Retry:                   servicebus.DefaultRetry,
		TracerProvider:          a.tp,
	})
	if err != nil {
		return nil, err
	}
	p, err := servicebus.NewResolverPublisher(c, a.cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, c.Close)
	return p, nil
}
