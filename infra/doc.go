// Package infra holds the Bicep that `azd up` deploys (main.bicep at subscription scope, the
// modules under app/, main.parameters.json and abbreviations.json) and the Go tests that keep it
// honest where no Bicep CLI and no network are available.
//
// The tests guarantee, without compiling the Bicep:
//   - every .bicep file lexes: brackets balance outside strings and comments, strings and
//     comments are closed; every module path exists and every module call passes exactly
//     parameters its module declares, all required ones included; every parameter in
//     main.parameters.json is declared in main.bicep and every required one is supplied;
//   - every role definition ID is the published one for the role it is named after;
//   - no storage account allows shared-key access or public blob access and all require TLS 1.2,
//     the Service Bus namespace and Application Insights refuse local (key) auth, and no output
//     or app setting carries a key;
//   - the config contract: the app settings in app/api.bicep and the Values of
//     local.settings.example.json hold every setting the code reads (config/config.go,
//     config/connections.go, the %NAME% and connection references of host.json and every
//     function.json) and nothing else beyond named host and platform settings; both sets load
//     with config.Load;
//   - scripts/package.sh builds a package with an executable linux/amd64 baton, host.json and
//     every function folder from any current folder, and never ships local.settings.json;
//     package.ps1 sets the same target (checked statically: no pwsh here); the preprovision hook
//     (scripts/validate.sh) refuses bad settings of the azd environment;
//   - the defaults work: the real handler, started with exactly the app settings the template
//     deploys by default (connections pointed at an Azurite the test starts, the transport
//     switched to the Storage queue because no Service Bus is available), runs the first timer
//     occurrence to a succeeded run; with bad job params it stays up and records a failed run
//     naming BATON_JOB_PARAMS;
//   - the alert rules (app/alerts.bicep): each log search rule has the severity, period and
//     window docs/deploy.md states and loads its query from app/alerts/*.kql; each query parses
//     and analyzes without a diagnostic in Microsoft's Kusto language service (pinned in
//     internal/tools/kql, run with node) against the traces table, passes a structural check
//     of its own (known table, operators and functions, columns defined before use), and
//     selects only log messages the handler's code writes, reading only keys those calls log
//     (both read from the Go source); the dead-letter rule watches both
//     queues; the action group exists only with an e-mail address; host.json keeps the lines out
//     of sampling;
//   - limits agree: the delivery limit comes from host.json alone, the Service Bus lock renewal
//     covers functionTimeout, a work message outlives the longest run timeout; the deployer gets
//     read-only access to the leases and runs containers and nothing else.
//
// They do not prove the templates deploy: names, API versions and property values are checked
// by Azure Resource Manager only at `azd provision`.
package infra
