// Package readme reads the repository's Markdown documents (README.md and docs/*.md), whole
// or by section, so that tests can hold the documentation to the code it describes.
package readme

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// File returns the document at name (a slash-separated path relative to root, such as
// "docs/api.md").
func File(root, name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// Section returns the README section that starts with the level-2 heading "## <title>", up to
// the next level-2 heading outside a code fence (or the end of the file). The returned text
// starts with the heading line.
func Section(root, title string) (string, error) {
	return SectionOf(root, "README.md", title)
}

// SectionOf is Section for the document at name (relative to root).
func SectionOf(root, name, title string) (string, error) {
	doc, err := File(root, name)
	if err != nil {
		return "", err
	}
	var out []string
	in, fenced := false, false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		if !fenced && strings.HasPrefix(line, "## ") {
			if in {
				break
			}
			in = strings.TrimSpace(strings.TrimPrefix(line, "## ")) == title
		}
		if in {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		return "", fmt.Errorf("%s has no section %q", name, "## "+title)
	}
	return strings.Join(out, "\n") + "\n", nil
}

// Prose returns doc without its fenced code blocks, and whether every fence was closed.
func Prose(doc string) (string, bool) {
	var b strings.Builder
	fenced := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			b.WriteString(line + "\n")
		}
	}
	return b.String(), !fenced
}
