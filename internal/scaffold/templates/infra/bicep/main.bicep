// A NimBus subscriber endpoint as a Go custom handler on Azure Functions Flex Consumption.
//
// Deploy into a resource group (az deployment group create; see docs/deploying.md).
// Creates: a user-assigned identity; host storage without shared keys plus the Flex
// deployment container; Log Analytics and Application Insights (Entra auth only); a
// Flex Consumption (FC1) plan and Linux function app with runtime `custom` 1.0; a
// Cosmos DB account with Strong consistency and the inbox and session-state containers; the NimBus
// Service Bus topology for the endpoint on a new Standard namespace (its topic with duplicate
// detection), unless an existing namespace is named, and the forwarding subscriptions of the
// events it publishes (publishedEvents). Every connection is identity based. With
// deployResolver, also the NimBus Resolver as a second function app
// (modules/resolver-app.bicep).
{{sample}}
// With deploySampleLedger, also the ledger container of the sample endpoint's
// transactional handler (modules/sample-ledger.bicep).
{{end sample}}

targetScope = 'resourceGroup'

@description('Azure region for all resources. Defaults to the resource group\'s region.')
param location string = resourceGroup().location

@description('NimBus endpoint id. Becomes NimBus__Endpoint and the name of the endpoint topic and its session subscription. Up to 45 characters (the rule from-{endpoint} must fit in 50); must not be Resolver, Deferred, DeferredProcessor, Continuation or Retry, in any case.')
@minLength(1)
@maxLength(45)
param endpointName string

@description('Function app name (globally unique, 2-60 characters: letters, digits, hyphens). Defaults to func-<unique token>.')
@minLength(2)
@maxLength(60)
param functionAppName string = 'func-${uniqueString(subscription().id, resourceGroup().id, endpointName)}'

@description('Name of an existing Service Bus namespace that already has the NimBus topology for this endpoint. Empty (default): create a Standard namespace with the topology. When set, the topology is not created; role assignments are added on the endpoint topic, and the forwarding subscriptions of publishedEvents and the CloudEvents ingress when asked for.')
param existingServiceBusNamespaceName string = ''

@description('Resource group of the existing Service Bus namespace. Defaults to this deployment\'s resource group.')
param existingServiceBusResourceGroupName string = resourceGroup().name

@description('Create the endpoint topic with Service Bus duplicate detection: a message whose MessageId the topic saw within duplicateDetectionWindow is dropped, so an event the endpoint publishes again after a failure reaches no consumer twice. Applies to a new namespace only, and is fixed when the topic is created: Service Bus refuses to switch it on or off later, so set false when redeploying over a topic created without it.')
param endpointTopicDuplicateDetection bool = true

@description('Duplicate detection window of the endpoint topic, ISO 8601 (20 seconds to 7 days). A larger window costs topic throughput.')
param duplicateDetectionWindow string = 'PT10M'

@description('Events this endpoint publishes, for the forwarding subscriptions on its topic: each event type id mapped to the ids of the endpoints that consume it, e.g. { PaymentRecorded: [ \'Ledger\' ] }. Each consumer gets a subscription named after it that forwards to its topic with NimBus\'s rules (one per event type). Created in a new or an existing namespace; every consumer\'s topic must exist there. Empty (default): none.')
param publishedEvents object = {}

@description('NimBus__Inbox__RetentionPeriod: how long inbox records are kept (.NET TimeSpan d.hh:mm:ss). Must exceed the longest plausible redelivery, replay and recovery window.')
param inboxRetentionPeriod string = '7.00:00:00'

@description('NimBus__Inbox__CleanupSchedule: NCRONTAB (6 fields) schedule of the InboxCleanup timer function.')
param inboxCleanupSchedule string = '0 0 * * * *'

@description('NimBus__Outbox__SweepSchedule: NCRONTAB (6 fields) schedule of the OutboxSweep timer function, which sends the events of transactional deliveries that no redelivery finished.')
param outboxSweepSchedule string = '0 */5 * * * *'

@description('NimBus__Outbox__MinimumAge: how long a delivery\'s stored events stay with its redeliveries before the OutboxSweep sends them (.NET TimeSpan d.hh:mm:ss).')
param outboxMinimumAge string = '00:05:00'

