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
