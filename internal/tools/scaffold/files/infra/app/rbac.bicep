// Data-plane role assignments, each scoped as narrowly as the resource allows. The app's
// user-assigned identity gets what the host and Baton need. The deploying principal, when
// given, gets read-only access to the leases and runs containers and nothing else: enough for
// the README's steps (inspect the lease and the run ledger from a workstation); deploying the
// package, reading function keys and calling the HTTP API need no data role. Nobody gets a role
// on the resource group.
param appPrincipalId string

@description('Deploying user or service principal; empty grants it nothing.')
param principalId string = ''
param principalType string = 'User'

param storageAccountName string
param workQueueName string
param leaseContainerName string
param runsContainerName string
param serviceBusNamespaceName string
param serviceBusQueueName string

@description('Name of the control queue (BATON_CONTROL_QUEUE), on Service Bus and in the storage account.')
param controlQueueName string
param applicationInsightsName string

@description('true when the app runs the Storage-queue transport (BATON_TRANSPORT=queue): only then does it get the queue roles.')
param storageQueueTransport bool = false

@description('Grant the app Azure Service Bus Data Owner on the work and control queues so the scale controller can read each queue\'s message count (see below).')
param serviceBusScaleMonitoring bool = true

// Built-in role definition IDs (the same in every tenant).
var roles = {
  storageBlobDataOwner: 'b7e6dc6d-f1e8-4753-8033-0f276bb0955b'
  storageBlobDataReader: '2a2b9908-6ea1-4ae2-8e65-a410df84e7d1'
  storageQueueDataContributor: '974c5e8b-45b9-4653-ba55-5f855dd0fb88'
  storageTableDataContributor: '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3'
  serviceBusDataOwner: '090c5cfd-751d-490a-894a-3ce6f1109419'
  serviceBusDataReceiver: '4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0'
  serviceBusDataSender: '69a216fc-b8fb-44d8-bc22-1f3c2cd27a39'
  monitoringMetricsPublisher: '3913510d-42f4-4e42-8a64-420c390055eb'
}

resource account 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' existing = {
  parent: account
  name: 'default'
}

resource leaseContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' existing = {
  parent: blobService
  name: leaseContainerName
}

resource runsContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' existing = {
  parent: blobService
  name: runsContainerName
}

resource queueService 'Microsoft.Storage/storageAccounts/queueServices@2023-05-01' existing = {
  parent: account
  name: 'default'
}

resource workQueue 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' existing = {
  parent: queueService
  name: workQueueName
}

resource poisonQueue 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' existing = {
  parent: queueService
  name: '${workQueueName}-poison'
}

resource controlQueue 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' existing = {
  parent: queueService
  name: controlQueueName
}

resource controlPoisonQueue 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' existing = {
  parent: queueService
  name: '${controlQueueName}-poison'
}

resource namespace 'Microsoft.ServiceBus/namespaces@2022-10-01-preview' existing = {
  name: serviceBusNamespaceName
}

resource sbQueue 'Microsoft.ServiceBus/namespaces/queues@2022-10-01-preview' existing = {
  parent: namespace
  name: serviceBusQueueName
}

resource sbControlQueue 'Microsoft.ServiceBus/namespaces/queues@2022-10-01-preview' existing = {
  parent: namespace
  name: controlQueueName
}

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

// ---- The app's identity ----

// Storage Blob Data Owner on the account. It is the documented minimum for AzureWebJobsStorage:
// the host creates and uses its own containers at run time (azure-webjobs-hosts for timer and
// listener locks, azure-webjobs-secrets for function keys), which do not exist at deploy time
// and so cannot be scoped individually. The same grant covers the Flex deployment container
// and Baton's leases and runs containers in this account.
resource blobOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(account.id, appPrincipalId, roles.storageBlobDataOwner)
  scope: account
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageBlobDataOwner)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

// Storage Table Data Contributor on the account: the host writes diagnostic events to tables it
// creates per month (AzureFunctionsDiagnosticEvents<yyyyMM>), so no table exists to scope to.
resource tableContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(account.id, appPrincipalId, roles.storageTableDataContributor)
  scope: account
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageTableDataContributor)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

