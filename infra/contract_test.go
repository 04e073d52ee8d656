package infra_test

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/work"
)

// The config contract: the app settings in app/api.bicep and the Values of
// local.settings.example.json against what the code reads. The code's side is read from the
// sources, never listed here: the Setting* constants of config/config.go, the connection
// suffixes of config/connections.go, and the %NAME% and connection references of host.json and
// every function.json. What is listed here are the categories the sources cannot tell apart.

// platformSettings are read by the code but set by the Functions host or App Service on each
// instance; a file that set them would override the platform.
var platformSettings = []string{
	config.SettingPort, config.SettingLegacyPort, config.SettingAppRoot,
	config.SettingSiteName, config.SettingWebsiteInstance,
}

// where a setting may be set.
type where int

const (
	anywhere  where = iota
	azureOnly       // only in the Bicep app settings
	localOnly       // only in local settings
)

// optionalSettings are read by the code and may be left unset in both files.
var optionalSettings = map[string]where{
	config.SettingStorage: anywhere, // a second account for leases and runs (multi-region)
	// The account the inventory job reads: only when the operator names one (Azure), else none.
	config.SettingInventory: anywhere,
	// A fixed instance name for local runs; in Azure it would give every instance one identity.
	config.SettingInstanceID: localOnly,
}

// removedSettings are read by config/config.go only to refuse them at start-up, naming what
// replaces them: no file may set them.
var removedSettings = map[string]string{
	config.SettingMisfire:       "each schedule's catch-up window",
	config.SettingStartDeadline: "each schedule's catch-up window",
}

// hostSettings are not read by Baton's config package but by the Functions host or the SDK.
var hostSettings = map[string]where{
	"FUNCTIONS_WORKER_RUNTIME":                  localOnly, // Core Tools needs it; Flex Consumption rejects it
	"APPLICATIONINSIGHTS_CONNECTION_STRING":     azureOnly,
	"APPLICATIONINSIGHTS_AUTHENTICATION_STRING": azureOnly,
}

// hostStorageOnlySuffixes are identity-connection suffixes only the host reads, for its own
// storage connection (diagnostic events go to tables).
var hostStorageOnlySuffixes = []string{"tableServiceUri"}

// identityVariants are the settings an identity-based connection needs in Azure, by kind. A
// storage connection also needs __queueServiceUri when queues are used through it: always for
// host storage, and for Baton's storage connection under the queue transport.
var identityVariants = map[string][]string{
	"storage":    {"blobServiceUri", "credential", "clientId"},
	"servicebus": {"fullyQualifiedNamespace", "credential", "clientId"},
}

// bindingKinds maps binding types to the kind of connection they use.
var bindingKinds = map[string]string{
	"queueTrigger": "storage", "queue": "storage", "blobTrigger": "storage", "blob": "storage", "table": "storage",
	"serviceBusTrigger": "servicebus", "serviceBus": "servicebus",
}

// contract is the code's side, read from the sources.
type contract struct {
	settings    map[string]bool   // every Setting* value
	suffixes    map[string]bool   // connection suffixes config/connections.go reads
	connections map[string]string // connection name -> kind (function.json connections + host storage)
	references  map[string]bool   // %NAME% in host.json and function.json files
	functions   []function
}

type function struct {
	Name        string
	TriggerType string
	Connection  string
}

// settingsFile is one side of the contract: the names and values of one file.
type settingsFile struct {
	label  string
	where  where             // azureOnly for the Bicep, localOnly for local settings
	values map[string]string // literal values; "" where the Bicep value is an expression
}

