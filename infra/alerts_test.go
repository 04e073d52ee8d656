package infra_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/lib/ncrontab"
)

// The alert rules of app/alerts.bicep: each rule is declared with the severity, period and
// window docs/deploy.md states; each log search query passes the KQL checker and reads only
// lines and keys the handler logs; the dead-letter rule watches both queues; the action group
// exists only when an e-mail address is given, and every rule notifies it then.

// alertRule is what the tests expect of one log search rule.
type alertRule struct {
	name      string
	severity  int
	frequency string
	window    string // a literal ISO 8601 duration, or the parameter that sets it
	// messages are the handler's lines the query selects, each with the keys the query needs
	// it to carry (every site logging the message must carry them).
	messages map[string][]string
}

var alertRules = []alertRule{
	{"run-ended-badly", 2, "PT5M", "PT10M", map[string][]string{
		"run finished": {"run", "state"},
		"report was written but the manifest was not final; settled it": {"run", "state"},
		"run failed":                   {"run", "reason"},
		"run timed out while planning": {"run", "reason"},
		"occurrence recorded":          {"run", "state", "reason"},
	}},
	{"missed-occurrence", 2, "PT5M", "PT10M", map[string][]string{
		"occurrence recorded": {"run", "state", "schedule", "occurrence", "reason"},
	}},
	{"schedule-auto-paused", 1, "PT5M", "PT10M", map[string][]string{
		"schedule paused automatically: resume it once the cause is fixed": {"run", "schedule", "state", "note"},
	}},
	{"nobody-deciding", 1, "PT5M", "leaseAlertWindow", map[string][]string{
		"heartbeat: schedules decided":                                              {"function"},
		"heartbeat: the scheduler lease is held; its holder decides every schedule": {"function", "leaderEpoch"},
		"invocation failed":                                                         {"function"},
	}},
}

// Strings an alert query may hold besides its messages and the ledger's states: the host's log
// category of the handler's console lines, the start of a JSON line, the heartbeat's function.
var alertQueryConstants = []string{"Host.Function.Console", "{", "Tick"}

// bicepObjects returns the entries of each object literal directly inside the array literal
// that opens at offset open.
func (s *bicepScan) arrayObjects(open int) [][]bicepEntry {
	var out [][]bicepEntry
	end := s.pair[open]
	for i := open + 1; i < end; i++ {
		if !s.inCode(i) {
			continue
		}
		switch s.code[i] {
		case '{':
			out = append(out, s.objectEntries(i))
			i = s.pair[i]
		case '[', '(':
			i = s.pair[i]
		}
	}
	return out
}

