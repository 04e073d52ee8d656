package infra_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// Shared helpers: where the repository is, and the declarations the static checks and the
// config contract read out of the Bicep. Everything works on bicepScan.code, where comments
// are blank, and skips matches that start inside a string.

// repoRoot is the module root: go test runs in infra/.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repo root %s has no go.mod: %v", root, err)
	}
	return root
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(readFile(t, path)), v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// scanFile lexes one Bicep file and fails the test on a structural error.
func scanFile(t *testing.T, path string) *bicepScan {
	t.Helper()
	s, err := scanBicep(readFile(t, path))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return s
}

// bicepFiles lists every .bicep file under infra/, relative to infra/.
func bicepFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".bicep") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	if len(files) == 0 {
		t.Fatal("no .bicep files under infra/")
	}
	return files
}

// matches returns the submatches of re in s.code that start outside strings.
func (s *bicepScan) matches(re *regexp.Regexp) [][]int {
	var out [][]int
	for _, m := range re.FindAllStringSubmatchIndex(s.code, -1) {
		if s.inCode(m[0]) {
			out = append(out, m)
		}
	}
	return out
}

func (s *bicepScan) group(m []int, n int) string {
	if m[2*n] < 0 {
		return ""
	}
	return s.code[m[2*n]:m[2*n+1]]
}

// block returns the bracketed text that opens at the first { at or after from (outside
// strings), braces included, and its offset.
func (s *bicepScan) block(from int) (string, int, bool) {
	for i := from; i < len(s.code); i++ {
		if s.code[i] == '{' && s.inCode(i) {
			end, ok := s.pair[i]
			if !ok {
				return "", 0, false
			}
			return s.code[i : end+1], i, true
		}
	}
	return "", 0, false
}

type bicepParam struct {
	Name, Type string
	Default    string // raw default expression; "" when the parameter is required
}

var paramRE = regexp.MustCompile(`(?m)^[ \t]*param[ \t]+(\w+)[ \t]+(\w+)(?:[ \t]*=[ \t]*(.*?))?[ \t]*$`)

func (s *bicepScan) params() map[string]bicepParam {
	out := map[string]bicepParam{}
	for _, m := range s.matches(paramRE) {
		p := bicepParam{Name: s.group(m, 1), Type: s.group(m, 2), Default: s.group(m, 3)}
		out[p.Name] = p
	}
	return out
}

var varRE = regexp.MustCompile(`(?m)^[ \t]*var[ \t]+(\w+)[ \t]*=[ \t]*(.*?)[ \t]*$`)

// vars maps each variable to the rest of its first line (the whole value when it is one line).
func (s *bicepScan) vars() map[string]string {
	out := map[string]string{}
	for _, m := range s.matches(varRE) {
		out[s.group(m, 1)] = s.group(m, 2)
	}
	return out
}

var moduleRE = regexp.MustCompile(`(?m)^[ \t]*module[ \t]+(\w+)[ \t]+'([^']*)'`)

// modules maps each module symbol to its path as written.
func (s *bicepScan) modules() map[string]string {
	out := map[string]string{}
	for _, m := range s.matches(moduleRE) {
		out[s.group(m, 1)] = s.group(m, 2)
	}
	return out
}

var outputRE = regexp.MustCompile(`(?m)^[ \t]*output[ \t]+(\w+)[ \t]+(\w+)[ \t]*=[ \t]*(.*?)[ \t]*$`)

type bicepOutput struct{ Name, Type, Value string }

func (s *bicepScan) outputs() []bicepOutput {
	var out []bicepOutput
	for _, m := range s.matches(outputRE) {
		out = append(out, bicepOutput{Name: s.group(m, 1), Type: s.group(m, 2), Value: s.group(m, 3)})
	}
	return out
}

type bicepResource struct {
	Symbol, Type string
	Existing     bool
	Body         string // the resource's { … }
}

var resourceRE = regexp.MustCompile(`(?m)^[ \t]*resource[ \t]+(\w+)[ \t]+'([^'@]+)@[^']*'[ \t]+(existing[ \t]+)?=`)

func (s *bicepScan) resources() []bicepResource {
	var out []bicepResource
	for _, m := range s.matches(resourceRE) {
		body, _, _ := s.block(m[1])
		out = append(out, bicepResource{
			Symbol:   s.group(m, 1),
			Type:     s.group(m, 2),
			Existing: s.group(m, 3) != "",
			Body:     body,
		})
	}
	return out
}

type bicepEntry struct{ Key, Value string }

var entryRE = regexp.MustCompile(`^[ \t]*(?:'([^']*)'|([A-Za-z_]\w*))[ \t]*:[ \t]*(.*?)[ \t]*$`)

// objectEntries returns the top-level key: value lines of the object literal that opens at
// offset open (values are the rest of the key's line).
func (s *bicepScan) objectEntries(open int) []bicepEntry {
	end := s.pair[open]
	var out []bicepEntry
	depth, lineDepth := 0, 0 // bracket depth inside the object; lineDepth: at the line's start
	lineStart := open + 1
	for i := open + 1; i <= end; i++ {
		if i == end || s.code[i] == '\n' {
			if lineDepth == 0 {
				if m := entryRE.FindStringSubmatch(s.code[lineStart:i]); m != nil {
					key := m[1]
					if key == "" {
						key = m[2]
					}
					out = append(out, bicepEntry{Key: key, Value: m[3]})
				}
			}
			lineStart, lineDepth = i+1, depth
			continue
		}
		if !s.inCode(i) {
			continue
		}
		switch s.code[i] {
		case '{', '[', '(':
			depth++
		case '}', ']', ')':
			depth--
		}
	}
	return out
}

var settingsVarRE = regexp.MustCompile(`(?m)^[ \t]*var[ \t]+(\w+Settings)[ \t]*=[ \t]*\{`)

// settingsObjects returns the entries of every `var <name>Settings = { … }` in the file: the
// app settings by the convention stated in app/api.bicep.
func (s *bicepScan) settingsObjects() map[string][]bicepEntry {
	out := map[string][]bicepEntry{}
	for _, m := range s.matches(settingsVarRE) {
		open := m[1] - 1
		out[s.group(m, 1)] = s.objectEntries(open)
	}
	return out
}

// literal returns the value of a Bicep string literal ('…' without interpolation) or a
// number/bool literal, and whether expr is one.
func literal(expr string) (string, bool) {
	expr = strings.TrimSpace(expr)
	if len(expr) >= 2 && expr[0] == '\'' && expr[len(expr)-1] == '\'' {
		body := expr[1 : len(expr)-1]
		if strings.Contains(body, "${") || strings.Contains(strings.ReplaceAll(body, `\'`, ""), "'") {
			return "", false
		}
		return strings.ReplaceAll(body, `\'`, "'"), true
	}
	if regexp.MustCompile(`^(-?\d+|true|false)$`).MatchString(expr) {
		return expr, true
	}
	return "", false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