@description('NimBus__Publish__MaxMessageBytes: the largest message an event a handler publishes may make; 262144 is a Standard namespace\'s limit, up to 1048576 on Premium.')
@minValue(16384)
@maxValue(1048576)
param publishMaxMessageBytes int = 262144

@description('Cosmos DB database id of the inbox (NimBus__Inbox__Cosmos__DatabaseId).')
param cosmosDatabaseId string = 'MessageDatabase'

@description('Cosmos DB container id of the inbox (NimBus__Inbox__Cosmos__ContainerId). Partition key /id, no default TTL.')
param cosmosContainerId string = 'inbox'

@description('Cosmos DB container id of the session state (NimBus__Inbox__Cosmos__SessionContainerId): one document per (endpoint, SessionId) holding the blocking event, the parked copies and the replay cursor. Same account and database as the inbox; partition key /id, no default TTL. Must differ from cosmosContainerId.')
@minLength(1)
@maxLength(255)
param sessionStateContainerId string = 'sessionstate'

@description('Create the Cosmos DB account as serverless (true) or with autoscale throughput on the inbox container (false).')
param cosmosServerless bool = true

@description('Autoscale maximum RU/s of the inbox container when cosmosServerless is false.')
@minValue(1000)
param cosmosAutoscaleMaxThroughput int = 1000

@description('Flex Consumption: maximum number of instances the app scales out to.')
@minValue(40)
@maxValue(1000)
param maximumInstanceCount int = 100

@description('Flex Consumption: memory per instance in MB.')
@allowed([
  512
  2048
  4096
])
param instanceMemoryMB int = 2048

@description('Flex Consumption: always-ready instances for the Subscriber function (0 = scale from zero).')
@minValue(0)
param subscriberAlwaysReadyInstances int = 0

@description('NimBus__LogLevel of the handler (debug, info, warn, error).')
@allowed([
  'debug'
  'info'
  'warn'
  'error'
])
param logLevel string = 'info'

@description('Ingress topic for external CloudEvents producers (CloudEvents 1.0, binary or structured mode). Empty (default): no ingress; the CloudEventsIngress function stays disabled. When set, the topic and a session subscription named after the endpoint are created (also in an existing namespace), CloudEvents are enabled and CloudEventsIngress drains the subscription; responses still go to the endpoint topic.')
@maxLength(260)
param cloudEventsIngressTopic string = ''

@description('NimBus__CloudEvents__Deduplication: SourceAndId keys CloudEvents deliveries on their source and id, so a producer\'s re-send with a fresh broker MessageId is skipped; MessageId keys on the broker MessageId as NimBus does.')
@allowed([
  'SourceAndId'
  'MessageId'
])
param cloudEventsDeduplication string = 'SourceAndId'

@description('Tags applied to every resource.')
param tags object = {}

@description('Also deploy the NimBus Resolver as a second function app (modules/resolver-app.bicep): its own identity and plan, the tracking containers in the same Cosmos database, receive and send roles on the Resolver topic.')
param deployResolver bool = false

@description('Function app name of the Resolver (when deployResolver). Defaults to func-resolver-<unique token>.')
@minLength(2)
@maxLength(60)
param resolverFunctionAppName string = 'func-resolver-${uniqueString(subscription().id, resourceGroup().id, endpointName)}'

@description('Endpoint ids whose tracking containers the Resolver gets (when deployResolver). Empty: this endpoint only. List every endpoint that reports to this Resolver.')
param resolverEndpointIds array = []

@description('NimBus__Cosmos__UnresolvedRetentionDays of the Resolver: -1 (unlimited) or 1-365 days (0 is refused at start-up).')
@minValue(-1)
@maxValue(365)
param unresolvedRetentionDays int = -1

@description('Concurrent sessions per instance of the Resolver trigger (NimBus pins 16).')
@minValue(1)
@maxValue(200)
param resolverMaxConcurrentSessions int = 16

{{sample}}
@description('Also create the Cosmos DB container of the sample endpoint\'s transactional PaymentReceived handler (modules/sample-ledger.bicep): partition key /customerId, time to live on with no default (-1), in the inbox\'s account; and set NimBus__Sample__Ledger__DatabaseId and NimBus__Sample__Ledger__ContainerId.')
param deploySampleLedger bool = false

@description('Cosmos DB database id of the sample ledger (when deploySampleLedger). Created unless it is cosmosDatabaseId.')
@minLength(1)
@maxLength(255)
param sampleLedgerDatabaseId string = 'Billing'