func readContract(t *testing.T) contract {
	t.Helper()
	root := repoRoot(t)
	c := contract{
		settings:    settingConstants(t, filepath.Join(root, "internal", "engine", "config", "config.go")),
		suffixes:    connectionSuffixes(t, filepath.Join(root, "internal", "engine", "config", "connections.go")),
		connections: map[string]string{config.SettingHostStorage: "storage"},
		references:  map[string]bool{},
	}
	if len(c.settings) < 10 || len(c.suffixes) < 5 {
		t.Fatalf("read %d settings and %d suffixes from config/: the parsers found too little", len(c.settings), len(c.suffixes))
	}
	addRefs := func(v any) {
		for _, m := range regexp.MustCompile(`%(\w+)%`).FindAllStringSubmatch(fmt.Sprint(v), -1) {
			c.references[m[1]] = true
		}
	}
	var host any
	readJSON(t, filepath.Join(root, "host.json"), &host)
	addRefs(host)

	dirs, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		path := filepath.Join(root, d.Name(), "function.json")
		if !d.IsDir() {
			continue
		}
		if _, err := os.Stat(path); err != nil {
			continue
		}
		var fj struct {
			Bindings []map[string]any `json:"bindings"`
		}
		readJSON(t, path, &fj)
		fn := function{Name: d.Name()}
		for _, b := range fj.Bindings {
			typ, _ := b["type"].(string)
			if strings.HasSuffix(typ, "Trigger") {
				fn.TriggerType = typ
			}
			if conn, ok := b["connection"].(string); ok && conn != "" {
				kind, known := bindingKinds[typ]
				if !known {
					t.Fatalf("%s: binding type %q has a connection but the contract test does not know its kind", path, typ)
				}
				c.connections[conn] = kind
				if strings.HasSuffix(typ, "Trigger") {
					fn.Connection = conn
				}
			}
			addRefs(b)
		}
		c.functions = append(c.functions, fn)
	}
	if len(c.functions) == 0 {
		t.Fatal("no function folders found at the repo root")
	}
	return c
}

// settingConstants returns the values of the Setting* string constants of a Go file.
func settingConstants(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Setting") || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("%s: %s is not a string literal; the contract test reads setting names as literals", path, name.Name)
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				out[v] = true
			}
		}
	}
	return out
}

// connectionSuffixes returns every "__suffix" string literal of a Go file.
func connectionSuffixes(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if v, err := strconv.Unquote(lit.Value); err == nil && strings.HasPrefix(v, "__") && len(v) > 2 {
				out[v[2:]] = true
			}
		}
		return true
	})
	return out
}

// bicepSettings reads every app setting of app/api.bicep: name -> literal value ("" when the
// value is an expression), and the raw expressions.
func bicepSettings(t *testing.T) (settingsFile, map[string]string) {
	t.Helper()
	s := scanFile(t, "app/api.bicep")
	objects := s.settingsObjects()
	if len(objects) == 0 {
		t.Fatal("app/api.bicep: no `var …Settings = { … }` objects")
	}
	f := settingsFile{label: "app/api.bicep app settings", where: azureOnly, values: map[string]string{}}
	exprs := map[string]string{}
	for _, name := range sortedKeys(objects) {
		for _, e := range objects[name] {
			if _, dup := exprs[e.Key]; dup {
				t.Errorf("app/api.bicep: %s is set twice (second time in %s)", e.Key, name)
			}
			exprs[e.Key] = e.Value
			f.values[e.Key], _ = literal(e.Value)
		}
	}
	return f, exprs
}

func localSettings(t *testing.T) settingsFile {
	t.Helper()
	var file struct {
		IsEncrypted *bool             `json:"IsEncrypted"`
		Values      map[string]string `json:"Values"`
		Host        struct {
			LocalHttpPort int `json:"LocalHttpPort"`
		} `json:"Host"`
	}
	path := filepath.Join(repoRoot(t), "local.settings.example.json")
	readJSON(t, path, &file)
	if file.IsEncrypted == nil || *file.IsEncrypted {
		t.Errorf("%s: want \"IsEncrypted\": false", path)
	}
	if file.Host.LocalHttpPort != 7071 {
		t.Errorf("%s: Host.LocalHttpPort: got %d, want 7071", path, file.Host.LocalHttpPort)
	}
	return settingsFile{label: "local.settings.example.json", where: localOnly, values: file.Values}
}

var disabledRE = regexp.MustCompile(`^AzureWebJobs\.(\w+)\.Disabled$`)

func (f settingsFile) disabled(fn string) bool {
	return strings.EqualFold(f.values["AzureWebJobs."+fn+".Disabled"], "true")
}

