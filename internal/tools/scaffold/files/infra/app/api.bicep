// The Flex Consumption plan and the function app running Baton's custom handler.
//
// App settings: the names here are exactly the names the config package reads
// (config/config.go Setting*, config/connections.go suffixes), plus the host's own. The config
// contract test (infra/contract_test.go) reads the keys of every `var …Settings = { … }` object
// in this file and fails on a name the code does not read or a setting the code needs that is
// missing, so keep every app setting in such an object.
param name string
param planName string
param location string
param tags object = {}

@description('azure.yaml service name; azd finds the deploy target by the azd-service-name tag.')
param serviceName string

param identityId string
param identityClientId string
param storageBlobEndpoint string
param storageQueueEndpoint string
param storageTableEndpoint string
param deploymentContainerName string
param serviceBusHost string
param applicationInsightsName string

@minValue(40)
@maxValue(1000)
param maximumInstanceCount int
@allowed([
  512
  2048
  4096
])
param instanceMemoryMB int

param heartbeat string
param schedule string
@description('Overrides of declared schedules by name; the app setting holds them as compact JSON, empty when there are none.')
param schedules object
@description('BATON_FAILURE_BUDGETS: jobs\' failure budgets by job name; the app setting holds them as compact JSON, empty when there are none.')
param failureBudgets object
@description('BATON_LIMITS: named limits\' settings by limit name; the app setting holds them as compact JSON, empty when there are none.')
param limits object
@description('BATON_TRACE_URL: the address of a run\'s trace in a trace UI ({trace}: its trace ID); empty: none.')
param traceUrl string
@description('How long final runs are kept, by final state; the app setting holds it as compact JSON, empty for the defaults.')
param retention object
param job string
@description('The job\'s parameters; the app setting holds them as compact JSON.')
param jobParams object
@description('BATON_MANUAL_JOBS: jobs a manual run may start besides the schedules\' jobs, or *; empty: the schedules\' jobs only.')
param manualJobs string
param overlap string
param maxDeliveries int
param leaseDuration string
param runTimeout string
param logLevel string
param workQueueName string
param controlQueueName string
param leaseContainerName string
param runsContainerName string

@description('Resource ID of a shared lease/runs storage account, or empty for this app\'s own account.')
param leaseStorageAccountId string = ''

@description('Resource ID of the storage account the inventory job reads. Empty: the job refuses every run.')
param inventoryStorageAccountId string = ''

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

// Host and platform settings. Flex Consumption takes the runtime from functionAppConfig, so
// FUNCTIONS_WORKER_RUNTIME and FUNCTIONS_EXTENSION_VERSION must not be set (Flex rejects them).
var hostSettings = {
  // Host storage through the managed identity: the account has shared keys disabled, so there
  // is no AzureWebJobsStorage connection string. Baton's blob and queue clients read the same
  // settings (BATON_STORAGE defaults to this connection).
  AzureWebJobsStorage__blobServiceUri: storageBlobEndpoint
  AzureWebJobsStorage__queueServiceUri: storageQueueEndpoint
  AzureWebJobsStorage__tableServiceUri: storageTableEndpoint
  AzureWebJobsStorage__credential: 'managedidentity'
  AzureWebJobsStorage__clientId: identityClientId
  // The Work function's trigger and Baton's sender (function.json connection "ServiceBusConnection").
  ServiceBusConnection__fullyQualifiedNamespace: serviceBusHost
  ServiceBusConnection__credential: 'managedidentity'
  ServiceBusConnection__clientId: identityClientId
  // No AZURE_CLIENT_ID: every connection names the user-assigned identity in its own __clientId
  // and Baton builds a managed-identity credential from that, so nothing would read it.
  // Telemetry with Entra ID auth: the component has local (key) auth disabled.
  APPLICATIONINSIGHTS_CONNECTION_STRING: applicationInsights.properties.ConnectionString
  APPLICATIONINSIGHTS_AUTHENTICATION_STRING: 'ClientId=${identityClientId};Authorization=AAD'
  // Azure uses the Service Bus transport; the Storage-queue twin of Work stays off.
  'AzureWebJobs.WorkQueue.Disabled': 'true'
  'AzureWebJobs.ControlQueue.Disabled': 'true'
}

