// Package minihost stands in for the Azure Functions host in tests: it
// receives from a Service Bus session subscription with azservicebus, builds
// each invocation envelope exactly as the host does for a custom handler
// (research/functions.md §1, `dataType: binary`, sessions on), POSTs it to
// the handler and settles the message the way the host does: complete on a
// successful (2xx, JSON) invocation, abandon otherwise. It also builds timer
// invocations.
//
// The envelope builders are pure functions so their byte shape can be
// checked against captured fixtures.
package minihost

import (
	"crypto/rand"
	"encoding/hex"
	"sort"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostsim"
)

// Property is one application property; the host writes them in the order
// the message carried them.
type Property = hostsim.Property

// ServiceBusTrigger is what the host knows about one delivered message.
// Nil pointers are the .NET nulls the host leaves out of Metadata.
type ServiceBusTrigger struct {
	Body []byte
	// SessionLockedUntil is the session lock; the zero time means a
	// non-session trigger, whose action objects are {}.
	SessionLockedUntil time.Time
	// Namespace is Client.FullyQualifiedNamespace; ClientIdentifier is
	// Client.Identifier, written only when set.
	Namespace        string
	ClientIdentifier string

	DeliveryCount           int
	DeadLetterSource        *string
	LockToken               string
	ExpiresAt               time.Time
	EnqueuedTime            time.Time
	MessageID               string
	ContentType             *string
	ReplyTo                 *string
	SequenceNumber          int64
	To                      *string
	Subject                 *string
	CorrelationID           *string
	ApplicationProperties   []Property
	SessionID               *string
	ReplyToSessionID        *string
	PartitionKey            *string
	TransactionPartitionKey *string
}

// Sys is the WebJobs system binding data every invocation carries.
type Sys struct {
	MethodName string
	UtcNow     time.Time
	RandGuid   string
}

// NewSys returns Sys for an invocation of function now.
func NewSys(function string) Sys {
	return Sys{MethodName: function, UtcNow: time.Now().UTC(), RandGuid: NewGUID()}
}

// maxDateTimeOffset is .NET's DateTimeOffset.MaxValue: ExpiresAt of a
// message whose time to live is unlimited.
var maxDateTimeOffset = time.Date(9999, 12, 31, 23, 59, 59, 999999900, time.UTC)

// TriggerFromMessage describes m as the Service Bus extension does.
// Application properties are sorted by name: the SDK hands them over as a Go
// map, so their wire order is lost (JSON object order carries no meaning).
func TriggerFromMessage(m *azservicebus.ReceivedMessage, sessionLockedUntil time.Time, namespace, clientIdentifier string) *ServiceBusTrigger {
	t := &ServiceBusTrigger{
		Body:               m.Body,
		SessionLockedUntil: sessionLockedUntil,
		Namespace:          namespace,
		ClientIdentifier:   clientIdentifier,
		DeliveryCount:      int(m.DeliveryCount),
		DeadLetterSource:   m.DeadLetterSource,
		LockToken:          formatGUID(m.LockToken),
		MessageID:          m.MessageID,
		ContentType:        m.ContentType,
		ReplyTo:            m.ReplyTo,
		To:                 m.To,
		Subject:            m.Subject,
		CorrelationID:      m.CorrelationID,
		SessionID:          m.SessionID,
		ReplyToSessionID:   m.ReplyToSessionID,
		PartitionKey:       m.PartitionKey,
		ExpiresAt:          maxDateTimeOffset,
	}
	if m.SequenceNumber != nil {
		t.SequenceNumber = *m.SequenceNumber
	}
	if m.EnqueuedTime != nil {
		t.EnqueuedTime = *m.EnqueuedTime
		if m.TimeToLive != nil && *m.TimeToLive > 0 && maxDateTimeOffset.Sub(t.EnqueuedTime) > *m.TimeToLive {
			t.ExpiresAt = t.EnqueuedTime.Add(*m.TimeToLive)
		}
	}
	names := make([]string, 0, len(m.ApplicationProperties))
	for k := range m.ApplicationProperties {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		t.ApplicationProperties = append(t.ApplicationProperties, Property{Name: k, Value: m.ApplicationProperties[k]})
	}
	return t
}

// BuildServiceBusInvocation returns the request body the host POSTs for a
// Service Bus trigger with `"dataType": "binary"`, cardinality one (see
// hostsim for the format). It fails only for an application property value
// of a type the host could not have produced.
func BuildServiceBusInvocation(binding string, t *ServiceBusTrigger, sys Sys) ([]byte, error) {
	return hostsim.Build(hostsim.ServiceBusMessage{
		FunctionName:            sys.MethodName,
		Binding:                 binding,
		Body:                    t.Body,
		MessageID:               t.MessageID,
		SessionID:               t.SessionID,
		CorrelationID:           t.CorrelationID,
		ContentType:             t.ContentType,
		Subject:                 t.Subject,
		ReplyTo:                 t.ReplyTo,
		ReplyToSessionID:        t.ReplyToSessionID,
		To:                      t.To,
		PartitionKey:            t.PartitionKey,
		TransactionPartitionKey: t.TransactionPartitionKey,
		DeadLetterSource:        t.DeadLetterSource,
		LockToken:               t.LockToken,
		DeliveryCount:           t.DeliveryCount,
		SequenceNumber:          t.SequenceNumber,
		EnqueuedTime:            t.EnqueuedTime,
		ExpiresAt:               t.ExpiresAt,
		SessionLockedUntil:      t.SessionLockedUntil,
		Properties:              t.ApplicationProperties,
		Namespace:               t.Namespace,
		ClientID:                t.ClientIdentifier,
		UtcNow:                  sys.UtcNow,
		RandGUID:                sys.RandGuid,
	})
}

// TimerInfo is the timer trigger's TimerInfo.
type TimerInfo struct {
	// Last, Next and LastUpdated are the schedule status; the zero time is
	// written as 0001-01-01T00:00:00+00:00 (first run).
	Last, Next, LastUpdated time.Time
	// NoMonitor writes "ScheduleStatus": null (useMonitor off).
	NoMonitor bool
	IsPastDue bool
}

// BuildTimerInvocation returns the request body the host POSTs for a timer
// trigger.
func BuildTimerInvocation(binding string, t TimerInfo, sys Sys) []byte {
	return hostsim.TimerEnvelope(hostsim.Timer{
		FunctionName: sys.MethodName, Binding: binding, Last: t.Last, Next: t.Next, LastUpdated: t.LastUpdated,
		IsPastDue: t.IsPastDue, NoMonitor: t.NoMonitor, UtcNow: sys.UtcNow, RandGUID: sys.RandGuid,
	})
}

// formatGUID formats 16 bytes in .NET's Guid "D" form. The SDK already
// presents lock tokens in .NET byte order, so this is the host's text.
func formatGUID(u [16]byte) string {
	var s [36]byte
	hex.Encode(s[0:8], u[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], u[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], u[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], u[8:10])
	s[23] = '-'
	hex.Encode(s[24:], u[10:])
	return string(s[:])
}

// NewGUID returns a random (version 4) GUID in "D" form.
func NewGUID() string {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return formatGUID(u)
}