// contractProblems lists every way a settings file breaks the contract; each names the setting.
func contractProblems(c contract, f settingsFile) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, f.label+": "+fmt.Sprintf(format, args...)) }
	has := func(n string) bool { _, ok := f.values[n]; return ok }

	// The categories must name settings the code reads, else the lists above are stale.
	for _, n := range append(append([]string{}, platformSettings...), sortedKeys(optionalSettings)...) {
		if !c.settings[n] {
			bad("the contract test lists %s, which config/config.go does not read", n)
		}
	}

	connections := map[string]string{}
	for n, k := range c.connections {
		connections[n] = k
	}
	for _, setting := range []string{config.SettingStorage, config.SettingInventory} {
		if name := f.values[setting]; name != "" {
			connections[name] = "storage"
		}
	}
	transport := strings.ToLower(f.values[config.SettingTransport])
	isPlatform := map[string]bool{}
	for _, n := range platformSettings {
		isPlatform[n] = true
	}

	// 1. Everything the code needs is there.
	for _, n := range sortedKeys(c.settings) {
		_, optional := optionalSettings[n]
		_, isConn := connections[n]
		_, removed := removedSettings[n]
		if isPlatform[n] || optional || isConn || removed {
			continue
		}
		if !has(n) {
			bad("missing %s (read by config/config.go)", n)
		}
	}
	for _, n := range sortedKeys(c.references) {
		if !c.settings[n] {
			bad("%%%s%% is referenced by host.json or a function.json but config/config.go does not read %s", n, n)
		}
		if !has(n) {
			bad("missing %s (referenced as %%%s%% by host.json or a function.json)", n, n)
		}
	}
	batonStorage := f.values[config.SettingStorage]
	if batonStorage == "" {
		batonStorage = config.SettingHostStorage
	}
	for _, conn := range sortedKeys(connections) {
		kind := connections[conn]
		needed := conn == config.SettingHostStorage || conn == batonStorage ||
			(kind == "servicebus" && transport == string(config.TransportServiceBus))
		queues := conn == config.SettingHostStorage || (conn == batonStorage && transport == string(config.TransportQueue))
		for _, fn := range c.functions {
			if fn.Connection == conn && !f.disabled(fn.Name) {
				needed = true
				queues = queues || kind == "storage"
			}
		}
		switch f.where {
		case azureOnly:
			if has(conn) {
				bad("%s is set as a connection string: Azure uses identity-based settings (%s__…) and the resources refuse keys", conn, conn)
			}
			if !needed {
				continue
			}
			variants := append([]string{}, identityVariants[kind]...)
			if kind == "storage" && queues {
				variants = append(variants, "queueServiceUri")
			}
			if conn == config.SettingHostStorage {
				variants = append(variants, hostStorageOnlySuffixes...)
			}
			for _, sfx := range variants {
				if !has(conn + "__" + sfx) {
					bad("missing %s__%s (identity-based connection %s)", conn, sfx, conn)
				}
			}
			if v := f.values[conn+"__credential"]; has(conn+"__credential") && v != "managedidentity" {
				bad("%s__credential=%q, want managedidentity", conn, v)
			}
		case localOnly:
			if needed && !has(conn) && !has(conn+"__blobServiceUri") && !has(conn+"__fullyQualifiedNamespace") {
				bad("missing %s (a connection string, or its identity-based settings)", conn)
			}
		}
	}

	// 2. Nothing the code does not read.
	for _, n := range sortedKeys(f.values) {
		switch {
		case isPlatform[n]:
			bad("%s is set by the Functions platform and must not be set here", n)
		case removedSettings[n] != "":
			bad("%s is no longer read (the handler refuses to start while it is set): %s replaces it", n, removedSettings[n])
		case c.settings[n]:
			if w, ok := optionalSettings[n]; ok && w != anywhere && w != f.where {
				bad("%s must not be set here (optional setting limited to the other file)", n)
			}
		case disabledRE.MatchString(n):
			fn := disabledRE.FindStringSubmatch(n)[1]
			found := false
			for _, x := range c.functions {
				found = found || x.Name == fn
			}
			if !found {
				bad("%s disables %s, which is not a function folder", n, fn)
			}
			if v := strings.ToLower(f.values[n]); v != "true" && v != "false" {
				bad("%s=%q, want \"true\" or \"false\"", n, f.values[n])
			}
		case strings.Contains(n, "__"):
			conn, sfx, _ := strings.Cut(n, "__")
			_, isConn := connections[conn]
			hostOnly := conn == config.SettingHostStorage && contains(hostStorageOnlySuffixes, sfx)
			if !isConn || (!c.suffixes[sfx] && !hostOnly) {
				bad("%s is not a setting the code or host reads (connection %q, suffix %q)", n, conn, sfx)
			}
		default:
			if w, ok := hostSettings[n]; !ok || (w != anywhere && w != f.where) {
				bad("%s is not a setting the code reads here", n)
			}
		}
	}

	// 3. The transport and the enabled work function agree: one consumer per transport.
	for _, fn := range c.functions {
		var wantEnabled bool
		switch fn.TriggerType {
		case "serviceBusTrigger":
			wantEnabled = transport == string(config.TransportServiceBus)
		case "queueTrigger":
			wantEnabled = transport == string(config.TransportQueue)
		default:
			continue
		}
		if wantEnabled == f.disabled(fn.Name) {
			bad("%s=%q but function %s (%s) is %s: set AzureWebJobs.%s.Disabled=%t",
				config.SettingTransport, transport, fn.Name, fn.TriggerType, map[bool]string{true: "disabled", false: "enabled"}[f.disabled(fn.Name)],
				fn.Name, !wantEnabled)
		}
	}

	// 4. No secrets: keys only ever come from the developer's own local.settings.json.
	for _, n := range sortedKeys(f.values) {
		if keyMaterial.MatchString(f.values[n]) {
			bad("%s holds a key", n)
		}
	}
	sort.Strings(out)
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestConfigContract_Bicep(t *testing.T) {
	c := readContract(t)
	f, _ := bicepSettings(t)
	if problems := contractProblems(c, f); len(problems) > 0 {
		t.Errorf("%d problems:\n%s", len(problems), strings.Join(problems, "\n"))
	}
	// The code must read what Azure sets: the identity suffixes come from config/connections.go.
	for kind, sfxs := range identityVariants {
		for _, sfx := range append(append([]string{}, sfxs...), "queueServiceUri") {
			if !c.suffixes[sfx] {
				t.Errorf("%s connections need __%s in Azure but config/connections.go never reads it", kind, sfx)
			}
		}
	}
}

