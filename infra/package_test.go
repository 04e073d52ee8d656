package infra_test

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// Tests of scripts/package.sh, the azd prepackage hook: it runs for real into temporary
// folders. A tiny app of its own makes the main test independent of ./handler, which other
// work may leave not compiling; the whole-repo test builds the real handler.

func packageScript(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh on this machine: scripts/package.sh is the POSIX hook")
	}
	return filepath.Join(repoRoot(t), "scripts", "package.sh")
}

// runPackage runs the script with the given environment overrides and returns its output.
func runPackage(t *testing.T, env map[string]string) (string, error) {
	t.Helper()
	cmd := exec.Command("sh", packageScript(t))
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=local")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// tree lists every file under dir, relative and slash-separated.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, path)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// checkBinary checks that path is an executable, static linux/amd64 ELF file.
func checkBinary(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o111 != 0o111 {
		t.Errorf("%s: mode %v, want executable by everyone (azd zips the mode as is)", path, fi.Mode().Perm())
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("%s is not an ELF binary: %v", path, err)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 || f.Class != elf.ELFCLASS64 {
		t.Errorf("%s: got %v %v, want a 64-bit x86-64 binary", path, f.Class, f.Machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked: want CGO_ENABLED=0 (static)", path)
		}
	}
}

func TestPackageScript_BuildsPackage(t *testing.T) {
	src := t.TempDir()
	writeFiles(t, src, map[string]string{
		"go.mod":                    "module example.com/app\n\ngo 1.22\n",
		"handler/main.go":           "package main\n\nfunc main() {}\n",
		"host.json":                 `{"version": "2.0"}`,
		"Tick/function.json":        `{"bindings": []}`,
		"Work/function.json":        `{"bindings": []}`,
		"Work/notes.md":             "kept: a function folder is copied whole",
		"Work/local.settings.json":  `{"Values": {"SECRET": "x"}}`,
		"docs/readme.md":            "no function.json: not copied",
		"nested/Deep/function.json": `{"bindings": []}`,
		"local.settings.json":       `{"Values": {"SECRET": "x"}}`,
	})
	dist := filepath.Join(t.TempDir(), "dist")
	writeFiles(t, dist, map[string]string{"Stale/function.json": "{}"})

	out, err := runPackage(t, map[string]string{"SOURCE_DIR": src, "DIST_DIR": dist, "GO_PACKAGE": "./handler"})
	if err != nil {
		t.Fatalf("package.sh: %v\n%s", err, out)
	}
	got := strings.Join(tree(t, dist), "\n")
	want := strings.Join([]string{"Tick/function.json", "Work/function.json", "Work/notes.md", "baton", "host.json"}, "\n")
	if got != want {
		t.Errorf("dist tree:\n%s\nwant:\n%s", got, want)
	}
	checkBinary(t, filepath.Join(dist, "baton"))
	if b, _ := os.ReadFile(filepath.Join(dist, "host.json")); string(b) != `{"version": "2.0"}` {
		t.Errorf("dist/host.json: got %q, want a copy of host.json", b)
	}
	if !strings.Contains(out, "2 function folders") {
		t.Errorf("output %q: want it to report 2 function folders", out)
	}
}

func TestPackageScript_Refuses(t *testing.T) {
	src := t.TempDir()
	writeFiles(t, src, map[string]string{
		"go.mod":             "module example.com/app\n\ngo 1.22\n",
		"handler/main.go":    "package main\n\nfunc main() {}\n",
		"broken/main.go":     "package main\n\nfunc main() {\n",
		"host.json":          `{"version": "2.0"}`,
		"Tick/function.json": `{"bindings": []}`,
	})
	nofn := t.TempDir()
	writeFiles(t, nofn, map[string]string{
		"go.mod":          "module example.com/app\n\ngo 1.22\n",
		"handler/main.go": "package main\n\nfunc main() {}\n",
		"host.json":       `{"version": "2.0"}`,
	})
	cases := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"dist is the sources", map[string]string{"SOURCE_DIR": src, "DIST_DIR": src}, "refusing to empty DIST_DIR"},
		{"dist holds the sources", map[string]string{"SOURCE_DIR": src, "DIST_DIR": filepath.Dir(src)}, "refusing to empty DIST_DIR"},
		{"dist is the root", map[string]string{"SOURCE_DIR": src, "DIST_DIR": "/"}, "refusing to empty DIST_DIR"},
		{"no host.json", map[string]string{"SOURCE_DIR": t.TempDir(), "DIST_DIR": filepath.Join(t.TempDir(), "d")}, "no host.json"},
		{"build fails", map[string]string{"SOURCE_DIR": src, "DIST_DIR": filepath.Join(t.TempDir(), "d"), "GO_PACKAGE": "./broken"}, "go build ./broken failed"},
		{"no function folders", map[string]string{"SOURCE_DIR": nofn, "DIST_DIR": filepath.Join(t.TempDir(), "d")}, "no function folders"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runPackage(t, tc.env)
			if err == nil || !strings.Contains(out, tc.want) {
				t.Errorf("got err=%v output:\n%s\nwant a failure saying %q", err, out, tc.want)
			}
			// Nothing of the sources may be lost.
			if _, err := os.Stat(filepath.Join(src, "host.json")); err != nil {
				t.Fatalf("the sources were damaged: %v", err)
			}
		})
	}
}

