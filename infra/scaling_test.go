package infra_test

import (
	"regexp"
	"slices"
	"testing"
)

// TestBicep_ScaleMonitoringOwnsEveryTriggerQueue: target-based scaling of a Service Bus
// trigger reads its queue's message count, which needs the Manage right (Data Owner). Each
// queue a trigger listens on (work: Work; control: Control) gets Data Owner for the app, scoped
// to that queue alone and granted only with serviceBusScaleMonitoring.
func TestBicep_ScaleMonitoringOwnsEveryTriggerQueue(t *testing.T) {
	rbac := scanFile(t, "app/rbac.bicep")
	conditional := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^resource[ \t]+(\w+)[ \t]+'[^']+'[ \t]+=[ \t]+if \(serviceBusScaleMonitoring\)`).FindAllStringSubmatch(rbac.code, -1) {
		conditional[m[1]] = true
	}
	var scopes []string
	for _, g := range roleGrants(t, "app/rbac.bicep") {
		if g.role != "serviceBusDataOwner" {
			continue
		}
		if g.principal != "appPrincipalId" {
			t.Errorf("app/rbac.bicep: %s gives Data Owner to %s, want the app only", g.symbol, g.principal)
		}
		if !conditional[g.symbol] {
			t.Errorf("app/rbac.bicep: %s is not conditional on serviceBusScaleMonitoring", g.symbol)
		}
		scopes = append(scopes, g.scope)
	}
	slices.Sort(scopes)
	if want := []string{"sbControlQueue", "sbQueue"}; !slices.Equal(scopes, want) {
		t.Errorf("app/rbac.bicep: Data Owner is granted on %v, want exactly %v (the work and control queues)", scopes, want)
	}
	if _, ok := scanFile(t, "main.bicep").params()["serviceBusScaleMonitoring"]; !ok {
		t.Error("main.bicep: want the serviceBusScaleMonitoring parameter that turns the grants off")
	}
}