func TestConfigContract_LocalSettings(t *testing.T) {
	c := readContract(t)
	if problems := contractProblems(c, localSettings(t)); len(problems) > 0 {
		t.Errorf("%d problems:\n%s", len(problems), strings.Join(problems, "\n"))
	}
}

// TestConfigContract_Broken feeds the checker small broken files: each problem must be named.
func TestConfigContract_Broken(t *testing.T) {
	c := contract{
		settings:    map[string]bool{},
		suffixes:    map[string]bool{"blobServiceUri": true, "queueServiceUri": true, "fullyQualifiedNamespace": true, "credential": true, "clientId": true},
		connections: map[string]string{"AzureWebJobsStorage": "storage", "ServiceBusConnection": "servicebus"},
		references:  map[string]bool{"BATON_HEARTBEAT": true},
		functions: []function{
			{Name: "Tick", TriggerType: "timerTrigger"},
			{Name: "Work", TriggerType: "serviceBusTrigger", Connection: "ServiceBusConnection"},
			{Name: "WorkQueue", TriggerType: "queueTrigger", Connection: "AzureWebJobsStorage"},
		},
	}
	for _, n := range append(append([]string{}, platformSettings...), config.SettingStorage, config.SettingInstanceID,
		config.SettingHostStorage, config.SettingServiceBus, config.SettingTransport, config.SettingHeartbeat, config.SettingJob,
		config.SettingMisfire) {
		c.settings[n] = true
	}
	azure := settingsFile{label: "azure", where: azureOnly, values: map[string]string{
		"AzureWebJobsStorage":                     "DefaultEndpointsProtocol=https;AccountName=x;AccountKey=abc",
		"AzureWebJobsStorage__blobServiceUri":     "",
		"AzureWebJobsStorage__credential":         "managedidentity",
		"AzureWebJobsStorage__clientId":           "",
		"ServiceBusConnection__credential":        "connectionstring",
		"BATON_TRANSPORT":                         "servicebus",
		"BATON_INSTANCE_ID":                       "one",
		"WEBSITE_INSTANCE_ID":                     "x",
		"FUNCTIONS_WORKER_RUNTIME":                "custom",
		"BATON_SCHEDUEL":                          "0 0 * * * *",
		"BATON_MISFIRE":                           "skip",
		"ServiceBusConnection__fullQualifiedName": "x",
		"AzureWebJobs.Nope.Disabled":              "true",
	}}
	got := strings.Join(contractProblems(c, azure), "\n")
	for _, want := range []string{
		"azure: missing BATON_HEARTBEAT (read by config/config.go)",
		"azure: missing BATON_JOB (read by config/config.go)",
		"azure: missing BATON_HEARTBEAT (referenced as %BATON_HEARTBEAT%",
		"azure: BATON_MISFIRE is no longer read",
		"azure: AzureWebJobsStorage is set as a connection string",
		"azure: missing AzureWebJobsStorage__queueServiceUri",
		"azure: missing AzureWebJobsStorage__tableServiceUri",
		"azure: missing ServiceBusConnection__fullyQualifiedNamespace",
		`azure: ServiceBusConnection__credential="connectionstring", want managedidentity`,
		"azure: BATON_INSTANCE_ID must not be set here",
		"azure: WEBSITE_INSTANCE_ID is set by the Functions platform",
		"azure: FUNCTIONS_WORKER_RUNTIME is not a setting the code reads here",
		"azure: BATON_SCHEDUEL is not a setting the code reads here",
		"azure: ServiceBusConnection__fullQualifiedName is not a setting the code or host reads",
		"azure: AzureWebJobs.Nope.Disabled disables Nope, which is not a function folder",
		`azure: BATON_TRANSPORT="servicebus" but function WorkQueue (queueTrigger) is enabled`,
		"azure: AzureWebJobsStorage holds a key",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("want a problem containing %q; got:\n%s", want, got)
		}
	}

	local := settingsFile{label: "local", where: localOnly, values: map[string]string{
		"BATON_TRANSPORT":                         "queue",
		"BATON_HEARTBEAT":                         "0 * * * * *",
		"BATON_JOB":                               "synthetic",
		"AzureWebJobs.Work.Disabled":              "false",
		"APPLICATIONINSIGHTS_CONNECTION_STRING":   "InstrumentationKey=x",
		"ServiceBusConnection":                    "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=secret",
		"AzureWebJobs.WorkQueue.Disabled":         "yes",
		"AzureWebJobsStorage__blobServiceUri_bad": "x",
	}}
	got = strings.Join(contractProblems(c, local), "\n")
	for _, want := range []string{
		"local: missing AzureWebJobsStorage (a connection string, or its identity-based settings)",
		`local: BATON_TRANSPORT="queue" but function Work (serviceBusTrigger) is enabled`,
		"local: APPLICATIONINSIGHTS_CONNECTION_STRING is not a setting the code reads here",
		"local: ServiceBusConnection holds a key",
		`local: AzureWebJobs.WorkQueue.Disabled="yes", want "true" or "false"`,
		"local: AzureWebJobsStorage__blobServiceUri_bad is not a setting the code or host reads",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("want a problem containing %q; got:\n%s", want, got)
		}
	}
}

