package infra_test

import (
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
	if err := os.MkdirAll(filepath.Join(unreadable, "v1", "index"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(unreadable, "v1", "index", "db.json"), []byte("not a database"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, version, cache, want string
	}{
		{"the database module cannot be downloaded", "v0.0.0-20000101000000-000000000000", t.TempDir(), "cannot be downloaded, so nothing was scanned"},
		{"the database cannot be read", "v1", unreadable, "unrecognized vulndb format"},
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
