package config

import (
	"strconv"

	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// Setting is one app setting: its name and its default as written in the
// app settings ("" when it has none).
type Setting struct {
	Name    string
	Default string
	// SetByHost marks a setting the Functions host provides itself
	// (FUNCTIONS_CUSTOMHANDLER_PORT); the sample settings leave it out.
	SetByHost bool
	// Indexed marks the pattern of an indexed list setting: Name holds
	// IndexPlaceholder where the index 0, 1, 2, … goes (IndexedKey). The
	// sample settings leave these out.
	Indexed bool
	// Sample, when set, is the value the sample settings show instead of
	// Default: the one an app deployed with the Bicep runs with.
	Sample string
}

// SampleValue is the value the sample settings show for s.
func (s Setting) SampleValue() string {
	if s.Sample != "" {
		return s.Sample
	}
	return s.Default
}

// Settings lists every app setting this package reads, plus
// ServiceBusConnection__credential, which only the host reads, in the order
// of the documentation.
var Settings = []Setting{
	{Name: KeyApp, Default: string(AppEndpoint)},
	{Name: KeyEndpoint},
	{Name: KeyInboxEnabled, Default: "false", Sample: "true"}, // transactional handlers need it, and the Bicep turns it on
	{Name: KeyInboxStore},
	{Name: KeyRetention, Default: formatTimeSpan(DefaultRetention)},
	{Name: KeyCleanupSchedule, Default: DefaultCleanupSchedule},
	{Name: KeyPurgeBatchSize, Default: strconv.Itoa(DefaultPurgeBatchSize)},
	{Name: KeyCleanupBudget, Default: formatTimeSpan(DefaultCleanupBudget)},
	{Name: KeyCleanupConcurrency, Default: strconv.Itoa(DefaultCleanupConcurrency)},
	{Name: KeyOutboxSweepSchedule, Default: DefaultOutboxSweepSchedule},
	{Name: KeyOutboxMinimumAge, Default: formatTimeSpan(DefaultOutboxMinimumAge)},
	{Name: KeyPublishMaxMessageBytes, Default: strconv.Itoa(message.DefaultMaxMessageBytes)},
	{Name: KeyCosmosEndpoint},
	{Name: KeyCosmosClientID},
	{Name: KeyCosmosConnectionString},
	{Name: KeyCosmosDatabase, Default: DefaultCosmosDatabase},
	{Name: KeyCosmosContainer, Default: DefaultCosmosContainer},
	{Name: KeySessionContainer, Default: DefaultSessionContainer},
	{Name: KeyLedgerDatabase, Default: DefaultLedgerDatabase},
	{Name: KeyLedgerContainer, Default: DefaultLedgerContainer},
	{Name: KeyOrdersDatabase, Default: DefaultOrdersDatabase},
	{Name: KeyOrdersContainer, Default: DefaultOrdersContainer},
	{Name: KeySessionStore},
	{Name: KeyMaxDeliveryCount, Default: strconv.Itoa(DefaultMaxDeliveryCount)},
	{Name: KeyReplayBudget, Default: formatTimeSpan(DefaultReplayBudget)},
	{Name: KeyCosmosAutoCreate, Default: "true"},
	{Name: KeyCosmosRelaxed, Default: "false"},
	{Name: KeyUnresolvedRetentionDays, Default: strconv.Itoa(DefaultUnresolvedRetentionDays)},
	{Name: KeyServiceBus},
	{Name: KeyServiceBusNamespace},
	{Name: KeyServiceBusCredential},
	{Name: KeyServiceBusClientID},
	{Name: KeyResolverSink, Default: string(SinkServiceBus)},
	{Name: KeyRetryBaseDelay, Default: formatTimeSpan(DefaultRetryBaseDelay)},
	{Name: KeyRetryMaxDelay, Default: formatTimeSpan(DefaultRetryMaxDelay)},
	{Name: KeyRetryPolicyDefaultMaxRetries},
	{Name: KeyRetryPolicyDefaultBackoff},
	{Name: KeyRetryPolicyDefaultBaseDelay},
	{Name: KeyRetryPolicyDefaultMaxDelay},
	{Name: KeyRetryPolicyDefaultJitter},
	{Name: KeyRetryPolicyDefaultBoundedJitterFactor},
	{Name: KeyRetryPolicyEventTypeID, Indexed: true},
	{Name: KeyRetryPolicyEventTypeMaxRetries, Indexed: true},
	{Name: KeyRetryPolicyEventTypeBackoff, Indexed: true},
	{Name: KeyRetryPolicyEventTypeBaseDelay, Indexed: true},
	{Name: KeyRetryPolicyEventTypeMaxDelay, Indexed: true},
	{Name: KeyRetryPolicyEventTypeJitter, Indexed: true},
	{Name: KeyRetryPolicyEventTypeBoundedJitterFactor, Indexed: true},
	{Name: KeyRetryPolicyRuleExceptionContains, Indexed: true},
	{Name: KeyRetryPolicyRuleEventTypeIDs, Indexed: true},
	{Name: KeyRetryPolicyRuleMaxRetries, Indexed: true},
	{Name: KeyRetryPolicyRuleBackoff, Indexed: true},
	{Name: KeyRetryPolicyRuleBaseDelay, Indexed: true},
	{Name: KeyRetryPolicyRuleMaxDelay, Indexed: true},
	{Name: KeyRetryPolicyRuleJitter, Indexed: true},
	{Name: KeyRetryPolicyRuleBoundedJitterFactor, Indexed: true},
	{Name: KeyMaxBodyBytesInFlight, Default: strconv.Itoa(DefaultMaxBodyBytesInFlight)},
	{Name: KeyLogLevel, Default: "info"},
	{Name: KeyCloudEventsEnabled, Default: "false"},
	{Name: KeyCloudEventsPrefixes, Default: DefaultCloudEventsPrefixes},
	{Name: KeyCloudEventsTypeMap},
	{Name: KeyCloudEventsSessionIDAttribute, Default: DefaultCloudEventsSessionIDAttribute},
	{Name: KeyCloudEventsCorrelationIDAttribute, Default: DefaultCloudEventsCorrelationIDAttribute},
	{Name: KeyCloudEventsDeduplication, Default: string(DedupMessageID)},
	{Name: KeyCloudEventsIngressTopic},
	{Name: KeyCloudEventsIngressSubscription},
	{Name: KeyTrackingStore, Default: string(TrackingCosmos)},
	{Name: KeyTrackingEndpoint},
	{Name: KeyTrackingClientID},
	{Name: KeyTrackingConnectionString},
	{Name: KeyTrackingDatabase, Default: DefaultTrackingDatabase},
	{Name: KeyTrackingAutoCreate, Default: "true"},
	{Name: KeyTrackingRelaxed, Default: "false"},
	{Name: KeyPort, Default: strconv.Itoa(DefaultPort), SetByHost: true},
}
