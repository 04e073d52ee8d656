package scaffold

// Copied are Baton's own files that an app gets too, as paths relative to the repository root.
// files/ holds a byte-for-byte copy of each (embed cannot reach outside this package), made by
// `go generate` and checked against the originals by TestCopiesMatchBaton; Render adapts them to
// the app with the rules in rules.go.
var Copied = []string{
	"host.json",
	"Control/function.json",
	"ControlQueue/function.json",
	"Dashboard/function.json",
	"Leader/function.json",
	"Limits/function.json",
	"Runs/function.json",
	"Schedules/function.json",
	"Tick/function.json",
	"Work/function.json",
	"WorkQueue/function.json",
	"azure.yaml",
	"infra/abbreviations.json",
	"infra/main.bicep",
	"infra/main.parameters.json",
	"infra/app/alerts.bicep",
	"infra/app/alerts/missed-occurrence.kql",
	"infra/app/alerts/nobody-deciding.kql",
	"infra/app/alerts/run-ended-badly.kql",
	"infra/app/alerts/schedule-auto-paused.kql",
	"infra/app/api.bicep",
	"infra/app/identity.bicep",
	"infra/app/inventory-reader.bicep",
	"infra/app/monitoring.bicep",
	"infra/app/rbac.bicep",
	"infra/app/servicebus.bicep",
	"infra/app/shared-leases.bicep",
	"infra/app/storage.bicep",
	"scripts/package.sh",
	"scripts/package.ps1",
	"scripts/validate.sh",
	"scripts/validate.ps1",
	"package.json",
	"package-lock.json",
	"local.settings.example.json",
}

// Retired are the paths an earlier version of Baton generated and this one does not: sync
// removes each (unless edited) from an app whose manifest still lists it. A path leaving Copied
// or the generated templates must move here, or sync and check refuse the manifest of every app
// written before.
var Retired = []string{}
