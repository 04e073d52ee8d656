package scaffold

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const repoRoot = "../../.."

// TestCopiesMatchBaton: files/ holds exactly Baton's own files (go generate ./internal/tools/scaffold
// refreshes it), so an app gets what Baton itself runs and deploys.
func TestCopiesMatchBaton(t *testing.T) {
	for _, rel := range Copied {
		want, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(rel)))
		if err != nil {
			t.Fatal(err)
		}
		got, err := embedded.ReadFile("files/" + rel)
		if err != nil {
			t.Fatalf("%s is not in files/: run go generate ./internal/tools/scaffold", rel)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("files/%s differs from Baton's %s: run go generate ./internal/tools/scaffold", rel, rel)
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
			t.Errorf("%s is not in Copied (copy.go): an app would lack the function; add it, run go generate ./internal/tools/scaffold and go tool baton sync in examples/csvtotals", rel)
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
		"main.go":                                `primes.Schedule("nightly", "0 0 2 * * *")`,
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
	retire(t, "Gone/function.json")
	writeManifestT(t, dir, m)
	// A file the user brought by hand to what this version writes: in step, not skipped.
	m = readManifest(t, dir)
	m.Files["Leader/function.json"] = Hash([]byte("what an older Baton wrote"))
	writeManifestT(t, dir, m)
	// The user's edits: a generated file and their own main.go.
	const edited = `{"version":"2.0","mine":true}`
	write(t, dir, "host.json", edited)
	write(t, dir, "main.go", "package main\n\n// mine\nfunc main() {}\n")

	rep, err := Sync(dir, "v9.9.9", SyncOptions{})
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
	if _, err := os.Stat(filepath.Join(dir, "Gone")); err == nil {
		t.Error("sync left a file this version no longer generates, or its emptied folder")
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
	rep, err = Sync(dir, "v9.9.9", SyncOptions{})
	if err != nil || len(rep.Updated)+len(rep.Added)+len(rep.Removed) != 0 || len(rep.Skipped) != 1 {
		t.Errorf("second sync: %+v, %v; want only host.json skipped", rep, err)
	}
}

// TestCheck: a fresh app has no drift; a generated file that differs or is missing is reported
// by path; one whose manifest entry was deleted is the app's own, reported as owned and never as
// drift, however it differs; the user's own files are never reported.
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
	delete(m.Files, "azure.yaml") // owned by the app from now on
	writeManifestT(t, dir, m)
	write(t, dir, "azure.yaml", "name: mine\n")
	rep, err := Inspect(dir)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, x := range rep.Drifts {
		paths = append(paths, x.Path)
	}
	slices.Sort(paths)
	if want := []string{"Leader/function.json", "infra/main.bicep"}; !slices.Equal(paths, want) {
		t.Errorf("Inspect reported drifts %v, want %v", rep.Drifts, want)
	}
	if !slices.Equal(rep.Owned, []string{"azure.yaml"}) {
		t.Errorf("Inspect reported owned %v, want [azure.yaml]", rep.Owned)
	}
	// Owning every drifted file makes the app check clean.
	m = readManifest(t, dir)
	delete(m.Files, "infra/main.bicep")
	writeManifestT(t, dir, m)
	write(t, dir, "Leader/function.json", "{}")
	m = readManifest(t, dir)
	delete(m.Files, "Leader/function.json")
	writeManifestT(t, dir, m)
	if d, err := Check(dir); err != nil || len(d) != 0 {
		t.Errorf("Check with the drifted files owned: %v, %v; want no drift", d, err)
	}
}