@description('Cosmos DB container id of the sample ledger (when deploySampleLedger).')
@minLength(1)
@maxLength(255)
param sampleLedgerContainerId string = 'ledger'

@description('Also create the Cosmos DB container of the sample endpoint\'s PlaceOrder HTTP function, its front door (modules/sample-ledger.bicep): partition key /customerId, time to live on with no default (-1), in the inbox\'s account; and set NimBus__Sample__Orders__DatabaseId and NimBus__Sample__Orders__ContainerId.')
param deploySampleOrders bool = false

@description('Cosmos DB database id of the sample orders (when deploySampleOrders). Created unless it is cosmosDatabaseId or the sample ledger\'s.')
@minLength(1)
@maxLength(255)
param sampleOrdersDatabaseId string = 'Sales'

@description('Cosmos DB container id of the sample orders (when deploySampleOrders).')
@minLength(1)
@maxLength(255)
param sampleOrdersContainerId string = 'orders'
{{end sample}}

var token = uniqueString(subscription().id, resourceGroup().id, endpointName)
var createServiceBus = empty(existingServiceBusNamespaceName)
var serviceBusNamespaceName = createServiceBus ? 'sb-${token}' : existingServiceBusNamespaceName
var serviceBusResourceGroupName = createServiceBus ? resourceGroup().name : existingServiceBusResourceGroupName
var deploymentContainerName = 'app-package'
var cloudEventsIngress = !empty(cloudEventsIngressTopic)

// Built-in role definitions.
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

resource identity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: 'id-${token}'
  location: location
  tags: tags
}

// ---------------------------------------------------------------- monitoring

resource logAnalytics 'Microsoft.OperationalInsights/workspaces@2025-02-01' = {
  name: 'log-${token}'
  location: location
  tags: tags
  properties: {
    sku: {
      name: 'PerGB2018'
    }
    retentionInDays: 30
  }
}

resource appInsights 'Microsoft.Insights/components@2020-02-02' = {
  name: 'appi-${token}'
  location: location
  tags: tags
  kind: 'web'
  properties: {
    Application_Type: 'web'
    WorkspaceResourceId: logAnalytics.id
    DisableLocalAuth: true
  }
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

// ---------------------------------------------------------------- host storage

resource storage 'Microsoft.Storage/storageAccounts@2024-01-01' = {
  name: 'st${token}'
  location: location
  tags: tags
  sku: {
    name: 'Standard_LRS'
  }
  kind: 'StorageV2'
  properties: {
    allowBlobPublicAccess: false
    allowSharedKeyAccess: false
    defaultToOAuthAuthentication: true
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
  }
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2024-01-01' = {
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

// ---------------------------------------------------------------- Service Bus

module serviceBusTopology 'modules/servicebus-topology.bicep' = if (createServiceBus) {
  name: 'servicebus-topology'
  params: {
    location: location
    namespaceName: serviceBusNamespaceName
    endpointName: endpointName
    tags: tags
    duplicateDetection: endpointTopicDuplicateDetection
    duplicateDetectionWindow: duplicateDetectionWindow
  }
}

module eventForwarding 'modules/event-forwarding.bicep' = if (!empty(publishedEvents)) {
  name: 'event-forwarding'
  scope: resourceGroup(serviceBusResourceGroupName)
  params: {
    namespaceName: serviceBusNamespaceName
    endpointName: endpointName
    publishedEvents: publishedEvents
  }
  dependsOn: [
    serviceBusTopology
  ]
}

module serviceBusAccess 'modules/servicebus-access.bicep' = {
  name: 'servicebus-access'
  scope: resourceGroup(serviceBusResourceGroupName)
  params: {
    namespaceName: serviceBusNamespaceName
    endpointTopicName: endpointName
    principalId: identity.properties.principalId
  }
  dependsOn: [
    serviceBusTopology
  ]
}

module cloudEventsIngressTopology 'modules/cloudevents-ingress.bicep' = if (cloudEventsIngress) {
  name: 'cloudevents-ingress'
  scope: resourceGroup(serviceBusResourceGroupName)
  params: {
    namespaceName: serviceBusNamespaceName
    ingressTopicName: cloudEventsIngressTopic
    subscriptionName: endpointName
    principalId: identity.properties.principalId
  }
  dependsOn: [
    serviceBusTopology
  ]
}

// ---------------------------------------------------------------- Cosmos DB inbox

resource cosmos 'Microsoft.DocumentDB/databaseAccounts@2024-11-15' = {
  name: 'cosmos-${token}'
  location: location
  tags: tags
  kind: 'GlobalDocumentDB'
  properties: {
    databaseAccountOfferType: 'Standard'
    // The inbox's duplicate check must see records written by other instances:
    // the handler refuses weaker consistency unless AllowRelaxedConsistency is set.
    consistencyPolicy: {
      defaultConsistencyLevel: 'Strong'
    }
    locations: [
      {
        locationName: location
        failoverPriority: 0
        isZoneRedundant: false
      }
    ]
    capabilities: cosmosServerless ? [
      {
        name: 'EnableServerless'
      }
    ] : []
    disableLocalAuth: true
    minimalTlsVersion: 'Tls12'
  }
}

resource cosmosDatabase 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases@2024-11-15' = {
  parent: cosmos
  name: cosmosDatabaseId
  properties: {
    resource: {
      id: cosmosDatabaseId
    }
  }
}

// Entra data-plane RBAC cannot create containers, so the inbox container is
// provisioned here: partition key /id, no default TTL (cleanup is explicit),
// and only the paths the purge query filters on indexed (the duplicate check
// is a point read; fewer index terms make every record and delete cheaper).
resource inboxContainer 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers@2024-11-15' = {
  parent: cosmosDatabase
  name: cosmosContainerId
  properties: {
    resource: {
      id: cosmosContainerId
      partitionKey: {
        paths: [
          '/id'
        ]
        kind: 'Hash'
        version: 2
      }
      indexingPolicy: {
        indexingMode: 'consistent'
        automatic: true
        includedPaths: [
          {
            path: '/endpointId/?'
          }
          {
            path: '/createdAtUtc/?'
          }
        ]
        excludedPaths: [
          {
            path: '/*'
          }
        ]
      }
    }
    options: cosmosServerless ? {} : {
      autoscaleSettings: {
        maxThroughput: cosmosAutoscaleMaxThroughput
      }
    }
  }
}

