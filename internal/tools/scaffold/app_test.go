package scaffold_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/tools/scaffold/scaffoldtest"
)

// TestInit_AppBuilds: the new app is a module that tidies, builds, vets and passes its own tests
// (batontest on the example job), with the handler binary host.json names.
func TestInit_AppBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module")
	}
	dir := scaffoldtest.App(t, "example.com/team/nightly")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	scaffoldtest.Go(t, ctx, dir, "build", "-o", "nightly", ".")
	scaffoldtest.Go(t, ctx, dir, "vet", "./...")
	scaffoldtest.Go(t, ctx, dir, "test", "-count=1", "./...")
	if _, err := os.Stat(filepath.Join(dir, "nightly")); err != nil {
		t.Errorf("no handler binary named as in host.json: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "primes_test.go"), []byte("package main\n\nimport \"testing\"\n\nfunc TestFails(t *testing.T) { t.Fatal(\"boom\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "./...")
	cmd.Dir = dir
	if err := cmd.Run(); err == nil {
		t.Error("go test in the app passed with a failing test: the harness proves nothing")
	}
}
