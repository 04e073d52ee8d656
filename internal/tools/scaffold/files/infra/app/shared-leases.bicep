// Multi-region: grants an app's identity access to the leases and runs containers of a storage
// account shared by every app that runs the same schedule, and the deployer (when given)
// read-only access to them. The lease blob and the run ledger are what make a run exactly-once,
// so all apps must use one account; each app keeps its own host storage and Service Bus queue.
//
// Deployed into the shared account's resource group. The containers must exist: the first
// region's deployment creates them in its own account, which is the one to share.
param storageAccountName string
param containerNames array
param appPrincipalId string
param principalId string = ''
param principalType string = 'User'

// Storage Blob Data Contributor for the app: read, write, lease and delete blobs. Nothing here
// needs the ACL rights of Data Owner, and the host's own containers are not in this account.
// Storage Blob Data Reader for the deployer: inspect the lease and the ledger, change nothing.
var roles = {
  storageBlobDataContributor: 'ba92f5b4-2d11-453d-a403-e96b0029c9fe'
  storageBlobDataReader: '2a2b9908-6ea1-4ae2-8e65-a410df84e7d1'
}

var grants = concat([
  {
    id: appPrincipalId
    type: 'ServicePrincipal'
    role: roles.storageBlobDataContributor
  }
], empty(principalId) ? [] : [
  {
    id: principalId
    type: principalType
    role: roles.storageBlobDataReader
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
  for g in grants: {
    name: guid(leaseContainer.id, g.id, g.role)
    scope: leaseContainer
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', g.role)
      principalId: g.id
      principalType: g.type
    }
  }
]

resource runsAccess 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for g in grants: {
    name: guid(runsContainer.id, g.id, g.role)
    scope: runsContainer
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', g.role)
      principalId: g.id
      principalType: g.type
    }
  }
]
