package scaffold

// A rule adapts one of Baton's files to the app: every occurrence of Old becomes New with
// appName replaced by the app's name. A rule that no longer matches is an error from Render
// (and fails the tests), so a change to Baton's file cannot silently skip the adaptation.
type rule struct{ Old, New string }

// appName stands for Params.Name in a rule's New.
const appName = "APPNAME"

// rules adapt Baton's files (by path) to an app whose handler is the main package at its root,
// named after the app, with one job of its own instead of the built-in ones.
var rules = map[string][]rule{
	"host.json": {{`"defaultExecutablePath": "baton"`, `"defaultExecutablePath": "APPNAME"`}},
	"azure.yaml": {
		{"\nname: baton\n", "\nname: APPNAME\n"},
		{"# Baton on Azure Functions Flex Consumption.", "# APPNAME, a Baton app on Azure Functions Flex Consumption."},
	},
	"package.json":      {{`"name": "baton-dev-tools"`, `"name": "APPNAME-dev-tools"`}},
	"package-lock.json": {{`"name": "baton-dev-tools"`, `"name": "APPNAME-dev-tools"`}},
	"infra/main.bicep": {
		{"}baton-${resourceToken}", "}APPNAME-${resourceToken}"},
		{"the registered job of the schedule tick (BATON_SCHEDULE) and of a manual run that names none. synthetic needs no input, so a fresh deployment\\'s first occurrence really runs; inventory lists a blob container named in jobParams.')\n@allowed([\n  'synthetic'\n  'inventory'\n])\nparam job string = 'synthetic'",
			"the registered job of the schedule tick (BATON_SCHEDULE) and of a manual run that names none; empty means the app\\'s only job.')\nparam job string = ''"},
		// The app declares its schedules in code: the settings declare none unless asked to.
		{"in UTC (default: hourly on the hour). Schedules declared in code (App.Schedule) need no setting.')\nparam schedule string = '0 0 * * * *'",
			"in UTC (default: none, the app declares its schedules in code with App.Schedule).')\nparam schedule string = ''"},
	},
	"infra/main.parameters.json": {
		{`"${BATON_JOB=synthetic}"`, `"${BATON_JOB}"`},
		{`"${BATON_SCHEDULE=0 0 * * * *}"`, `"${BATON_SCHEDULE}"`},
	},
	"infra/app/api.bicep": {{"defaultExecutablePath (baton)", "defaultExecutablePath (APPNAME)"}},
	"scripts/package.sh": {
		{"(default: ./handler)", "(default: .)"},
		{"${GO_PACKAGE:-./handler}", "${GO_PACKAGE:-.}"},
		{`"$dist/baton"`, `"$dist/APPNAME"`},
		{"#   baton            the custom handler", "#   APPNAME  the custom handler"},
		{"with baton, host.json", "with APPNAME, host.json"},
	},
	"scripts/package.ps1": {
		{"(default ./handler)", "(default .)"},
		{"else { './handler' }", "else { '.' }"},
		{"Join-Path $dist 'baton'", "Join-Path $dist 'APPNAME'"},
		{"#   baton            the custom handler", "#   APPNAME  the custom handler"},
		{"marks baton as a plain", "marks APPNAME as a plain"},
		{"cannot start baton,", "cannot start APPNAME,"},
		{"with baton, host.json", "with APPNAME, host.json"},
	},
	"scripts/validate.sh":  {{"run ./handler validate", "run . validate"}, {"(`baton validate`", "(`APPNAME validate`"}},
	"scripts/validate.ps1": {{"run ./handler validate", "run . validate"}, {"(`baton validate`", "(`APPNAME validate`"}},
	"local.settings.example.json": {
		{`"BATON_SCHEDULE": "0 */5 * * * *"`, `"BATON_SCHEDULE": ""`},
		{`"BATON_JOB": "synthetic"`, `"BATON_JOB": ""`},
		{`"BATON_JOB_PARAMS": "{\"partitions\":20}"`, `"BATON_JOB_PARAMS": ""`},
	},
}