// logRuleDecls reads `var logRules = [ { … } … ]` of app/alerts.bicep, by rule name.
func logRuleDecls(t *testing.T, s *bicepScan) map[string]map[string]string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^var logRules = \[`).FindStringIndex(s.code)
	if m == nil {
		t.Fatal("app/alerts.bicep: no var logRules = [ … ]")
	}
	out := map[string]map[string]string{}
	for _, obj := range s.arrayObjects(m[1] - 1) {
		fields := map[string]string{}
		for _, e := range obj {
			fields[e.Key] = e.Value
		}
		name, ok := literal(fields["name"])
		if !ok {
			t.Fatalf("app/alerts.bicep: a log rule without a literal name: %v", fields)
		}
		out[name] = fields
	}
	return out
}

// ledgerStates reads the run states of the ledger (State = "…" constants).
func ledgerStates(t *testing.T) []string {
	t.Helper()
	src := readFile(t, filepath.Join(repoRoot(t), "internal", "engine", "ledger", "manifest.go"))
	var out []string
	for _, m := range regexp.MustCompile(`State\s*=\s*"([a-z-]+)"`).FindAllStringSubmatch(src, -1) {
		out = append(out, m[1])
	}
	if !slices.Contains(out, "timed-out") || !slices.Contains(out, "missed") {
		t.Fatalf("ledger states %v: the scan misses some", out)
	}
	return out
}

// alertQuery returns the query the rule deploys: the .kql file, with the parameter's default
// put in for the nobody-deciding rule's N as main.bicep's default deploys it.
func alertQuery(t *testing.T, name string) string {
	t.Helper()
	return readFile(t, filepath.Join("app", "alerts", name+".kql"))
}

// queryProblems checks one rule's query: it passes the KQL checker, every string in it is one
// of the rule's messages, a ledger state or a known constant, every message is logged with the
// keys the rule needs, and every key it reads from a line is logged by one of its messages.
func queryProblems(rule alertRule, query string, sites []logSite, states []string) []string {
	q, probs := checkKQL(query)
	for i, p := range probs {
		probs[i] = rule.name + ": " + p
	}
	logged := map[string]bool{}
	for _, k := range slogBuiltins {
		logged[k] = true
	}
	for _, msg := range sortedKeys(rule.messages) {
		if !slices.Contains(q.strings, msg) {
			probs = append(probs, fmt.Sprintf("%s: the query does not select the line %q", rule.name, msg))
		}
		got := sitesOf(sites, msg)
		if len(got) == 0 {
			probs = append(probs, fmt.Sprintf("%s: the handler logs no line %q", rule.name, msg))
		}
		for _, s := range got {
			for _, k := range rule.messages[msg] {
				if !s.keys[k] {
					probs = append(probs, fmt.Sprintf("%s: %s:%d logs %q without the key %s", rule.name, s.file, s.line, msg, k))
				}
			}
			for k := range s.keys {
				logged[k] = true
			}
		}
	}
	for _, s := range q.strings {
		if _, ok := rule.messages[s]; !ok && !slices.Contains(states, s) && !slices.Contains(alertQueryConstants, s) {
			probs = append(probs, fmt.Sprintf("%s: the query holds %q, which is none of its lines, a run state or a known constant", rule.name, s))
		}
	}
	for _, k := range q.lineKeys {
		if !logged[k] {
			probs = append(probs, fmt.Sprintf("%s: the query reads line.%s, which none of its lines logs", rule.name, k))
		}
	}
	if len(q.columns) == 0 && len(probs) == 0 {
		probs = append(probs, rule.name+": the query returns no columns")
	}
	return probs
}

func TestAlerts_Queries(t *testing.T) {
	sites := readLogSites(t, repoRoot(t), logSourceDirs)
	states := ledgerStates(t)
	files, err := filepath.Glob(filepath.Join("app", "alerts", "*.kql"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(alertRules) {
		t.Errorf("app/alerts holds %d queries %v, want one per log rule (%d)", len(files), files, len(alertRules))
	}
	for _, rule := range alertRules {
		for _, p := range queryProblems(rule, alertQuery(t, rule.name), sites, states) {
			t.Error(p)
		}
	}
}

func TestAlerts_Queries_Broken(t *testing.T) {
	sites := readLogSites(t, repoRoot(t), logSourceDirs)
	states := ledgerStates(t)
	rule := alertRules[1] // missed-occurrence
	good := alertQuery(t, rule.name)
	if p := queryProblems(rule, good, sites, states); len(p) != 0 {
		t.Fatalf("the real query: %v", p)
	}
	for _, c := range []struct{ name, old, new, want string }{
		{"renamed message", `"occurrence recorded"`, `"occurrence logged"`, `does not select the line "occurrence recorded"`},
		{"a key nobody logs", "line.schedule", "line.scheduleName", "reads line.scheduleName, which none of its lines logs"},
		{"a state that does not exist", `"missed"`, `"mised"`, `holds "mised"`},
		{"broken syntax", "| project", "| projekt", `unknown tabular operator "projekt"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := strings.Replace(good, c.old, c.new, 1)
			if q == good {
				t.Fatalf("%q is not in the query", c.old)
			}
			if got := strings.Join(queryProblems(rule, q, sites, states), "\n"); !strings.Contains(got, c.want) {
				t.Errorf("problems %q, want one containing %q", got, c.want)
			}
		})
	}
	// A message the handler no longer logs, or logs without a key the rule needs.
	gone := rule
	gone.messages = map[string][]string{"occurrence recorded": {"run", "state", "streak"}}
	if got := strings.Join(queryProblems(gone, good, sites, states), "\n"); !strings.Contains(got, `logs "occurrence recorded" without the key streak`) {
		t.Errorf("problems %q, want the missing key streak named", got)
	}
	gone.messages = map[string][]string{"occurrence recorded": {"run"}, "occurrence written": nil}
	if got := strings.Join(queryProblems(gone, good, sites, states), "\n"); !strings.Contains(got, `the handler logs no line "occurrence written"`) {
		t.Errorf("problems %q, want the unlogged message named", got)
	}
}

