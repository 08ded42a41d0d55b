// Data-plane access to an endpoint topic for the function app's identity.
//
// Deployed into the namespace's resource group (new or existing namespace).
// Data Sender is scoped to the endpoint topic: the endpoint sends Resolver
// responses, parked copies (To=Deferred), ProcessDeferredRequests
// (To=DeferredProcessor) and scheduled RetryRequests (To=Retry) to its own
// topic; scheduling a message is a send. Data Receiver is scoped to each
// subscription the app receives from, the narrowest scope Service Bus RBAC
// has: `{E}` (Subscriber), `Deferred` (the DeferredProcessor function accepts
// its sessions to replay parked copies) and `DeferredProcessor` (its
// trigger). The topic's other subscription, the Resolver fan-out, stays out of
// the app's reach. The subscriptions must exist (the topology module creates
// them; an existing namespace must already have them).

@description('Name of the Service Bus namespace (in this deployment\'s resource group).')
param namespaceName string

@description('Name of the endpoint topic; it must already exist.')
param endpointTopicName string

@description('Subscriptions of the endpoint topic the identity receives from (Data Receiver on each). Defaults to the endpoint subscription, Deferred and DeferredProcessor.')
param receiveSubscriptionNames array = [
  endpointTopicName
  'Deferred'
  'DeferredProcessor'
]

@description('Principal (object) id of the identity that receives the roles.')
param principalId string

var serviceBusDataReceiver = '4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0'
var serviceBusDataSender = '69a216fc-b8fb-44d8-bc22-1f3c2cd27a39'

resource namespace 'Microsoft.ServiceBus/namespaces@2024-01-01' existing = {
  name: namespaceName
}

resource endpointTopic 'Microsoft.ServiceBus/namespaces/topics@2024-01-01' existing = {
  parent: namespace
  name: endpointTopicName
}

resource receiveSubscriptions 'Microsoft.ServiceBus/namespaces/topics/subscriptions@2024-01-01' existing = [for name in receiveSubscriptionNames: {
  parent: endpointTopic
  name: name
}]

resource sender 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(endpointTopic.id, principalId, serviceBusDataSender)
  scope: endpointTopic
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', serviceBusDataSender)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

resource receivers 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for (name, i) in receiveSubscriptionNames: {
  name: guid(receiveSubscriptions[i].id, principalId, serviceBusDataReceiver)
  scope: receiveSubscriptions[i]
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', serviceBusDataReceiver)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}]

// serviceBusEndpoint looks like https://<ns>.servicebus.windows.net:443/ (cloud-specific suffix).
@description('Fully qualified namespace host name, e.g. <ns>.servicebus.windows.net.')
output fullyQualifiedNamespace string = split(split(namespace.properties.serviceBusEndpoint, '/')[2], ':')[0]
