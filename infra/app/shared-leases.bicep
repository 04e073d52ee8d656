// Multi-region: grants an app's identity (and the deployer, when given) access to the leases and
// runs containers of a storage account shared by every app that runs the same schedule. The
// lease blob and the run ledger are what make a run exactly-once, so all apps must use one
// account; each app keeps its own host storage and Service Bus queue.
//
// Deployed into the shared account's resource group. The containers must exist: the first
// region's deployment creates them in its own account, which is the one to share.
param storageAccountName string
param containerNames array
param appPrincipalId string
param principalId string = ''
param principalType string = 'User'

// Storage Blob Data Contributor: read, write, lease and delete blobs. Nothing here needs the
// ACL rights of Data Owner, and the host's own containers are not in this account.
var storageBlobDataContributor = 'ba92f5b4-2d11-453d-a403-e96b0029c9fe'

var principals = concat([
  {
    id: appPrincipalId
    type: 'ServicePrincipal'
  }
], empty(principalId) ? [] : [
  {
    id: principalId
    type: principalType
  }
])

resource account 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' existing = {
  parent: account
  name: 'default'
}

// Scoped to the two containers, not the account, which belongs to another app.
resource leaseContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' existing = {
  parent: blobService
  name: containerNames[0]
}

resource runsContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' existing = {
  parent: blobService
  name: containerNames[1]
}

resource leaseAccess 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for p in principals: {
    name: guid(leaseContainer.id, p.id, storageBlobDataContributor)
    scope: leaseContainer
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', storageBlobDataContributor)
      principalId: p.id
      principalType: p.type
    }
  }
]

resource runsAccess 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for p in principals: {
    name: guid(runsContainer.id, p.id, storageBlobDataContributor)
    scope: runsContainer
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', storageBlobDataContributor)
      principalId: p.id
      principalType: p.type
    }
  }
]
