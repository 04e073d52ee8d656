package infra_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/batonfn/baton/internal/readme"
)

// TestDeployDocs keeps the README's deploy section consistent with the files it
// describes: the azd values it reads are Bicep outputs, the ones it sets are parameters, the
// settings and Bicep parameters it names exist, and the steps the issue asks for are there.
func TestDeployDocs(t *testing.T) {
	root := repoRoot(t)
	doc, err := readme.Section(root, "Deploy to Azure")
	if err != nil {
		t.Fatal(err)
	}

	// Prose outside fenced code blocks: headings start at ##, so the section merges under the
	// README's title.
	var prose strings.Builder
	fenced := false
	for i, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if strings.HasPrefix(line, "# ") {
			t.Errorf("README.md (deploy section):%d: %q is a level-1 heading; the section's headings start at ##", i+1, line)
		}
		prose.WriteString(line + "\n")
	}
	if fenced {
		t.Error("README.md (deploy section): a code fence is not closed")
	}
	if !strings.HasPrefix(doc, "## ") {
		t.Error("README.md (deploy section): want it to open with a ## heading")
	}

	for _, want := range []string{
		"1.23.4", "azd config set alpha.language.custom on", "azd auth login", "azd up", "azd deploy",
		"azd down --purge", "az functionapp keys list", "x-functions-key", `-X POST "$URL/api/runs"`,
		"traces", "line.run", "line.epoch", "line.instance", "BATON_STORAGE", "exactly one run per",
		"UseDevelopmentEmulator=true", `"RequiresDuplicateDetection": true`, `"MaxDeliveryCount": 5`,
		"BATON_TRANSPORT", "servicebus", "Endpoint=sb://127.0.0.1:5672",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("README.md (deploy section): want it to mention %q", want)
		}
	}

	main := scanFile(t, "main.bicep")
	outputs := map[string]bool{}
	for _, o := range main.outputs() {
		outputs[o.Name] = true
	}
	for _, m := range regexp.MustCompile(`azd env get-value (\w+)`).FindAllStringSubmatch(doc, -1) {
		if !outputs[m[1]] {
			t.Errorf("README.md (deploy section) reads %s, which main.bicep does not output", m[1])
		}
	}
	params := readFile(t, "main.parameters.json")
	for _, m := range regexp.MustCompile(`azd env set (\w+)`).FindAllStringSubmatch(doc, -1) {
		if !strings.Contains(params, "${"+m[1]) {
			t.Errorf("README.md (deploy section) sets %s, which main.parameters.json does not read", m[1])
		}
	}
	c := readContract(t)
	for _, name := range regexp.MustCompile(`\bBATON_[A-Z_]+\b`).FindAllString(doc, -1) {
		if !c.settings[name] {
			t.Errorf("README.md (deploy section) names %s, which config/config.go does not read", name)
		}
	}
	// Backticked lowerCamel identifiers are Bicep parameters the reader is told to change.
	mainParams := main.params()
	for _, m := range regexp.MustCompile("`([a-z][a-z0-9]*[A-Z][A-Za-z0-9]*)`").FindAllStringSubmatch(prose.String(), -1) {
		if _, ok := mainParams[m[1]]; !ok {
			t.Errorf("README.md (deploy section) names `%s`, which is not a parameter of main.bicep", m[1])
		}
	}
}
