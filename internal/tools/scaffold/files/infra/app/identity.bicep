// The user-assigned identity the function app uses for everything: host storage, the deployment
// package, Baton's blob and queue clients, Service Bus and Application Insights. One identity
// that outlives the app keeps role assignments stable across app re-creation.
param name string
param location string
param tags object = {}

resource identity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: name
  location: location
  tags: tags
}

output id string = identity.id
output name string = identity.name
output clientId string = identity.properties.clientId
output principalId string = identity.properties.principalId
