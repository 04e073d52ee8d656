package readme_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/batonfn/baton/internal/readme"
)

// root is the repository root, seen from this package's directory.
const root = "../.."

// maxReadme is the README's budget: what a newcomer reads in ten minutes. Reference material
// goes to docs/.
const maxReadme = 12 << 10

func TestReadme_StaysShort(t *testing.T) {
	doc, err := readme.File(root, "README.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(doc) > maxReadme {
		t.Errorf("README.md is %d bytes, over its %d-byte budget: move reference material to docs/", len(doc), maxReadme)
	}
	for _, want := range []string{"make demo", "make test", "cmd/devhost", "func start", "docs/api.md", "docs/deploy.md",
		"docs/design.md", "docs/reliability.md", "docs/jobs.md", "docs/configuration.md"} {
		if !strings.Contains(doc, want) {
			t.Errorf("README.md does not mention %q", want)
		}
	}
}

// hostInternal are settings the Functions host passes to the handler that nobody sets by hand;
// the README's table leaves them out.
var hostInternal = map[string]bool{"FUNCTIONS_HTTPWORKER_PORT": true, "FUNCTIONS_APP_ROOT_PATH": true}

// The configuration table (docs/configuration.md) names every setting the code reads (the
// Setting* constants of config/config.go), each in a row of its own or shared with its sibling.
func TestReadme_ConfigurationTableListsEverySetting(t *testing.T) {
	section, err := readme.SectionOf(root, "docs/configuration.md", "Settings")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.Split(line, "|")[1]
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(first, -1) {
			rows[m[1]] = true
		}
	}
	settings := settingConstants(t)
	if len(settings) < 20 {
		t.Fatalf("read %d settings from config/config.go: the parser found too little", len(settings))
	}
	for _, s := range settings {
		if !hostInternal[s] && !rows[s] {
			t.Errorf("docs/configuration.md's table has no row for %s", s)
		}
	}
}

// settingConstants returns the values of the Setting* constants in config/config.go.
func settingConstants(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, "config", "config.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Setting") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, v)
				}
			}
		}
	}
	return out
}

// The design's package map has a row for every Go package in the module, and the design has its
// flow diagram and the sections that code comments point at.
func TestDesign_PackageMapAndSections(t *testing.T) {
	doc, err := readme.File(root, "docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range goPackages(t) {
		if !strings.Contains(doc, "| `"+pkg+"` ") {
			t.Errorf("docs/design.md's package map has no row for %s", pkg)
		}
	}
	for _, want := range []string{"```mermaid", "\n## Package map\n", "\n## Storage layout\n", "\n## Invariants\n",
		"\n## Host protocol\n", "\n## Azure SDK and Azurite\n", "_pending/<run>.json", "_schedule.json", "active.json"} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/design.md does not have %q", want)
		}
	}
	if _, closed := readme.Prose(doc); !closed {
		t.Error("docs/design.md: a code fence is not closed")
	}
}

// goPackages lists the module's package directories, slash-separated and relative to the root
// ("handler", "ledger/blobstore").
func goPackages(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "node_modules", "testdata", "dist", ".git":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		if rel = filepath.ToSlash(rel); rel != "." && !seen[rel] {
			seen[rel] = true
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 15 {
		t.Fatalf("found %d packages: the walk found too little", len(out))
	}
	return out
}

// outside matches references to documents that live outside the repository; the repository's
// code and docs must stand alone. (Written so that this file does not match it.)
var outside = regexp.MustCompile(`shared[/]|functions-protocol\.md|sdk-azurite-facts\.md|DESIGN\.md|as the issue (asks|says)`)

func TestDocs_CiteNothingOutsideTheRepository(t *testing.T) {
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "node_modules", "dist", ".git":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, ".md") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := outside.FindString(line); m != "" {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s:%d cites %q, a document outside the repository: state the fact or point at docs/design.md", rel, i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// docs/security.md backs its statements with tests by name: each one it names exists, so a
// renamed or deleted test shows up here instead of leaving the claim unbacked.
func TestSecurity_NamedTestsExist(t *testing.T) {
	doc, err := readme.File(root, "docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	for _, pkg := range goPackages(t) {
		files, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(pkg), "*_test.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range regexp.MustCompile(`(?m)^func (Test\w+)\(`).FindAllStringSubmatch(string(b), -1) {
				defined[m[1]] = true
			}
		}
	}
	named := regexp.MustCompile("`(Test\\w+)`").FindAllStringSubmatch(doc, -1)
	if len(named) < 10 {
		t.Fatalf("docs/security.md names %d tests; the parser found too few", len(named))
	}
	for _, m := range named {
		if !defined[m[1]] {
			t.Errorf("docs/security.md names %s, which no test file defines", m[1])
		}
	}
}