// The session state (blocked sessions, parked copies, replay cursor) in its
// own container of the inbox's Strong account and database: partition key
// /id, no default TTL (a document must outlive any block, however long
// operators take, and its sequences must never restart), default indexing
// (small documents; operators query blocked sessions by endpointId and
// state.BlockedByEventId). Throughput as the inbox's: serverless, or its own
// autoscale maximum of cosmosAutoscaleMaxThroughput.
resource sessionStateContainer 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers@2024-11-15' = {
  parent: cosmosDatabase
  name: sessionStateContainerId
  properties: {
    resource: {
      id: sessionStateContainerId
      partitionKey: {
        paths: [
          '/id'
        ]
        kind: 'Hash'
        version: 2
      }
    }
    options: cosmosServerless ? {} : {
      autoscaleSettings: {
        maxThroughput: cosmosAutoscaleMaxThroughput
      }
    }
  }
}

{{sample}}
// The sample endpoint's ledger, when asked: a business container whose documents
// and inbox markers commit in one transactional batch per customer.
module sampleLedger 'modules/sample-ledger.bicep' = if (deploySampleLedger) {
  name: 'sample-ledger'
  params: {
    cosmosAccountName: cosmos.name
    databaseId: sampleLedgerDatabaseId
    createDatabase: sampleLedgerDatabaseId != cosmosDatabaseId
    containerId: sampleLedgerContainerId
    cosmosServerless: cosmosServerless
    cosmosAutoscaleMaxThroughput: cosmosAutoscaleMaxThroughput
  }
  dependsOn: [
    cosmosDatabase
  ]
}

// The sample endpoint's orders, when asked: the container of PlaceOrder's front door,
// whose order documents and request records commit in one transactional batch per
// customer. The same shape as the ledger's.
module sampleOrders 'modules/sample-ledger.bicep' = if (deploySampleOrders) {
  name: 'sample-orders'
  params: {
    cosmosAccountName: cosmos.name
    databaseId: sampleOrdersDatabaseId
    createDatabase: sampleOrdersDatabaseId != cosmosDatabaseId && !(deploySampleLedger && sampleOrdersDatabaseId == sampleLedgerDatabaseId)
    containerId: sampleOrdersContainerId
    cosmosServerless: cosmosServerless
    cosmosAutoscaleMaxThroughput: cosmosAutoscaleMaxThroughput
  }
  dependsOn: [
    cosmosDatabase
    sampleLedger
  ]
}
{{end sample}}