// TestCheck_Diff: a drifted file's report carries a unified diff from what Baton writes to the
// file on disk, and says how to resolve it; a file rewritten whole gets a bounded diff.
func TestCheck_Diff(t *testing.T) {
	dir := initApp(t)
	host := read(t, dir, "host.json")
	write(t, dir, "host.json", strings.Replace(host, `"defaultExecutablePath": "nightly"`, `"defaultExecutablePath": "mine"`, 1))
	var big strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&big, "line %d %s\n", i, strings.Repeat("x", 500))
	}
	write(t, dir, "package-lock.json", big.String())
	d, err := Check(dir)
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]Drift{}
	for _, x := range d {
		byPath[x.Path] = x
	}
	h := byPath["host.json"]
	for _, want := range []string{"--- host.json", "+++ host.json", "\n@@ -", `-      "defaultExecutablePath": "nightly"`, `+      "defaultExecutablePath": "mine"`} {
		if !strings.Contains(h.Diff, want) {
			t.Errorf("host.json diff lacks %q:\n%s", want, h.Diff)
		}
	}
	if !strings.Contains(h.Problem, ManifestPath) || !strings.Contains(h.Problem, "sync -force") {
		t.Errorf("host.json problem %q: want both ways out (own it, or sync -force)", h.Problem)
	}
	lock := byPath["package-lock.json"].Diff
	if n := strings.Count(lock, "\n"); lock == "" || n > maxDiffLines+4 || len(lock) > (maxDiffLines+4)*(maxDiffLineLen+16) || !strings.Contains(lock, "more diff lines not shown") {
		t.Errorf("package-lock.json diff: %d lines, %d bytes; want at most %d lines, saying the rest is not shown", n, len(lock), maxDiffLines+4)
	}
}

// TestUnifiedDiff: the hunks, their ranges, context and a missing final newline.
func TestUnifiedDiff(t *testing.T) {
	want := "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n"
	got := "a\nb\nc\nD\ne\nf\ng\nh\ni\nj\nk"
	const exp = "--- f (what this Baton writes)\n+++ f (on disk)\n" +
		"@@ -1,10 +1,11 @@\n a\n b\n c\n-d\n+D\n e\n f\n g\n h\n i\n j\n+k\n\\ No newline at end of file\n"
	if d := unifiedDiff("f", []byte(want), []byte(got)); d != exp {
		t.Errorf("unifiedDiff:\n%s\nwant:\n%s", d, exp)
	}
	long := strings.Repeat("x\n", 20)
	const exp2 = "--- f (what this Baton writes)\n+++ f (on disk)\n" +
		"@@ -1,4 +1,3 @@\n-first\n x\n x\n x\n" +
		"@@ -19,3 +18,4 @@\n x\n x\n x\n+last\n"
	if d := unifiedDiff("f", []byte("first\n"+long), []byte(long+"last\n")); d != exp2 {
		t.Errorf("unifiedDiff with two hunks:\n%s\nwant:\n%s", d, exp2)
	}
	if d := unifiedDiff("f", []byte(long), []byte(long)); d != "" {
		t.Errorf("unifiedDiff of equal files: %q", d)
	}
}

