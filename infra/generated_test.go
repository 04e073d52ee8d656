package infra_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/internal/tools/scaffold/scaffoldtest"
)

// TestDeployedDefaults_GeneratedApp: `azd up` with nothing set deploys an app written by `baton
// init` that passes its preprovision check, declares in code one schedule of its own job and
// nothing from the settings (BATON_SCHEDULE is empty), and whose first due occurrence runs the
// job to the end. The app is generated into a temporary folder (its go.mod replacing Baton with
// this checkout) and built as its package script builds it; the test then reads the app
// settings from the generated infra/ exactly as TestDeployedDefaults_FirstOccurrenceRuns reads
// Baton's, and runs the generated binary with them.
func TestDeployedDefaults_GeneratedApp(t *testing.T) {
	if testing.Short() {
		t.Skip("generates and builds an app")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*deployTestTimeout)
	defer cancel()
	app := scaffoldtest.App(t, "example.com/team/nightly")
	hc := struct {
		CustomHandler struct {
			Description struct {
				DefaultExecutablePath string `json:"defaultExecutablePath"`
			} `json:"description"`
		} `json:"customHandler"`
	}{}
	readJSON(t, filepath.Join(app, "host.json"), &hc)
	exe := filepath.Join(app, hc.CustomHandler.Description.DefaultExecutablePath)
	scaffoldtest.Go(t, ctx, app, "build", "-o", exe, ".")
	srv := azurite.Private(t, azurite.Options{}) // Baton's pinned Azurite, found from here
	t.Chdir(filepath.Join(app, "infra"))         // the helpers read main.bicep and app/ from the current folder
	qs := createTemplateResources(t, ctx, srv)
	env := deployedAppSettings(t, srv, freeLoopbackPort(t))
	if env[config.SettingAppRoot] != app {
		t.Fatalf("app root %s, want the generated app %s", env[config.SettingAppRoot], app)
	}
	if env[config.SettingSchedule] != "" {
		t.Errorf("the generated template deploys %s=%q, want none: the app declares its schedules in code", config.SettingSchedule, env[config.SettingSchedule])
	}
	s := onlySchedule(t, validateDeployed(t, ctx, exe, env), "nightly", "primes")
	store := runsStore(t, srv)
	occ := makeDue(t, ctx, store, env, s)
	h := startBinary(t, ctx, exe, env)
	h.tick()
	m := h.deliverUntilFinal(ctx, qs, store, ledger.ScheduleRunID(s.Name, occ))
	if m.State != ledger.StateSucceeded || m.Trigger != ledger.TriggerTimer || m.Schedule != s.Name || m.Job != "primes" || m.Partitions == 0 {
		t.Fatalf("run %s: state %s, trigger %s, schedule %s, job %s, %d partitions (reason %q); want a succeeded run of the schedule %s of the app's own job primes",
			m.RunID, m.State, m.Trigger, m.Schedule, m.Job, m.Partitions, m.Reason, s.Name)
	}
}
