// Log Analytics and a workspace-based Application Insights component that accepts only Entra ID
// (managed identity) ingestion: the instrumentation key in the connection string alone cannot
// send telemetry, so the connection string is not a secret.
param logAnalyticsName string
param applicationInsightsName string
param location string
param tags object = {}

@description('Days Log Analytics keeps data.')
param retentionInDays int = 30

resource logAnalytics 'Microsoft.OperationalInsights/workspaces@2023-09-01' = {
  name: logAnalyticsName
  location: location
  tags: tags
  properties: {
    sku: {
      name: 'PerGB2018'
    }
    retentionInDays: retentionInDays
    features: {
      disableLocalAuth: true
    }
  }
}

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' = {
  name: applicationInsightsName
  location: location
  tags: tags
  kind: 'web'
  properties: {
    Application_Type: 'web'
    WorkspaceResourceId: logAnalytics.id
    DisableLocalAuth: true
  }
}

output applicationInsightsName string = applicationInsights.name
output logAnalyticsName string = logAnalytics.name