// deployResolver evaluates an app-setting expression of app/api.bicep to what `azd up` deploys
// in a fresh azd environment (no BATON_* values set), as far as the tests can: a literal, or an
// app/api.bicep parameter (optionally wrapped in string(), or in the guard that deploys an empty
// string for an empty object) whose main.bicep namesake is
//   - a parameter: main.parameters.json's ${VAR=default} default when it maps one (azd passes
//     that default when VAR is unset), else the Bicep default (azd leaves a parameter mapped to
//     an unset ${VAR} out); a literal or the empty object {};
//   - a variable: a literal, or a property path into a loadJsonContent('…') variable.
type deployResolver struct {
	params   map[string]bicepParam
	vars     map[string]string
	supplied map[string]string // main.parameters.json values, as written
}

var (
	stringCallRE  = regexp.MustCompile(`^string\((\w+)\)$`)
	azdDefaultRE  = regexp.MustCompile(`^\$\{\w+=(.*)\}$`)
	azdVarRE      = regexp.MustCompile(`^\$\{\w+\}$`)
	propertyRE    = regexp.MustCompile(`^(\w+)((?:\.\w+)+)$`)
	loadJSONRE    = regexp.MustCompile(`^loadJsonContent\('([^']+)'\)$`)
	emptyObjectRE = regexp.MustCompile(`^\{\s*\}$`)
	// emptyOrStringRE is an object parameter written as compact JSON, or '' when it is {}.
	emptyOrStringRE = regexp.MustCompile(`^empty\((\w+)\)\s*\?\s*''\s*:\s*string\((\w+)\)$`)
)

func newDeployResolver(t *testing.T) deployResolver {
	t.Helper()
	main := scanFile(t, "main.bicep")
	return deployResolver{params: main.params(), vars: main.vars(), supplied: suppliedParameters(t)}
}