// localGo is the version of the machine's Go (GOTOOLCHAIN=local), as major, minor, patch.
func localGo(t *testing.T) [3]int {
	t.Helper()
	cmd := exec.Command("go", "env", "GOVERSION")
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go env GOVERSION: %v", err)
	}
	return goVersion(t, strings.TrimSpace(string(out)))
}

func goVersion(t *testing.T, s string) [3]int {
	t.Helper()
	m := regexp.MustCompile(`^go(\d+)\.(\d+)(?:\.(\d+))?`).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("%q is not a Go version", s)
	}
	var v [3]int
	for i := range v {
		v[i], _ = strconv.Atoi(m[i+1])
	}
	return v
}

func older(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// repoGoTooOld reports whether the machine's Go is older than go.mod's toolchain line, in
// which case package.sh must refuse the repository (GOTOOLCHAIN=local keeps go from fetching).
// It checks that refusal, so a caller returns at once.
func repoGoTooOld(t *testing.T, out string, err error) bool {
	t.Helper()
	m := regexp.MustCompile(`(?m)^toolchain (go\S+)`).FindStringSubmatch(readFile(t, filepath.Join(repoRoot(t), "go.mod")))
	if m == nil || !older(localGo(t), goVersion(t, m[1])) {
		return false
	}
	if err == nil || !strings.Contains(out, "is older than "+m[1]) {
		t.Errorf("the machine's Go is older than go.mod's %s, yet package.sh did not refuse it: %v\n%s", m[1], err, out)
	}
	return true
}

// TestPackageScript_GoVersion: the package is built only by a Go at least as new as go.mod's
// toolchain line (else its go line), compared as numbers (go1.26.10 is newer than go1.26.8).
func TestPackageScript_GoVersion(t *testing.T) {
	have := localGo(t)
	cases := []struct {
		name, goMod string
		refused     bool
	}{
		{"the same toolchain", fmt.Sprintf("go 1.22\n\ntoolchain go%d.%d.%d\n", have[0], have[1], have[2]), false},
		{"an older toolchain", "go 1.21\n\ntoolchain go1.21.0\n", false},
		{"no toolchain line, an old go line", "go 1.22\n", false},
		{"a newer patch with more digits", fmt.Sprintf("go 1.22\n\ntoolchain go%d.%d.%d\n", have[0], have[1], have[2]+10), true},
		{"a newer minor", fmt.Sprintf("go 1.22\n\ntoolchain go%d.%d.0\n", have[0], have[1]+1), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := t.TempDir()
			writeFiles(t, src, map[string]string{
				"go.mod":             "module example.com/app\n\n" + tc.goMod,
				"handler/main.go":    "package main\n\nfunc main() {}\n",
				"host.json":          `{"version": "2.0"}`,
				"Tick/function.json": `{"bindings": []}`,
			})
			dist := filepath.Join(t.TempDir(), "dist")
			out, err := runPackage(t, map[string]string{"SOURCE_DIR": src, "DIST_DIR": dist})
			switch {
			case tc.refused && (err == nil || !strings.Contains(out, "which go.mod asks for") || !strings.Contains(out, "GOTOOLCHAIN=")):
				t.Errorf("got err=%v output:\n%s\nwant a refusal naming both versions and GOTOOLCHAIN", err, out)
			case tc.refused:
				if _, err := os.Stat(filepath.Join(dist, "baton")); err == nil {
					t.Error("a refused package still holds a binary")
				}
			case err != nil:
				t.Errorf("package.sh: %v\n%s", err, out)
			}
		})
	}
}

