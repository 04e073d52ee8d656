// Data-plane role assignments, each scoped as narrowly as the resource allows. The app's
// user-assigned identity gets what the host and Baton need; the deploying principal, when given,
// gets the same data roles (minus monitoring and Service Bus management) so it can inspect runs
// and run Baton locally against these resources. Nobody gets a role on the resource group.
param appPrincipalId string

@description('Deploying user or service principal; empty grants it nothing.')
param principalId string = ''
param principalType string = 'User'

param storageAccountName string
param workQueueName string
param serviceBusNamespaceName string
param serviceBusQueueName string

@description('Name of the control queue (BATON_CONTROL_QUEUE), on Service Bus and in the storage account.')
param controlQueueName string
param applicationInsightsName string

@description('Grant the app Azure Service Bus Data Owner on the work queue so the scale controller can read the queue\'s message count (see below).')
param serviceBusScaleMonitoring bool = true

// Built-in role definition IDs (the same in every tenant).
var roles = {
  storageBlobDataOwner: 'b7e6dc6d-f1e8-4753-8033-0f276bb0955b'
  storageQueueDataContributor: '974c5e8b-45b9-4653-ba55-5f855dd0fb88'
  storageTableDataContributor: '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3'
  serviceBusDataOwner: '090c5cfd-751d-490a-894a-3ce6f1109419'
  serviceBusDataReceiver: '4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0'
  serviceBusDataSender: '69a216fc-b8fb-44d8-bc22-1f3c2cd27a39'
  monitoringMetricsPublisher: '3913510d-42f4-4e42-8a64-420c390055eb'
}

var app = [
  {
    id: appPrincipalId
    type: 'ServicePrincipal'
  }
]
var everyone = concat(app, empty(principalId) ? [] : [
  {
    id: principalId
    type: principalType
  }
])

resource account 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
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

// Storage Blob Data Owner on the account. It is the documented minimum for AzureWebJobsStorage:
// the host creates and uses its own containers at run time (azure-webjobs-hosts for timer and
// listener locks, azure-webjobs-secrets for function keys), which do not exist at deploy time
// and so cannot be scoped individually. The same grant covers the Flex deployment container
// and Baton's leases and runs containers in this account.
resource blobOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for p in everyone: {
    name: guid(account.id, p.id, roles.storageBlobDataOwner)
    scope: account
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageBlobDataOwner)
      principalId: p.id
      principalType: p.type
    }
  }
]

// Storage Table Data Contributor on the account: the host writes diagnostic events to tables it
// creates per month (AzureFunctionsDiagnosticEvents<yyyyMM>), so no table exists to scope to.
resource tableContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for p in everyone: {
    name: guid(account.id, p.id, roles.storageTableDataContributor)
    scope: account
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageTableDataContributor)
      principalId: p.id
      principalType: p.type
    }
  }
]

// Storage Queue Data Contributor on the work queue and its poison queue only: the optional
// Storage-queue transport sends to the work queue, its trigger (WorkQueue, disabled in Azure)
// reads and deletes there and moves failed messages to the poison queue. Both queues are
// declared in storage.bicep, so nothing needs account-wide queue rights.
resource workQueueContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for p in everyone: {
    name: guid(workQueue.id, p.id, roles.storageQueueDataContributor)
    scope: workQueue
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageQueueDataContributor)
      principalId: p.id
      principalType: p.type
    }
  }
]

resource poisonQueueContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for p in everyone: {
    name: guid(poisonQueue.id, p.id, roles.storageQueueDataContributor)
    scope: poisonQueue
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageQueueDataContributor)
      principalId: p.id
      principalType: p.type
    }
  }
]

// The same on the control queue and its poison queue (the ControlQueue twin of Control).
resource controlQueueContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for p in everyone: {
    name: guid(controlQueue.id, p.id, roles.storageQueueDataContributor)
    scope: controlQueue
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageQueueDataContributor)
      principalId: p.id
      principalType: p.type
    }
  }
]

resource controlPoisonQueueContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for p in everyone: {
    name: guid(controlPoisonQueue.id, p.id, roles.storageQueueDataContributor)
    scope: controlPoisonQueue
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageQueueDataContributor)
      principalId: p.id
      principalType: p.type
    }
  }
]

// Azure Service Bus Data Sender and Data Receiver on the work queue (not the namespace): the
// leader sends partition and scheduled check messages, the Work trigger receives, completes,
// abandons and dead-letters them. Nothing else in the namespace is reachable.
resource sbSender 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for p in everyone: {
    name: guid(sbQueue.id, p.id, roles.serviceBusDataSender)
    scope: sbQueue
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataSender)
      principalId: p.id
      principalType: p.type
    }
  }
]

resource sbReceiver 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for p in everyone: {
    name: guid(sbQueue.id, p.id, roles.serviceBusDataReceiver)
    scope: sbQueue
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataReceiver)
      principalId: p.id
      principalType: p.type
    }
  }
]

// Sender and Receiver on the control queue too: the leader sends checks there and the Control
// trigger receives them. No Data Owner: a queue holding a few checks per run needs no precise
// count for scaling.
resource sbControlSender 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for p in everyone: {
    name: guid(sbControlQueue.id, p.id, roles.serviceBusDataSender)
    scope: sbControlQueue
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataSender)
      principalId: p.id
      principalType: p.type
    }
  }
]

resource sbControlReceiver 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for p in everyone: {
    name: guid(sbControlQueue.id, p.id, roles.serviceBusDataReceiver)
    scope: sbControlQueue
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataReceiver)
      principalId: p.id
      principalType: p.type
    }
  }
]

// Azure Service Bus Data Owner on the work queue, for the app only. Why: scaling decisions for
// the Service Bus trigger read the queue's runtime properties (active message count), a
// management operation that needs the Manage right, which only Data Owner carries among the
// data roles. Without it the extension silently falls back to a less accurate peek-based
// estimate, so a burst of partitions scales out late. Scoped to this one queue, it cannot touch
// any other entity. Set serviceBusScaleMonitoring=false to trade scaling accuracy for the
// smaller grant.
resource sbOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (serviceBusScaleMonitoring) {
  name: guid(sbQueue.id, appPrincipalId, roles.serviceBusDataOwner)
  scope: sbQueue
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
