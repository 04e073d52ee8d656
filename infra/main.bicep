// Baton on Azure Functions Flex Consumption: one resource group holding the function app (custom
// handler runtime), its user-assigned identity, a storage account (host storage, the leases and
// runs containers, the optional work queue), a Service Bus namespace with the work queue, and
// Log Analytics + Application Insights. Every connection is identity-based: the storage account
// refuses shared keys and the namespace refuses SAS, so no secret exists to leak. `azd up` deploys
// it; plain Bicep only (no registry modules) so it can be reviewed offline.
targetScope = 'subscription'

@minLength(1)
@maxLength(64)
@description('Name of the azd environment; names the resource group and seeds the unique suffix of every resource name.')
param environmentName string

@minLength(1)
@description('Region of every resource. It must offer Flex Consumption with the custom runtime: az functionapp list-flexconsumption-runtimes --location <region> --runtime custom.')
@metadata({
  azd: {
    type: 'location'
  }
})
param location string

@description('Object ID of the deploying user or service principal (azd fills in AZURE_PRINCIPAL_ID). When given, it gets read-only access to the leases and runs containers (Storage Blob Data Reader), enough to inspect the lease and the run ledger from a workstation; nothing else. Empty: nobody but the app gets data access.')
param principalId string = ''

@description('Kind of principalId.')
@allowed([
  'User'
  'ServicePrincipal'
  'Group'
])
param principalType string = 'User'

@description('Highest number of instances Flex Consumption may scale the app out to (40-1000).')
@minValue(40)
@maxValue(1000)
param maximumInstanceCount int = 100

@description('Memory of each Flex Consumption instance, in MB.')
@allowed([
  512
  2048
  4096
])
param instanceMemoryMB int = 2048

@description('BATON_HEARTBEAT: six-field NCRONTAB of the Tick timer, in UTC. On each heartbeat the scheduler decides every schedule\'s due occurrences, so a schedule fires at most one heartbeat late; it must beat at least hourly (default: every minute).')
param heartbeat string = '0 * * * * *'

@description('BATON_SCHEDULE: declares the schedule named tick, a run of BATON_JOB with BATON_JOB_PARAMS at each occurrence of this six-field NCRONTAB, in UTC (default: hourly on the hour). Schedules declared in code (App.Schedule) need no setting.')
param schedule string = '0 0 * * * *'

@description('BATON_SCHEDULES (azd env set BATON_SCHEDULES \'{"tick":{"paused":true}}\'): changes schedules the app declares, by name, without a rebuild, as a JSON object of cron, timeZone, paused, overlap, catchUp and jitter. Empty ({}): every schedule as declared.')
param schedules object = {}

@description('BATON_FAILURE_BUDGETS (azd env set BATON_FAILURE_BUDGETS \'{"sync-crm":{"maxFailed":10}}\'): jobs\' failure budgets by job name, replacing those in code: past maxFailed failed partitions, or maxPercent of them, a run stops early as failed. Empty ({}): the budgets in code.')
param failureBudgets object = {}
@description('BATON_LIMITS (azd env set BATON_LIMITS \'{"crm":{"maxInFlight":4,"rate":10}}\'): named limits\' settings by limit name, replacing those in code. Empty ({}): the limits in code.')
param limits object = {}
@description('BATON_TRACE_URL (azd env set BATON_TRACE_URL \'https://tracing.example.com/trace/{trace}\'): the address of a run\'s trace in your trace UI, {trace} standing for its trace ID; the dashboard links each run to it. Empty: no link.')
param traceUrl string = ''

@description('BATON_RETENTION (azd env set BATON_RETENTION \'{"succeeded":"14d","paused":"off"}\'): how long final runs are kept before the heartbeat deletes them, as a JSON object from final state (succeeded, partial, failed, timed-out, cancelled, skipped, missed, paused) to a duration ("30d", "720h") or "off" (kept for ever). States not given keep their defaults: succeeded 30d; partial, failed, timed-out and cancelled 90d; skipped, missed and paused 7d. Empty ({}): the defaults.')
param retention object = {}

@description('BATON_JOB (azd env set BATON_JOB …): the registered job of the schedule tick (BATON_SCHEDULE) and of a manual run that names none. synthetic needs no input, so a fresh deployment\'s first occurrence really runs; inventory lists a blob container named in jobParams.')
@allowed([
  'synthetic'
  'inventory'
])
param job string = 'synthetic'

