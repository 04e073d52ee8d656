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

func TestSectionOf_AndFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	doc := "# Doc\n\n## A\nx\n## B\ny\n"
	if err := os.WriteFile(filepath.Join(dir, "docs", "d.md"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := File(dir, "docs/d.md"); err != nil || got != doc {
		t.Errorf("File = %q, %v", got, err)
	}
	if got, err := SectionOf(dir, "docs/d.md", "A"); err != nil || got != "## A\nx\n" {
		t.Errorf("SectionOf(A) = %q, %v", got, err)
	}
	if _, err := SectionOf(dir, "docs/d.md", "C"); err == nil || !strings.Contains(err.Error(), "docs/d.md") {
		t.Errorf("missing section: err = %v, want one naming the file", err)
	}
	if _, err := File(dir, "docs/none.md"); err == nil {
		t.Error("missing file: no error")
	}
}

func TestProse(t *testing.T) {
	prose, closed := Prose("a\n```sh\ncode\n```\nb\n")
	if prose != "a\nb\n\n" || !closed {
		t.Errorf("Prose = %q, %v", prose, closed)
	}
	if _, closed := Prose("a\n```\nopen\n"); closed {
		t.Error("an open fence reads as closed")
	}
}
