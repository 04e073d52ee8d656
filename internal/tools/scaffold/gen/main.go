// Command gen copies Baton's own files listed in scaffold.Copied into internal/scaffold/files,
// from the repository root: run by `go generate ./internal/tools/scaffold`.
package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/batonfn/baton/internal/tools/scaffold"
)

func main() {
	if err := run("../../..", "files"); err != nil {
		slog.Error("scaffold gen", "err", err)
		os.Exit(1)
	}
}

func run(root, out string) error {
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	for _, rel := range scaffold.Copied {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return fmt.Errorf("copy %s: %w", rel, err)
		}
		dst := filepath.Join(out, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
