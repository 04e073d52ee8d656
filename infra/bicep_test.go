package infra_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
)

// Static checks of the Bicep: structure, references between files, and the security
// properties the deployment promises (no key-based authentication, no key in the files or
// their outputs). Each check is a function returning the problems it found, run on the real
// files (want none) and on small broken inputs (want the problem named).

// moduleProblems lists module references of the file at path whose target does not exist.
func moduleProblems(s *bicepScan, path string) []string {
	var out []string
	for sym, ref := range s.modules() {
		if strings.HasPrefix(ref, "br:") || strings.HasPrefix(ref, "br/") || strings.HasPrefix(ref, "ts:") {
			out = append(out, fmt.Sprintf("%s: module %s uses registry reference %q: plain Bicep only", path, sym, ref))
			continue
		}
		target := filepath.Join(filepath.Dir(path), filepath.FromSlash(ref))
		if fi, err := os.Stat(target); err != nil || fi.IsDir() || !strings.HasSuffix(ref, ".bicep") {
			out = append(out, fmt.Sprintf("%s: module %s refers to %q, which is not a .bicep file", path, sym, ref))
		}
	}
	return out
}

// securityRule is a property every declared (not existing) resource of a type must set.
type securityRule struct {
	resourceType string
	property     *regexp.Regexp
	why          string
}

func prop(name, value string) *regexp.Regexp {
	return regexp.MustCompile(`(?m)^[ \t]*` + name + `[ \t]*:[ \t]*` + regexp.QuoteMeta(value) + `[ \t]*$`)
}

var securityRules = []securityRule{
	{"Microsoft.Storage/storageAccounts", prop("allowSharedKeyAccess", "false"), "allowSharedKeyAccess: false (no account keys or key-signed SAS)"},
	{"Microsoft.Storage/storageAccounts", prop("allowBlobPublicAccess", "false"), "allowBlobPublicAccess: false"},
	{"Microsoft.Storage/storageAccounts", prop("minimumTlsVersion", "'TLS1_2'"), "minimumTlsVersion: 'TLS1_2'"},
	{"Microsoft.ServiceBus/namespaces", prop("disableLocalAuth", "true"), "disableLocalAuth: true (no SAS keys)"},
	{"Microsoft.ServiceBus/namespaces", prop("minimumTlsVersion", "'1.2'"), "minimumTlsVersion: '1.2'"},
	{"Microsoft.Insights/components", prop("DisableLocalAuth", "true"), "DisableLocalAuth: true (Entra ID ingestion only)"},
	{"Microsoft.OperationalInsights/workspaces", prop("disableLocalAuth", "true"), "disableLocalAuth: true"},
	{"Microsoft.Web/sites", prop("httpsOnly", "true"), "httpsOnly: true"},
}

// Functions and strings that produce or carry keys.
var keyMaterial = regexp.MustCompile(`(?i)\blist(Keys|ConnectionStrings|AccountSas|ServiceSas|Secrets)\s*\(|AccountKey=|SharedAccessKey=|SharedAccessSignature=`)

// Output names or values that would put a secret into the azd environment.
var secretOutput = regexp.MustCompile(`(?i)key|secret|password|connectionstring|sas\b|token`)

// securityProblems lists every resource that weakens authentication and every key that could
// leak through the file.
func securityProblems(s *bicepScan, path string) []string {
	var out []string
	for _, r := range s.resources() {
		if r.Existing {
			continue
		}
		for _, rule := range securityRules {
			if r.Type == rule.resourceType && !rule.property.MatchString(r.Body) {
				out = append(out, fmt.Sprintf("%s: resource %s (%s) must set %s", path, r.Symbol, r.Type, rule.why))
			}
		}
	}
	if loc := keyMaterial.FindStringIndex(s.code); loc != nil {
		line := strings.Count(s.code[:loc[0]], "\n") + 1
		out = append(out, fmt.Sprintf("%s:%d: %q produces or holds a key", path, line, s.code[loc[0]:loc[1]]))
	}
	for _, o := range s.outputs() {
		if strings.Contains(o.Value, "@secure") || secretOutput.MatchString(o.Name) || secretOutput.MatchString(o.Value) {
			out = append(out, fmt.Sprintf("%s: output %s = %s may carry a secret", path, o.Name, o.Value))
		}
	}
	return out
}

