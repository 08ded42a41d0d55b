// NimBus Service Bus topology for one endpoint, on a new Standard namespace.
//
// Mirrors NimBus's TopologyDescriptor: one topic
// per endpoint plus the system topic `Resolver`. Every subscription uses
// MaxDeliveryCount 10, LockDuration 30 s, batched operations and dead-lettering on
// filter evaluation exceptions.
//
// Service Bus creates a `$Default` rule (filter 1=1) with every subscription. NimBus
// deletes it everywhere except on the Resolver topic's own subscription. A template
// cannot delete a rule, so each filtered subscription here overwrites `$Default` with
// a filter that matches nothing (1=0); the effect on routing is the same.
//
// The endpoint topic requires duplicate detection unless asked not to: the broker drops a
// message whose MessageId it saw within the window, so a published event sent again (same
// deterministic MessageId) after a failure or a crash reaches no consumer twice. Responses and
// control messages carry a fresh MessageId each. Service Bus fixes the setting when the topic is
// created: it cannot be switched on or off later. The Resolver topic must not require it: the
// Resolver re-sends with the same MessageId.

@description('Azure region.')
param location string

@description('Service Bus namespace name (6-50 characters: letters, digits, hyphens; starts with a letter).')
@minLength(6)
@maxLength(50)
param namespaceName string

@description('NimBus endpoint id: the endpoint topic and its session subscription are named after it.')
@minLength(1)
@maxLength(45)
param endpointName string

@description('Tags applied to the namespace.')
param tags object = {}

@description('Create the endpoint topic with duplicate detection (requiresDuplicateDetection). Fixed at creation: Service Bus refuses to change it on an existing topic.')
param duplicateDetection bool = true

@description('Duplicate detection window of the endpoint topic (ISO 8601 duration, 20 seconds to 7 days).')
param duplicateDetectionWindow string = 'PT10M'

var resolverId = 'Resolver'

var topicProperties = {
  supportOrdering: true
  enableBatchedOperations: true
  maxSizeInMegabytes: 5120
}

var endpointTopicProperties = union(topicProperties, {
  requiresDuplicateDetection: duplicateDetection
}, duplicateDetection ? {
  duplicateDetectionHistoryTimeWindow: duplicateDetectionWindow
} : {})

var subscriptionDefaults = {
  maxDeliveryCount: 10
  lockDuration: 'PT30S'
  enableBatchedOperations: true
  deadLetteringOnFilterEvaluationExceptions: true
}

// Replaces the implicit catch-all rule on a filtered subscription.
var inertDefaultRule = {
  name: '$Default'
  properties: {
    filterType: 'SqlFilter'
    sqlFilter: { sqlExpression: '1=0' }
  }
}

// Rules of the endpoint's own session subscription `{E}`.
var endpointRules = [
  inertDefaultRule
  {
    name: 'to-${endpointName}'
    properties: {
      filterType: 'SqlFilter'
      sqlFilter: { sqlExpression: 'user.To = \'${endpointName}\'' }
    }
  }
  {
    name: 'continuation'
    properties: {
      filterType: 'SqlFilter'
      sqlFilter: { sqlExpression: 'user.To = \'Continuation\'' }
      action: { sqlExpression: 'SET user.To = \'${endpointName}\'; SET user.From = \'Continuation\'' }
    }
  }
  {
    name: 'retry'
    properties: {
      filterType: 'SqlFilter'
      sqlFilter: { sqlExpression: 'user.To = \'Retry\'' }
      action: { sqlExpression: 'SET user.To = \'${endpointName}\'; SET user.From = \'Retry\'' }
    }
  }
]

// Rules of the `Resolver` fan-out subscription on `{E}` (auto-forwarded to the Resolver topic):
// responses (To = Resolver) get From = {E}; audit copies of everything addressed to {E}.
var fanoutRules = [
  inertDefaultRule
  {
    name: 'from-${endpointName}'
    properties: {
      filterType: 'SqlFilter'
      sqlFilter: { sqlExpression: 'user.To = \'${resolverId}\'' }
      action: { sqlExpression: 'SET user.From = \'${endpointName}\'' }
    }
  }
  {
    name: 'to-${endpointName}'
    properties: {
      filterType: 'SqlFilter'
      sqlFilter: { sqlExpression: 'user.To = \'${endpointName}\'' }
    }
  }
]

