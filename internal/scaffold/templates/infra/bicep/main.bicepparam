using './main.bicep'

// Example parameters; see docs/deploying.md. Only endpointName is required.
param endpointName = '{{endpoint}}'

// Join an existing NimBus namespace instead of creating one:
// param existingServiceBusNamespaceName = 'sb-nimbus-prod'
// param existingServiceBusResourceGroupName = 'rg-nimbus-platform'

// Forward the events this endpoint publishes to the endpoints that consume them
// (each consumer's topic must exist in the namespace):
// param publishedEvents = {
//   PaymentRecorded: [
//     'Ledger'
//     'Notifications'
//   ]
// }

// The endpoint topic drops a re-sent MessageId within the window. Fixed when the topic
// is created: set false to redeploy over a topic created without it.
param endpointTopicDuplicateDetection = true
param duplicateDetectionWindow = 'PT10M'

// On a Premium namespace, let handlers publish events of up to 1 MB (Standard: 256 KB):
// param publishMaxMessageBytes = 1048576

// Let external CloudEvents producers send to an ingress topic:
// param cloudEventsIngressTopic = 'PartnerInbound'
// param cloudEventsDeduplication = 'SourceAndId'

{{sample}}
// Provision the sample endpoint's ledger (its transactional PaymentReceived handler):
// param deploySampleLedger = true
// param sampleLedgerDatabaseId = 'Billing'
// param sampleLedgerContainerId = 'ledger'
// and the orders of its PlaceOrder HTTP function (its front door):
// param deploySampleOrders = true
// param sampleOrdersDatabaseId = 'Sales'
// param sampleOrdersContainerId = 'orders'
{{end sample}}

param inboxRetentionPeriod = '7.00:00:00'
param inboxCleanupSchedule = '0 0 * * * *'
param outboxSweepSchedule = '0 */5 * * * *'
param outboxMinimumAge = '00:05:00'
param cosmosServerless = true
param maximumInstanceCount = 100
param instanceMemoryMB = 2048
param subscriberAlwaysReadyInstances = 0
param logLevel = 'info'
param tags = {
  app: 'nimbus-subscriber'
}
