// Ingress for external CloudEvents producers: a topic they send to and the
// endpoint's session subscription on it, which the CloudEventsIngress function
// drains. Responses still go to the endpoint's own topic. External producers
// set no NimBus properties, so the subscription keeps the `$Default` catch-all
// rule. Deployed into the namespace's resource group (new or existing
// namespace); the identity gets Data Receiver on the ingress topic.

@description('Name of the Service Bus namespace (in this deployment\'s resource group).')
param namespaceName string

@description('Name of the ingress topic external producers send CloudEvents to.')
@minLength(1)
@maxLength(260)
param ingressTopicName string

@description('Name of the session subscription on the ingress topic: the endpoint name.')
@minLength(1)
@maxLength(50)
param subscriptionName string

@description('Principal (object) id of the identity that receives Data Receiver on the ingress topic.')
param principalId string

var serviceBusDataReceiver = '4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0'

resource namespace 'Microsoft.ServiceBus/namespaces@2024-01-01' existing = {
  name: namespaceName
}

resource ingressTopic 'Microsoft.ServiceBus/namespaces/topics@2024-01-01' = {
  parent: namespace
  name: ingressTopicName
  properties: {
    supportOrdering: true
    enableBatchedOperations: true
    maxSizeInMegabytes: 5120
  }
}

// Sessions on, as on the endpoint subscription: a producer's broker SessionId
// keeps its events in order. MaxDeliveryCount 10 and LockDuration 30 s as
// everywhere in the NimBus topology.
resource ingressSubscription 'Microsoft.ServiceBus/namespaces/topics/subscriptions@2024-01-01' = {
  parent: ingressTopic
  name: subscriptionName
  properties: {
    requiresSession: true
    maxDeliveryCount: 10
    lockDuration: 'PT30S'
    enableBatchedOperations: true
    deadLetteringOnFilterEvaluationExceptions: true
  }
}

resource receiver 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(ingressTopic.id, principalId, serviceBusDataReceiver)
  scope: ingressTopic
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', serviceBusDataReceiver)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

@description('Name of the ingress topic.')
output ingressTopicName string = ingressTopic.name
