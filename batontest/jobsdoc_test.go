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
	testModule(t, "example.com/primes", map[string]string{
		"main.go": first[0],
		"primes.go": "package main\n\nimport (\n\t\"context\"\n\t\"errors\"\n\t\"iter\"\n\t\"strconv\"\n\n\t\"github.com/batonfn/baton\"\n)\n\n" +
			first[1],
		"primes_test.go": "package main\n\nimport (\n\t\"testing\"\n\n\t\"github.com/batonfn/baton/batontest\"\n)\n\n" + test[0],
	})
}

// testModule writes files beside a go.mod requiring this Baton as module name, and runs its
// tests, which must pass.
func testModule(t *testing.T, name string, files map[string]string) {
	t.Helper()
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
	files["go.mod"] = "module " + name + "\n\ngo " + goVersion[1] + "\n\nrequire github.com/batonfn/baton v0.0.0\n\n" +
		"replace github.com/batonfn/baton => " + root + "\n"
	files["go.sum"] = string(sum)
	for file, text := range files {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(text), 0o644); err != nil {
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
		t.Fatalf("go test of %s from docs/jobs.md: %v\n%s", name, err, out)
	}
}

// contactsJob is the job docs/jobs.md's test under a limit checks: it syncs pages of contacts
// from a CRM and slows down when the CRM answers 429.
const contactsJob = `package contacts

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"strconv"
	"time"

	"github.com/batonfn/baton"
)

type ContactParams struct{ Pages int }

func contactsJob(crm string) baton.Job {
	return baton.TypedJob(
		func(ctx context.Context, p ContactParams, cursor string, emit func(int, string) error) error {
			start, _ := strconv.Atoi(cursor) // "" is the start
			for page := start; page < p.Pages; page++ {
				if err := emit(page, strconv.Itoa(page+1)); err != nil {
					return err
				}
			}
			return nil
		},
		func(ctx context.Context, part baton.Part[ContactParams, int]) (int, error) {
			url := fmt.Sprintf("%s/contacts?page=%d", crm, part.Payload)
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return 0, baton.Permanent(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return 0, err
			}
			defer resp.Body.Close()
			if resp.StatusCode == http.StatusTooManyRequests {
				d, _ := time.ParseDuration(resp.Header.Get("Retry-After") + "s")
				return 0, baton.SlowDown(d, fmt.Errorf("GET %s: %s", url, resp.Status))
			}
			if resp.StatusCode != http.StatusOK {
				return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
			}
			return 1, nil
		},
		func(ctx context.Context, run baton.RunOf[ContactParams], results iter.Seq2[baton.Outcome[int], error]) (int, error) {
			synced := 0
			for r, err := range results {
				if err != nil {
					return 0, err
				}
				synced += r.Output
			}
			return synced, nil
		})
}
`

// The test under a limit in docs/jobs.md's Limits section compiles and passes against a job
// that slows down on the CRM's 429.
func TestJobsDoc_LimitTestPasses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module of its own")
	}
	var test string
	for _, b := range docBlocks(t, "Limits: protect what your jobs call") {
		if strings.Contains(b, "batontest.UnderLimit") {
			test = b
		}
	}
	if test == "" {
		t.Fatal("docs/jobs.md: no test with batontest.UnderLimit under \"Limits: protect what your jobs call\"")
	}
	testModule(t, "example.com/contacts", map[string]string{
		"contacts.go": contactsJob,
		"contacts_test.go": "package contacts\n\nimport (\n\t\"fmt\"\n\t\"net/http\"\n\t\"net/http/httptest\"\n\t\"sync/atomic\"\n\t\"testing\"\n\t\"time\"\n\n" +
			"\t\"github.com/batonfn/baton\"\n\t\"github.com/batonfn/baton/batontest\"\n)\n\n" + test,
	})
}