func TestAlerts_Rules(t *testing.T) {
	s := scanFile(t, "app/alerts.bicep")
	decls := logRuleDecls(t, s)
	if len(decls) != len(alertRules) {
		t.Errorf("app/alerts.bicep declares log rules %v, want %d", sortedKeys(decls), len(alertRules))
	}
	vars := s.vars()
	for _, rule := range alertRules {
		d, ok := decls[rule.name]
		if !ok {
			t.Errorf("app/alerts.bicep: no log rule %s", rule.name)
			continue
		}
		if d["severity"] != strconv.Itoa(rule.severity) {
			t.Errorf("%s: severity %s, want %d", rule.name, d["severity"], rule.severity)
		}
		if d["evaluationFrequency"] != "'"+rule.frequency+"'" {
			t.Errorf("%s: evaluationFrequency %s, want '%s'", rule.name, d["evaluationFrequency"], rule.frequency)
		}
		wantWindow := rule.window
		if strings.HasPrefix(wantWindow, "PT") {
			wantWindow = "'" + wantWindow + "'"
		}
		if d["windowSize"] != wantWindow {
			t.Errorf("%s: windowSize %s, want %s", rule.name, d["windowSize"], wantWindow)
		}
		// The query is the .kql file, loaded as it is (the nobody-deciding rule's N put in).
		load := "loadTextContent('alerts/" + rule.name + ".kql')"
		query := d["query"]
		if v, ok := vars[query]; ok {
			query = v
		}
		if !strings.Contains(query, load) {
			t.Errorf("%s: query %s, want it to load %s", rule.name, d["query"], load)
		}
		if _, err := os.Stat(filepath.Join("app", "alerts", rule.name+".kql")); err != nil {
			t.Errorf("%s: %v", rule.name, err)
		}
		if rule.severity < 0 || rule.severity > 4 {
			t.Errorf("%s: severity %d is not 0-4", rule.name, rule.severity)
		}
	}
	// Every log rule fires on a row of its query in its window, on Application Insights'
	// traces, and notifies the action group when there is one.
	var logAlerts, metric, group *bicepResource
	for _, r := range s.resources() {
		switch r.Type {
		case "Microsoft.Insights/scheduledQueryRules":
			logAlerts = &r
		case "Microsoft.Insights/metricAlerts":
			metric = &r
		case "Microsoft.Insights/actionGroups":
			group = &r
		}
	}
	if logAlerts == nil || metric == nil || group == nil {
		t.Fatalf("app/alerts.bicep: want scheduledQueryRules, metricAlerts and actionGroups resources")
	}
	if !regexp.MustCompile(`(?m)^resource logAlerts '[^']+' = \[for rule in logRules: \{`).MatchString(s.code) {
		t.Error("app/alerts.bicep: want one scheduledQueryRules resource per entry of logRules")
	}
	for _, want := range []*regexp.Regexp{
		prop("kind", "'LogAlert'"), prop("severity", "rule.severity"), prop("evaluationFrequency", "rule.evaluationFrequency"),
		prop("windowSize", "rule.windowSize"), prop("query", "rule.query"), prop("timeAggregation", "'Count'"),
		prop("operator", "'GreaterThan'"), prop("threshold", "0"), prop("actionGroups", "actionGroups"),
		regexp.MustCompile(`scopes: \[\s*applicationInsights\.id\s*\]`),
	} {
		if !want.MatchString(logAlerts.Body) {
			t.Errorf("scheduledQueryRules: want a line matching %s", want)
		}
	}
	for _, want := range []*regexp.Regexp{
		prop("metricName", "'DeadletteredMessages'"), prop("metricNamespace", "'Microsoft.ServiceBus/namespaces'"),
		prop("name", "'EntityName'"), prop("operator", "'GreaterThan'"), prop("threshold", "0"),
		prop("timeAggregation", "'Maximum'"), prop("severity", "2"), prop("evaluationFrequency", "'PT5M'"),
		prop("windowSize", "'PT5M'"), regexp.MustCompile(`values: \[\s*workQueueName\s+controlQueueName\s*\]`),
		regexp.MustCompile(`scopes: \[\s*serviceBus\.id\s*\]`),
		regexp.MustCompile(`actions: empty\(alertEmail\) \? \[\] : \[\s*\{\s*actionGroupId: actionGroup\.id\s*\}\s*\]`),
	} {
		if !want.MatchString(metric.Body) {
			t.Errorf("metricAlerts (dead letters): want a line matching %s", want)
		}
	}
	// The action group: only with an e-mail address, which it mails.
	if !regexp.MustCompile(`(?m)^resource actionGroup '[^']+' = if \(!empty\(alertEmail\)\)`).MatchString(s.code) {
		t.Error("app/alerts.bicep: want the action group declared = if (!empty(alertEmail))")
	}
	if !prop("emailAddress", "alertEmail").MatchString(group.Body) {
		t.Error("app/alerts.bicep: the action group must mail alertEmail")
	}
	if got := vars["actionGroups"]; got != "empty(alertEmail) ? [] : [" {
		t.Errorf("app/alerts.bicep: var actionGroups = %s…, want empty(alertEmail) ? [] : [ actionGroup.id ]", got)
	}
	if !regexp.MustCompile(`var actionGroups = empty\(alertEmail\) \? \[\] : \[\s*actionGroup\.id\s*\]`).MatchString(s.code) {
		t.Error("app/alerts.bicep: want var actionGroups = empty(alertEmail) ? [] : [ actionGroup.id ]")
	}
	if p := s.params()["alertEmail"]; p.Default != "''" {
		t.Errorf("app/alerts.bicep: alertEmail defaults to %s, want '' (no action group)", p.Default)
	}

	// main.bicep: the parameters, their defaults, and the module call that passes them.
	main := scanFile(t, "main.bicep")
	params := main.params()
	if p := params["alertEmail"]; p.Type != "string" || p.Default != "''" {
		t.Errorf("main.bicep: alertEmail is %s = %s, want string = ''", p.Type, p.Default)
	}
	if s := suppliedParameters(t)["alertEmail"]; s != "${ALERT_EMAIL}" {
		t.Errorf("main.parameters.json: alertEmail = %q, want ${ALERT_EMAIL}", s)
	}
	if m := regexp.MustCompile(`(?m)^module alerts 'app/alerts\.bicep' = \{`).FindStringIndex(main.code); m == nil {
		t.Error("main.bicep: want module alerts 'app/alerts.bicep' = { … } deployed unconditionally")
	} else {
		body, _, _ := main.block(m[1] - 1)
		for _, name := range []string{"alertEmail", "leaseAlertHeartbeats", "leaseAlertWindow"} {
			if !prop(name, name).MatchString(body) {
				t.Errorf("main.bicep: module alerts must pass %s: %s", name, name)
			}
		}
	}
}

