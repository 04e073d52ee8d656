// Package readme reads sections of the repository's README.md, so that tests can hold the
// documentation to the code it describes.
package readme

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Section returns the README section that starts with the level-2 heading "## <title>", up to
// the next level-2 heading outside a code fence (or the end of the file). The returned text
// starts with the heading line.
func Section(root, title string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		return "", err
	}
	var out []string
	in, fenced := false, false
	for _, line := range strings.Split(string(b), "\n") {
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
		return "", fmt.Errorf("README.md has no section %q", "## "+title)
	}
	return strings.Join(out, "\n") + "\n", nil
}
