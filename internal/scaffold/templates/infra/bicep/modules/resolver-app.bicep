// The NimBus Resolver as a second function app from the same binary (package it with
// `scripts/package.sh resolver`; NimBus__App=Resolver). Deployed by main.bicep when
// deployResolver is true, beside the endpoint app: it shares the host storage account,
// Application Insights, the Cosmos account and database and the Service Bus namespace,
// and has its own identity, Flex Consumption plan and deployment container.
//
// Creates the tracking containers the Resolver writes, because Entra data-plane RBAC
// cannot create containers: one per endpoint id (partition key /id, TTL on with no
// default, so each row's own ttl decides), `messages` (partition key /eventId, items
// expire after 90 days) and `audits` (partition key /eventId, 1 year). The Resolver's
// identity receives from and sends to the Resolver topic only (its trigger, and the
// scheduled same-MessageId re-sends after a store failure).

@description('Azure region.')
param location string

@description('Suffix that makes resource names unique (main.bicep\'s token).')
param token string

@description('Function app name of the Resolver.')
@minLength(2)
@maxLength(60)
param functionAppName string

@description('Endpoint ids whose tracking containers are created (one container each). Add an endpoint here before it sends its first response: the identity cannot create containers.')
@minLength(1)
param endpointIds array

@description('Name of the existing host storage account (main.bicep\'s).')
param storageAccountName string

@description('Name of the existing Application Insights resource.')
param appInsightsName string

@description('Name of the existing Cosmos DB account.')
param cosmosAccountName string

@description('Name of the existing Cosmos DB database of the tracking containers.')
param cosmosDatabaseName string

@description('Create the tracking containers without throughput settings (serverless account, true) or with autoscale (false).')
param cosmosServerless bool

@description('Autoscale maximum RU/s of each tracking container when cosmosServerless is false.')
@minValue(1000)
param cosmosAutoscaleMaxThroughput int

@description('Name of the Service Bus namespace that has the Resolver topic.')
param serviceBusNamespaceName string

@description('Resource group of the Service Bus namespace.')
param serviceBusResourceGroupName string

@description('NimBus__Cosmos__UnresolvedRetentionDays: -1 (unlimited) or 1-365 whole days for Pending, Failed, Deferred, DeadLettered and Unsupported rows.')
@minValue(-1)
@maxValue(365)
param unresolvedRetentionDays int

@description('Concurrent sessions per instance of the Resolver trigger (NimBus pins 16).')
@minValue(1)
@maxValue(200)
param maxConcurrentSessions int

@description('Flex Consumption: maximum number of instances.')
@minValue(40)
@maxValue(1000)
param maximumInstanceCount int

@description('Flex Consumption: memory per instance in MB.')
param instanceMemoryMB int

@description('NimBus__LogLevel of the Resolver.')
param logLevel string

@description('Tags applied to every resource.')
param tags object

var deploymentContainerName = 'app-package-resolver'
var storageBlobDataOwner = 'b7e6dc6d-f1e8-4753-8033-0f276bb0955b'
var storageQueueDataContributor = '974c5e8b-45b9-4653-ba55-5f855dd0fb88'
var storageTableDataContributor = '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3'
var monitoringMetricsPublisher = '3913510d-42f4-4e42-8a64-420c390055eb'
var cosmosDataContributor = '00000000-0000-0000-0000-000000000002' // Cosmos DB Built-in Data Contributor (data plane)
var storageRoleIds = [
  storageBlobDataOwner
  storageQueueDataContributor
  storageTableDataContributor
]

// Per-message history documents live 90 days, audits a year (each document carries
// its own ttl; the container's TTL must be on for it to apply).
var sharedContainers = [
  {
    name: 'messages'
    ttl: 7776000
  }
  {
    name: 'audits'
    ttl: 31536000
  }
]

resource identity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: 'id-resolver-${token}'
  location: location
  tags: tags
}

resource storage 'Microsoft.Storage/storageAccounts@2024-01-01' existing = {
  name: storageAccountName
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2024-01-01' existing = {
  parent: storage
  name: 'default'
}

resource deploymentContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2024-01-01' = {
  parent: blobService
  name: deploymentContainerName
  properties: {
    publicAccess: 'None'
  }
}

resource storageRoles 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for roleId in storageRoleIds: {
  name: guid(storage.id, identity.id, roleId)
  scope: storage
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleId)
    principalId: identity.properties.principalId
    principalType: 'ServicePrincipal'
  }
}]

resource appInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: appInsightsName
}

resource appInsightsPublisher 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(appInsights.id, identity.id, monitoringMetricsPublisher)
  scope: appInsights
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', monitoringMetricsPublisher)
    principalId: identity.properties.principalId
    principalType: 'ServicePrincipal'
  }
}

// ---------------------------------------------------------------- Cosmos DB tracking store

resource cosmos 'Microsoft.DocumentDB/databaseAccounts@2024-11-15' existing = {
  name: cosmosAccountName
}

resource database 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases@2024-11-15' existing = {
  parent: cosmos
  name: cosmosDatabaseName
}

// One tracking container per endpoint: partition key /id, TTL on with no default (-1).
@batchSize(1)
resource endpointContainers 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers@2024-11-15' = [for id in endpointIds: {
  parent: database
  name: id
  properties: {
    resource: {
      id: id
      partitionKey: {
        paths: [
          '/id'
        ]
        kind: 'Hash'
        version: 2
      }
      defaultTtl: -1
    }
    options: cosmosServerless ? {} : {
      autoscaleSettings: {
        maxThroughput: cosmosAutoscaleMaxThroughput
      }
    }
  }
}]