// TestAlerts_LeaseWindow: the nobody-deciding rule's N reaches its query, and its default window
// holds N heartbeats of the default heartbeat with room for the lines to arrive.
func TestAlerts_LeaseWindow(t *testing.T) {
	s := scanFile(t, "app/alerts.bicep")
	query := alertQuery(t, "nobody-deciding")
	if n := strings.Count(query, "let beats = 5;"); n != 1 {
		t.Fatalf("nobody-deciding.kql: want exactly one `let beats = 5;` (the parameter replaces it), found %d", n)
	}
	if v := s.vars()["nobodyDeciding"]; v != "replace(loadTextContent('alerts/nobody-deciding.kql'), 'let beats = 5;', 'let beats = ${leaseAlertHeartbeats};')" {
		t.Errorf("app/alerts.bicep: var nobodyDeciding = %s, want the file with leaseAlertHeartbeats put in", v)
	}
	main := scanFile(t, "main.bicep")
	params := main.params()
	n, err := strconv.Atoi(params["leaseAlertHeartbeats"].Default)
	if err != nil || n != 5 || s.params()["leaseAlertHeartbeats"].Default != "5" {
		t.Fatalf("leaseAlertHeartbeats defaults to %q in main.bicep and %q in app/alerts.bicep, want 5 in both (the .kql file's N)",
			params["leaseAlertHeartbeats"].Default, s.params()["leaseAlertHeartbeats"].Default)
	}
	win, ok := literal(params["leaseAlertWindow"].Default)
	if !ok || win != s.params()["leaseAlertWindow"].Default[1:len(s.params()["leaseAlertWindow"].Default)-1] {
		t.Fatalf("leaseAlertWindow defaults: main.bicep %s, app/alerts.bicep %s; want the same literal", params["leaseAlertWindow"].Default, s.params()["leaseAlertWindow"].Default)
	}
	window, err := isoDuration(win)
	if err != nil {
		t.Fatalf("leaseAlertWindow %s: %v", win, err)
	}
	hb, ok := literal(params["heartbeat"].Default)
	if !ok {
		t.Fatal("main.bicep: heartbeat has no literal default")
	}
	expr, err := ncrontab.Parse(hb)
	if err != nil {
		t.Fatal(err)
	}
	// The longest gap between heartbeats over a day.
	var gap time.Duration
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	prev, ok := expr.Next(at, time.UTC)
	for ok && prev.Before(at.Add(24*time.Hour)) {
		next, more := expr.Next(prev, time.UTC)
		if !more {
			break
		}
		gap = max(gap, next.Sub(prev))
		prev = next
	}
	if gap == 0 {
		t.Fatalf("heartbeat %q: no two occurrences in a day", hb)
	}
	const ingestion = 3 * time.Minute // lines reach Application Insights within a few minutes
	if need := time.Duration(n)*gap + ingestion; window < need {
		t.Errorf("leaseAlertWindow %s is shorter than %d heartbeats of %q (%s) plus %s for the lines to arrive", win, n, hb, gap, ingestion)
	}
	if window < 5*time.Minute || window > 48*time.Hour {
		t.Errorf("leaseAlertWindow %s is outside the 5 minutes to 2 days a log search alert allows", win)
	}
	freq, _ := isoDuration("PT5M")
	if window < freq {
		t.Errorf("leaseAlertWindow %s is shorter than the rule's evaluation period %s: heartbeats between windows go unseen", win, freq)
	}
}

