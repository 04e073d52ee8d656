// The Service Bus namespace and the work queue of the production transport. Local (SAS) auth is
// off: only Entra ID principals with a data role can send or receive.
param name string
param location string
param tags object = {}

@description('Name of the work queue (BATON_WORK_QUEUE).')
param queueName string

@description('Name of the control queue (BATON_CONTROL_QUEUE): check messages only.')
param controlQueueName string

@description('Deliveries before a message is dead-lettered; equals BATON_MAX_DELIVERIES.')
@minValue(1)
@maxValue(100)
param maxDeliveryCount int

@description('Peek-lock duration (ISO 8601, at most PT5M).')
param lockDuration string

@description('Duplicate-detection history window (ISO 8601).')
param duplicateDetectionWindow string

@description('Message time to live (ISO 8601).')
param messageTimeToLive string

resource namespace 'Microsoft.ServiceBus/namespaces@2022-10-01-preview' = {
  name: name
  location: location
  tags: tags
  // Standard: Basic has no duplicate detection, which a replayed enqueue relies on.
  sku: {
    name: 'Standard'
    tier: 'Standard'
  }
  properties: {
    disableLocalAuth: true
    minimumTlsVersion: '1.2'
    publicNetworkAccess: 'Enabled'
  }
}

resource queue 'Microsoft.ServiceBus/namespaces/queues@2022-10-01-preview' = {
  parent: namespace
  name: queueName
  properties: {
    // Message IDs are deterministic (run, partition, epoch, round): a replayed enqueue re-sends
    // the same IDs and Service Bus drops the copies.
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: duplicateDetectionWindow
    maxDeliveryCount: maxDeliveryCount
    lockDuration: lockDuration
    defaultMessageTimeToLive: messageTimeToLive
    // An expired message is kept in the dead-letter queue for inspection, never silently lost.
    deadLetteringOnMessageExpiration: true
    requiresSession: false
    enablePartitioning: false
    maxSizeInMegabytes: 1024
  }
}

// The control queue carries the check messages (the runs' dead-man's switch, lease probes and
// handover checks) with the same guarantees as the work queue: their IDs are deterministic too.
resource controlQueue 'Microsoft.ServiceBus/namespaces/queues@2022-10-01-preview' = {
  parent: namespace
  name: controlQueueName
  properties: {
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: duplicateDetectionWindow
    maxDeliveryCount: maxDeliveryCount
    lockDuration: lockDuration
    defaultMessageTimeToLive: messageTimeToLive
    deadLetteringOnMessageExpiration: true
    requiresSession: false
    enablePartitioning: false
    maxSizeInMegabytes: 1024
  }
}

output name string = namespace.name
output id string = namespace.id
// Fully qualified namespace (host name only) for ServiceBusConnection__fullyQualifiedNamespace,
// taken from the endpoint so it is right in every cloud.
output host string = split(split(replace(namespace.properties.serviceBusEndpoint, 'https://', ''), ':')[0], '/')[0]
output queueName string = queue.name
output controlQueueName string = controlQueue.name
