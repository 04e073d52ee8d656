package infra_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/tools/readme"
)

// TestDeployDocs keeps the Azure runbook (docs/deploy.md) consistent with the files it
// describes: the azd values it reads are Bicep outputs, the ones it sets are parameters, the
// settings and Bicep parameters it names exist, and the runbook's steps (deploy, keys, logs,
// multi-region, teardown, the Service Bus emulator) are there.
func TestDeployDocs(t *testing.T) {
	root := repoRoot(t)
	doc, err := readme.File(root, "docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}

	// Prose outside fenced code blocks: one title, the first line; every other heading is ## or
	// deeper.
	prose, closed := readme.Prose(doc)
	if !closed {
		t.Error("docs/deploy.md: a code fence is not closed")
	}
	if !strings.HasPrefix(doc, "# Deploy to Azure\n") {
		t.Error("docs/deploy.md: want it to open with its title, # Deploy to Azure")
	}
	for i, line := range strings.Split(prose, "\n") {
		if i > 0 && strings.HasPrefix(line, "# ") {
			t.Errorf("docs/deploy.md: %q is a second level-1 heading", line)
		}
	}

	for _, want := range []string{
		"1.23.4", "azd config set alpha.language.custom on", "azd auth login", "azd up", "azd deploy",
		"azd down --purge", "az functionapp keys list", "x-functions-key", `-X POST "$URL/api/runs"`,
		"traces", "line.run", "line.epoch", "line.instance", "BATON_STORAGE", "exactly one run per",
		"UseDevelopmentEmulator=true", `"RequiresDuplicateDetection": true`, `"MaxDeliveryCount": 5`,
		"BATON_TRANSPORT", "servicebus", "Endpoint=sb://127.0.0.1:5672",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/deploy.md: want it to mention %q", want)
		}
	}

	main := scanFile(t, "main.bicep")
	outputs := map[string]bool{}
	for _, o := range main.outputs() {
		outputs[o.Name] = true
	}
	for _, m := range regexp.MustCompile(`azd env get-value (\w+)`).FindAllStringSubmatch(doc, -1) {
		if !outputs[m[1]] {
			t.Errorf("docs/deploy.md reads %s, which main.bicep does not output", m[1])
		}
	}
	params := readFile(t, "main.parameters.json")
	for _, m := range regexp.MustCompile(`azd env set (\w+)`).FindAllStringSubmatch(doc, -1) {
		if !strings.Contains(params, "${"+m[1]) {
			t.Errorf("docs/deploy.md sets %s, which main.parameters.json does not read", m[1])
		}
	}
	c := readContract(t)
	for _, name := range regexp.MustCompile(`\bBATON_[A-Z_]+\b`).FindAllString(doc, -1) {
		if !c.settings[name] {
			t.Errorf("docs/deploy.md names %s, which config/config.go does not read", name)
		}
	}
	// Backticked lowerCamel identifiers are Bicep parameters the reader is told to change, or
	// fields of BATON_SCHEDULES (as docs/configuration.md lists them, which internal/readme
	// holds to config).
	mainParams := main.params()
	fields, err := readme.SectionOf(root, "docs/configuration.md", "BATON_SCHEDULES")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile("`([a-z][a-z0-9]*[A-Z][A-Za-z0-9]*)`").FindAllStringSubmatch(prose, -1) {
		if _, ok := mainParams[m[1]]; !ok && !strings.Contains(fields, "| `"+m[1]+"` |") {
			t.Errorf("docs/deploy.md names `%s`, which is neither a parameter of main.bicep nor a field of %s", m[1], config.SettingSchedules)
		}
	}
	// The runbook says how to declare, change and pause schedules, and what daylight saving does.
	flat := strings.Join(strings.Fields(doc), " ") // prose wraps anywhere
	for _, want := range []string{"## Schedules", ".Schedule(", "azd env set BATON_SCHEDULES", `"paused":true`,
		"/pause", "/resume", "does not fire", "fires once", "BATON_HEARTBEAT"} {
		if !strings.Contains(flat, want) {
			t.Errorf("docs/deploy.md: want it to mention %q", want)
		}
	}
}