resource historyContainers 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers@2024-11-15' = [for c in sharedContainers: {
  parent: database
  name: c.name
  properties: {
    resource: {
      id: c.name
      partitionKey: {
        paths: [
          '/eventId'
        ]
        kind: 'Hash'
        version: 2
      }
      defaultTtl: c.ttl
    }
    options: cosmosServerless ? {} : {
      autoscaleSettings: {
        maxThroughput: cosmosAutoscaleMaxThroughput
      }
    }
  }
}]

resource cosmosDataAccess 'Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments@2024-11-15' = {
  parent: cosmos
  name: guid(cosmos.id, identity.id, cosmosDataContributor)
  properties: {
    roleDefinitionId: '${cosmos.id}/sqlRoleDefinitions/${cosmosDataContributor}'
    principalId: identity.properties.principalId
    scope: cosmos.id
  }
}

// ---------------------------------------------------------------- Service Bus

// Data Receiver (the Resolver subscription) and Data Sender (scheduled re-sends) on the
// Resolver topic.
module serviceBusAccess 'servicebus-access.bicep' = {
  name: 'servicebus-access-resolver'
  scope: resourceGroup(serviceBusResourceGroupName)
  params: {
    namespaceName: serviceBusNamespaceName
    endpointTopicName: 'Resolver'
    principalId: identity.properties.principalId
  }
}

// ---------------------------------------------------------------- function app

resource plan 'Microsoft.Web/serverfarms@2024-04-01' = {
  name: 'plan-resolver-${token}'
  location: location
  tags: tags
  kind: 'functionapp'
  sku: {
    tier: 'FlexConsumption'
    name: 'FC1'
  }
  properties: {
    reserved: true
  }
}

resource functionApp 'Microsoft.Web/sites@2024-04-01' = {
  name: functionAppName
  location: location
  tags: tags
  kind: 'functionapp,linux'
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${identity.id}': {}
    }
  }
  properties: {
    serverFarmId: plan.id
    httpsOnly: true
    functionAppConfig: {
      deployment: {
        storage: {
          type: 'blobContainer'
          value: '${storage.properties.primaryEndpoints.blob}${deploymentContainerName}'
          authentication: {
            type: 'UserAssignedIdentity'
            userAssignedIdentityResourceId: identity.id
          }
        }
      }
      scaleAndConcurrency: {
        maximumInstanceCount: maximumInstanceCount
        instanceMemoryMB: instanceMemoryMB
      }
      runtime: {
        name: 'custom'
        version: '1.0'
      }
    }
    siteConfig: {
      minTlsVersion: '1.2'
      ftpsState: 'Disabled'
      appSettings: [
        {
          name: 'AzureWebJobsStorage__blobServiceUri'
          value: storage.properties.primaryEndpoints.blob
        }
        {
          name: 'AzureWebJobsStorage__queueServiceUri'
          value: storage.properties.primaryEndpoints.queue
        }
        {
          name: 'AzureWebJobsStorage__tableServiceUri'
          value: storage.properties.primaryEndpoints.table
        }
        {
          name: 'AzureWebJobsStorage__credential'
          value: 'managedidentity'
        }
        {
          name: 'AzureWebJobsStorage__clientId'
          value: identity.properties.clientId
        }
        {
          name: 'APPLICATIONINSIGHTS_CONNECTION_STRING'
          value: appInsights.properties.ConnectionString
        }
        {
          name: 'APPLICATIONINSIGHTS_AUTHENTICATION_STRING'
          value: 'ClientId=${identity.properties.clientId};Authorization=AAD'
        }
        // Service Bus: the Resolver trigger and the scheduled re-sends.
        {
          name: 'ServiceBusConnection__fullyQualifiedNamespace'
          value: serviceBusAccess.outputs.fullyQualifiedNamespace
        }
        {
          name: 'ServiceBusConnection__credential'
          value: 'managedidentity'
        }
        {
          name: 'ServiceBusConnection__clientId'
          value: identity.properties.clientId
        }
        // NimBus pins the Resolver's sessions per instance; this overrides host.json.
        {
          name: 'AzureFunctionsJobHost__extensions__serviceBus__maxConcurrentSessions'
          value: string(maxConcurrentSessions)
        }
        {
          name: 'NimBus__App'
          value: 'Resolver'
        }
        {
          name: 'NimBus__LogLevel'
          value: logLevel
        }
        {
          name: 'NimBus__Resolver__Store'
          value: 'Cosmos'
        }
        {
          name: 'NimBus__Cosmos__AccountEndpoint'
          value: cosmos.properties.documentEndpoint
        }
        {
          name: 'NimBus__Cosmos__ClientId'
          value: identity.properties.clientId
        }
        {
          name: 'NimBus__Cosmos__DatabaseId'
          value: cosmosDatabaseName
        }
        // The identity cannot create containers; the containers above are pre-provisioned.
        {
          name: 'NimBus__Cosmos__AutoCreateContainers'
          value: 'false'
        }
        {
          name: 'NimBus__Cosmos__AllowRelaxedConsistency'
          value: 'false'
        }
        {
          name: 'NimBus__Cosmos__UnresolvedRetentionDays'
          value: string(unresolvedRetentionDays)
        }
      ]
    }
  }
  dependsOn: [
    storageRoles
    appInsightsPublisher
    deploymentContainer
    endpointContainers
    historyContainers
    cosmosDataAccess
  ]
}

@description('Name of the Resolver function app (pass it to NIMBUS_APP=resolver scripts/publish.sh).')
output functionAppName string = functionApp.name

@description('Client id of the Resolver\'s user-assigned identity.')
output identityClientId string = identity.properties.clientId
