package infra_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/batonfn/baton/internal/engine/config"
)

// TestBicep_QueueRolesFollowTheTransport: the app gets Storage Queue Data Contributor, and the
// Storage queues exist, only under the Storage-queue transport; the template deploys Service
// Bus, so main.bicep's switch must say so too.
func TestBicep_QueueRolesFollowTheTransport(t *testing.T) {
	rbac := scanFile(t, "app/rbac.bicep")
	conditional := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^resource[ \t]+(\w+)[ \t]+'[^']*'[ \t]*=[ \t]*if[ \t]*\([ \t]*storageQueueTransport[ \t]*\)`).FindAllStringSubmatch(rbac.code, -1) {
		conditional[m[1]] = true
	}
	n := 0
	for _, g := range roleGrants(t, "app/rbac.bicep") {
		if g.role != "storageQueueDataContributor" {
			continue
		}
		n++
		if !conditional[g.symbol] {
			t.Errorf("app/rbac.bicep: %s grants %s unconditionally, want `= if (storageQueueTransport)`", g.symbol, g.role)
		}
	}
	if n == 0 {
		t.Error("app/rbac.bicep: no Storage Queue Data Contributor grant found; the Storage-queue transport needs one")
	}
	if p, ok := rbac.params()["storageQueueTransport"]; !ok || p.Default != "false" {
		t.Errorf("app/rbac.bicep: want param storageQueueTransport bool = false, got %+v", p)
	}

	main := scanFile(t, "main.bicep")
	transport := ""
	for _, e := range scanFile(t, "app/api.bicep").settingsObjects()["batonSettings"] {
		if e.Key == config.SettingTransport {
			transport, _ = literal(e.Value)
		}
	}
	want := map[string]string{string(config.TransportServiceBus): "false", string(config.TransportQueue): "true"}[transport]
	if want == "" {
		t.Fatalf("app/api.bicep: %s is %q, want a literal transport", config.SettingTransport, transport)
	}
	if got := main.vars()["storageQueueTransport"]; got != want {
		t.Errorf("main.bicep: storageQueueTransport = %q, want %s for %s=%s", got, want, config.SettingTransport, transport)
	}
	if !regexp.MustCompile(`storageQueueTransport:\s*storageQueueTransport`).MatchString(main.code) {
		t.Error("main.bicep: the rbac module must get storageQueueTransport")
	}
	if !regexp.MustCompile(`queueNames:\s*storageQueueTransport\s*\?`).MatchString(main.code) {
		t.Error("main.bicep: the storage module's queueNames must be empty unless storageQueueTransport")
	}
}

// TestBicep_RunsSoftDelete: a blob of the runs container deleted or overwritten by mistake, or
// the container itself, can be restored (docs/deploy.md says how).
func TestBicep_RunsSoftDelete(t *testing.T) {
	s := scanFile(t, "app/storage.bicep")
	var body string
	for _, r := range s.resources() {
		if r.Type == "Microsoft.Storage/storageAccounts/blobServices" && !r.Existing {
			body = r.Body
		}
	}
	if body == "" {
		t.Fatal("app/storage.bicep declares no blobServices")
	}
	for _, policy := range []string{"deleteRetentionPolicy", "containerDeleteRetentionPolicy"} {
		re := regexp.MustCompile(policy + `:\s*\{\s*enabled:\s*true\s+days:\s*(\w+)\s*\}`)
		m := re.FindStringSubmatch(body)
		if m == nil {
			t.Errorf("app/storage.bicep: blobServices must set %s { enabled: true, days: … }", policy)
			continue
		}
		if p, ok := s.params()[m[1]]; !ok || p.Default == "" || p.Default == "0" {
			t.Errorf("app/storage.bicep: %s days = %s, want a parameter with a default of at least 1", policy, m[1])
		}
	}
	deploy := readFile(t, repoRoot(t)+"/docs/deploy.md")
	for _, want := range []string{"az storage blob undelete", "az storage container restore", "## Private endpoints"} {
		if !strings.Contains(deploy, want) {
			t.Errorf("docs/deploy.md does not mention %q", want)
		}
	}
}

// TestBicep_InventoryReadsOnlyWhatItIsGiven: the inventory job's connection exists only when
// an account is named, and the app gets Storage Blob Data Reader on the named containers of
// that account and nothing else there.
func TestBicep_InventoryReadsOnlyWhatItIsGiven(t *testing.T) {
	grants := roleGrants(t, "app/inventory-reader.bicep")
	if len(grants) == 0 {
		t.Fatal("app/inventory-reader.bicep grants nothing")
	}
	for _, g := range grants {
		if g.role != "storageBlobDataReader" || g.principal != "appPrincipalId" || !strings.HasPrefix(g.scope, "containers[") {
			t.Errorf("app/inventory-reader.bicep: %s gives %s %s on %s, want the app Storage Blob Data Reader on a named container",
				g.symbol, g.principal, g.role, g.scope)
		}
	}
	api := scanFile(t, "app/api.bicep")
	objects := api.settingsObjects()
	found := false
	for name, entries := range objects {
		for _, e := range entries {
			if e.Key == config.SettingInventory {
				found = true
				if name != "inventorySettings" {
					t.Errorf("app/api.bicep: %s is set in %s, want it only in inventorySettings", e.Key, name)
				}
			}
		}
	}
	if !found {
		t.Errorf("app/api.bicep never sets %s", config.SettingInventory)
	}
	if !regexp.MustCompile(`empty\(inventoryStorageAccountId\)\s*\?\s*\{\}\s*:\s*inventorySettings`).MatchString(api.code) {
		t.Error("app/api.bicep: inventorySettings must apply only when inventoryStorageAccountId is set")
	}
	main := scanFile(t, "main.bicep")
	if !regexp.MustCompile(`module inventoryReader 'app/inventory-reader.bicep' = if \(inventoryShared\)`).MatchString(main.code) {
		t.Error("main.bicep: the inventory grants must be deployed only when an inventory account is named")
	}
}