func TestBicep_FilesLex(t *testing.T) {
	for _, path := range bicepFiles(t) {
		if _, err := scanBicep(readFile(t, path)); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
}

func TestBicep_ModulePathsExist(t *testing.T) {
	count := 0
	for _, path := range bicepFiles(t) {
		s := scanFile(t, path)
		count += len(s.modules())
		for _, p := range moduleProblems(s, path) {
			t.Error(p)
		}
	}
	if count == 0 {
		t.Error("found no module declarations at all: the scanner is not seeing main.bicep's modules")
	}
}

func TestBicep_ModulePathsExist_Broken(t *testing.T) {
	s, err := scanBicep("module a 'app/missing.bicep' = {\n}\nmodule b 'br/public:avm/res/web/site:0.1.0' = {\n}\nmodule c 'app/api.bicep' = {\n}\n")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(moduleProblems(s, "main.bicep"), "\n")
	for _, want := range []string{"module a refers to \"app/missing.bicep\"", "module b uses registry reference"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems:\n%s\nwant one containing %q", got, want)
		}
	}
	if strings.Contains(got, "module c") {
		t.Errorf("problems:\n%s\nwant none for module c (app/api.bicep exists)", got)
	}
}

func TestBicep_Security(t *testing.T) {
	seen := map[string]bool{}
	for _, path := range bicepFiles(t) {
		s := scanFile(t, path)
		for _, r := range s.resources() {
			if !r.Existing {
				seen[r.Type] = true
			}
		}
		for _, p := range securityProblems(s, path) {
			t.Error(p)
		}
	}
	// The rules only mean something if the resources they guard are declared.
	for _, rule := range securityRules {
		if !seen[rule.resourceType] {
			t.Errorf("no %s is declared: got types %v", rule.resourceType, sortedKeys(seen))
		}
	}
}

func TestBicep_Security_Broken(t *testing.T) {
	cases := []struct {
		name, src, want string
	}{
		{
			"shared key allowed",
			"resource st 'Microsoft.Storage/storageAccounts@2023-05-01' = {\n  properties: {\n    allowSharedKeyAccess: true\n    allowBlobPublicAccess: false\n    minimumTlsVersion: 'TLS1_2'\n  }\n}\n",
			"resource st (Microsoft.Storage/storageAccounts) must set allowSharedKeyAccess: false",
		},
		{
			"shared key left at its default",
			"resource st 'Microsoft.Storage/storageAccounts@2023-05-01' = {\n  properties: {\n    allowBlobPublicAccess: false\n    minimumTlsVersion: 'TLS1_2'\n  }\n}\n",
			"must set allowSharedKeyAccess: false",
		},
		{
			"shared key disabled only in a comment",
			"resource st 'Microsoft.Storage/storageAccounts@2023-05-01' = {\n  properties: {\n    // allowSharedKeyAccess: false\n    allowBlobPublicAccess: false\n    minimumTlsVersion: 'TLS1_2'\n  }\n}\n",
			"must set allowSharedKeyAccess: false",
		},
		{
			"public blobs",
			"resource st 'Microsoft.Storage/storageAccounts@2023-05-01' = {\n  properties: {\n    allowSharedKeyAccess: false\n    allowBlobPublicAccess: true\n    minimumTlsVersion: 'TLS1_2'\n  }\n}\n",
			"must set allowBlobPublicAccess: false",
		},
		{
			"old TLS",
			"resource st 'Microsoft.Storage/storageAccounts@2023-05-01' = {\n  properties: {\n    allowSharedKeyAccess: false\n    allowBlobPublicAccess: false\n    minimumTlsVersion: 'TLS1_0'\n  }\n}\n",
			"must set minimumTlsVersion: 'TLS1_2'",
		},
		{
			"service bus local auth",
			"resource sb 'Microsoft.ServiceBus/namespaces@2022-10-01-preview' = {\n  properties: {\n    disableLocalAuth: false\n    minimumTlsVersion: '1.2'\n  }\n}\n",
			"resource sb (Microsoft.ServiceBus/namespaces) must set disableLocalAuth: true",
		},
		{
			"app insights key auth",
			"resource ai 'Microsoft.Insights/components@2020-02-02' = {\n  properties: {\n    Application_Type: 'web'\n  }\n}\n",
			"must set DisableLocalAuth: true",
		},
		{
			"listKeys",
			"var cs = 'AccountName=x;AccountKey=${st.listKeys().keys[0].value}'\n",
			"produces or holds a key",
		},
		{
			"connection string output",
			"output APPLICATIONINSIGHTS_CONNECTION_STRING string = ai.properties.ConnectionString\n",
			"may carry a secret",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := scanBicep(tc.src)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(securityProblems(s, "x.bicep"), "\n")
			if !strings.Contains(got, tc.want) {
				t.Errorf("problems:\n%s\nwant one containing %q", got, tc.want)
			}
		})
	}
	// An existing resource is someone else's: it is not judged.
	s, err := scanBicep("resource st 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {\n  name: 'x'\n}\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := securityProblems(s, "x.bicep"); len(got) != 0 {
		t.Errorf("existing storage account: got problems %v, want none", got)
	}
}