// TestAlerts_LinesReachApplicationInsights: the log rules see every line they count. The host
// samples telemetry by default, so host.json keeps traces (the handler's lines) out of
// sampling; it forwards the handler's console at Information, and the template deploys
// BATON_LOG_LEVEL info, the level of "run finished" and the heartbeat's lines.
func TestAlerts_LinesReachApplicationInsights(t *testing.T) {
	var host struct {
		Logging struct {
			ApplicationInsights struct {
				SamplingSettings struct {
					IsEnabled     *bool  `json:"isEnabled"`
					ExcludedTypes string `json:"excludedTypes"`
				} `json:"samplingSettings"`
			} `json:"applicationInsights"`
			LogLevel map[string]string `json:"logLevel"`
		} `json:"logging"`
	}
	readJSON(t, filepath.Join(repoRoot(t), "host.json"), &host)
	ss := host.Logging.ApplicationInsights.SamplingSettings
	sampled := ss.IsEnabled == nil || *ss.IsEnabled
	if sampled && !slices.Contains(strings.Split(ss.ExcludedTypes, ";"), "Trace") {
		t.Errorf("host.json: sampling is on and excludedTypes %q leaves Trace in: the alert rules would miss sampled lines", ss.ExcludedTypes)
	}
	level := host.Logging.LogLevel["default"]
	if l, ok := host.Logging.LogLevel["Host.Function.Console"]; ok {
		level = l
	}
	if !slices.Contains([]string{"Trace", "Debug", "Information"}, level) {
		t.Errorf("host.json: the handler's console is forwarded at %q, want Information or lower", level)
	}
	if p := scanFile(t, "main.bicep").params()["logLevel"]; p.Default != "'info'" {
		t.Errorf("main.bicep: logLevel defaults to %s, want 'info': the rules read info lines", p.Default)
	}
}

