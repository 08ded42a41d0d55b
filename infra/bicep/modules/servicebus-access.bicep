// Data-plane access to an endpoint topic for the function app's identity.
//
// Deployed into the namespace's resource group (new or existing namespace). The
// assignments are scoped to the endpoint topic: Data Receiver covers its
// subscriptions (`{E}`, `Deferred`, `DeferredProcessor`), Data Sender covers the
// Resolver responses and control messages the endpoint sends to its own topic.

@description('Name of the Service Bus namespace (in this deployment\'s resource group).')
param namespaceName string

@description('Name of the endpoint topic; it must already exist.')
param endpointTopicName string

@description('Principal (object) id of the identity that receives the roles.')
param principalId string

var serviceBusDataReceiver = '4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0'
var serviceBusDataSender = '69a216fc-b8fb-44d8-bc22-1f3c2cd27a39'
var roleIds = [
  serviceBusDataReceiver
  serviceBusDataSender
]

resource namespace 'Microsoft.ServiceBus/namespaces@2024-01-01' existing = {
  name: namespaceName
}

resource endpointTopic 'Microsoft.ServiceBus/namespaces/topics@2024-01-01' existing = {
  parent: namespace
  name: endpointTopicName
}

resource roles 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for roleId in roleIds: {
  name: guid(endpointTopic.id, principalId, roleId)
  scope: endpointTopic
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleId)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}]

// serviceBusEndpoint looks like https://<ns>.servicebus.windows.net:443/ (cloud-specific suffix).
@description('Fully qualified namespace host name, e.g. <ns>.servicebus.windows.net.')
output fullyQualifiedNamespace string = split(split(namespace.properties.serviceBusEndpoint, '/')[2], ':')[0]
