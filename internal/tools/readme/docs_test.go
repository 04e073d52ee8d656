package readme_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/tools/readme"
)

// root is the repository root, seen from this package's directory.
const root = "../../.."

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
		"docs/design.md", "docs/reliability.md", "docs/jobs.md", "docs/configuration.md", ".Schedule(",
		"BATON_HEARTBEAT", "BATON_SCHEDULES"} {
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
	known := map[string]bool{}
	for _, s := range settings {
		known[s] = true
		if !hostInternal[s] && !rows[s] {
			t.Errorf("docs/configuration.md's table has no row for %s", s)
		}
	}
	for r := range rows {
		if !known[r] {
			t.Errorf("docs/configuration.md's table has a row for %s, which config/config.go does not read", r)
		}
	}
}

// The table's defaults are the code's: each setting's default column names the value config
// falls back to (or the template's, for the heartbeat the code requires).
func TestReadme_ConfigurationDefaults(t *testing.T) {
	section, err := readme.SectionOf(root, "docs/configuration.md", "Settings")
	if err != nil {
		t.Fatal(err)
	}
	defaults := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		cols := strings.Split(line, "|")
		if !strings.HasPrefix(line, "| `") || len(cols) < 4 {
			continue
		}
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(cols[1], -1) {
			defaults[m[1]] = cols[2]
		}
	}
	for setting, want := range map[string]any{
		config.SettingTransport: config.DefaultTransport, config.SettingWorkQueue: config.DefaultWorkQueue,
		config.SettingControlQueue: config.DefaultControlQueue, config.SettingJob: config.DefaultJob,
		config.SettingJobParams: config.DefaultJobParams, config.SettingLeaseContainer: config.DefaultLeaseContainer,
		config.SettingRunsContainer: config.DefaultRunsContainer, config.SettingLeaseName: config.DefaultLeaseName,
		config.SettingLeaseDuration: "30s", config.SettingStallTimeout: "2m", config.SettingOverlap: config.DefaultOverlap,
		config.SettingMaxDeliveries: config.DefaultMaxDeliveries, config.SettingRunTimeout: "1h",
		config.SettingCheckRounds: config.DefaultCheckRounds, config.SettingEnqueueBatch: config.DefaultEnqueueBatch,
		config.SettingMaxBacklog: config.DefaultMaxBacklog, config.SettingSyntheticMax: config.DefaultSyntheticMax,
		config.SettingHeartbeat: "0 * * * * *", config.SettingMisfire: "removed", config.SettingStartDeadline: "removed",
	} {
		if w := fmt.Sprint(want); !strings.Contains(defaults[setting], w) {
			t.Errorf("docs/configuration.md: %s's default is %q, want it to say %s", setting, strings.TrimSpace(defaults[setting]), w)
		}
	}
	// The durations the table spells out are config's.
	for setting, d := range map[string]time.Duration{
		"30s": config.DefaultLeaseDuration, "2m": config.DefaultStallTimeout, "1h": config.DefaultRunTimeout,
	} {
		if got, err := time.ParseDuration(setting); err != nil || got != d {
			t.Errorf("the table's default %s is not config's %s", setting, d)
		}
	}
}

// The fields of BATON_SCHEDULES the docs list are exactly the ones config reads (the JSON tags
// of the object config/config.go decodes each entry into).
func TestReadme_ScheduleOverrideFields(t *testing.T) {
	section, err := readme.SectionOf(root, "docs/configuration.md", "BATON_SCHEDULES")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(\\w+)` \\|").FindAllStringSubmatch(section, -1) {
		documented[m[1]] = true
	}
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, "internal", "engine", "config", "config.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	read := map[string]bool{}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "overrides" {
			continue
		}
		ast.Inspect(fn, func(n ast.Node) bool {
			if st, ok := n.(*ast.StructType); ok {
				for _, field := range st.Fields.List {
					if field.Tag == nil {
						continue
					}
					tag, _ := strconv.Unquote(field.Tag.Value)
					if name, _, _ := strings.Cut(reflect.StructTag(tag).Get("json"), ","); name != "" {
						read[name] = true
					}
				}
			}
			return true
		})
	}
	if len(read) < 4 {
		t.Fatalf("read %d fields from config.overrides: the parser found too little", len(read))
	}
	for name := range read {
		if !documented[name] {
			t.Errorf("docs/configuration.md's BATON_SCHEDULES table has no row for the field %s", name)
		}
	}
	for name := range documented {
		if !read[name] {
			t.Errorf("docs/configuration.md's BATON_SCHEDULES table lists %s, which config does not read", name)
		}
	}
}

// settingConstants returns the values of the Setting* constants in config/config.go.
func settingConstants(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, "internal", "engine", "config", "config.go"), nil, 0)
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
		"\n## Host protocol\n", "\n## Azure SDK and Azurite\n", "_schedules/"} {
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

// docs/jobs.md's schedules section names every schedule option the package offers (the
// exported functions of schedule.go that return a ScheduleOption, and the overlap policies),
// and says what daylight saving, catch-up, run now and pause do.
func TestJobs_SchedulesSection(t *testing.T) {
	section, err := readme.SectionOf(root, "docs/jobs.md", "Schedules")
	if err != nil {
		t.Fatal(err)
	}
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, "schedule.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if res := d.Type.Results; d.Recv == nil && d.Name.IsExported() && res != nil && len(res.List) == 1 {
				if id, ok := res.List[0].Type.(*ast.Ident); ok && id.Name == "ScheduleOption" {
					names = append(names, d.Name.Name)
				}
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				if vs, ok := spec.(*ast.ValueSpec); ok {
					for _, n := range vs.Names {
						if strings.HasPrefix(n.Name, "Overlap") {
							names = append(names, n.Name)
						}
					}
				}
			}
		}
	}
	if len(names) < 6 {
		t.Fatalf("read %d schedule options and policies from schedule.go: the parser found too little", len(names))
	}
	flat := strings.Join(strings.Fields(section), " ") // prose wraps anywhere
	for _, want := range append(names, ".Schedule(", "RegistrationError", "BATON_HEARTBEAT", "BATON_SCHEDULES",
		"does not fire", "fires once", "missed", "/runs", "/pause", "/resume") {
		if !strings.Contains(flat, want) {
			t.Errorf("docs/jobs.md's section Schedules does not mention %s", want)
		}
	}
}
