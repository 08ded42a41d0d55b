package app

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
	"github.com/nimbus-go/functions-subscriber/internal/txn/cosmostxn"
)

// buildTxn creates the store of the transactional handlers' containers,
// nil when no handler is transactional. The containers are in the inbox's
// Cosmos account with the inbox's credentials, auto-create and consistency
// settings; with the inbox in memory they are in memory, one store for the
// process. Without the inbox there is no store: the markers are the
// inbox's. No request is sent here.
func (a *endpointApp) buildTxn(handlers *subscriber.Registry) (txn.Store, error) {
	if len(handlers.Targets()) == 0 {
		return nil, nil
	}
	switch {
	case !a.cfg.Inbox.Enabled:
		return nil, fmt.Errorf("app: transactional handlers and front doors need the inbox (%s=true)", config.KeyInboxEnabled)
	case a.cfg.Inbox.Store == config.StoreInMemory:
		a.txnMemory = txn.NewMemory(a.now)
		return a.txnMemory, nil
	case a.cfg.Inbox.Store != config.StoreCosmos:
		return nil, fmt.Errorf("app: inbox store %q is not available to transactional handlers", a.cfg.Inbox.Store)
	}
	account, err := a.sharedCosmosAccount(a.cfg.Inbox.Cosmos)
	if err != nil {
		return nil, err
	}
	return cosmostxn.New(account, cosmostxn.Options{StoreOptions: a.inboxStoreOptions()})
}

// serveTxnDocuments answers GET /_nimbus/txn?database=D&container=C with
// the live documents (markers included) of the in-memory container C of a
// transactional handler, as a JSON array: a view for local demos and
// tests, served only when the containers are in memory.
func (a *endpointApp) serveTxnDocuments(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	db, ctr := q.Get("database"), q.Get("container")
	for _, t := range a.txnTargets {
		if t.DatabaseID != db || t.ContainerID != ctr {
			continue
		}
		docs, err := a.txnMemory.Documents(t)
		if err != nil {
			http.Error(w, "the container cannot be read", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(docs)
		return
	}
	http.Error(w, "no transactional handler uses that container (give database= and container=)", http.StatusNotFound)
}
