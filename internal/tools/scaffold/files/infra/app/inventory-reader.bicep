// The inventory job's read access: Storage Blob Data Reader for the app's identity on each named
// container of the account it inventories, and nothing else (no write, no other container, no
// account-wide role). Deployed into that account's resource group. The containers must exist.
param storageAccountName string
param containerNames array
param appPrincipalId string

var storageBlobDataReader = '2a2b9908-6ea1-4ae2-8e65-a410df84e7d1'

resource account 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' existing = {
  parent: account
  name: 'default'
}

resource containers 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' existing = [
  for name in containerNames: {
    parent: blobService
    name: name
  }
]

resource readers 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for (name, i) in containerNames: {
    name: guid(containers[i].id, appPrincipalId, storageBlobDataReader)
    scope: containers[i]
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', storageBlobDataReader)
      principalId: appPrincipalId
      principalType: 'ServicePrincipal'
    }
  }
]
