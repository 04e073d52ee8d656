package main

import (
	"os/exec"
	"strings"
	"testing"
)

// Every job and schedule the app declares is accepted, and the table covers every overlap
// policy.
func TestApp_DeclaresItsSchedules(t *testing.T) {
	if err := newApp().Err(); err != nil {
		t.Fatalf("the app's registrations: %v", err)
	}
	policies := map[string]bool{}
	for _, s := range schedules {
		policies[string(s.Overlap)] = true
	}
	if len(policies) != 3 {
		t.Errorf("the schedules cover the overlap policies %v, want all three", policies)
	}
}

// The app is written only against the public API, as a user's app is: the root package and the
// built-in synthetic job, nothing else of Baton's and no SDK.
func TestApp_UsesOnlyThePublicAPI(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, "github.com/batonfn/baton/internal/tools/e2eapp").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	allowed := map[string]bool{"github.com/batonfn/baton": true, "github.com/batonfn/baton/work/synthetic": true}
	for _, imp := range strings.Fields(string(out)) {
		if strings.Contains(strings.SplitN(imp, "/", 2)[0], ".") && !allowed[imp] {
			t.Errorf("e2eapp imports %s; it may import only the root package and the built-in jobs", imp)
		}
	}
}
