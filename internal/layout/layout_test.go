// Package layout holds the tests of the package map itself: which packages may import what.
package layout

import (
	"os/exec"
	"strings"
	"testing"
)

// The domain packages — and the plain settings and contracts they build on — link no Azure SDK:
// only the adapters (election/bloblease, ledger/blobstore, transport/storagequeue,
// transport/servicebus, work/inventory's own reads) and the process wiring (internal/app,
// internal/azclient) do.
func TestDomainPackagesImportNoSDK(t *testing.T) {
	domain := []string{"api", "config", "coordinator", "election", "ledger", "protocol", "transport", "work", "work/synthetic"}
	args := []string{"list", "-deps", "-f", "{{.ImportPath}}"}
	for _, p := range domain {
		args = append(args, "github.com/batonfn/baton/"+p)
	}
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/Azure/azure-sdk-for-go/") {
			t.Errorf("a domain package depends on %s (go list -deps %s)", dep, strings.Join(domain, " "))
		}
	}
}

// The reference app (handler) is written only against the public API, as a user's app is: it
// imports the root package and the built-in jobs, nothing else of Baton's and no SDK.
func TestHandlerUsesOnlyThePublicAPI(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, "github.com/batonfn/baton/handler").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	allowed := map[string]bool{
		"github.com/batonfn/baton":                true,
		"github.com/batonfn/baton/work/synthetic": true,
		"github.com/batonfn/baton/work/inventory": true,
	}
	for _, imp := range strings.Fields(string(out)) {
		if !strings.Contains(strings.SplitN(imp, "/", 2)[0], ".") {
			continue // the standard library
		}
		if !allowed[imp] {
			t.Errorf("handler imports %s; the reference app may import only the root package and the built-in jobs", imp)
		}
	}
}