// Storage Queue Data Contributor on the work queue and its poison queue only, and only when the
// app runs the Storage-queue transport (storageQueueTransport): that transport sends to the work
// queue, its trigger (WorkQueue) reads and deletes there and moves failed messages to the poison
// queue. The queues are declared in storage.bicep, so nothing needs account-wide queue rights.
// Under Service Bus (what this template deploys) no queue role is granted at all.
resource workQueueContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (storageQueueTransport) {
  name: guid(workQueue.id, appPrincipalId, roles.storageQueueDataContributor)
  scope: workQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageQueueDataContributor)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource poisonQueueContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (storageQueueTransport) {
  name: guid(poisonQueue.id, appPrincipalId, roles.storageQueueDataContributor)
  scope: poisonQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageQueueDataContributor)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

// The same on the control queue and its poison queue (the ControlQueue twin of Control).
resource controlQueueContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (storageQueueTransport) {
  name: guid(controlQueue.id, appPrincipalId, roles.storageQueueDataContributor)
  scope: controlQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageQueueDataContributor)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource controlPoisonQueueContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (storageQueueTransport) {
  name: guid(controlPoisonQueue.id, appPrincipalId, roles.storageQueueDataContributor)
  scope: controlPoisonQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageQueueDataContributor)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

// Azure Service Bus Data Sender and Data Receiver on the work queue (not the namespace): the
// leader sends partition and scheduled check messages, the Work trigger receives, completes,
// abandons and dead-letters them. Nothing else in the namespace is reachable.
resource sbSender 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(sbQueue.id, appPrincipalId, roles.serviceBusDataSender)
  scope: sbQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataSender)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource sbReceiver 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(sbQueue.id, appPrincipalId, roles.serviceBusDataReceiver)
  scope: sbQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataReceiver)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

// Sender and Receiver on the control queue too: the leader sends checks there and the Control
// trigger receives them.
resource sbControlSender 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(sbControlQueue.id, appPrincipalId, roles.serviceBusDataSender)
  scope: sbControlQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataSender)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource sbControlReceiver 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(sbControlQueue.id, appPrincipalId, roles.serviceBusDataReceiver)
  scope: sbControlQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataReceiver)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

// Azure Service Bus Data Owner on the work and control queues, for the app only. Why:
// target-based scaling of a Service Bus trigger reads the queue's runtime properties (active
// message count), a management operation that needs the Manage right, which only Data Owner
// carries among the data roles. Without it the extension silently falls back to a less
// accurate peek-based estimate, so a burst of partitions scales out late, and the Control
// function (a trigger of its own, scaled on its own queue) loses target-based scaling: checks,
// lease probes and handovers then wait for an instance the scale controller did not start for
// them. Each grant is scoped to its one queue and cannot touch any other entity. Set
// serviceBusScaleMonitoring=false to trade scaling accuracy for the smaller grants.
resource sbOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (serviceBusScaleMonitoring) {
  name: guid(sbQueue.id, appPrincipalId, roles.serviceBusDataOwner)
  scope: sbQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataOwner)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource sbControlOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (serviceBusScaleMonitoring) {
  name: guid(sbControlQueue.id, appPrincipalId, roles.serviceBusDataOwner)
  scope: sbControlQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataOwner)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

// Monitoring Metrics Publisher on the Application Insights component only: the component
// accepts Entra ID ingestion only (APPLICATIONINSIGHTS_AUTHENTICATION_STRING).
resource metricsPublisher 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(applicationInsights.id, appPrincipalId, roles.monitoringMetricsPublisher)
  scope: applicationInsights
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.monitoringMetricsPublisher)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

// ---- The deploying principal ----

// Storage Blob Data Reader on the leases and runs containers: read the lease blob (who leads,
// which epoch) and the run ledger (manifests, results, reports) with `az storage blob … --auth-mode
// login`. Read-only on purpose: a workstation must not be able to take the lease or rewrite a
// run, and it needs no queue, table, Service Bus or host-storage access.
resource deployerLeaseReader 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(principalId)) {
  name: guid(leaseContainer.id, principalId, roles.storageBlobDataReader)
  scope: leaseContainer
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageBlobDataReader)
    principalId: principalId
    principalType: principalType
  }
}

resource deployerRunsReader 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(principalId)) {
  name: guid(runsContainer.id, principalId, roles.storageBlobDataReader)
  scope: runsContainer
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageBlobDataReader)
    principalId: principalId
    principalType: principalType
  }
}
