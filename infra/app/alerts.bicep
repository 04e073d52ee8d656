// Alert rules on what the handler logs and on the work queues, with an optional action group
// that e-mails them. The handler's JSON log lines reach Application Insights through the
// Functions host (the traces table, category Host.Function.Console), so four rules are log
// search alerts whose queries live beside this file in alerts/*.kql (docs/deploy.md lists them
// and says how to change them); dead letters are a platform metric of the Service Bus
// namespace, so that rule is a metric alert. No rule needs a key: Azure Monitor evaluates them
// with its own access to the resources in scope.
param namePrefix string
param location string
param tags object = {}

@description('Application Insights component whose traces the log search rules query.')
param applicationInsightsName string

@description('Service Bus namespace and the queues whose dead letters the metric rule watches.')
param serviceBusNamespaceName string
param workQueueName string
param controlQueueName string

@description('E-mail address the alerts are sent to. Empty: the rules fire in the portal only, with no action group.')
param alertEmail string = ''

@description('N of the nobody-deciding rule: it fires when the last N heartbeats took no scheduler lease.')
@minValue(1)
@maxValue(60)
param leaseAlertHeartbeats int = 5

@description('Window the nobody-deciding rule looks back over (ISO 8601, PT5M to P2D): at least leaseAlertHeartbeats heartbeats of BATON_HEARTBEAT.')
param leaseAlertWindow string = 'PT10M'

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

resource serviceBus 'Microsoft.ServiceBus/namespaces@2022-10-01-preview' existing = {
  name: serviceBusNamespaceName
}

resource actionGroup 'Microsoft.Insights/actionGroups@2023-01-01' = if (!empty(alertEmail)) {
  name: '${namePrefix}-alerts'
  location: 'global'
  tags: tags
  properties: {
    groupShortName: 'baton'
    enabled: true
    emailReceivers: [
      {
        name: 'email'
        emailAddress: alertEmail
        useCommonAlertSchema: true
      }
    ]
  }
}

var actionGroups = empty(alertEmail) ? [] : [
  actionGroup.id
]

// The nobody-deciding query states its N as `let beats = 5;`; the parameter replaces it.
var nobodyDeciding = replace(loadTextContent('alerts/nobody-deciding.kql'), 'let beats = 5;', 'let beats = ${leaseAlertHeartbeats};')

// One log search rule per entry: it fires when its query returns a row in its window. The
// event rules look back twice their period, so a line that reaches Application Insights a few
// minutes late is still seen; a fired alert stays one alert (autoMitigate) until a window
// without rows resolves it.
var logRules = [
  {
    name: 'run-ended-badly'
    displayName: 'Baton: a run ended failed, timed out or partial'
    severity: 2
    evaluationFrequency: 'PT5M'
    windowSize: 'PT10M'
    query: loadTextContent('alerts/run-ended-badly.kql')
  }
  {
    name: 'missed-occurrence'
    displayName: 'Baton: a schedule missed an occurrence'
    severity: 2
    evaluationFrequency: 'PT5M'
    windowSize: 'PT10M'
    query: loadTextContent('alerts/missed-occurrence.kql')
  }
  {
    name: 'schedule-auto-paused'
    displayName: 'Baton: a schedule paused itself'
    severity: 1
    evaluationFrequency: 'PT5M'
    windowSize: 'PT10M'
    query: loadTextContent('alerts/schedule-auto-paused.kql')
  }
  {
    name: 'nobody-deciding'
    displayName: 'Baton: nobody decides the schedules'
    severity: 1
    evaluationFrequency: 'PT5M'
    windowSize: leaseAlertWindow
    query: nobodyDeciding
  }
]

resource logAlerts 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = [for rule in logRules: {
  name: '${namePrefix}-${rule.name}'
  location: location
  tags: tags
  kind: 'LogAlert'
  properties: {
    displayName: rule.displayName
    description: 'See docs/deploy.md, Alerts; the query is infra/app/alerts/${rule.name}.kql.'
    severity: rule.severity
    enabled: true
    scopes: [
      applicationInsights.id
    ]
    evaluationFrequency: rule.evaluationFrequency
    windowSize: rule.windowSize
    criteria: {
      allOf: [
        {
          query: rule.query
          timeAggregation: 'Count'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    autoMitigate: true
    actions: {
      actionGroups: actionGroups
    }
  }
}]

// Dead letters present: the namespace's DeadletteredMessages metric, per queue, above zero.
// Dead letters stay until someone deletes them (baton deadletters purge), so the alert stays
// fired until then.
resource deadLetters 'Microsoft.Insights/metricAlerts@2018-03-01' = {
  name: '${namePrefix}-dead-letters'
  location: 'global'
  tags: tags
  properties: {
    description: 'Baton: dead letters on the work or control queue. See docs/deploy.md, Dead letters.'
    severity: 2
    enabled: true
    scopes: [
      serviceBus.id
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT5M'
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          criterionType: 'StaticThresholdCriterion'
          name: 'deadLetters'
          metricNamespace: 'Microsoft.ServiceBus/namespaces'
          metricName: 'DeadletteredMessages'
          dimensions: [
            {
              name: 'EntityName'
              operator: 'Include'
              values: [
                workQueueName
                controlQueueName
              ]
            }
          ]
          operator: 'GreaterThan'
          threshold: 0
          timeAggregation: 'Maximum'
        }
      ]
    }
    autoMitigate: true
    actions: empty(alertEmail) ? [] : [
      {
        actionGroupId: actionGroup.id
      }
    ]
  }
}
