// Package message is the NimBus wire model: message types, application
// property names, the MessageContent body, reading an inbound message and
// building the responses a subscriber sends to the Resolver. It does no I/O.
//
// The rules follow NimBus's MessageHelper and MessageContext: property names
// are the PascalCase enum names, RetryCount is an AMQP int32, QueueTimeMs and
// ProcessingTimeMs are int64, everything else is a string, and the body is
// MessageContent serialized the way Newtonsoft.Json does with default
// settings (PascalCase, nulls written, declaration order).
package message
