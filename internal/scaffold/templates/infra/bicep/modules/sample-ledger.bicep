{{sample}}
// A business container of the sample endpoint, in the inbox's account: the ledger its
// transactional PaymentReceived handler writes (main.bicep deploys it when deploySampleLedger
// is true) and the orders its PlaceOrder HTTP function commits through a front door (when
// deploySampleOrders is true). Entra data-plane RBAC cannot create containers, so it is provisioned here:
// partition key /customerId (every document of one customer, and the inbox markers of the
// payments that changed them, commit in one transactional batch of that partition) and
// time to live on with no default (-1), so documents live for ever unless they carry a ttl:
// each inbox marker carries the inbox retention period as its own ttl. A container with
// time to live off is refused by the handler, because its markers would never expire.
// The endpoint identity's data-plane role is assigned at account scope (main.bicep), which
// covers this container.

@description('Name of the existing Cosmos DB account (the inbox\'s).')
param cosmosAccountName string

@description('Database id of the ledger (NimBus__Sample__Ledger__DatabaseId).')
@minLength(1)
@maxLength(255)
param databaseId string

@description('Create the database (true), or use the one main.bicep already creates (false: databaseId is the inbox\'s database).')
param createDatabase bool

@description('Container id of the ledger (NimBus__Sample__Ledger__ContainerId).')
@minLength(1)
@maxLength(255)
param containerId string

@description('Create the container without throughput settings (serverless account, true) or with autoscale (false).')
param cosmosServerless bool

@description('Autoscale maximum RU/s of the container when cosmosServerless is false.')
@minValue(1000)
param cosmosAutoscaleMaxThroughput int

resource cosmos 'Microsoft.DocumentDB/databaseAccounts@2024-11-15' existing = {
  name: cosmosAccountName
}

resource newDatabase 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases@2024-11-15' = if (createDatabase) {
  parent: cosmos
  name: databaseId
  properties: {
    resource: {
      id: databaseId
    }
  }
}

resource database 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases@2024-11-15' existing = {
  parent: cosmos
  name: databaseId
}

resource ledger 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers@2024-11-15' = {
  parent: database
  name: containerId
  properties: {
    resource: {
      id: containerId
      partitionKey: {
        paths: [
          '/customerId'
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
  dependsOn: [
    newDatabase
  ]
}

@description('Database id of the ledger.')
output databaseId string = databaseId

@description('Container id of the ledger.')
output containerId string = ledger.name
{{end sample}}