// TestAlerts_Documented: docs/deploy.md lists every rule with its severity and shows each query
// exactly as deployed, so a user reading it reads what fires.
func TestAlerts_Documented(t *testing.T) {
	doc := readFile(t, filepath.Join(repoRoot(t), "docs", "deploy.md"))
	for _, rule := range alertRules {
		q := strings.TrimRight(alertQuery(t, rule.name), "\n")
		if !strings.Contains(doc, "```kusto\n"+q+"\n```") {
			t.Errorf("docs/deploy.md: the query of %s is not shown as infra/app/alerts/%s.kql holds it", rule.name, rule.name)
		}
		row := regexp.MustCompile(`(?m)^\| ` + regexp.QuoteMeta(rule.name) + ` \| [^|]+ \| (\d) \|`).FindStringSubmatch(doc)
		if row == nil || row[1] != strconv.Itoa(rule.severity) {
			t.Errorf("docs/deploy.md: want a table row for %s with severity %d, got %v", rule.name, rule.severity, row)
		}
	}
	for _, want := range []string{"| dead-letters |", "`DeadletteredMessages`", "azd env set ALERT_EMAIL", "`leaseAlertHeartbeats`", "`leaseAlertWindow`"} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/deploy.md: want it to mention %s", want)
		}
	}
}

// TestTelemetry_IdentityIngestion: the host sends the handler's lines to Application Insights
// with the app's user-assigned identity (no key): the authentication string names that
// identity's client ID with Authorization=AAD, the connection string comes from the component
// (which refuses keys: TestBicep_Security), no instrumentation key setting exists, and the
// identity holds Monitoring Metrics Publisher on the component.
func TestTelemetry_IdentityIngestion(t *testing.T) {
	api := scanFile(t, "app/api.bicep")
	host := map[string]string{}
	for _, e := range api.settingsObjects()["hostSettings"] {
		host[e.Key] = e.Value
	}
	if got := host["APPLICATIONINSIGHTS_AUTHENTICATION_STRING"]; got != "'ClientId=${identityClientId};Authorization=AAD'" {
		t.Errorf("app/api.bicep: APPLICATIONINSIGHTS_AUTHENTICATION_STRING = %s, want 'ClientId=${identityClientId};Authorization=AAD'", got)
	}
	if got := host["APPLICATIONINSIGHTS_CONNECTION_STRING"]; got != "applicationInsights.properties.ConnectionString" {
		t.Errorf("app/api.bicep: APPLICATIONINSIGHTS_CONNECTION_STRING = %s, want the component's connection string", got)
	}
	for _, e := range api.settingsObjects() {
		for _, s := range e {
			if s.Key == "APPINSIGHTS_INSTRUMENTATIONKEY" {
				t.Error("app/api.bicep: APPINSIGHTS_INSTRUMENTATIONKEY is set; ingestion is by identity only")
			}
		}
	}
	main := scanFile(t, "main.bicep")
	if !prop("identityClientId", "identity.outputs.clientId").MatchString(main.code) {
		t.Error("main.bicep: want identityClientId: identity.outputs.clientId passed to the app (the user-assigned identity)")
	}
	granted := false
	for _, g := range roleGrants(t, "app/rbac.bicep") {
		if g.role == "monitoringMetricsPublisher" && g.principal == "appPrincipalId" && g.scope == "applicationInsights" {
			granted = true
		}
	}
	if !granted {
		t.Error("app/rbac.bicep: want the app's identity granted Monitoring Metrics Publisher on applicationInsights")
	}
}