@description('BATON_JOB_PARAMS (azd env set BATON_JOB_PARAMS \'{"container":"data"}\'): the parameters of the schedule tick\'s job as a JSON object. Empty ({}) with the default job synthetic means its default params (16 partitions of 200 ms); any other job must be given its own.')
param jobParams object = {}

@description('BATON_MANUAL_JOBS (azd env set BATON_MANUAL_JOBS …): the jobs a function key may start by hand (POST /api/runs naming a job) besides those of the app\'s schedules, comma-separated, or * for every registered job. Empty: only the jobs the schedules run.')
param manualJobs string = ''

@description('BATON_OVERLAP: what an occurrence of the schedule tick does while its latest run is still in progress: skip records it skipped, buffer-one queues it until that run ends, allow starts it beside.')
@allowed([
  'skip'
  'buffer-one'
  'allow'
])
param overlap string = 'skip'

@description('BATON_LEASE_DURATION: the blob lease duration, a whole number of seconds from 15s to 60s; the leader renews it every third.')
param leaseDuration string = '30s'

@description('BATON_RUN_TIMEOUT: how long after planning a run may take before its missing partitions are re-enqueued (1m to 24h, the work message time to live; with the check rounds a run stays open at most 7 days).')
param runTimeout string = '1h'

@description('BATON_LOG_LEVEL: minimum level of the handler\'s JSON logs.')
@allowed([
  'debug'
  'info'
  'warn'
  'error'
])
param logLevel string = 'info'

@description('Peek-lock duration of a work message (ISO 8601, at most PT5M). The host renews the lock while an invocation runs (host.json maxAutoLockRenewalDuration), so this only bounds how soon a message held by a crashed instance is redelivered.')
param lockDuration string = 'PT1M'

@description('Service Bus duplicate-detection window (ISO 8601). A message whose ID was seen within it is dropped. IDs are deterministic per run, partition, epoch and re-enqueue round, so this makes a replayed enqueue by the same leader harmless; it must outlast the time such a replay can take.')
param duplicateDetectionWindow string = 'PT1H'

@description('Time to live of a work message (ISO 8601); an expired message is dead-lettered, not lost.')
param messageTimeToLive string = 'P1D'

@description('Give the app Azure Service Bus Data Owner on the work and control queues so Flex Consumption scales the Work and Control functions on the real message counts (see app/rbac.bicep). false: Sender and Receiver only, with peek-based scaling estimates.')
param serviceBusScaleMonitoring bool = true

@description('Resource ID of an existing storage account whose leases and runs containers this app should share (multi-region: every app of one schedule points at the same account). Empty: use this deployment\'s own account.')
param leaseStorageAccountId string = ''

@description('Resource ID of a storage account whose containers (inventoryContainers) the inventory job may read. Empty: the job refuses every run; it never reads this app\'s own account.')
param inventoryStorageAccountId string = ''

@description('Comma-separated containers of that account the app may read (Storage Blob Data Reader on each, nothing else).')
param inventoryContainers string = ''

@description('E-mail address the alert rules notify (azd env set ALERT_EMAIL you@example.com). Empty: no action group; the alerts show in the portal only (docs/deploy.md, Alerts).')
param alertEmail string = ''

@description('N of the nobody-deciding alert: it fires when the last N heartbeats took no scheduler lease.')
@minValue(1)
@maxValue(60)
param leaseAlertHeartbeats int = 5

@description('How far back the nobody-deciding alert looks (ISO 8601, PT5M to P2D): at least leaseAlertHeartbeats heartbeats of the heartbeat parameter, plus a few minutes for the logs to arrive.')
param leaseAlertWindow string = 'PT10M'

var abbrs = loadJsonContent('./abbreviations.json')

// The transport app/api.bicep deploys is Service Bus (BATON_TRANSPORT=servicebus). The Storage
// queues and their roles exist only for the Storage-queue transport: set this to true together
// with BATON_TRANSPORT=queue there, never one without the other.
var storageQueueTransport = false

// host.json is the one source of the delivery limit. The queue trigger reads its
// maxDequeueCount; the Service Bus queue's maxDeliveryCount and BATON_MAX_DELIVERIES take the
// same number from it here, so no parameter can disagree (the handler refuses to start when
// BATON_MAX_DELIVERIES differs from host.json: the last delivery is where a failing partition
// records its failure).
var hostJson = loadJsonContent('../host.json')
var maxDeliveries = hostJson.extensions.queues.maxDequeueCount
var resourceToken = toLower(uniqueString(subscription().id, environmentName, location))
var tags = {
  'azd-env-name': environmentName
}

