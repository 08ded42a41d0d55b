package config

// The sample endpoint's ledger: the Cosmos DB container its transactional
// PaymentReceived handler keeps payments and balances in, in the inbox's
// account (with the inbox's credentials), partitioned on /customerId. With
// NimBus__Inbox__Store=InMemory it is in memory. The sample handler reads
// the two settings; they are listed here so that they are known names and
// documented with the others.
const (
	KeyLedgerDatabase  = "NimBus__Sample__Ledger__DatabaseId"
	KeyLedgerContainer = "NimBus__Sample__Ledger__ContainerId"

	DefaultLedgerDatabase  = "Billing"
	DefaultLedgerContainer = "ledger"
)

// The sample endpoint's orders: the container its PlaceOrder HTTP function
// commits an order and its OrderPlaced event to through a front door, in
// the inbox's account, partitioned on /customerId (in memory with
// NimBus__Inbox__Store=InMemory). The sample reads the two settings; they
// are listed here so that they are known names.
const (
	KeyOrdersDatabase  = "NimBus__Sample__Orders__DatabaseId"
	KeyOrdersContainer = "NimBus__Sample__Orders__ContainerId"

	DefaultOrdersDatabase  = "Sales"
	DefaultOrdersContainer = "orders"
)

// Ledger is the sample ledger's container.
type Ledger struct {
	DatabaseID  string
	ContainerID string
}

// ledger reads the ledger settings; each must pass the Cosmos DB id rule.
func (l *loader) ledger() Ledger {
	return Ledger{
		DatabaseID:  l.cosmosID(KeyLedgerDatabase, DefaultLedgerDatabase),
		ContainerID: l.cosmosID(KeyLedgerContainer, DefaultLedgerContainer),
	}
}
