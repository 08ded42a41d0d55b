package config

import (
	"encoding/json"
	"fmt"
	"strings"
)

// CloudEvents settings: consuming events from producers outside NimBus that
// speak CloudEvents 1.0 over Service Bus. Off by default, as in NimBus.
const (
	KeyCloudEventsEnabled                = "NimBus__CloudEvents__Enabled"
	KeyCloudEventsPrefixes               = "NimBus__CloudEvents__Prefixes"
	KeyCloudEventsTypeMap                = "NimBus__CloudEvents__TypeMap"
	KeyCloudEventsSessionIDAttribute     = "NimBus__CloudEvents__SessionIdAttribute"
	KeyCloudEventsCorrelationIDAttribute = "NimBus__CloudEvents__CorrelationIdAttribute"
	KeyCloudEventsDeduplication          = "NimBus__CloudEvents__Deduplication"
	// The ingress function's trigger reads these two (as
	// %NimBus:CloudEvents:IngressTopic% and ...IngressSubscription%).
	KeyCloudEventsIngressTopic        = "NimBus__CloudEvents__IngressTopic"
	KeyCloudEventsIngressSubscription = "NimBus__CloudEvents__IngressSubscription"
)

// CloudEvents defaults.
const (
	DefaultCloudEventsPrefixes               = "cloudEvents:,ce-"
	DefaultCloudEventsSessionIDAttribute     = "sessionid"
	DefaultCloudEventsCorrelationIDAttribute = "correlationid"
)

// CloudEvents limits.
const (
	MaxCloudEventsPrefixes       = 8
	MaxServiceBusTopicLen        = 260
	MaxServiceBusSubscriptionLen = 50
	MaxCloudEventsTypeMapBytes   = 64 << 10
)

// Deduplication selects the inbox key of a CloudEvents delivery.
type Deduplication string

// Inbox keys for CloudEvents deliveries.
const (
	// DedupMessageID keys on the broker MessageId, as NimBus does (a
	// producer's re-send without its own AMQP message-id gets a fresh one and
	// is not recognised).
	DedupMessageID Deduplication = "MessageId"
	// DedupSourceAndID keys on the CloudEvents source and id within the
	// configured endpoint.
	DedupSourceAndID Deduplication = "SourceAndId"
)

// CloudEvents configures CloudEvents consumption.
type CloudEvents struct {
	Enabled bool
	// Prefixes are the accepted binary-mode application-property prefixes,
	// probed in order.
	Prefixes []string
	// TypeMap maps CloudEvents types to EventTypeIds; other types map to
	// their last dot-delimited segment.
	TypeMap                map[string]string
	SessionIDAttribute     string
	CorrelationIDAttribute string
	Deduplication          Deduplication
	// IngressTopic and IngressSubscription are what the CloudEventsIngress
	// trigger listens on; "" when not set.
	IngressTopic        string
	IngressSubscription string
}