// Names shared by the resources and the app settings (the config package's defaults).
var appName = '${abbrs.webSitesFunctions}baton-${resourceToken}'
var deploymentContainerName = 'app-package-${take(appName, 32)}-${take(resourceToken, 7)}'
var leaseContainerName = 'leases'
var runsContainerName = 'runs'
var workQueueName = 'baton-work'
// Check messages travel on their own queue, so they never wait behind the partition backlog.
var controlQueueName = 'baton-control'

resource rg 'Microsoft.Resources/resourceGroups@2024-03-01' = {
  name: '${abbrs.resourcesResourceGroups}${environmentName}'
  location: location
  tags: tags
}

module identity 'app/identity.bicep' = {
  name: 'identity'
  scope: rg
  params: {
    name: '${abbrs.managedIdentityUserAssignedIdentities}baton-${resourceToken}'
    location: location
    tags: tags
  }
}

module monitoring 'app/monitoring.bicep' = {
  name: 'monitoring'
  scope: rg
  params: {
    logAnalyticsName: '${abbrs.operationalInsightsWorkspaces}${resourceToken}'
    applicationInsightsName: '${abbrs.insightsComponents}${resourceToken}'
    location: location
    tags: tags
  }
}

module storage 'app/storage.bicep' = {
  name: 'storage'
  scope: rg
  params: {
    name: '${abbrs.storageStorageAccounts}${resourceToken}'
    location: location
    tags: tags
    containerNames: [
      deploymentContainerName
      leaseContainerName
      runsContainerName
    ]
    queueNames: storageQueueTransport ? [
      workQueueName
      // The queue trigger moves a message here after maxDequeueCount failures. Declaring it lets
      // the queue role in app/rbac.bicep be scoped to the two queues, not the whole account.
      '${workQueueName}-poison'
      controlQueueName
      '${controlQueueName}-poison'
    ] : []
  }
}

module serviceBus 'app/servicebus.bicep' = {
  name: 'servicebus'
  scope: rg
  params: {
    name: '${abbrs.serviceBusNamespaces}${resourceToken}'
    location: location
    tags: tags
    queueName: workQueueName
    controlQueueName: controlQueueName
    maxDeliveryCount: maxDeliveries
    lockDuration: lockDuration
    duplicateDetectionWindow: duplicateDetectionWindow
    messageTimeToLive: messageTimeToLive
  }
}

module api 'app/api.bicep' = {
  name: 'api'
  scope: rg
  // Create the app after its roles exist, so the host's first start can already reach storage,
  // Service Bus and Application Insights (role propagation can still lag a few minutes).
  dependsOn: [
    rbac
  ]
  params: {
    name: appName
    planName: '${abbrs.webServerFarms}${resourceToken}'
    location: location
    tags: tags
    serviceName: 'api'
    identityId: identity.outputs.id
    identityClientId: identity.outputs.clientId
    storageBlobEndpoint: storage.outputs.blobEndpoint
    storageQueueEndpoint: storage.outputs.queueEndpoint
    storageTableEndpoint: storage.outputs.tableEndpoint
    deploymentContainerName: deploymentContainerName
    serviceBusHost: serviceBus.outputs.host
    applicationInsightsName: monitoring.outputs.applicationInsightsName
    maximumInstanceCount: maximumInstanceCount
    instanceMemoryMB: instanceMemoryMB
    heartbeat: heartbeat
    schedule: schedule
    schedules: schedules
    failureBudgets: failureBudgets
    limits: limits
    traceUrl: traceUrl
    retention: retention
    job: job
    jobParams: jobParams
    manualJobs: manualJobs
    overlap: overlap
    maxDeliveries: maxDeliveries
    leaseDuration: leaseDuration
    runTimeout: runTimeout
    logLevel: logLevel
    workQueueName: workQueueName
    controlQueueName: controlQueueName
    leaseContainerName: leaseContainerName
    runsContainerName: runsContainerName
    leaseStorageAccountId: leaseStorageAccountId
    inventoryStorageAccountId: inventoryStorageAccountId
  }
}