// parameterProblems compares main.parameters.json with main.bicep's params: every supplied
// parameter must be declared, every required one supplied, and an azd default
// (${VAR=default}) must equal the Bicep default so azd and a plain deployment agree.
func parameterProblems(params map[string]bicepParam, supplied map[string]string) []string {
	var out []string
	for _, name := range sortedKeys(supplied) {
		p, ok := params[name]
		if !ok {
			out = append(out, fmt.Sprintf("main.parameters.json supplies %q, which main.bicep does not declare", name))
			continue
		}
		if m := regexp.MustCompile(`^\$\{\w+=(.*)\}$`).FindStringSubmatch(supplied[name]); m != nil {
			def, ok := literal(p.Default)
			if !ok || def != m[1] {
				out = append(out, fmt.Sprintf("main.parameters.json defaults %q to %q but main.bicep to %s", name, m[1], p.Default))
			}
		}
	}
	for _, name := range sortedKeys(params) {
		if params[name].Default == "" {
			if _, ok := supplied[name]; !ok {
				out = append(out, fmt.Sprintf("main.bicep requires %q but main.parameters.json does not supply it", name))
			}
		}
	}
	return out
}

func suppliedParameters(t *testing.T) map[string]string {
	t.Helper()
	var file struct {
		Parameters map[string]struct {
			Value any `json:"value"`
		} `json:"parameters"`
	}
	readJSON(t, "main.parameters.json", &file)
	out := map[string]string{}
	for name, p := range file.Parameters {
		out[name] = fmt.Sprint(p.Value)
	}
	return out
}

func TestBicep_Parameters(t *testing.T) {
	s := scanFile(t, "main.bicep")
	params := s.params()
	supplied := suppliedParameters(t)
	for _, p := range parameterProblems(params, supplied) {
		t.Error(p)
	}
	for _, name := range []string{"environmentName", "location", "principalId"} {
		if _, ok := supplied[name]; !ok {
			t.Errorf("main.parameters.json does not supply %s (azd convention)", name)
		}
	}
	if !regexp.MustCompile(`(?m)^targetScope\s*=\s*'subscription'`).MatchString(s.code) {
		t.Error("main.bicep: want targetScope = 'subscription'")
	}
}

func TestBicep_Parameters_Broken(t *testing.T) {
	s, err := scanBicep("param environmentName string\nparam schedule string = '0 0 * * * *'\nparam location string\n")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(parameterProblems(s.params(), map[string]string{
		"environmentName": "${AZURE_ENV_NAME}",
		"schedule":        "${BATON_SCHEDULE=0 */5 * * * *}",
		"principalId":     "${AZURE_PRINCIPAL_ID}",
	}), "\n")
	for _, want := range []string{
		`supplies "principalId", which main.bicep does not declare`,
		`defaults "schedule" to "0 */5 * * * *" but main.bicep to '0 0 * * * *'`,
		`requires "location" but main.parameters.json does not supply it`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("problems:\n%s\nwant one containing %q", got, want)
		}
	}
}

// Built-in role definition IDs, as published in the Azure built-in roles reference.
var builtInRoles = map[string]string{
	"storageBlobDataOwner":        "b7e6dc6d-f1e8-4753-8033-0f276bb0955b",
	"storageBlobDataContributor":  "ba92f5b4-2d11-453d-a403-e96b0029c9fe",
	"storageBlobDataReader":       "2a2b9908-6ea1-4ae2-8e65-a410df84e7d1",
	"storageQueueDataContributor": "974c5e8b-45b9-4653-ba55-5f855dd0fb88",
	"storageTableDataContributor": "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3",
	"serviceBusDataOwner":         "090c5cfd-751d-490a-894a-3ce6f1109419",
	"serviceBusDataReceiver":      "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0",
	"serviceBusDataSender":        "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39",
	"monitoringMetricsPublisher":  "3913510d-42f4-4e42-8a64-420c390055eb",
}

var roleLineRE = regexp.MustCompile(`(?m)^[ \t]*(?:var[ \t]+)?(\w+)[ \t]*[:=][ \t]*'([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})'`)