func (l *loader) cloudEvents(c *Config) {
	ce := &c.CloudEvents
	ce.Enabled = l.bool(KeyCloudEventsEnabled, false)

	raw := l.str(KeyCloudEventsPrefixes)
	if raw == "" {
		raw = DefaultCloudEventsPrefixes
	}
	seen, emptyReported := map[string]bool{}, false
	for _, p := range strings.Split(raw, ",") {
		p = strings.TrimSpace(p)
		switch {
		case p == "":
			if !emptyReported {
				l.problem("%s=%s has an empty prefix: list prefixes separated by commas, such as %s", KeyCloudEventsPrefixes, show(raw), DefaultCloudEventsPrefixes)
				emptyReported = true
			}
		case seen[p]:
			l.problem("%s=%s lists %s twice", KeyCloudEventsPrefixes, show(raw), show(p))
		default:
			seen[p] = true
			ce.Prefixes = append(ce.Prefixes, p)
		}
	}
	if len(ce.Prefixes) > MaxCloudEventsPrefixes {
		l.problem("%s lists %d prefixes; the most is %d", KeyCloudEventsPrefixes, len(ce.Prefixes), MaxCloudEventsPrefixes)
	}

	if raw := l.str(KeyCloudEventsTypeMap); raw != "" {
		var m map[string]string
		switch {
		case len(raw) > MaxCloudEventsTypeMapBytes:
			l.problem("%s is %d bytes long; the most is %d", KeyCloudEventsTypeMap, len(raw), MaxCloudEventsTypeMapBytes)
		case json.Unmarshal([]byte(raw), &m) != nil || m == nil:
			l.problem("%s=%s is not a JSON object of CloudEvents type to EventTypeId strings, such as {\"com.acme.order.placed\":\"OrderPlaced\"}", KeyCloudEventsTypeMap, show(raw))
		case duplicateKey(raw) != "":
			l.problem("%s maps %s twice: give each CloudEvents type one EventTypeId", KeyCloudEventsTypeMap, show(duplicateKey(raw)))
		default:
			for k, v := range m {
				if strings.TrimSpace(v) == "" {
					l.problem("%s maps %s to an empty EventTypeId", KeyCloudEventsTypeMap, show(k))
				}
			}
			ce.TypeMap = m
		}
	}
	ce.SessionIDAttribute = l.attribute(KeyCloudEventsSessionIDAttribute, DefaultCloudEventsSessionIDAttribute)
	ce.CorrelationIDAttribute = l.attribute(KeyCloudEventsCorrelationIDAttribute, DefaultCloudEventsCorrelationIDAttribute)

	switch raw := l.str(KeyCloudEventsDeduplication); {
	case raw == "" || strings.EqualFold(raw, string(DedupMessageID)):
		ce.Deduplication = DedupMessageID
	case strings.EqualFold(raw, string(DedupSourceAndID)):
		ce.Deduplication = DedupSourceAndID
		if !c.Inbox.Enabled {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s=%s has no effect while %s is false", KeyCloudEventsDeduplication, DedupSourceAndID, KeyInboxEnabled))
		}
	default:
		l.problem("%s=%s is not supported (use %s or %s)", KeyCloudEventsDeduplication, show(raw), DedupMessageID, DedupSourceAndID)
	}

	ce.IngressTopic = l.str(KeyCloudEventsIngressTopic)
	ce.IngressSubscription = l.str(KeyCloudEventsIngressSubscription)
	if n := utf16Len(ce.IngressTopic); n > MaxServiceBusTopicLen {
		l.problem("%s=%s is %d characters long; a topic name has at most %d", KeyCloudEventsIngressTopic, show(ce.IngressTopic), n, MaxServiceBusTopicLen)
	}
	if n := utf16Len(ce.IngressSubscription); n > MaxServiceBusSubscriptionLen {
		l.problem("%s=%s is %d characters long; a subscription name has at most %d", KeyCloudEventsIngressSubscription, show(ce.IngressSubscription), n, MaxServiceBusSubscriptionLen)
	}
	// An ingress topic of its own carries only CloudEvents: consuming it
	// with CloudEvents off would dead-letter every event.
	if ce.IngressTopic != "" && ce.IngressTopic != c.Endpoint && !ce.Enabled {
		l.problem("%s=%s names an ingress topic but %s is false: every event on it would be rejected as not a NimBus message; set %s to true", KeyCloudEventsIngressTopic, show(ce.IngressTopic), KeyCloudEventsEnabled, KeyCloudEventsEnabled)
	}
	if ce.IngressTopic != "" && ce.IngressSubscription == "" {
		l.problem("%s must be set when %s is: the CloudEventsIngress trigger resolves its subscription from it (usually the endpoint name, %s)", KeyCloudEventsIngressSubscription, KeyCloudEventsIngressTopic, show(c.Endpoint))
	}
}

// attribute reads a CloudEvents attribute name: an extension name, or
// subject. CloudEvents attribute names are lower-case letters and digits.
func (l *loader) attribute(key, def string) string {
	raw := l.str(key)
	if raw == "" {
		return def
	}
	for _, r := range raw {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			l.problem("%s=%s is not a CloudEvents attribute name (letters and digits only; %s, or an extension name such as %s)", key, show(raw), "subject", def)
			return def
		}
	}
	return raw
}

// duplicateKey returns the first key that a valid JSON object repeats
// (json.Unmarshal would keep the last silently), or "".
func duplicateKey(raw string) string {
	dec := json.NewDecoder(strings.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		k, ok := t.(string)
		if err != nil || !ok {
			return ""
		}
		if seen[k] {
			return k
		}
		seen[k] = true
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return ""
		}
	}
	return ""
}
