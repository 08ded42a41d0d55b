package app

import (
	"context"
	"errors"

	"github.com/nimbus-go/functions-subscriber/internal/funchost"
	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
)

func (a *App) buildCosmosStore() (inbox.Store, error) {
	return nil, errors.New("app: the Cosmos inbox store is not wired yet")
}

func (a *App) buildServiceBusPublisher() (resolver.Publisher, error) {
	return nil, errors.New("app: the Service Bus publisher is not wired yet")
}

func (a *App) invokeCleanup(ctx context.Context, inv *funchost.Invocation) error {
	return errors.New("app: cleanup is not wired yet")
}
