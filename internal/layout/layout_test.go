// Package layout holds the tests of the package map itself: which layer each package is in, and
// that no package imports one from a layer above it.
package layout

import (
	"os/exec"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/batonfn/baton"

// The layers, bottom first. A package may import packages of its own layer and the layers below,
// never one above. The first matching prefix decides (longest first); test files are not checked
// (a test sits above everything it tests).
//
//	lib     helpers that know nothing of Baton: cron, caches, fan-out, JSON params, latency
//	engine  the exactly-once machinery: settings, ledger, leases, transports, API, coordinator, worker
//	app     the handler process that wires the engine to the Functions host
//	public  what an app imports: package baton and its test kit
//	jobs    Baton's built-in jobs, written against the public API as an app's jobs are
//	top     the apps, commands, local host, soak, scaffold, benchmarks and end-to-end tests
var layers = []struct {
	name     string
	prefixes []string
}{
	{"lib", []string{"internal/lib/"}},
	{"engine", []string{"internal/engine/", "coordinator", "work"}},
	{"app", []string{"internal/app"}},
	{"public", []string{"", "batontest", "internal/enginejob"}},
	{"jobs", []string{"work/synthetic", "work/inventory"}},
	{"top", []string{"handler", "cmd/", "internal/tools/", "internal/e2e", "internal/bench", "internal/layout", "examples", "infra"}},
}

// layerOf returns the layer index of a package path relative to the module ("" is the root).
func layerOf(rel string) (int, bool) {
	best, bestLen := -1, -1
	for i, l := range layers {
		for _, p := range l.prefixes {
			match := rel == p || (p == "" && rel == "") ||
				(p != "" && strings.HasSuffix(p, "/") && strings.HasPrefix(rel, p)) ||
				(p != "" && !strings.HasSuffix(p, "/") && strings.HasPrefix(rel, p+"/"))
			if match && len(p) > bestLen {
				best, bestLen = i, len(p)
			}
		}
	}
	return best, best >= 0
}

// packages maps each package of the module (relative path) to its non-test imports of the module.
func packages(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	pkgs := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		var imps []string
		for _, imp := range f[1:] {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				imps = append(imps, rel(imp))
			}
		}
		pkgs[rel(f[0])] = imps
	}
	return pkgs
}

func rel(path string) string { return strings.TrimPrefix(strings.TrimPrefix(path, module), "/") }

func TestLayers_NoUpwardImport(t *testing.T) {
	pkgs := packages(t)
	if len(pkgs) < 30 {
		t.Fatalf("go list found %d packages: too few to be this module", len(pkgs))
	}
	for p, imps := range pkgs {
		lp, ok := layerOf(p)
		if !ok {
			t.Errorf("package %q is in no layer: add it to the map in this test", p)
			continue
		}
		for _, imp := range imps {
			li, ok := layerOf(imp)
			if ok && li > lp {
				t.Errorf("%s (layer %s) imports %s (layer %s, above it)", show(p), layers[lp].name, show(imp), layers[li].name)
			}
		}
	}
}

func show(rel string) string {
	if rel == "" {
		return "baton (the root)"
	}
	return rel
}

// The map itself is checked against known placements, so a prefix typo cannot make every
// package land in one layer and the test pass vacuously.
func TestLayers_Map(t *testing.T) {
	for p, want := range map[string]string{
		"": "public", "batontest": "public", "internal/lib/ncrontab": "lib", "internal/engine/ledger/blobstore": "engine",
		"coordinator": "engine", "work": "engine", "work/synthetic": "jobs", "internal/app": "app", "handler": "top",
		"internal/tools/devhost": "top", "cmd/baton": "top", "workers": "", "internal/applied": "",
	} {
		i, ok := layerOf(p)
		got := ""
		if ok {
			got = layers[i].name
		}
		if got != want {
			t.Errorf("layerOf(%q) = %q, want %q", p, got, want)
		}
	}
}

// The public surface: outside internal/ are only the root, its test kit, the design card's
// folders (handler, coordinator, work and the built-in jobs under it, infra's tests), the
// commands and the example apps' test.
func TestPublicPackages(t *testing.T) {
	allowed := map[string]bool{"": true, "batontest": true, "handler": true, "coordinator": true, "work": true,
		"work/synthetic": true, "work/inventory": true, "infra": true, "examples": true, "cmd/baton": true, "cmd/devhost": true}
	var extra []string
	for p := range packages(t) {
		if !allowed[p] && !strings.HasPrefix(p, "internal/") && !strings.HasSuffix(p, "/internal") && !strings.Contains(p, "/internal/") {
			extra = append(extra, p)
		}
	}
	sort.Strings(extra)
	if len(extra) > 0 {
		t.Errorf("packages outside internal/ that are not part of the public surface: %v", extra)
	}
}

// The engine, the lib and the plain settings link no Azure SDK: only the adapters (bloblease,
// blobstore, the two transports, azclient, deadletter), the process wiring (internal/app) and
// the inventory job's own reads do.
func TestDomainPackagesImportNoSDK(t *testing.T) {
	domain := []string{"internal/engine/api", "internal/engine/config", "coordinator", "internal/engine/election", "internal/engine/ledger",
		"internal/engine/protocol", "internal/engine/transport", "work"}
	args := []string{"list", "-deps", "-f", "{{.ImportPath}}"}
	for _, p := range domain {
		args = append(args, module+"/"+p)
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

// The reference app, the built-in jobs and the test kit are written only against the public
// API, as a user's app is: the root package (and the jobs, for the app), nothing else of Baton's.
func TestPublicImports(t *testing.T) {
	pkgs := packages(t)
	for p, allowed := range map[string][]string{
		"handler":        {"", "work/synthetic", "work/inventory"},
		"work/synthetic": {""},
		"work/inventory": {""},
	} {
		ok := map[string]bool{}
		for _, a := range allowed {
			ok[a] = true
		}
		for _, imp := range pkgs[p] {
			if !ok[imp] {
				t.Errorf("%s imports %s; it may import only %v of Baton", p, show(imp), allowed)
			}
		}
	}
}
