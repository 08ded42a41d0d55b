package config

// KeySessionContainer names the container of the session-state store: one
// document per (endpoint, SessionId) holding NimBus's session state (the
// blocking event, parked copies, replay). It sits beside
// NimBus__Inbox__Cosmos__ContainerId because the state lives in the inbox's
// account and database: both need Strong consistency, and sharing the
// account keeps one set of connection settings.
const KeySessionContainer = "NimBus__Inbox__Cosmos__SessionContainerId"

// DefaultSessionContainer is the session-state container's default id. Not
// "sessions": the Resolver's tracking store names one container after each
// endpoint in a database of the same default name, and "sessions" is a
// plausible endpoint id.
const DefaultSessionContainer = "sessionstate"

// sessionContainer reads KeySessionContainer into c. It must pass the
// Cosmos DB id rule and differ from the inbox's container: both key their
// documents by the same identity hash, so a shared container would let an
// inbox record and a session's state overwrite each other's id.
func (l *loader) sessionContainer(c *Cosmos) {
	c.SessionContainerID = l.cosmosID(KeySessionContainer, DefaultSessionContainer)
	if c.SessionContainerID == c.ContainerID {
		l.problem("%s=%s is the inbox's container (%s); the session state needs its own container, because both key documents by the same identity hash", KeySessionContainer, show(c.SessionContainerID), KeyCosmosContainer)
	}
}