func (r deployResolver) value(expr string) (string, bool) {
	expr = strings.TrimSpace(expr)
	if v, ok := literal(expr); ok {
		return v, true
	}
	if m := emptyOrStringRE.FindStringSubmatch(expr); m != nil && m[1] == m[2] {
		v, ok := r.value(m[1])
		if ok && emptyObjectRE.MatchString(v) {
			return "", true
		}
		return v, ok
	}
	if m := stringCallRE.FindStringSubmatch(expr); m != nil {
		expr = m[1]
	}
	if p, ok := r.params[expr]; ok {
		if s, ok := r.supplied[expr]; ok {
			if m := azdDefaultRE.FindStringSubmatch(s); m != nil {
				return m[1], true
			}
			if !azdVarRE.MatchString(s) {
				return s, true
			}
		}
		if emptyObjectRE.MatchString(p.Default) {
			return "{}", true
		}
		return literal(p.Default)
	}
	v, ok := r.vars[expr]
	if !ok {
		return "", false
	}
	if lv, ok := literal(v); ok {
		return lv, true
	}
	m := propertyRE.FindStringSubmatch(v)
	if m == nil {
		return "", false
	}
	lm := loadJSONRE.FindStringSubmatch(r.vars[m[1]])
	if lm == nil {
		return "", false
	}
	b, err := os.ReadFile(lm[1]) // relative to main.bicep, which is where go test runs
	if err != nil {
		return "", false
	}
	var node any
	if err := json.Unmarshal(b, &node); err != nil {
		return "", false
	}
	for _, key := range strings.Split(strings.TrimPrefix(m[2], "."), ".") {
		obj, ok := node.(map[string]any)
		if !ok {
			return "", false
		}
		node = obj[key]
	}
	switch n := node.(type) {
	case string:
		return n, true
	case float64, bool:
		return fmt.Sprint(n), true
	}
	return "", false
}

// Stand-ins for values only Azure knows, by connection suffix.
var fakeIdentityValues = map[string]string{
	"blobServiceUri":          "https://example.blob.core.windows.net/",
	"queueServiceUri":         "https://example.queue.core.windows.net/",
	"tableServiceUri":         "https://example.table.core.windows.net/",
	"fullyQualifiedNamespace": "example.servicebus.windows.net",
	"clientId":                "00000000-0000-0000-0000-000000000001",
}

// TestConfigContract_BicepSettingsLoad loads the app settings the Bicep deploys (parameters at
// their defaults) with config.Load, the way the handler does at start-up in Azure, with and
// without the shared lease account.
func TestConfigContract_BicepSettingsLoad(t *testing.T) {
	_, exprs := bicepSettings(t)
	r := newDeployResolver(t)
	root := repoRoot(t)

	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared lease account %t", shared), func(t *testing.T) {
			env := map[string]string{config.SettingAppRoot: root}
			for name, expr := range exprs {
				if !shared && (name == config.SettingStorage || strings.HasPrefix(name, "BatonLeaseStorage__")) {
					continue
				}
				if v, ok := r.value(expr); ok {
					env[name] = v
					continue
				}
				if _, sfx, ok := strings.Cut(name, "__"); ok && fakeIdentityValues[sfx] != "" {
					env[name] = fakeIdentityValues[sfx]
					continue
				}
				if strings.HasPrefix(name, "BATON_") {
					t.Errorf("app/api.bicep: %s = %s: cannot resolve it to a value (want a literal, or a main.bicep parameter or variable of that name the test can evaluate)", name, expr)
				}
			}
			cfg, err := config.Load(func(k string) string { return env[k] })
			if err != nil {
				t.Fatalf("config.Load of the deployed settings: %v", err)
			}
			if cfg.Transport != config.TransportServiceBus {
				t.Errorf("Transport: got %q, want %q", cfg.Transport, config.TransportServiceBus)
			}
			if cfg.ServiceBus.Namespace == "" || !cfg.ServiceBus.Credential.ManagedIdentity || cfg.ServiceBus.Credential.ClientID == "" {
				t.Errorf("ServiceBus: got %+v, want an identity-based namespace connection with a client ID", cfg.ServiceBus)
			}
			wantStorage := config.SettingHostStorage
			if shared {
				wantStorage = env[config.SettingStorage]
			}
			if cfg.Storage.Name != wantStorage || !cfg.Storage.Credential.ManagedIdentity || cfg.Storage.Credential.ClientID == "" {
				t.Errorf("Storage: got %+v, want the identity-based connection %s with a client ID", cfg.Storage, wantStorage)
			}
			checkDefaults(t, cfg)
			// The default job must run as deployed: synthetic with its default params.
			if cfg.Job != "synthetic" || cfg.JobParams != config.DefaultJobParams {
				t.Errorf("deployed job %s %s, want synthetic with %s", cfg.Job, cfg.JobParams, config.DefaultJobParams)
			}
		})
	}
}