// Account scope: it covers the inbox and the session-state containers, the
// sample ledger when deployed (any database of the account), and the account
// metadata read of the handler's Strong-consistency check.
resource cosmosDataAccess 'Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments@2024-11-15' = {
  parent: cosmos
  name: guid(cosmos.id, identity.id, cosmosDataContributor)
  properties: {
    roleDefinitionId: '${cosmos.id}/sqlRoleDefinitions/${cosmosDataContributor}'
    principalId: identity.properties.principalId
    scope: cosmos.id
  }
}

// ---------------------------------------------------------------- function app

resource plan 'Microsoft.Web/serverfarms@2024-04-01' = {
  name: 'plan-${token}'
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
        alwaysReady: subscriberAlwaysReadyInstances > 0 ? [
          {
            name: 'function:Subscriber'
            instanceCount: subscriberAlwaysReadyInstances
          }
        ] : []
      }
      // Flex takes the worker runtime from here; FUNCTIONS_WORKER_RUNTIME must not be set.
      runtime: {
        name: 'custom'
        version: '1.0'
      }
    }
    siteConfig: {
      minTlsVersion: '1.2'
      ftpsState: 'Disabled'
      appSettings: concat([
        // Host storage (timer schedule monitor, locks) through the identity.
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
        // Service Bus: used by the trigger and by the handler's Resolver publisher.
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
        // NimBus subscriber.
        {
          name: 'NimBus__App'
          value: 'Endpoint'
        }
        {
          name: 'NimBus__Endpoint'
          value: endpointName
        }
        {
          name: 'NimBus__Resolver__Sink'
          value: 'ServiceBus'
        }
        {
          name: 'NimBus__LogLevel'
          value: logLevel
        }
        {
          name: 'NimBus__Inbox__Enabled'
          value: 'true'
        }
        {
          name: 'NimBus__Inbox__Store'
          value: 'Cosmos'
        }
        {
          name: 'NimBus__Inbox__RetentionPeriod'
          value: inboxRetentionPeriod
        }
        {
          name: 'NimBus__Inbox__CleanupSchedule'
          value: inboxCleanupSchedule
        }
        {
          name: 'NimBus__Outbox__SweepSchedule'
          value: outboxSweepSchedule
        }
        {
          name: 'NimBus__Outbox__MinimumAge'
          value: outboxMinimumAge
        }
        {
          name: 'NimBus__Publish__MaxMessageBytes'
          value: string(publishMaxMessageBytes)
        }
        {
          name: 'NimBus__Inbox__Cosmos__AccountEndpoint'
          value: cosmos.properties.documentEndpoint
        }
        {
          name: 'NimBus__Inbox__Cosmos__ClientId'
          value: identity.properties.clientId
        }
        {
          name: 'NimBus__Inbox__Cosmos__DatabaseId'
          value: cosmosDatabaseId
        }
        {
          name: 'NimBus__Inbox__Cosmos__ContainerId'
          value: cosmosContainerId
        }
        {
          name: 'NimBus__Inbox__Cosmos__SessionContainerId'
          value: sessionStateContainerId
        }
        // The identity cannot create containers; the containers above are pre-provisioned.
        {
          name: 'NimBus__Inbox__Cosmos__AutoCreateContainer'
          value: 'false'
        }
        {
          name: 'NimBus__Inbox__Cosmos__AllowRelaxedConsistency'
          value: 'false'
        }
        // CloudEvents ingress. Without an ingress topic the trigger's settings
        // still name an existing entity (the endpoint's own subscription) so
        // the host can resolve them, and the function is disabled.
        {
          name: 'NimBus__CloudEvents__Enabled'
          value: cloudEventsIngress ? 'true' : 'false'
        }
        {
          name: 'NimBus__CloudEvents__Deduplication'
          value: cloudEventsDeduplication
        }
        {
          name: 'NimBus__CloudEvents__IngressTopic'
          value: cloudEventsIngress ? cloudEventsIngressTopic : endpointName
        }
        {
          name: 'NimBus__CloudEvents__IngressSubscription'
          value: endpointName
        }
        {
          name: 'AzureWebJobs.CloudEventsIngress.Disabled'
          value: cloudEventsIngress ? 'false' : 'true'
        }
{{sample}}
      ], deploySampleLedger ? [
        // The sample's ledger, in the inbox's account with the inbox's identity.
        {
          name: 'NimBus__Sample__Ledger__DatabaseId'
          value: sampleLedgerDatabaseId
        }
        {
          name: 'NimBus__Sample__Ledger__ContainerId'
          value: sampleLedgerContainerId
        }
      ] : [], deploySampleOrders ? [
        // The sample's orders (PlaceOrder's front door), in the inbox's account.
        {
          name: 'NimBus__Sample__Orders__DatabaseId'
          value: sampleOrdersDatabaseId
        }
        {
          name: 'NimBus__Sample__Orders__ContainerId'
          value: sampleOrdersContainerId
        }
      ] : [])
{{end sample}}
{{team}}
      ])
{{end team}}
    }
  }
  // Start the host only once its identity can reach storage, telemetry and the inbox, and
  // once the events it publishes are forwarded.
  dependsOn: [
    storageRoles
    appInsightsPublisher
    deploymentContainer
    inboxContainer
    sessionStateContainer
{{sample}}
    sampleLedger
    sampleOrders
{{end sample}}
    cosmosDataAccess
    cloudEventsIngressTopology
    eventForwarding
  ]
}