// TestPackageScript_Repo packages the repository itself: the real handler, host.json and
// every function folder found at the root.
func TestPackageScript_Repo(t *testing.T) {
	root := repoRoot(t)
	dist := filepath.Join(t.TempDir(), "dist")
	out, err := runPackage(t, map[string]string{"DIST_DIR": dist})
	if repoGoTooOld(t, out, err) {
		return
	}
	if err != nil {
		// Only a handler that does not compile yet is a reason to skip; say so plainly.
		build := exec.Command("go", "build", "-o", os.DevNull, "./handler")
		build.Dir = root
		if bout, berr := build.CombinedOutput(); berr != nil {
			t.Skipf("./handler does not build yet, so the package cannot be made (package.sh output:\n%s)\ngo build ./handler: %v\n%s", out, berr, bout)
		}
		t.Fatalf("package.sh failed although ./handler builds: %v\n%s", err, out)
	}
	checkBinary(t, filepath.Join(dist, "baton"))

	want := []string{"baton", "host.json"}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(root, e.Name(), "function.json")); err == nil && e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			want = append(want, e.Name())
			if b1, b2 := readFile(t, filepath.Join(root, e.Name(), "function.json")), readFile(t, filepath.Join(dist, e.Name(), "function.json")); b1 != b2 {
				t.Errorf("dist/%s/function.json differs from the source", e.Name())
			}
		}
	}
	var got []string
	distEntries, err := os.ReadDir(dist)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range distEntries {
		got = append(got, e.Name())
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("dist holds %v, want %v", got, want)
	}
	host := readFile(t, filepath.Join(root, "host.json"))
	if !strings.Contains(host, `"defaultExecutablePath": "baton"`) {
		t.Errorf("host.json: want customHandler.description.defaultExecutablePath \"baton\", the file package.sh builds")
	}
}