// TestConfigContract_LocalSettingsLoad loads local.settings.example.json the way the handler does
// under Core Tools.
func TestConfigContract_LocalSettingsLoad(t *testing.T) {
	f := localSettings(t)
	env := map[string]string{config.SettingAppRoot: repoRoot(t)}
	for k, v := range f.values {
		env[k] = v
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("config.Load of local.settings.example.json: %v", err)
	}
	if cfg.Transport != config.TransportQueue || cfg.Storage.ConnectionString == "" {
		t.Errorf("got transport %q with storage %+v, want the queue transport on Azurite", cfg.Transport, cfg.Storage)
	}
	var params map[string]any
	if err := json.Unmarshal([]byte(cfg.JobParams), &params); err != nil {
		t.Errorf("%s=%q is not a JSON object: %v", config.SettingJobParams, cfg.JobParams, err)
	}
	// Locally one plan batch of full bundles is in flight at a time: the backlog bound holds
	// one batch, and the batch goes out in bundles of the default cap.
	if cfg.MaxBacklog != cfg.EnqueueBatch || work.SpreadBundleSize(work.DefaultMaxBundle, cfg.EnqueueBatch, cfg.BatchSpread) != work.DefaultMaxBundle {
		t.Errorf("%s=%d, %s=%d, %s=%d: want a backlog of one batch, sent in bundles of %d",
			config.SettingMaxBacklog, cfg.MaxBacklog, config.SettingEnqueueBatch, cfg.EnqueueBatch,
			config.SettingBatchSpread, cfg.BatchSpread, work.DefaultMaxBundle)
	}
	cfg.EnqueueBatch, cfg.BatchSpread = config.DefaultEnqueueBatch, config.DefaultBatchSpread // checked above
	checkDefaults(t, cfg)
}

// defaultHeartbeat is the documented default of BATON_HEARTBEAT: every minute.
const defaultHeartbeat = "0 * * * * *"

// checkDefaults: both files spell out the defaults rather than change them (the local file
// but for the batch, its spread and the backlog).
func checkDefaults(t *testing.T, cfg config.Config) {
	t.Helper()
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{config.SettingHeartbeat, cfg.Heartbeat, defaultHeartbeat},
		{config.SettingSchedules, len(cfg.Overrides), 0},
		{config.SettingWorkQueue, cfg.WorkQueue, config.DefaultWorkQueue},
		{config.SettingLeaseContainer, cfg.LeaseContainer, config.DefaultLeaseContainer},
		{config.SettingRunsContainer, cfg.RunsContainer, config.DefaultRunsContainer},
		{config.SettingLeaseName, cfg.LeaseName, config.DefaultLeaseName},
		{config.SettingLeaseDuration, cfg.LeaseDuration, config.DefaultLeaseDuration},
		{config.SettingStallTimeout, cfg.StallTimeout, config.DefaultStallTimeout},
		{config.SettingOverlap, cfg.Overlap, config.DefaultOverlap},
		{config.SettingMaxDeliveries, cfg.MaxDeliveries, config.DefaultMaxDeliveries},
		{config.SettingRunTimeout, cfg.RunTimeout, config.DefaultRunTimeout},
		{config.SettingCheckRounds, cfg.CheckRounds, config.DefaultCheckRounds},
		{config.SettingEnqueueBatch, cfg.EnqueueBatch, config.DefaultEnqueueBatch},
		{config.SettingBatchSpread, cfg.BatchSpread, config.DefaultBatchSpread},
	} {
		if d, ok := c.got.(time.Duration); ok {
			c.got = d.String()
			c.want = c.want.(time.Duration).String()
		}
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("%s: got %v, want the default %v", c.name, c.got, c.want)
		}
	}
}
