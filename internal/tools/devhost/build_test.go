package devhost

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeFiles writes name → content under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBuild: the app in the folder is built from its main package (the root by default, or the
// one given) into the binary host.json names, and that binary is the app's.
func TestBuild(t *testing.T) {
	for _, tc := range []struct{ name, pkg, mainDir string }{
		{"root package", "", "."},
		{"named package", "./cmd/app", "cmd/app"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, map[string]string{
				"go.mod":                             "module example.com/myapp\n\ngo 1.24\n",
				"host.json":                          `{"version":"2.0","customHandler":{"description":{"defaultExecutablePath":"myapp"}}}`,
				filepath.Join(tc.mainDir, "main.go"): "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello from myapp\") }\n",
			})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var out bytes.Buffer
			exe, err := Build(ctx, dir, tc.pkg, &out)
			if err != nil {
				t.Fatalf("Build: %v (go output: %s)", err, out.String())
			}
			if want := filepath.Join(dir, "myapp"); exe != want {
				t.Errorf("Build returned %s, want %s", exe, want)
			}
			got, err := exec.CommandContext(ctx, exe).Output()
			if err != nil {
				t.Fatalf("run %s: %v", exe, err)
			}
			if strings.TrimSpace(string(got)) != "hello from myapp" {
				t.Errorf("the built binary printed %q, want the app's greeting", got)
			}
		})
	}
}

// TestBuild_Errors: a folder whose host.json names no plain executable, or whose package does
// not build, is an error naming the cause.
func TestBuild_Errors(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"host.json": `{"version":"2.0","customHandler":{"description":{"defaultExecutablePath":"%EXE%"}}}`,
	})
	if _, err := Build(ctx, dir, "", &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "defaultExecutablePath") {
		t.Errorf("Build with %%EXE%%: %v, want an error naming defaultExecutablePath", err)
	}
	dir = t.TempDir()
	writeFiles(t, dir, map[string]string{
		"go.mod":    "module example.com/broken\n\ngo 1.24\n",
		"host.json": `{"version":"2.0","customHandler":{"description":{"defaultExecutablePath":"broken"}}}`,
		"main.go":   "package main\n\nfunc main() { undefined() }\n",
	})
	var out bytes.Buffer
	if _, err := Build(ctx, dir, "", &out); err == nil || !strings.Contains(out.String(), "undefined") {
		t.Errorf("Build of a broken package: %v (output %q), want an error and the compiler's message", err, out.String())
	}
}

// TestBuild_RefusesLibrary: a package that is not main is refused before anything is built,
// with the module's main packages named, and the binary host.json names is left as it was.
func TestBuild_RefusesLibrary(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"go.mod":          "module example.com/lib\n\ngo 1.24\n",
		"lib.go":          "package lib\n\nfunc X() int { return 1 }\n",
		"handler/main.go": "package main\n\nfunc main() {}\n",
		"host.json":       `{"version":"2.0","customHandler":{"description":{"defaultExecutablePath":"lib"}}}`,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	exe, err := Build(ctx, dir, "./handler", &out)
	if err != nil {
		t.Fatalf("Build ./handler: %v (%s)", err, out.String())
	}
	before, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range []string{"", "./..."} {
		_, err = Build(ctx, dir, pkg, &out)
		if !errors.Is(err, ErrNotMain) || !strings.Contains(err.Error(), "./handler") {
			t.Errorf("Build %q of a library: %v, want ErrNotMain naming ./handler", pkg, err)
		}
	}
	if after, err := os.ReadFile(exe); err != nil || !bytes.Equal(before, after) {
		t.Errorf("the binary %s changed (%v)", exe, err)
	}
	assertNoBuildLeftovers(t, dir)
}

// TestBuild_KeepsExecutable: when go build writes something that is not an executable for
// this platform, Build fails saying so and the binary host.json names is left as it was.
func TestBuild_KeepsExecutable(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"host.json": `{"version":"2.0","customHandler":{"description":{"defaultExecutablePath":"app"}}}`,
		// A go command whose list says main and whose build writes an ar archive to -o.
		"fakego": "#!/bin/sh\ncase \"$1\" in\nlist) echo main ;;\nbuild) printf '!<arch>\\n' > \"$4\"; chmod +x \"$4\" ;;\nesac\n",
	})
	if err := os.Chmod(filepath.Join(dir, "fakego"), 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "app")
	if err := os.WriteFile(exe, self, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GO", filepath.Join(dir, "fakego"))
	_, err = Build(context.Background(), dir, "", &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "not an") || !strings.Contains(err.Error(), "left as it was") {
		t.Errorf("Build writing an archive: %v, want an error saying the result is not an executable", err)
	}
	if after, err := os.ReadFile(exe); err != nil || !bytes.Equal(self, after) {
		t.Errorf("the binary %s changed (%v)", exe, err)
	}
	assertNoBuildLeftovers(t, dir)
}

// assertNoBuildLeftovers checks that Build left no temporary folder in dir.
func assertNoBuildLeftovers(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".build-") {
			t.Errorf("Build left %s behind", e.Name())
		}
	}
}