// TestPackageScript_PowerShellTwin: no pwsh here to run package.ps1, so check it does the same
// steps as package.sh, by the settings and names both must use.
func TestPackageScript_PowerShellTwin(t *testing.T) {
	root := repoRoot(t)
	for _, name := range []string{"package.sh", "package.ps1"} {
		text := readFile(t, filepath.Join(root, "scripts", name))
		for _, want := range []string{"GOOS", "'linux'", "GOARCH", "amd64", "CGO_ENABLED", "'0'", "-trimpath", "-s -w",
			"SOURCE_DIR", "DIST_DIR", "GO_PACKAGE", "./handler", "host.json", "function.json", "local.settings.json", "baton",
			"env GOVERSION", "toolchain", "which go.mod asks for", "GOTOOLCHAIN=auto"} {
			if name == "package.sh" {
				want = strings.Trim(want, "'")
			}
			if !strings.Contains(text, want) {
				t.Errorf("scripts/%s does not mention %s", name, want)
			}
		}
	}
	// The POSIX hook must be executable for azd's `run: ./scripts/package.sh`.
	fi, err := os.Stat(filepath.Join(root, "scripts", "package.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o100 == 0 {
		t.Errorf("scripts/package.sh: mode %v, want executable", fi.Mode().Perm())
	}
}

// TestAzureYAML checks the azd project file against the pieces it names (no YAML parser in
// the module; the file is small and its shape fixed).
func TestAzureYAML(t *testing.T) {
	root := repoRoot(t)
	y := readFile(t, filepath.Join(root, "azure.yaml"))
	for _, want := range []string{
		"\n  api:", "project: .", "host: function", "language: custom", "dist: ./dist",
		"prepackage:", "posix:", "shell: sh", "run: ./scripts/package.sh", "windows:", "shell: pwsh", "run: ./scripts/package.ps1",
		"alpha.language.custom", "1.23.4",
		"preprovision:", "run: ./scripts/validate.sh", "run: ./scripts/validate.ps1",
	} {
		if !strings.Contains(y, want) {
			t.Errorf("azure.yaml: want %q", want)
		}
	}
	for _, script := range []string{"scripts/package.sh", "scripts/package.ps1", "scripts/validate.sh", "scripts/validate.ps1"} {
		if _, err := os.Stat(filepath.Join(root, script)); err != nil {
			t.Errorf("azure.yaml runs %s: %v", script, err)
		}
	}
	if regexp.MustCompile(`(?m)^\s*language:\s*go\b`).MatchString(y) {
		t.Error("azure.yaml: language go targets the native Go worker, not a custom handler")
	}
}

// TestPackageScript_AnyCurrentFolder: azd runs the hook from the service folder, a developer
// from anywhere; the script finds the sources from its own location, not the current folder.
func TestPackageScript_AnyCurrentFolder(t *testing.T) {
	elsewhere := t.TempDir()
	dist := filepath.Join(t.TempDir(), "dist")
	cmd := exec.Command("sh", packageScript(t))
	cmd.Dir = elsewhere
	// A cross-compilation target left in the caller's environment must not leak into the build.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=local", "DIST_DIR="+dist, "GOOS=windows", "GOARCH=arm64", "CGO_ENABLED=1")
	out, err := cmd.CombinedOutput()
	if repoGoTooOld(t, string(out), err) {
		return
	}
	if err != nil {
		t.Fatalf("package.sh from %s: %v\n%s", elsewhere, err, out)
	}
	checkBinary(t, filepath.Join(dist, "baton"))
	if _, err := os.Stat(filepath.Join(dist, "baton.exe")); err == nil {
		t.Error("dist/baton.exe exists: the package must hold baton, the Linux binary host.json names")
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Errorf("package.sh wrote into the current folder: %v", entries)
	}
}

// TestPackageScript_PowerShellSetsTarget: pwsh is not installed here, so package.ps1 cannot
// run; this static check makes sure it sets GOOS=linux, GOARCH=amd64 and CGO_ENABLED=0 in the
// environment before the build (a Windows caller would otherwise get a Windows binary), writes
// baton without .exe, and resolves the sources from $PSScriptRoot, not the current folder.
func TestPackageScript_PowerShellSetsTarget(t *testing.T) {
	text := readFile(t, filepath.Join(repoRoot(t), "scripts", "package.ps1"))
	build := strings.Index(text, "& $go build")
	if build < 0 {
		t.Fatal("scripts/package.ps1: no `& $go build` line")
	}
	for _, re := range []string{`\$env:GOOS\s*=\s*'linux'`, `\$env:GOARCH\s*=\s*'amd64'`, `\$env:CGO_ENABLED\s*=\s*'0'`} {
		loc := regexp.MustCompile(re).FindStringIndex(text)
		if loc == nil || loc[0] > build {
			t.Errorf("scripts/package.ps1: want %s set before the build", re)
		}
	}
	if !regexp.MustCompile(`-o \(Join-Path \$dist 'baton'\)`).MatchString(text) || strings.Contains(text, "baton.exe") {
		t.Error("scripts/package.ps1: want the build to write $dist/baton (no .exe)")
	}
	if !strings.Contains(text, "Split-Path -Parent $PSScriptRoot") || !strings.Contains(text, "Push-Location -LiteralPath $src") {
		t.Error("scripts/package.ps1: want the sources found from $PSScriptRoot and the build run there")
	}
	sh := readFile(t, filepath.Join(repoRoot(t), "scripts", "package.sh"))
	if !strings.Contains(sh, `GOOS=linux GOARCH=amd64 CGO_ENABLED=0 "$go_cmd" build`) {
		t.Error("scripts/package.sh: want GOOS=linux GOARCH=amd64 CGO_ENABLED=0 on the build command")
	}
}

// TestValidateScript runs the preprovision hook from another folder, as azd does with the azd
// environment's values in the environment: the defaults pass and are the template's (the
// schedule tick, hourly, of the synthetic job), a job without its params fails naming
// BATON_JOB_PARAMS, an override of a schedule the app does not declare fails naming
// BATON_SCHEDULES.
func TestValidateScript(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh on this machine: scripts/validate.sh is the POSIX hook")
	}
	script := filepath.Join(repoRoot(t), "scripts", "validate.sh")
	run := func(kv ...string) (string, error) {
		cmd := exec.Command("sh", script)
		cmd.Dir = t.TempDir()
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=local", "GOOS=windows", "BATON_JOB=", "BATON_JOB_PARAMS=", "BATON_SCHEDULE=", "BATON_SCHEDULES=", "BATON_HEARTBEAT=")
		cmd.Env = append(cmd.Env, kv...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// Unset or empty, a setting takes main.parameters.json's default, as azd fills it in.
	out, err := run()
	if err != nil || !strings.Contains(out, "ok: BATON_HEARTBEAT="+defaultHeartbeat+";") ||
		!strings.Contains(out, `tick ("0 0 * * * *" UTC, job synthetic`) {
		t.Fatalf("defaults: %v\n%s\nwant ok with the template's heartbeat and the hourly schedule tick of synthetic", err, out)
	}
	out, err = run("BATON_JOB=inventory")
	if err == nil || !strings.Contains(out, "BATON_JOB_PARAMS is not set") {
		t.Errorf("inventory without params: %v\n%s", err, out)
	}
	out, err = run(`BATON_SCHEDULES={"nightly":{"paused":true}}`)
	if err == nil || !strings.Contains(out, "BATON_SCHEDULES names the schedule \"nightly\"") {
		t.Errorf("an override of a schedule the app does not declare: %v\n%s", err, out)
	}
	// The PowerShell twin (static: no pwsh here) runs the same command from the repo root.
	ps := readFile(t, filepath.Join(repoRoot(t), "scripts", "validate.ps1"))
	for _, want := range []string{"Split-Path -Parent $PSScriptRoot", "run ./handler validate", "FUNCTIONS_APP_ROOT_PATH", "Env:GOOS", "exit $code",
		"infra/main.parameters.json", `'^\$\{(BATON_[A-Z0-9_]+)=([^}]*)\}$'`} {
		if !strings.Contains(ps, want) {
			t.Errorf("scripts/validate.ps1 does not mention %s", want)
		}
	}
	if fi, err := os.Stat(script); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Errorf("scripts/validate.sh must exist and be executable: %v", err)
	}
}