var deferredRules = [
  inertDefaultRule
  {
    name: 'DeferredFilter'
    properties: {
      filterType: 'SqlFilter'
      sqlFilter: { sqlExpression: 'user.To = \'Deferred\' AND user.OriginalSessionId IS NOT NULL' }
    }
  }
]

var deferredProcessorRules = [
  inertDefaultRule
  {
    name: 'DeferredProcessorFilter'
    properties: {
      filterType: 'SqlFilter'
      sqlFilter: { sqlExpression: 'user.To = \'DeferredProcessor\'' }
    }
  }
]

resource namespace 'Microsoft.ServiceBus/namespaces@2024-01-01' = {
  name: namespaceName
  location: location
  tags: tags
  sku: {
    name: 'Standard' // topics and sessions need Standard or Premium
    tier: 'Standard'
  }
  properties: {
    disableLocalAuth: true // Entra ID only; the function app uses its managed identity
    minimumTlsVersion: '1.2'
  }
}

// No duplicate detection: the Resolver's re-sends keep their MessageId.
resource resolverTopic 'Microsoft.ServiceBus/namespaces/topics@2024-01-01' = {
  parent: namespace
  name: resolverId
  properties: topicProperties
}

// The Resolver's session subscription keeps the `$Default` true filter.
resource resolverSubscription 'Microsoft.ServiceBus/namespaces/topics/subscriptions@2024-01-01' = {
  parent: resolverTopic
  name: resolverId
  properties: union(subscriptionDefaults, { requiresSession: true })
}

resource endpointTopic 'Microsoft.ServiceBus/namespaces/topics@2024-01-01' = {
  parent: namespace
  name: endpointName
  properties: endpointTopicProperties
}

resource endpointSubscription 'Microsoft.ServiceBus/namespaces/topics/subscriptions@2024-01-01' = {
  parent: endpointTopic
  name: endpointName
  properties: union(subscriptionDefaults, { requiresSession: true })
}

// Rules on one subscription are created one at a time: concurrent rule writes on the
// same entity can fail with a conflict.
@batchSize(1)
resource endpointSubscriptionRules 'Microsoft.ServiceBus/namespaces/topics/subscriptions/rules@2024-01-01' = [for rule in endpointRules: {
  parent: endpointSubscription
  name: rule.name
  properties: rule.properties
}]

resource fanoutSubscription 'Microsoft.ServiceBus/namespaces/topics/subscriptions@2024-01-01' = {
  parent: endpointTopic
  name: resolverId
  properties: union(subscriptionDefaults, {
    requiresSession: false
    forwardTo: resolverTopic.name
  })
}

@batchSize(1)
resource fanoutSubscriptionRules 'Microsoft.ServiceBus/namespaces/topics/subscriptions/rules@2024-01-01' = [for rule in fanoutRules: {
  parent: fanoutSubscription
  name: rule.name
  properties: rule.properties
}]

// Parking lot for messages held back while their session is blocked.
resource deferredSubscription 'Microsoft.ServiceBus/namespaces/topics/subscriptions@2024-01-01' = {
  parent: endpointTopic
  name: 'Deferred'
  properties: union(subscriptionDefaults, {
    requiresSession: true
    defaultMessageTimeToLive: 'P14D'
  })
}

@batchSize(1)
resource deferredSubscriptionRules 'Microsoft.ServiceBus/namespaces/topics/subscriptions/rules@2024-01-01' = [for rule in deferredRules: {
  parent: deferredSubscription
  name: rule.name
  properties: rule.properties
}]

// Trigger subscription for the deferred drain.
resource deferredProcessorSubscription 'Microsoft.ServiceBus/namespaces/topics/subscriptions@2024-01-01' = {
  parent: endpointTopic
  name: 'DeferredProcessor'
  properties: union(subscriptionDefaults, { requiresSession: false })
}

@batchSize(1)
resource deferredProcessorSubscriptionRules 'Microsoft.ServiceBus/namespaces/topics/subscriptions/rules@2024-01-01' = [for rule in deferredProcessorRules: {
  parent: deferredProcessorSubscription
  name: rule.name
  properties: rule.properties
}]

@description('Name of the namespace.')
output namespaceName string = namespace.name

@description('Name of the endpoint topic (the endpoint id).')
output endpointTopicName string = endpointTopic.name
