// Package minihost stands in for the Azure Functions host in tests: it
// receives from a Service Bus subscription with azservicebus (a session
// subscription, or one without sessions), builds each invocation envelope
// exactly as the host does for a custom handler (with hostwire.Build: a
// "dataType": "binary" trigger, cardinality one, sessions on or off), POSTs
// it to the handler and settles the message the way the host does: complete
// on a successful (2xx, JSON) invocation, abandon otherwise. Timer invocations are built with hostwire.BuildTimer.
package minihost

import (
	"crypto/rand"
	"encoding/hex"
	"sort"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
)

// maxDateTimeOffset is .NET's DateTimeOffset.MaxValue, the cap on a
// message's ExpiresAt.
var maxDateTimeOffset = time.Date(9999, 12, 31, 23, 59, 59, 999999900, time.UTC)

// TriggerFromMessage describes m as the Service Bus extension hands it to
// the host, received under a session lock held until sessionLockedUntil
// (the zero time for a trigger without sessions) by a client of namespace
// whose identifier is clientID. The caller sets the invocation's
// FunctionName, Binding, UtcNow and RandGUID before hostwire.Build.
// Application properties are sorted by name: the SDK hands them over as a
// Go map, so their wire order is lost (JSON object order carries no
// meaning).
func TriggerFromMessage(m *azservicebus.ReceivedMessage, sessionLockedUntil time.Time, namespace, clientID string) hostwire.ServiceBusMessage {
	t := hostwire.ServiceBusMessage{
		Body:               m.Body,
		MessageID:          m.MessageID,
		LockToken:          formatGUID(m.LockToken),
		SessionID:          m.SessionID,
		CorrelationID:      m.CorrelationID,
		ContentType:        m.ContentType,
		Subject:            m.Subject,
		ReplyTo:            m.ReplyTo,
		ReplyToSessionID:   m.ReplyToSessionID,
		To:                 m.To,
		PartitionKey:       m.PartitionKey,
		DeadLetterSource:   m.DeadLetterSource,
		DeliveryCount:      int(m.DeliveryCount),
		SessionLockedUntil: sessionLockedUntil,
		Namespace:          namespace,
		ClientID:           clientID,
	}
	if m.SequenceNumber != nil {
		t.SequenceNumber = *m.SequenceNumber
	}
	if m.EnqueuedTime != nil {
		t.EnqueuedTime = *m.EnqueuedTime
		// ExpiresAt stays zero (no time to live) when enqueue time plus
		// time to live reaches DateTimeOffset.MaxValue.
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
		t.Properties = append(t.Properties, hostwire.Property{Name: k, Value: m.ApplicationProperties[k]})
	}
	return t
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
