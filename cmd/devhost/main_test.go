package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunCmd_TimerFlag: -timer accepts only all and one, and says so.
func TestRunCmd_TimerFlag(t *testing.T) {
	err := runCmd(context.Background(), []string{"-timer", "each", "-app", t.TempDir()}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-timer") || !strings.Contains(err.Error(), `"one"`) {
		t.Errorf("runCmd -timer each: %v, want an error naming -timer and its values", err)
	}
}

// TestRunCmd_BuildsTheApp: without -exe, run builds the app's main package in the folder first
// and stops at a compile error, showing the compiler's message.
func TestRunCmd_BuildsTheApp(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"go.mod":    "module example.com/broken\n\ngo 1.24\n",
		"host.json": `{"version":"2.0","customHandler":{"description":{"defaultExecutablePath":"broken"}}}`,
		"main.go":   "package main\n\nfunc main() { notDefinedAnywhere() }\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	err := runCmd(context.Background(), []string{"-app", dir}, &out)
	if err == nil || !strings.Contains(err.Error(), "build") || !strings.Contains(out.String(), "notDefinedAnywhere") {
		t.Errorf("runCmd on a broken app: %v (output %q), want the build's error and the compiler's message", err, out.String())
	}
}