// ---------------------------------------------------------------- NimBus Resolver (optional)

module resolverApp 'modules/resolver-app.bicep' = if (deployResolver) {
  name: 'resolver-app'
  params: {
    location: location
    token: token
    functionAppName: resolverFunctionAppName
    endpointIds: empty(resolverEndpointIds) ? [
      endpointName
    ] : resolverEndpointIds
    storageAccountName: storage.name
    appInsightsName: appInsights.name
    cosmosAccountName: cosmos.name
    cosmosDatabaseName: cosmosDatabase.name
    cosmosServerless: cosmosServerless
    cosmosAutoscaleMaxThroughput: cosmosAutoscaleMaxThroughput
    serviceBusNamespaceName: serviceBusNamespaceName
    serviceBusResourceGroupName: serviceBusResourceGroupName
    unresolvedRetentionDays: unresolvedRetentionDays
    maxConcurrentSessions: resolverMaxConcurrentSessions
    maximumInstanceCount: maximumInstanceCount
    instanceMemoryMB: instanceMemoryMB
    logLevel: logLevel
    tags: tags
  }
  dependsOn: [
    serviceBusTopology
    blobService
  ]
}

@description('Name of the Resolver function app; empty unless deployResolver.')
output resolverFunctionAppName string = deployResolver ? resolverApp.outputs.functionAppName : ''

@description('Name of the function app (pass it to scripts/publish.sh).')
output functionAppName string = functionApp.name

@description('Default host name of the function app.')
output functionAppHostName string = functionApp.properties.defaultHostName

@description('Client id of the user-assigned identity the app uses for every connection.')
output identityClientId string = identity.properties.clientId

@description('Principal (object) id of the user-assigned identity.')
output identityPrincipalId string = identity.properties.principalId

@description('Fully qualified Service Bus namespace the trigger and the Resolver publisher use.')
output serviceBusFullyQualifiedNamespace string = serviceBusAccess.outputs.fullyQualifiedNamespace

@description('Cosmos DB account name.')
output cosmosAccountName string = cosmos.name

@description('Cosmos DB account endpoint (NimBus__Inbox__Cosmos__AccountEndpoint).')
output cosmosAccountEndpoint string = cosmos.properties.documentEndpoint

{{sample}}
@description('Cosmos DB database and container ids of the sample ledger; empty unless deploySampleLedger.')
output sampleLedger string = deploySampleLedger ? '${sampleLedgerDatabaseId}/${sampleLedgerContainerId}' : ''

@description('Cosmos DB database and container ids of the sample orders; empty unless deploySampleOrders.')
output sampleOrders string = deploySampleOrders ? '${sampleOrdersDatabaseId}/${sampleOrdersContainerId}' : ''
{{end sample}}

@description('Host storage account name.')
output storageAccountName string = storage.name

@description('CloudEvents ingress topic external producers send to; empty when none was requested.')
output cloudEventsIngressTopic string = cloudEventsIngressTopic

@description('Application Insights resource name.')
output applicationInsightsName string = appInsights.name
