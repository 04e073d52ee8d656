package batontest_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/tools/readme"
)

// goBlock matches a ```go code block.
var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

// docBlocks returns the go code blocks of a section of docs/jobs.md.
func docBlocks(t *testing.T, title string) []string {
	t.Helper()
	sec, err := readme.SectionOf("..", "docs/jobs.md", title)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range goBlock.FindAllStringSubmatch(sec, -1) {
		out = append(out, m[1])
	}
	return out
}

// The first job in docs/jobs.md is a working app: its main.go, its job and its batontest test
// compile as a module of their own that requires Baton, and the test passes.
func TestJobsDoc_FirstJobBuildsAndPassesItsTest(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module of its own")
	}
	first, test := docBlocks(t, "Your first job"), docBlocks(t, "Test it with batontest")
	if len(first) != 2 || len(test) != 1 {
		t.Fatalf("docs/jobs.md: want main.go and the job under \"Your first job\" and one test block; got %d and %d", len(first), len(test))
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	goMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(string(goMod))
	if goVersion == nil {
		t.Fatal("go.mod has no go line")
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/primes\n\ngo " + goVersion[1] + "\n\nrequire github.com/batonfn/baton v0.0.0\n\n" +
			"replace github.com/batonfn/baton => " + root + "\n",
		"go.sum":  string(sum),
		"main.go": first[0],
		"primes.go": "package main\n\nimport (\n\t\"context\"\n\t\"errors\"\n\t\"iter\"\n\t\"strconv\"\n\n\t\"github.com/batonfn/baton\"\n)\n\n" +
			first[1],
		"primes_test.go": "package main\n\nimport (\n\t\"testing\"\n\n\t\"github.com/batonfn/baton/batontest\"\n)\n\n" + test[0],
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-mod=mod", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok") {
		t.Fatalf("go test of the docs/jobs.md app: %v\n%s", err, out)
	}
}
