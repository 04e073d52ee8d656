package readme

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSection(t *testing.T) {
	dir := t.TempDir()
	doc := "# T\n\n## One\na\n```sh\n## not a heading\n```\n## Two\nb\n"
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	one, err := Section(dir, "One")
	if err != nil || !strings.Contains(one, "## not a heading") || strings.Contains(one, "## Two") {
		t.Errorf("Section(One) = %q, %v", one, err)
	}
	two, err := Section(dir, "Two")
	if err != nil || two != "## Two\nb\n\n" {
		t.Errorf("Section(Two) = %q, %v", two, err)
	}
	if _, err := Section(dir, "Three"); err == nil {
		t.Error("missing section: no error")
	}
}