// kustoDiagnostic is one problem Microsoft's Kusto language service found in a query.
type kustoDiagnostic struct {
	Severity, Code, Message string
	Line                    int
}

// analyzeKusto parses and analyzes queries with the Kusto language service pinned in
// internal/tools/kql (`make tools` installs it), against the traces table's schema, and returns
// each query's diagnostics.
func analyzeKusto(t *testing.T, queries map[string]string) map[string][]kustoDiagnostic {
	t.Helper()
	dir := filepath.Join(repoRoot(t), "internal", "tools", "kql")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@kusto", "language-service-next")); err != nil {
		t.Fatalf("the Kusto language service is not installed in %s: run `make tools` (npm ci there; it needs Node.js 20+ and npm)", dir)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found: install Node.js 20+ (`make tools` needs it too)")
	}
	cols := make([]string, len(tracesSchema))
	for i, c := range tracesSchema {
		cols[i] = c[0] + ":" + c[1]
	}
	in, err := json.Marshal(map[string]any{
		"tables":  map[string]string{"traces": "(" + strings.Join(cols, ", ") + ")"},
		"queries": queries,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(dir, "check.js"))
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node check.js: %v\n%s", err, stderr.String())
	}
	var got map[string][]kustoDiagnostic
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("check.js answered %q: %v", out, err)
	}
	return got
}

// TestAlerts_KustoParser: every alert query, as deployed, parses and analyzes without a
// diagnostic in Microsoft's own Kusto language service, against Application Insights' traces
// table: names, operators, functions and types all resolve. The nobody-deciding query is also
// checked with another N put in, as a parameter would deploy it; and broken queries show the
// service does report what the tests rely on it for.
func TestAlerts_KustoParser(t *testing.T) {
	queries := map[string]string{}
	for _, rule := range alertRules {
		queries[rule.name] = alertQuery(t, rule.name)
	}
	queries["nobody-deciding with N=12"] = strings.Replace(queries["nobody-deciding"], "let beats = 5;", "let beats = 12;", 1)
	broken := map[string]string{
		"broken: misspelt column":   strings.Replace(queries["missed-occurrence"], "| where start >= 0", "| where strt >= 0", 1),
		"broken: unknown operator":  strings.Replace(queries["missed-occurrence"], "| project ", "| projekt ", 1),
		"broken: unclosed string":   strings.Replace(queries["missed-occurrence"], `== "missed"`, `== "missed`, 1),
		"broken: keyword as a name": strings.Replace(queries["nobody-deciding"], "lastBeat = max", "last = max", 1),
	}
	for name, q := range broken {
		queries[name] = q
	}
	got := analyzeKusto(t, queries)
	for name := range queries {
		diags, ok := got[name]
		if !ok {
			t.Errorf("%s: no answer from the Kusto language service", name)
			continue
		}
		if _, isBroken := broken[name]; isBroken {
			if len(diags) == 0 {
				t.Errorf("%s: no diagnostic, want the language service to report it", name)
			}
			continue
		}
		for _, d := range diags {
			t.Errorf("%s: line %d: %s %s: %s", name, d.Line, d.Severity, d.Code, d.Message)
		}
	}
}
