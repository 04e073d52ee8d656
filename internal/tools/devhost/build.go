package devhost

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Build compiles an app's custom handler the way its users' `go build` would: `go build
// -trimpath -o <exe> <pkg>` run in appRoot, where exe is host.json's defaultExecutablePath
// (relative to its workingDirectory, as the host resolves it) and pkg the main package, "."
// (the app root) when empty. The go command's output goes to out. It returns the binary's path,
// ready for Options.Executable.
func Build(ctx context.Context, appRoot, pkg string, out io.Writer) (string, error) {
	root, err := filepath.Abs(appRoot)
	if err != nil {
		return "", err
	}
	hc, err := ReadHostConfig(root)
	if err != nil {
		return "", err
	}
	exe := hc.Executable
	if exe == "" || strings.Contains(exe, "%") {
		return "", fmt.Errorf("build: host.json's defaultExecutablePath %q is not a plain file name: build the handler yourself and pass its path", exe)
	}
	dir := root
	if wd := hc.WorkingDirectory; wd != "" {
		dir = wd
		if !filepath.IsAbs(wd) {
			dir = filepath.Join(root, wd)
		}
	}
	if !filepath.IsAbs(exe) {
		exe = filepath.Join(dir, exe)
	}
	if pkg == "" {
		pkg = "."
	}
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	cmd := exec.CommandContext(ctx, goCmd, "build", "-trimpath", "-o", exe, pkg)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build %s from %s in %s: %w", exe, pkg, root, err)
	}
	return exe, nil
}
