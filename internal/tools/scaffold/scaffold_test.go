package scaffold

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const repoRoot = "../../.."

// TestCopiesMatchBaton: files/ holds exactly Baton's own files (go generate ./internal/scaffold
// refreshes it), so an app gets what Baton itself runs and deploys.
func TestCopiesMatchBaton(t *testing.T) {
	for _, rel := range Copied {
		want, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(rel)))
		if err != nil {
			t.Fatal(err)
		}
		got, err := embedded.ReadFile("files/" + rel)
		if err != nil {
			t.Fatalf("%s is not in files/: run go generate ./internal/scaffold", rel)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("files/%s differs from Baton's %s: run go generate ./internal/scaffold", rel, rel)
		}
	}
}

// TestCopiesCoverBatonsInfra: every file of Baton's infra/ is copied, so a module Baton's
// template starts to use is never missing from an app's.
func TestCopiesCoverBatonsInfra(t *testing.T) {
	err := filepath.WalkDir(filepath.Join(repoRoot, "infra"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) == ".go" {
			return err
		}
		rel, err := filepath.Rel(repoRoot, path)
		if err != nil {
			return err
		}
		if !slices.Contains(Copied, filepath.ToSlash(rel)) {
			t.Errorf("%s is not in Copied: an app's infra would lack it", filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCopiesCoverBatonsFunctions: every function folder of Baton's (a top-level folder with a
// function.json) is copied, so an app has every function Baton's handler serves.
func TestCopiesCoverBatonsFunctions(t *testing.T) {
	entries, err := os.ReadDir(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		rel := e.Name() + "/function.json"
		if _, err := os.Stat(filepath.Join(repoRoot, e.Name(), "function.json")); !e.IsDir() || err != nil {
			continue
		}
		n++
		if !slices.Contains(Copied, rel) {
			t.Errorf("%s is not in Copied (copy.go): an app would lack the function; add it, run go generate ./internal/scaffold and go tool baton sync in examples/csvtotals", rel)
		}
	}
	if n < 5 {
		t.Fatalf("found %d function folders at Baton's root: the walk found too little", n)
	}
}

func render(t *testing.T, p Params) map[string]File {
	t.Helper()
	files, err := Render(p)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]File{}
	for _, f := range files {
		m[f.Path] = f
	}
	return m
}

// TestRender: the copies are adapted to the app (its name, its root package, its own job) and
// keep nothing that names Baton's handler or its built-in jobs.
func TestRender(t *testing.T) {
	files := render(t, Params{Module: "example.com/team/nightly"})
	for path, want := range map[string]string{
		"host.json":                              `"defaultExecutablePath": "nightly"`,
		"azure.yaml":                             "\nname: nightly\n",
		"infra/main.bicep":                       "}nightly-${resourceToken}",
		"infra/main.parameters.json":             `"${BATON_JOB}"`,
		"infra/main.bicep\x00schedule":           "param schedule string = ''\n",
		"infra/main.parameters.json\x00schedule": `"${BATON_SCHEDULE}"`,
		"local.settings.example.json":            `"BATON_SCHEDULE": ""`,
		"main.go":                                `app.Schedule("nightly", "primes", "0 0 2 * * *")`,
		"scripts/package.sh":                     `-o "$dist/nightly" "$pkg"`,
		"scripts/validate.sh":                    "run . validate",
		"package.json":                           `"name": "nightly-dev-tools"`,
		"go.mod":                                 "module example.com/team/nightly\n",
		"Makefile":                               "BIN := nightly\n",
	} {
		path, _, _ = strings.Cut(path, "\x00") // a second expectation on one file
		if !strings.Contains(string(files[path].Content), want) {
			t.Errorf("%s does not contain %q", path, want)
		}
	}
	for path, f := range files {
		for _, bad := range []string{"./handler", "'inventory'", "baton-dev-tools", `"baton"`} {
			if strings.Contains(string(f.Content), bad) {
				t.Errorf("%s still contains %q", path, bad)
			}
		}
	}
	for path, first := range map[string]string{
		"infra/main.bicep":    "// " + Marker + "\n",
		"infra/app/api.bicep": "// " + Marker + "\n",
		"scripts/package.sh":  "#!/bin/sh\n# " + Marker + "\n",
		"scripts/package.ps1": "# " + Marker + "\n",
		"azure.yaml":          "# yaml-language-server: $schema=https://raw.githubusercontent.com/Azure/azure-dev/main/schemas/v1.0/azure.yaml.json\n# " + Marker + "\n",
		"Makefile":            "# " + Marker + "\n",
	} {
		if !strings.HasPrefix(string(files[path].Content), first) {
			t.Errorf("%s does not start with the generated marker: %.120q", path, files[path].Content)
		}
	}
	for path, f := range files {
		if !f.Generated && strings.Contains(string(f.Content), Marker) {
			t.Errorf("%s is the user's but carries the generated marker", path)
		}
	}
	if files["scripts/package.sh"].Mode&0o111 == 0 {
		t.Error("scripts/package.sh is not executable")
	}
	for _, own := range []string{"go.mod", "main.go", "primes.go", "primes_test.go", "README.md", "local.settings.example.json"} {
		if files[own].Generated {
			t.Errorf("%s is generated, want it the user's", own)
		}
	}
	for _, gen := range []string{"host.json", "Tick/function.json", "infra/main.bicep", "Makefile", "package-lock.json"} {
		if !files[gen].Generated {
			t.Errorf("%s is the user's, want it generated", gen)
		}
	}
}

// TestParams_Validate: every problem is reported, naming the field.
func TestParams_Validate(t *testing.T) {
	p := Params{Name: "Bad_Name"}
	err := p.Validate()
	if err == nil || !strings.Contains(err.Error(), "module: required") || !strings.Contains(err.Error(), `name "Bad_Name"`) {
		t.Errorf("Validate: %v, want both the module and the name named", err)
	}
	p = Params{Module: "example.com/x/Way_Too_Long_For_Azure_Names"}
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "name") {
		t.Errorf("Validate with an unusable module element: %v, want an error asking for a name", err)
	}
}

// initApp writes an app into a temporary folder, its go.mod replacing Baton with this checkout.
func initApp(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "nightly")
	if _, err := Init(dir, Params{Module: "example.com/team/nightly", Replace: root}, "(test)"); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestInit_RefusesNonEmpty: init never writes over an existing folder's files.
func TestInit_RefusesNonEmpty(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Init(dir, Params{Module: "example.com/x"}, "(test)"); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("Init into a non-empty folder: %v, want refused", err)
	}
}

func readManifest(t *testing.T, dir string) Manifest {
	t.Helper()
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func writeManifestT(t *testing.T, dir string, m Manifest) {
	t.Helper()
	b, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, ManifestPath), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, dir, rel, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(rel)), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, dir, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSync: after an upgrade, a generated file still as the old Baton wrote it is rewritten; one
// the user edited, and the user's own files, are left alone and the edited one is named; a file
// the new version adds is written; one it no longer generates is removed.
func TestSync(t *testing.T) {
	dir := initApp(t)
	// The files as an older Baton wrote them: Tick/function.json and Makefile had other
	// content, recorded in the manifest; infra/app/rbac.bicep did not exist.
	m := readManifest(t, dir)
	old := map[string]string{"Tick/function.json": `{"old":true}`, "Makefile": "# old\n"}
	for rel, content := range old {
		write(t, dir, rel, content)
		m.Files[rel] = Hash([]byte(content))
	}
	if err := os.Remove(filepath.Join(dir, "infra/app/rbac.bicep")); err != nil {
		t.Fatal(err)
	}
	delete(m.Files, "infra/app/rbac.bicep")
	if err := os.MkdirAll(filepath.Join(dir, "Gone"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "Gone/function.json", `{"gone":true}`)
	m.Files["Gone/function.json"] = Hash([]byte(`{"gone":true}`))
	writeManifestT(t, dir, m)
	// A file the user brought by hand to what this version writes: in step, not skipped.
	m = readManifest(t, dir)
	m.Files["Leader/function.json"] = Hash([]byte("what an older Baton wrote"))
	writeManifestT(t, dir, m)
	// The user's edits: a generated file and their own main.go.
	const edited = `{"version":"2.0","mine":true}`
	write(t, dir, "host.json", edited)
	write(t, dir, "main.go", "package main\n\n// mine\nfunc main() {}\n")

	rep, err := Sync(dir, "v9.9.9")
	if err != nil {
		t.Fatal(err)
	}
	fresh := render(t, m.App)
	for _, rel := range []string{"Tick/function.json", "Makefile", "infra/app/rbac.bicep"} {
		if read(t, dir, rel) != string(fresh[rel].Content) {
			t.Errorf("%s after sync is not what this version writes", rel)
		}
	}
	if got := read(t, dir, "host.json"); got != edited {
		t.Errorf("sync rewrote the user-edited host.json: %q", got)
	}
	if !strings.Contains(read(t, dir, "main.go"), "// mine") {
		t.Error("sync touched the user's main.go")
	}
	if _, err := os.Stat(filepath.Join(dir, "Gone/function.json")); err == nil {
		t.Error("sync left a file this version no longer generates")
	}
	slices.Sort(rep.Updated)
	if !slices.Equal(rep.Updated, []string{"Makefile", "Tick/function.json"}) || !slices.Equal(rep.Added, []string{"infra/app/rbac.bicep"}) ||
		!slices.Equal(rep.Removed, []string{"Gone/function.json"}) || len(rep.Skipped) != 1 || rep.Skipped[0].Path != "host.json" {
		t.Errorf("sync report %+v, want Makefile and Tick updated, rbac.bicep added, Gone removed, host.json skipped", rep)
	}
	if m := readManifest(t, dir); m.Baton != "v9.9.9" || m.Files["Makefile"] != Hash(fresh["Makefile"].Content) {
		t.Errorf("manifest after sync: baton %q, Makefile %s; want the new version and hash", m.Baton, m.Files["Makefile"])
	}
	// A second sync has nothing to do but still names the edited file.
	rep, err = Sync(dir, "v9.9.9")
	if err != nil || len(rep.Updated)+len(rep.Added)+len(rep.Removed) != 0 || len(rep.Skipped) != 1 {
		t.Errorf("second sync: %+v, %v; want only host.json skipped", rep, err)
	}
}

// TestCheck: a fresh app has no drift; a generated file that differs, is missing or is not in
// the manifest is reported by path; the user's own files never are.
func TestCheck(t *testing.T) {
	dir := initApp(t)
	if d, err := Check(dir); err != nil || len(d) != 0 {
		t.Fatalf("Check of a fresh app: %v, %v; want no drift", d, err)
	}
	if m := readManifest(t, dir); m.App.Name != "nightly" || m.App.Module != "example.com/team/nightly" {
		t.Errorf("manifest app %+v, want the module and the name it was rendered with", m.App)
	}
	write(t, dir, "main.go", "package main\n\nfunc main() {}\n")
	if d, err := Check(dir); err != nil || len(d) != 0 {
		t.Errorf("Check after editing main.go (the user's): %v, %v; want no drift", d, err)
	}
	write(t, dir, "infra/main.bicep", read(t, dir, "infra/main.bicep")+"\n// drift\n")
	if err := os.Remove(filepath.Join(dir, "Leader/function.json")); err != nil {
		t.Fatal(err)
	}
	m := readManifest(t, dir)
	delete(m.Files, "azure.yaml")
	writeManifestT(t, dir, m)
	d, err := Check(dir)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, x := range d {
		paths = append(paths, x.Path)
	}
	slices.Sort(paths)
	if want := []string{"Leader/function.json", "azure.yaml", "infra/main.bicep"}; !slices.Equal(paths, want) {
		t.Errorf("Check reported %v, want %v", d, want)
	}
}

// TestTemplates_AreTheDocs: the app init writes is the one docs/jobs.md walks through: every
// declaration of main.go and primes.go (comments aside) stands in the guide as written.
func TestTemplates_AreTheDocs(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "jobs.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := render(t, Params{Module: "example.com/team/nightly"})
	for _, name := range []string{"main.go", "primes.go", "primes_test.go"} {
		src := string(files[name].Content)
		for _, decl := range strings.Split(src, "\n\n") {
			var code []string
			for _, line := range strings.Split(decl, "\n") {
				if !strings.HasPrefix(strings.TrimSpace(line), "//") {
					code = append(code, line)
				}
			}
			block := strings.Join(code, "\n")
			if !strings.HasPrefix(block, "func ") && !strings.HasPrefix(block, "type ") {
				continue // package clause and imports
			}
			if !strings.Contains(string(doc), block) {
				t.Errorf("%s: this declaration is not in docs/jobs.md as written:\n%s", name, block)
			}
		}
	}
}
