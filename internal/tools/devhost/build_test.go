package devhost

import (
	"bytes"
	"context"
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