// Baton's own settings (config/config.go). BATON_INSTANCE_ID is deliberately absent: it is a
// local override, and in Azure every instance must keep its own WEBSITE_INSTANCE_ID.
var batonSettings = {
  BATON_TRANSPORT: 'servicebus'
  // The Tick timer: each heartbeat decides every schedule's due occurrences.
  BATON_HEARTBEAT: heartbeat
  // The schedule tick of BATON_JOB (empty: none); schedules declared in code need no setting.
  BATON_SCHEDULE: schedule
  BATON_SCHEDULES: empty(schedules) ? '' : string(schedules)
  BATON_FAILURE_BUDGETS: empty(failureBudgets) ? '' : string(failureBudgets)
  BATON_LIMITS: empty(limits) ? '' : string(limits)
  BATON_TRACE_URL: traceUrl
  BATON_WORK_QUEUE: workQueueName
  BATON_CONTROL_QUEUE: controlQueueName
  BATON_JOB: job
  BATON_JOB_PARAMS: string(jobParams)
  // Manual runs (POST /api/runs) may start only the jobs of the app's schedules (tick's
  // included) unless manualJobs lists more, and synthetic runs are capped (10,000 partitions of
  // at most 60 s, 16 MiB of payload in all): whoever holds a function key cannot start a job
  // the app never schedules, burn compute with a million ten-minute partitions or fill the
  // work queue. The defaults (16 × 200 ms) fit.
  BATON_MANUAL_JOBS: manualJobs
  BATON_SYNTHETIC_MAX_PARTITIONS: '10000'
  BATON_SYNTHETIC_MAX_WORK_MS: '60000'
  BATON_SYNTHETIC_MAX_PAYLOAD_BYTES: '16777216'
  // At most 10 manual runs (ad-hoc runs and runs now) in progress, 3 of one job; beyond them a
  // POST is answered 429, so a key holder cannot queue enough runs to delay the schedules'.
  BATON_MAX_MANUAL_RUNS: '10'
  BATON_MAX_MANUAL_RUNS_PER_JOB: '3'
  BATON_LEASE_CONTAINER: leaseContainerName
  BATON_RUNS_CONTAINER: runsContainerName
  // Every app sharing one lease account must use the same lease name.
  BATON_LEASE_NAME: 'baton-leader'
  BATON_LEASE_DURATION: leaseDuration
  BATON_STALL_TIMEOUT: '2m'
  BATON_OVERLAP: overlap
  BATON_MAX_DELIVERIES: string(maxDeliveries)
  BATON_RUN_TIMEOUT: runTimeout
  BATON_CHECK_ROUNDS: '3'
  BATON_ENQUEUE_BATCH: '2048'
  // The fewest messages a plan batch goes out as: it spreads over that many instances.
  BATON_BATCH_SPREAD: '8'
  // Empty: half the invocation timeout (functionTimeout less a margin).
  BATON_SLICE_BUDGET: ''
  BATON_MAX_BACKLOG: '50000'
  BATON_LOG_LEVEL: logLevel
  // Final runs older than this, by state, are deleted by the heartbeat (empty: the defaults,
  // 30 days succeeded, 90 days ended badly, 7 days never ran).
  BATON_RETENTION: empty(retention) ? '' : string(retention)
}

// Multi-region: the leases and runs containers live in a shared account, reached through the
// BatonLeaseStorage connection (identity-based, blob only: the Service Bus transport needs no
// queue there). The host keeps its own storage.
var leaseAccountName = last(split(leaseStorageAccountId, '/'))
var sharedLeaseSettings = {
  BATON_STORAGE: 'BatonLeaseStorage'
  BatonLeaseStorage__blobServiceUri: 'https://${leaseAccountName}.blob.${environment().suffixes.storage}'
  BatonLeaseStorage__credential: 'managedidentity'
  BatonLeaseStorage__clientId: identityClientId
}

// The inventory job reads only the account the operator names, through a connection of its own
// (identity-based, blob only, read-only on the containers main.bicep grants); without one it
// refuses every run. It never reads this app's storage account, which holds the function keys.
var inventoryAccountName = last(split(inventoryStorageAccountId, '/'))
var inventorySettings = {
  BATON_INVENTORY_STORAGE: 'InventoryStorage'
  InventoryStorage__blobServiceUri: 'https://${inventoryAccountName}.blob.${environment().suffixes.storage}'
  InventoryStorage__credential: 'managedidentity'
  InventoryStorage__clientId: identityClientId
}

var appSettings = union(hostSettings, batonSettings, empty(leaseStorageAccountId) ? {} : sharedLeaseSettings,
  empty(inventoryStorageAccountId) ? {} : inventorySettings)

resource plan 'Microsoft.Web/serverfarms@2024-04-01' = {
  name: planName
  location: location
  tags: tags
  kind: 'functionapp'
  sku: {
    tier: 'FlexConsumption'
    name: 'FC1'
  }
  properties: {
    reserved: true // Linux
  }
}

resource site 'Microsoft.Web/sites@2024-04-01' = {
  name: name
  location: location
  tags: union(tags, {
    'azd-service-name': serviceName
  })
  kind: 'functionapp,linux'
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${identityId}': {}
    }
  }
  properties: {
    serverFarmId: plan.id
    httpsOnly: true
    siteConfig: {
      minTlsVersion: '1.2'
      appSettings: [
        for setting in items(appSettings): {
          name: setting.key
          value: setting.value
        }
      ]
    }
    functionAppConfig: {
      deployment: {
        storage: {
          // azd uploads the package here; the app reads it with its identity (no keys, no SAS).
          type: 'blobContainer'
          value: '${storageBlobEndpoint}${deploymentContainerName}'
          authentication: {
            type: 'UserAssignedIdentity'
            userAssignedIdentityResourceId: identityId
          }
        }
      }
      scaleAndConcurrency: {
        maximumInstanceCount: maximumInstanceCount
        instanceMemoryMB: instanceMemoryMB
      }
      runtime: {
        // The custom handler runtime: the host starts host.json's defaultExecutablePath (baton).
        name: 'custom'
        version: '1.0'
      }
    }
  }
}

// No basic-auth publishing: azd deploys with an Entra ID token.
resource scmBasicAuth 'Microsoft.Web/sites/basicPublishingCredentialsPolicies@2024-04-01' = {
  parent: site
  name: 'scm'
  properties: {
    allow: false
  }
}

resource ftpBasicAuth 'Microsoft.Web/sites/basicPublishingCredentialsPolicies@2024-04-01' = {
  parent: site
  name: 'ftp'
  properties: {
    allow: false
  }
}

output name string = site.name
output defaultHostName string = site.properties.defaultHostName