// TestSync_Force: without Force, an edited and a deleted generated file are skipped with the way
// out named; with it they are rewritten and named; an owned file is left alone either way.
func TestSync_Force(t *testing.T) {
	dir := initApp(t)
	write(t, dir, "host.json", `{"version":"2.0"}`)
	if err := os.Remove(filepath.Join(dir, "Leader/function.json")); err != nil {
		t.Fatal(err)
	}
	m := readManifest(t, dir)
	delete(m.Files, "azure.yaml")
	writeManifestT(t, dir, m)
	write(t, dir, "azure.yaml", "name: mine\n")

	rep, err := Sync(dir, "(test)", SyncOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	for _, s := range rep.Skipped {
		reasons[s.Path] = s.Reason
	}
	if r := reasons["host.json"]; !strings.Contains(r, "sync -force") || !strings.Contains(r, ManifestPath) {
		t.Errorf("skipped host.json for %q: want both ways out (own it, or sync -force)", r)
	}
	if r := reasons["Leader/function.json"]; !strings.Contains(r, "sync -force") {
		t.Errorf("skipped Leader/function.json for %q: want sync -force named", r)
	}
	if !slices.Equal(rep.Owned, []string{"azure.yaml"}) {
		t.Errorf("owned %v, want [azure.yaml]", rep.Owned)
	}

	rep, err = Sync(dir, "(test)", SyncOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Overwritten, []string{"host.json"}) || !slices.Equal(rep.Restored, []string{"Leader/function.json"}) || len(rep.Skipped) != 0 || !slices.Equal(rep.Owned, []string{"azure.yaml"}) {
		t.Errorf("forced sync report %+v, want host.json overwritten, Leader restored, azure.yaml owned", rep)
	}
	fresh := render(t, m.App)
	for _, rel := range []string{"host.json", "Leader/function.json"} {
		if read(t, dir, rel) != string(fresh[rel].Content) {
			t.Errorf("%s after sync -force is not what this version writes", rel)
		}
	}
	if got := read(t, dir, "azure.yaml"); got != "name: mine\n" {
		t.Errorf("sync -force rewrote the owned azure.yaml: %q", got)
	}
	if d, err := Check(dir); err != nil || len(d) != 0 {
		t.Errorf("Check after sync -force: %v, %v; want no drift", d, err)
	}
}

// TestSync_RefusesPathsOutside: a manifest entry that is not a path Baton generates ("..", an
// absolute path, the user's file) is refused by sync and check, naming it, and nothing outside
// the app is read or removed.
func TestSync_RefusesPathsOutside(t *testing.T) {
	dir := initApp(t)
	victim := filepath.Join(filepath.Dir(dir), "victim.txt")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, entry := range []string{"../victim.txt", victim, "Tick/../../victim.txt", "main.go"} {
		m := readManifest(t, dir)
		m.Files[entry] = Hash([]byte("precious"))
		writeManifestT(t, dir, m)
		if _, err := Sync(dir, "(test)", SyncOptions{Force: true}); err == nil || !strings.Contains(err.Error(), strconv.Quote(entry)) {
			t.Errorf("Sync with the entry %q: %v; want it refused, naming it", entry, err)
		}
		if _, err := Check(dir); err == nil || !strings.Contains(err.Error(), strconv.Quote(entry)) {
			t.Errorf("Check with the entry %q: %v; want it refused, naming it", entry, err)
		}
		if b, err := os.ReadFile(victim); err != nil || string(b) != "precious" {
			t.Fatalf("the file outside the app after sync with the entry %q: %q, %v", entry, b, err)
		}
		delete(m.Files, entry)
		writeManifestT(t, dir, m)
	}
	if got := read(t, dir, "main.go"); !strings.Contains(got, "package main") {
		t.Errorf("sync touched the user's main.go: %q", got)
	}
}

// TestSync_SymlinkOutside: a symlink in the app leading out of it (a generated folder, or a
// folder of a file no longer generated) is refused, naming the path: sync writes, reads and
// removes nothing outside, and still syncs the other files.
func TestSync_SymlinkOutside(t *testing.T) {
	dir := initApp(t)
	outside := filepath.Join(filepath.Dir(dir), "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, outside, "function.json", `{"gone":true}`)
	if err := os.RemoveAll(filepath.Join(dir, "infra")); err != nil {
		t.Fatal(err)
	}
	for _, link := range []string{"infra", "Gone"} {
		if err := os.Symlink("../outside", filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	// As if an older Baton generated no infra/ but a Gone function, and wrote Makefile otherwise.
	m := readManifest(t, dir)
	for rel := range m.Files {
		if strings.HasPrefix(rel, "infra/") {
			delete(m.Files, rel)
		}
	}
	retire(t, "Gone/function.json")
	m.Files["Gone/function.json"] = Hash([]byte(`{"gone":true}`))
	write(t, dir, "Makefile", "# old\n")
	m.Files["Makefile"] = Hash([]byte("# old\n"))
	writeManifestT(t, dir, m)

	rep, err := Sync(dir, "(test)", SyncOptions{Force: true})
	if err == nil || !strings.Contains(err.Error(), "infra/main.bicep") || !strings.Contains(err.Error(), "Gone/function.json") || !strings.Contains(err.Error(), "out of the app") {
		t.Errorf("Sync through symlinks leading outside: %v; want infra/main.bicep and Gone/function.json refused", err)
	}
	entries, _ := os.ReadDir(outside)
	if len(entries) != 1 || entries[0].Name() != "function.json" {
		t.Errorf("sync changed the folder outside the app: %v", entries)
	}
	if !slices.Contains(rep.Updated, "Makefile") {
		t.Errorf("sync report %+v: want the other files synced (Makefile updated)", rep)
	}
	if _, err := Check(dir); err == nil || !strings.Contains(err.Error(), "infra/main.bicep") {
		t.Errorf("Check through a symlink leading outside: %v; want infra/main.bicep refused", err)
	}
}

// retire adds rel to Retired for the test.
func retire(t *testing.T, rel string) {
	t.Helper()
	old := Retired
	Retired = append(slices.Clip(Retired), rel)
	t.Cleanup(func() { Retired = old })
}

// TestGenerates: the paths the manifest may name are exactly the generated files Render writes.
func TestGenerates(t *testing.T) {
	for path, f := range render(t, Params{Module: "example.com/x"}) {
		if generates(path) != f.Generated {
			t.Errorf("generates(%q) = %v, Render says %v", path, generates(path), f.Generated)
		}
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
