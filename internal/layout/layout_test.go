// Package layout holds the tests of the package map itself: which packages may import what.
package layout

import (
	"os/exec"
	"strings"
	"testing"
)

// The domain packages — and the plain settings and contracts they build on — link no Azure SDK:
// only the adapters (election/bloblease, ledger/blobstore, transport/storagequeue,
// transport/servicebus, work/inventory's own reads) and the process wiring (handler,
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
