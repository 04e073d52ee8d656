// Package scaffoldtest writes a ready-to-build app with the scaffold for tests: the new app's
// go.mod replaces Baton with this checkout, and its go.sum is filled in.
package scaffoldtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/tools/scaffold"
)

// BatonRoot is the root of this checkout of Baton (found from this file's path).
func BatonRoot(tb testing.TB) string {
	tb.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		tb.Fatal("scaffoldtest: no caller information")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", "..", ".."))
}

// App writes the app baton init writes for module into a new temporary folder named after the
// module's last element, runs go mod tidy there (GOFLAGS=-mod=mod, so the module proxy fills in
// go.sum), and returns the folder. Its go.mod replaces Baton with this checkout.
func App(tb testing.TB, module string) string {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), filepath.Base(module))
	if _, err := scaffold.Init(dir, scaffold.Params{Module: module, Replace: BatonRoot(tb)}, "(test)"); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	Go(tb, ctx, dir, "mod", "tidy")
	return dir
}

// Go runs the go command in dir with GOFLAGS=-mod=mod and fails tb with its output on an error.
func Go(tb testing.TB, ctx context.Context, dir string, args ...string) {
	tb.Helper()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go %v in %s: %v\n%s", args, dir, err, out)
	}
}
