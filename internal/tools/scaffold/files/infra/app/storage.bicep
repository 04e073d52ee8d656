// The app's storage account: Functions host storage (timer locks, keys, diagnostics), the Flex
// deployment package container, Baton's leases and runs containers, and the work queue of the
// optional Storage-queue transport. Shared-key access is off, so every caller authenticates with
// Entra ID and no account key or SAS can be used against it.
param name string
param location string
param tags object = {}

@description('Blob containers to create (deployment package, leases, runs).')
param containerNames array

@description('Queues to create (the work and control queues and their poison queues, for the Storage-queue transport only).')
param queueNames array

@description('Days a deleted or overwritten blob, or a deleted container, can be restored.')
@minValue(1)
@maxValue(365)
param softDeleteDays int = 7

resource account 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  name: name
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: {
    name: 'Standard_LRS'
  }
  properties: {
    accessTier: 'Hot'
    allowSharedKeyAccess: false
    allowBlobPublicAccess: false
    allowCrossTenantReplication: false
    defaultToOAuthAuthentication: true
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
    publicNetworkAccess: 'Enabled'
    networkAcls: {
      // Flex Consumption without VNet integration reaches storage over the public endpoint.
      defaultAction: 'Allow'
      bypass: 'AzureServices'
    }
  }
}

// Soft delete for blobs and containers: a blob deleted or overwritten by mistake (a run's
// manifest, results or report, the schedule's history in the runs container) and a deleted
// container can be restored for softDeleteDays (docs/deploy.md, Restoring deleted runs).
// Versioning is left off: every ledger write would keep a version.
resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' = {
  parent: account
  name: 'default'
  properties: {
    deleteRetentionPolicy: {
      enabled: true
      days: softDeleteDays
    }
    containerDeleteRetentionPolicy: {
      enabled: true
      days: softDeleteDays
    }
  }
}

resource containers 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = [
  for containerName in containerNames: {
    parent: blobService
    name: containerName
    properties: {
      publicAccess: 'None'
    }
  }
]

resource queueService 'Microsoft.Storage/storageAccounts/queueServices@2023-05-01' = {
  parent: account
  name: 'default'
}

resource queues 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' = [
  for queueName in queueNames: {
    parent: queueService
    name: queueName
  }
]

output name string = account.name
output id string = account.id
output blobEndpoint string = account.properties.primaryEndpoints.blob
output queueEndpoint string = account.properties.primaryEndpoints.queue
output tableEndpoint string = account.properties.primaryEndpoints.table