// TestBicep_RoleDefinitionIDs checks every role GUID named in the Bicep against the table, so a
// typo in one ID (which ARM would report only at deployment) fails here.
func TestBicep_RoleDefinitionIDs(t *testing.T) {
	used := map[string]bool{}
	for _, path := range bicepFiles(t) {
		s := scanFile(t, path)
		for _, m := range roleLineRE.FindAllStringSubmatch(s.code, -1) {
			name, id := m[1], m[2]
			want, ok := builtInRoles[name]
			switch {
			case !ok:
				t.Errorf("%s: role %s = %s is not in the test's table of built-in roles", path, name, id)
			case id != want:
				t.Errorf("%s: role %s: got %s, want %s", path, name, id, want)
			}
			used[name] = true
		}
	}
	// The data roles the app needs: each must be granted somewhere.
	for _, name := range []string{"storageBlobDataOwner", "storageQueueDataContributor", "storageTableDataContributor",
		"serviceBusDataSender", "serviceBusDataReceiver", "monitoringMetricsPublisher"} {
		if !used[name] {
			t.Errorf("role %s is not defined in any Bicep file", name)
		}
	}
}

// TestBicep_FlexApp checks the function app's shape against what azd and the custom handler need.
func TestBicep_FlexApp(t *testing.T) {
	api := scanFile(t, "app/api.bicep")
	var site, plan *bicepResource
	for _, r := range api.resources() {
		switch r.Type {
		case "Microsoft.Web/sites":
			site = &r
		case "Microsoft.Web/serverfarms":
			plan = &r
		}
	}
	if site == nil || plan == nil {
		t.Fatalf("app/api.bicep: want a Microsoft.Web/sites and a Microsoft.Web/serverfarms resource")
	}
	for _, want := range []*regexp.Regexp{prop("tier", "'FlexConsumption'"), prop("name", "'FC1'"), prop("reserved", "true")} {
		if !want.MatchString(plan.Body) {
			t.Errorf("plan: want a line matching %s", want)
		}
	}
	for _, want := range []*regexp.Regexp{
		prop("kind", "'functionapp,linux'"),
		prop("name", "'custom'"),
		prop("version", "'1.0'"),
		prop("type", "'blobContainer'"),
		prop("type", "'UserAssignedIdentity'"),
		prop("maximumInstanceCount", "maximumInstanceCount"),
		prop("instanceMemoryMB", "instanceMemoryMB"),
		prop("'azd-service-name'", "serviceName"),
	} {
		if !want.MatchString(site.Body) {
			t.Errorf("site: want a line matching %s", want)
		}
	}

	// azd finds the app by the tag value, which must be the service key in azure.yaml.
	main := scanFile(t, "main.bicep")
	if !regexp.MustCompile(`(?m)^[ \t]*serviceName:[ \t]*'api'[ \t]*$`).MatchString(main.code) {
		t.Error("main.bicep: want serviceName: 'api' passed to app/api.bicep")
	}
}

