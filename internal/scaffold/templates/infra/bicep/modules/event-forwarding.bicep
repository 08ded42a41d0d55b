// Forwarding of the events an endpoint publishes, as NimBus's topology lays it out.
//
// An endpoint publishes to its own topic with `To` = `EventTypeId` = the event type and no
// `From`. For each consuming endpoint C, the topic has a subscription named C that
// auto-forwards to C's topic, with one rule per event type C takes from this endpoint:
// filter `user.EventTypeId = '<type>' AND user.From IS NULL` (only original publishes, never a
// copy already forwarded, which would loop between two endpoints), action
// `SET user.From = '<producer>'; SET user.EventId = newid(); SET user.To = '<consumer>';`
// (a fresh EventId on every consumer's copy; the MessageId is kept). The strings are NimBus's,
// byte for byte, so NimBus's own provisioning finds nothing to change.
//
// Deployed into the namespace's resource group (new or existing namespace). Every consumer's
// topic must already exist in the namespace: Service Bus refuses a subscription that forwards
// to a missing entity. A consumer equal to the endpoint itself is left out, as NimBus does.

@description('Name of the Service Bus namespace (in this deployment\'s resource group).')
param namespaceName string

@description('The publishing endpoint: its topic carries the forwarding subscriptions.')
@minLength(1)
@maxLength(50)
param endpointName string

@description('Events the endpoint publishes: each event type id (the rule name, up to 50 characters) mapped to the ids of the endpoints that consume it, e.g. { PaymentRecorded: [ \'Ledger\', \'Notifications\' ] }.')
param publishedEvents object

// One entry per (event type, consumer), the endpoint itself left out.
var forwards = filter(flatten(map(items(publishedEvents), e => map(e.value, consumer => {
  eventTypeId: e.key
  consumer: consumer
}))), f => f.consumer != endpointName)

// Each consumer once (union removes duplicates).
var consumers = union(map(forwards, f => f.consumer), [])

resource namespace 'Microsoft.ServiceBus/namespaces@2024-01-01' existing = {
  name: namespaceName
}

resource endpointTopic 'Microsoft.ServiceBus/namespaces/topics@2024-01-01' existing = {
  parent: namespace
  name: endpointName
}

// No sessions: the forwarded copy keeps its SessionId and the consumer's session
// subscription orders it. MaxDeliveryCount 10 and LockDuration 30 s as everywhere in the
// NimBus topology.
resource forwarders 'Microsoft.ServiceBus/namespaces/topics/subscriptions@2024-01-01' = [for consumer in consumers: {
  parent: endpointTopic
  name: consumer
  properties: {
    requiresSession: false
    forwardTo: consumer
    maxDeliveryCount: 10
    lockDuration: 'PT30S'
    enableBatchedOperations: true
    deadLetteringOnFilterEvaluationExceptions: true
  }
}]

// Service Bus creates a `$Default` (1=1) rule with every subscription, which would forward
// everything sent to the topic; NimBus deletes it, a template overwrites it with a filter that
// matches nothing.
@batchSize(1)
resource inertDefaultRules 'Microsoft.ServiceBus/namespaces/topics/subscriptions/rules@2024-01-01' = [for (consumer, i) in consumers: {
  parent: forwarders[i]
  name: '$Default'
  properties: {
    filterType: 'SqlFilter'
    sqlFilter: { sqlExpression: '1=0' }
  }
}]

// Rules on one subscription are created one at a time: concurrent rule writes on the
// same entity can fail with a conflict.
@batchSize(1)
resource forwardRules 'Microsoft.ServiceBus/namespaces/topics/subscriptions/rules@2024-01-01' = [for f in forwards: {
  parent: forwarders[indexOf(consumers, f.consumer)]
  name: f.eventTypeId
  properties: {
    filterType: 'SqlFilter'
    sqlFilter: { sqlExpression: 'user.EventTypeId = \'${f.eventTypeId}\' AND user.From IS NULL' }
    action: { sqlExpression: 'SET user.From = \'${endpointName}\'; SET user.EventId = newid(); SET user.To = \'${f.consumer}\';' }
  }
  dependsOn: [
    inertDefaultRules
  ]
}]

@description('The consuming endpoints the endpoint topic forwards to.')
output consumers array = consumers