module rbac 'app/rbac.bicep' = {
  name: 'rbac'
  scope: rg
  params: {
    appPrincipalId: identity.outputs.principalId
    principalId: principalId
    principalType: principalType
    storageAccountName: storage.outputs.name
    workQueueName: workQueueName
    leaseContainerName: leaseContainerName
    runsContainerName: runsContainerName
    serviceBusNamespaceName: serviceBus.outputs.name
    serviceBusQueueName: workQueueName
    controlQueueName: controlQueueName
    applicationInsightsName: monitoring.outputs.applicationInsightsName
    serviceBusScaleMonitoring: serviceBusScaleMonitoring
    storageQueueTransport: storageQueueTransport
  }
}

// Alert rules on the handler's log lines and the queues' dead letters (app/alerts.bicep).
module alerts 'app/alerts.bicep' = {
  name: 'alerts'
  scope: rg
  params: {
    namePrefix: appName
    location: location
    tags: tags
    applicationInsightsName: monitoring.outputs.applicationInsightsName
    serviceBusNamespaceName: serviceBus.outputs.name
    workQueueName: workQueueName
    controlQueueName: controlQueueName
    alertEmail: alertEmail
    leaseAlertHeartbeats: leaseAlertHeartbeats
    leaseAlertWindow: leaseAlertWindow
  }
}

// Multi-region: grant this app's identity (and the deployer) blob access to the leases and runs
// containers of the shared account, wherever it lives.
// The ternaries keep the scope valid when no shared account is given (ARM evaluates only the
// branch it takes).
var leaseAccountShared = !empty(leaseStorageAccountId)
var leaseAccountIdParts = split(leaseStorageAccountId, '/')
var leaseAccountSubscriptionId = leaseAccountShared ? leaseAccountIdParts[2] : subscription().subscriptionId
var leaseAccountResourceGroup = leaseAccountShared ? leaseAccountIdParts[4] : rg.name

module sharedLeases 'app/shared-leases.bicep' = if (leaseAccountShared) {
  // Deployed into another environment's resource group: a unique name per app.
  name: 'shared-leases-${resourceToken}'
  scope: resourceGroup(leaseAccountSubscriptionId, leaseAccountResourceGroup)
  params: {
    storageAccountName: last(leaseAccountIdParts)
    containerNames: [
      leaseContainerName
      runsContainerName
    ]
    appPrincipalId: identity.outputs.principalId
    principalId: principalId
    principalType: principalType
  }
}

// The inventory job's account: Storage Blob Data Reader on the named containers only, wherever
// the account lives.
var inventoryShared = !empty(inventoryStorageAccountId)
var inventoryIdParts = split(inventoryStorageAccountId, '/')

module inventoryReader 'app/inventory-reader.bicep' = if (inventoryShared) {
  name: 'inventory-reader-${resourceToken}'
  scope: resourceGroup(inventoryShared ? inventoryIdParts[2] : subscription().subscriptionId, inventoryShared ? inventoryIdParts[4] : rg.name)
  params: {
    storageAccountName: last(inventoryIdParts)
    containerNames: filter(map(split(inventoryContainers, ','), c => trim(c)), c => !empty(c))
    appPrincipalId: identity.outputs.principalId
  }
}

// Outputs become azd environment values. None is a secret: names, endpoints and a client ID.
output AZURE_LOCATION string = location
output AZURE_TENANT_ID string = tenant().tenantId
output AZURE_RESOURCE_GROUP string = rg.name
output AZURE_FUNCTION_NAME string = api.outputs.name
output AZURE_FUNCTION_URL string = 'https://${api.outputs.defaultHostName}'
output SERVICE_API_NAME string = api.outputs.name
output AZURE_MANAGED_IDENTITY_CLIENT_ID string = identity.outputs.clientId
output AZURE_STORAGE_ACCOUNT_NAME string = storage.outputs.name
output AZURE_STORAGE_BLOB_ENDPOINT string = storage.outputs.blobEndpoint
output AZURE_SERVICEBUS_NAMESPACE string = serviceBus.outputs.name
output AZURE_SERVICEBUS_HOST string = serviceBus.outputs.host
output AZURE_SERVICEBUS_QUEUE string = workQueueName
output APPLICATIONINSIGHTS_NAME string = monitoring.outputs.applicationInsightsName
output AZURE_LOG_ANALYTICS_NAME string = monitoring.outputs.logAnalyticsName