// TestBicep_MaxDeliveries checks the one number three places must agree on: host.json's
// maxDequeueCount, BATON_MAX_DELIVERIES and the Service Bus queue's maxDeliveryCount. host.json
// is the single source: main.bicep loads it, so no parameter can disagree.
func TestBicep_MaxDeliveries(t *testing.T) {
	host, err := config.ReadHostJSON(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	if host.MaxDequeueCount != config.DefaultMaxDeliveries {
		t.Errorf("host.json maxDequeueCount %d, config.DefaultMaxDeliveries %d: want them equal", host.MaxDequeueCount, config.DefaultMaxDeliveries)
	}
	main := scanFile(t, "main.bicep")
	if p, ok := main.params()["maxDeliveries"]; ok {
		t.Errorf("main.bicep: param maxDeliveries (default %s) can disagree with host.json; derive it from host.json", p.Default)
	}
	vars := main.vars()
	if vars["hostJson"] != "loadJsonContent('../host.json')" {
		t.Errorf("main.bicep: var hostJson = %q, want loadJsonContent('../host.json')", vars["hostJson"])
	}
	if vars["maxDeliveries"] != "hostJson.extensions.queues.maxDequeueCount" {
		t.Errorf("main.bicep: var maxDeliveries = %q, want hostJson.extensions.queues.maxDequeueCount", vars["maxDeliveries"])
	}
	if got, ok := newDeployResolver(t).value("maxDeliveries"); !ok || got != strconv.Itoa(host.MaxDequeueCount) {
		t.Errorf("main.bicep: maxDeliveries resolves to %q (%t), want host.json's %d", got, ok, host.MaxDequeueCount)
	}
	if !prop("maxDeliveryCount", "maxDeliveries").MatchString(main.code) {
		t.Error("main.bicep: want maxDeliveryCount: maxDeliveries passed to the Service Bus module")
	}
	if !prop("maxDeliveries", "maxDeliveries").MatchString(main.code) {
		t.Error("main.bicep: want maxDeliveries: maxDeliveries passed to the app module")
	}
	sb := scanFile(t, "app/servicebus.bicep")
	for _, want := range []*regexp.Regexp{
		prop("maxDeliveryCount", "maxDeliveryCount"),
		prop("requiresDuplicateDetection", "true"),
		prop("duplicateDetectionHistoryTimeWindow", "duplicateDetectionWindow"),
		prop("deadLetteringOnMessageExpiration", "true"),
		prop("lockDuration", "lockDuration"),
	} {
		if !want.MatchString(sb.code) {
			t.Errorf("app/servicebus.bicep: want a line matching %s", want)
		}
	}
	api := scanFile(t, "app/api.bicep")
	found := false
	for _, entries := range api.settingsObjects() {
		for _, e := range entries {
			if e.Key == config.SettingMaxDeliveries {
				found = true
				if e.Value != "string(maxDeliveries)" {
					t.Errorf("app/api.bicep: %s = %s, want string(maxDeliveries)", e.Key, e.Value)
				}
			}
		}
	}
	if !found {
		t.Errorf("app/api.bicep: no %s app setting", config.SettingMaxDeliveries)
	}
}

// TestBicep_Limits checks the timing limits the template and host.json must keep consistent,
// beyond what config.Load checks at start-up: the Service Bus lock is renewed for as long as an
// invocation may run, a peek-lock fits Service Bus' 5-minute maximum, and a partition message
// lives at least as long as the longest BATON_RUN_TIMEOUT, so it is re-enqueued, not expired.
func TestBicep_Limits(t *testing.T) {
	host, err := config.ReadHostJSON(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	if host.FunctionTimeout <= 0 {
		t.Fatalf("host.json functionTimeout unbounded: Flex Consumption needs a bound")
	}
	if host.MaxAutoLockRenewal < host.FunctionTimeout {
		t.Errorf("host.json maxAutoLockRenewalDuration %s < functionTimeout %s", host.MaxAutoLockRenewal, host.FunctionTimeout)
	}
	params := scanFile(t, "main.bicep").params()
	iso := func(name string) time.Duration {
		t.Helper()
		v, ok := literal(params[name].Default)
		if !ok {
			t.Fatalf("main.bicep: %s has no literal default", name)
		}
		d, err := isoDuration(v)
		if err != nil {
			t.Fatalf("main.bicep: %s = %s: %v", name, v, err)
		}
		return d
	}
	if d := iso("lockDuration"); d <= 0 || d > 5*time.Minute {
		t.Errorf("main.bicep: lockDuration %s, want at most PT5M", d)
	}
	if d := iso("messageTimeToLive"); d < config.MaxRunTimeout {
		t.Errorf("main.bicep: messageTimeToLive %s is shorter than the longest %s (%s)", d, config.SettingRunTimeout, config.MaxRunTimeout)
	}
}

// isoDuration parses the ISO 8601 durations the template uses (PnDTnHnMnS).
func isoDuration(v string) (time.Duration, error) {
	m := regexp.MustCompile(`^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?$`).FindStringSubmatch(v)
	if m == nil || v == "P" || strings.HasSuffix(v, "T") {
		return 0, fmt.Errorf("not an ISO 8601 duration")
	}
	var d time.Duration
	for i, unit := range []time.Duration{24 * time.Hour, time.Hour, time.Minute, time.Second} {
		if m[i+1] != "" {
			n, _ := strconv.Atoi(m[i+1])
			d += time.Duration(n) * unit
		}
	}
	return d, nil
}

// TestBicep_Job checks the deploy-time guard on BATON_JOB: the @allowed list is exactly the
// handler's registered jobs, the default needs no input, and the params are an object (azd
// rejects a BATON_JOB_PARAMS that is not JSON before anything is deployed).
func TestBicep_Job(t *testing.T) {
	main := scanFile(t, "main.bicep")
	m := regexp.MustCompile(`@allowed\(\[([^\]]*)\]\)\s*param job string = '(\w+)'`).FindStringSubmatch(main.code)
	if m == nil {
		t.Fatal("main.bicep: want @allowed([...]) on param job string = '<default>'")
	}
	allowed := regexp.MustCompile(`'(\w+)'`).FindAllStringSubmatch(m[1], -1)
	var got []string
	for _, a := range allowed {
		got = append(got, a[1])
	}
	sort.Strings(got)
	jobsSrc := readFile(t, filepath.Join(repoRoot(t), "handler", "jobs.go"))
	var want []string
	// Each built-in job registers under its package's Name, which is the package's name.
	for _, c := range regexp.MustCompile(`app\.Register\((\w+)\.Name,`).FindAllStringSubmatch(jobsSrc, -1) {
		want = append(want, c[1])
	}
	if len(want) == 0 {
		t.Fatal("handler/jobs.go: found no app.Register(<job>.Name, ...)")
	}
	sort.Strings(want)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("main.bicep: job @allowed %v, handler/jobs.go registers %v", got, want)
	}
	if m[2] != config.DefaultJob {
		t.Errorf("main.bicep: job defaults to %s, config.DefaultJob is %s", m[2], config.DefaultJob)
	}
	if p := main.params()["jobParams"]; p.Type != "object" || !emptyObjectRE.MatchString(p.Default) {
		t.Errorf("main.bicep: jobParams is %s = %s, want object = {} (the default job's default params apply)", p.Type, p.Default)
	}
	if s := suppliedParameters(t)["jobParams"]; s != "${BATON_JOB_PARAMS}" {
		t.Errorf("main.parameters.json: jobParams = %q, want ${BATON_JOB_PARAMS}", s)
	}
}

// TestBicep_ManualJobs: BATON_MANUAL_JOBS deploys its own parameter, empty unless the operator
// sets it (azd env set BATON_MANUAL_JOBS), which the handler reads as the jobs of the app's
// schedules only; it never follows BATON_JOB, which a scaffolded app leaves empty.
func TestBicep_ManualJobs(t *testing.T) {
	_, exprs := bicepSettings(t)
	if e := exprs[config.SettingManualJobs]; e != "manualJobs" {
		t.Errorf("app/api.bicep: %s = %s, want the manualJobs parameter", config.SettingManualJobs, e)
	}
	if p := scanFile(t, "main.bicep").params()["manualJobs"]; p.Type != "string" || p.Default != "''" {
		t.Errorf("main.bicep: manualJobs is %s = %s, want string = '' (the schedules' jobs only)", p.Type, p.Default)
	}
	if s := suppliedParameters(t)["manualJobs"]; s != "${"+config.SettingManualJobs+"}" {
		t.Errorf("main.parameters.json: manualJobs = %q, want ${%s} with no default", s, config.SettingManualJobs)
	}
	v, ok := newDeployResolver(t).value(exprs[config.SettingManualJobs])
	env := map[string]string{config.SettingHostStorage: "UseDevelopmentStorage=true", config.SettingTransport: "queue",
		config.SettingHeartbeat: defaultHeartbeat, config.SettingManualJobs: v}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if !ok || err != nil || cfg.ManualAll || len(cfg.ManualJobs) != 0 {
		t.Errorf("deployed %s=%q (resolved %v): all %v, jobs %v, %v; want no job beyond the schedules'",
			config.SettingManualJobs, v, ok, cfg.ManualAll, cfg.ManualJobs, err)
	}
}

// Every Baton setting a user may want to change is exposed through `azd env set`.
func TestBicep_EnvMappedSettings(t *testing.T) {
	supplied := suppliedParameters(t)
	for param, setting := range map[string]string{
		"heartbeat": config.SettingHeartbeat, "schedule": config.SettingSchedule, "schedules": config.SettingSchedules,
		"job": config.SettingJob, "jobParams": config.SettingJobParams, "manualJobs": config.SettingManualJobs, "overlap": config.SettingOverlap,
		"leaseDuration": config.SettingLeaseDuration, "runTimeout": config.SettingRunTimeout, "logLevel": config.SettingLogLevel,
	} {
		v := supplied[param]
		if !strings.HasPrefix(v, "${"+setting+"}") && !strings.HasPrefix(v, "${"+setting+"=") {
			t.Errorf("main.parameters.json: %s = %q, want it mapped from ${%s…}", param, v, setting)
		}
	}
	// The settings that are gone are mapped by nothing.
	for name := range removedSettings {
		for param, v := range supplied {
			if strings.Contains(v, "${"+name) {
				t.Errorf("main.parameters.json: %s maps %s, which the handler refuses: remove it", param, name)
			}
		}
	}
	// BATON_SCHEDULES is JSON, which azd passes to an object parameter only: an object
	// defaulting to {} (no schedule changed), deployed as '' when empty.
	if p := scanFile(t, "main.bicep").params()["schedules"]; p.Type != "object" || !emptyObjectRE.MatchString(p.Default) {
		t.Errorf("main.bicep: schedules is %s = %s, want object = {}", p.Type, p.Default)
	}
	// The heartbeat's default beats every minute: schedules fire at most a minute late.
	if p := scanFile(t, "main.bicep").params()["heartbeat"]; p.Default != "'"+defaultHeartbeat+"'" {
		t.Errorf("main.bicep: heartbeat defaults to %s, want '%s'", p.Default, defaultHeartbeat)
	}
}

// roleGrant is one role assignment read out of a Bicep file.
type roleGrant struct {
	file, symbol, principal, role, scope string
}

var (
	roleDefRE   = regexp.MustCompile(`roleDefinitions',\s*(?:roles\.)?(\w+(?:\.\w+)?)\)`)
	principalRE = regexp.MustCompile(`(?m)^\s*principalId:\s*(\S+)`)
	scopeRE     = regexp.MustCompile(`(?m)^\s*scope:\s*(\S+)`)
)

func roleGrants(t *testing.T, path string) []roleGrant {
	t.Helper()
	var out []roleGrant
	for _, r := range scanFile(t, path).resources() {
		if r.Type != "Microsoft.Authorization/roleAssignments" {
			continue
		}
		g := roleGrant{file: path, symbol: r.Symbol}
		if m := roleDefRE.FindStringSubmatch(r.Body); m != nil {
			g.role = m[1]
		}
		if m := principalRE.FindStringSubmatch(r.Body); m != nil {
			g.principal = m[1]
		}
		if m := scopeRE.FindStringSubmatch(r.Body); m != nil {
			g.scope = m[1]
		}
		out = append(out, g)
	}
	return out
}

// TestBicep_DeployerLeastPrivilege: the deploying principal gets Storage Blob Data Reader on
// the leases and runs containers and nothing else (docs/deploy.md's steps read the ledger; deploy,
// keys and the HTTP API need no data role), and only when principalId is given. The app's
// identity is granted by its own principal ID, never through a list that also holds the
// deployer.
func TestBicep_DeployerLeastPrivilege(t *testing.T) {
	rbac := scanFile(t, "app/rbac.bicep")
	deployer := map[string]bool{}
	for _, g := range roleGrants(t, "app/rbac.bicep") {
		switch g.principal {
		case "appPrincipalId":
		case "principalId":
			deployer[g.scope] = true
			if g.role != "storageBlobDataReader" {
				t.Errorf("app/rbac.bicep: %s gives the deployer %s, want storageBlobDataReader only", g.symbol, g.role)
			}
			if g.scope != "leaseContainer" && g.scope != "runsContainer" {
				t.Errorf("app/rbac.bicep: %s is scoped to %s, want the leases or runs container", g.symbol, g.scope)
			}
		default:
			t.Errorf("app/rbac.bicep: %s grants principalId %s: name appPrincipalId or principalId directly", g.symbol, g.principal)
		}
	}
	if !deployer["leaseContainer"] || !deployer["runsContainer"] {
		t.Errorf("app/rbac.bicep: the deployer reads %v, want leaseContainer and runsContainer", deployer)
	}
	if n := len(regexp.MustCompile(`= if \(!empty\(principalId\)\)`).FindAllString(rbac.code, -1)); n != len(deployer) {
		t.Errorf("app/rbac.bicep: %d of the deployer's %d grants are conditional on principalId", n, len(deployer))
	}
	// Multi-region: the deployer reads the shared containers, the app writes them.
	shared := scanFile(t, "app/shared-leases.bicep")
	if !regexp.MustCompile(`id: principalId\s+type: principalType\s+role: roles\.storageBlobDataReader`).MatchString(shared.code) {
		t.Error("app/shared-leases.bicep: want the deployer granted roles.storageBlobDataReader")
	}
	if !regexp.MustCompile(`id: appPrincipalId\s+type: 'ServicePrincipal'\s+role: roles\.storageBlobDataContributor`).MatchString(shared.code) {
		t.Error("app/shared-leases.bicep: want the app granted roles.storageBlobDataContributor")
	}
	// The app's identity is user-assigned and every connection names it in __clientId, so no
	// AZURE_CLIENT_ID is deployed (nothing reads it).
	if !regexp.MustCompile(`type:\s*'UserAssigned'`).MatchString(scanFile(t, "app/api.bicep").code) {
		t.Error("app/api.bicep: the site's identity is no longer user-assigned; revisit the clientId settings")
	}
	_, exprs := bicepSettings(t)
	if _, ok := exprs["AZURE_CLIENT_ID"]; ok {
		t.Error("app/api.bicep: AZURE_CLIENT_ID is deployed but nothing reads it (each connection has __clientId)")
	}
}

var moduleDeclRE = regexp.MustCompile(`(?m)^[ \t]*module[ \t]+(\w+)[ \t]+'([^']*)'[ \t]*=`)
var paramsBlockRE = regexp.MustCompile(`(?m)^[ \t]*params[ \t]*:[ \t]*\{`)

// moduleParamProblems checks each module call of a file against the module's declared
// parameters: every argument is declared, every required parameter is passed. files maps a
// module path (as written) to the module's lexed source.
func moduleParamProblems(s *bicepScan, path string, files map[string]*bicepScan) []string {
	var out []string
	for _, m := range s.matches(moduleDeclRE) {
		sym, ref := s.group(m, 1), s.group(m, 2)
		target, ok := files[ref]
		if !ok {
			continue // moduleProblems reports missing files
		}
		body, open, ok := s.block(m[1])
		if !ok {
			out = append(out, fmt.Sprintf("%s: module %s has no body", path, sym))
			continue
		}
		passed := map[string]bool{}
		if pm := paramsBlockRE.FindStringIndex(body); pm != nil {
			for _, e := range s.objectEntries(open + pm[1] - 1) {
				passed[e.Key] = true
			}
		}
		declared := target.params()
		for _, name := range sortedKeys(passed) {
			if _, ok := declared[name]; !ok {
				out = append(out, fmt.Sprintf("%s: module %s passes %s, which %s does not declare", path, sym, name, ref))
			}
		}
		for _, name := range sortedKeys(declared) {
			if declared[name].Default == "" && !passed[name] {
				out = append(out, fmt.Sprintf("%s: module %s does not pass %s, which %s requires", path, sym, name, ref))
			}
		}
	}
	return out
}

func TestBicep_ModuleParameters(t *testing.T) {
	for _, path := range bicepFiles(t) {
		s := scanFile(t, path)
		files := map[string]*bicepScan{}
		for _, ref := range s.modules() {
			target := filepath.Join(filepath.Dir(path), filepath.FromSlash(ref))
			if _, err := os.Stat(target); err == nil {
				files[ref] = scanFile(t, target)
			}
		}
		for _, p := range moduleParamProblems(s, path, files) {
			t.Error(p)
		}
	}
}

func TestBicep_ModuleParameters_Broken(t *testing.T) {
	mod, err := scanBicep("param name string\nparam location string\nparam tags object = {}\n")
	if err != nil {
		t.Fatal(err)
	}
	s, err := scanBicep("module m 'app/m.bicep' = {\n  name: 'm'\n  params: {\n    name: 'x'\n    tag: {\n      a: 'b'\n    }\n  }\n}\n")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(moduleParamProblems(s, "main.bicep", map[string]*bicepScan{"app/m.bicep": mod}), "\n")
	for _, want := range []string{
		"module m passes tag, which app/m.bicep does not declare",
		"module m does not pass location, which app/m.bicep requires",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("problems:\n%s\nwant one containing %q", got, want)
		}
	}
	if strings.Contains(got, "passes a,") || strings.Contains(got, " name,") {
		t.Errorf("problems:\n%s\nwant nested keys and passed parameters left alone", got)
	}
}

// TestBicep_Abbreviations: every abbrs.<name> main.bicep uses is in abbreviations.json.
func TestBicep_Abbreviations(t *testing.T) {
	var abbrs map[string]string
	readJSON(t, "abbreviations.json", &abbrs)
	s := scanFile(t, "main.bicep")
	used := regexp.MustCompile(`\babbrs\.(\w+)`).FindAllStringSubmatch(s.src, -1)
	if len(used) == 0 {
		t.Fatal("main.bicep uses no abbreviation: the check sees nothing")
	}
	for _, m := range used {
		if _, ok := abbrs[m[1]]; !ok {
			t.Errorf("main.bicep uses abbrs.%s, which abbreviations.json does not define", m[1])
		}
	}
}
