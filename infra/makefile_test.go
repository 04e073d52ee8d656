package infra_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMakefile_VulncheckFailsWithoutDatabase: a vulnerability database that cannot be
// downloaded or read fails `make vulncheck` (and so `make vet`) instead of passing unscanned.
func TestMakefile_VulncheckFailsWithoutDatabase(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make on this machine")
	}
	unreadable := t.TempDir()
	writeFiles(t, filepath.Join(unreadable, "v1"), map[string]string{"index/db.json": "not a database"})
	// An empty database in the layout golang.org/x/vulndb's cmd/indexdb writes: govulncheck
	// reads it without complaint and finds nothing in any code.
	empty := t.TempDir()
	writeFiles(t, filepath.Join(empty, "v1"), map[string]string{
		"index/db.json":      `{"modified":"2026-01-01T00:00:00Z"}`,
		"index/modules.json": `[]`,
		"index/vulns.json":   `[]`,
		"ID/.keep":           "",
	})
	cases := []struct {
		name, version, cache, want string
	}{
		{"the database module cannot be downloaded", "v0.0.0-20000101000000-000000000000", t.TempDir(), "cannot be downloaded, so nothing was scanned"},
		{"the database cannot be read", "v1", unreadable, "unrecognized vulndb format"},
		{"the database holds no entries", "v1", empty, "holds no entries"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("make", "-s", "--no-print-directory", "vulncheck", "VULNDB_VERSION="+tc.version, "VULNDB_CACHE="+tc.cache)
			cmd.Dir = repoRoot(t)
			// GOPROXY=off: the download fails at once and offline, as it does where the proxy is out of reach.
			cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod", "GOVULNDB=", "GOWORK=off", "GOTOOLCHAIN=local")
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Errorf("make vulncheck: err=%v output:\n%s\nwant a failure saying %q", err, out, tc.want)
			}
			if strings.Contains(string(out), "no known vulnerability") {
				t.Errorf("make vulncheck reported a clean scan without a database:\n%s", out)
			}
		})
	}
}

// TestGoMod_NoDevelopmentTools: Baton's development tools are pinned in their own module
// (internal/tools/devtools), never in the library's go.mod, whose requirements every app that
// requires Baton carries in its module graph.
func TestGoMod_NoDevelopmentTools(t *testing.T) {
	root := repoRoot(t)
	tools := []struct{ module, cmd string }{
		{"honnef.co/go/tools", "honnef.co/go/tools/cmd/staticcheck"},
		{"golang.org/x/vuln", "golang.org/x/vuln/cmd/govulncheck"},
	}
	main := goModJSON(t, filepath.Join(root, "go.mod"))
	for _, tl := range main.Tool {
		t.Errorf("go.mod: tool %s: a development tool belongs in internal/tools/devtools/go.mod, out of every app's module graph", tl.Path)
	}
	for _, r := range main.Require {
		for _, tl := range tools {
			if r.Path == tl.module || strings.HasPrefix(r.Path, tl.module+"/") {
				t.Errorf("go.mod requires %s %s, the module of %s: remove it from the library's go.mod and run go mod tidy", r.Path, r.Version, tl.cmd)
			}
		}
	}
	dev := goModJSON(t, filepath.Join(root, "internal", "tools", "devtools", "go.mod"))
	pinned := map[string]bool{}
	for _, tl := range dev.Tool {
		pinned[tl.Path] = true
	}
	for _, tl := range tools {
		if !pinned[tl.cmd] {
			t.Errorf("internal/tools/devtools/go.mod: no tool %s; make vet runs it from there", tl.cmd)
		}
	}
}

// goModJSON reads a go.mod file through `go mod edit -json`.
func goModJSON(t *testing.T, path string) (mod struct {
	Require []struct{ Path, Version string }
	Tool    []struct{ Path string }
}) {
	t.Helper()
	out, err := exec.Command("go", "mod", "edit", "-json", path).Output()
	if err != nil {
		t.Fatalf("go mod edit -json %s: %v", path, err)
	}
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatalf("go mod edit -json %s: %v", path, err)
	}
	return mod
}

// TestMakefile_NpmRunsNoInstallScripts: the tools install runs no package's install scripts
// (Azurite works without them; internal/azurite's tests start the installed one).
func TestMakefile_NpmRunsNoInstallScripts(t *testing.T) {
	mk := readFile(t, filepath.Join(repoRoot(t), "Makefile"))
	n := 0
	for _, line := range strings.Split(mk, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "npm" && (f[1] == "ci" || f[1] == "install") {
			n++
			if !strings.Contains(line, "--ignore-scripts") {
				t.Errorf("Makefile: %q runs install scripts; add --ignore-scripts", strings.TrimSpace(line))
			}
		}
	}
	if n == 0 {
		t.Error("Makefile: no npm ci line found; the tools target installs Azurite with one")
	}
}
