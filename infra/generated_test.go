package infra_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/batonfn/baton/config"
	"github.com/batonfn/baton/internal/azurite"
	"github.com/batonfn/baton/internal/scaffold/scaffoldtest"
	"github.com/batonfn/baton/ledger"
)

// TestDeployedDefaults_GeneratedApp: `azd up` with nothing set deploys an app written by `baton
// init` whose first timer occurrence runs its own job. The app is generated into a temporary
// folder (its go.mod replacing Baton with this checkout) and built as its package script
// builds it; the test then reads the app settings from the generated infra/ exactly as
// TestDeployedDefaults_FirstOccurrenceRuns reads Baton's, and runs the generated binary with
// them.
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
	q := createTemplateResources(t, ctx, srv)
	env := deployedAppSettings(t, srv, freeLoopbackPort(t))
	if env[config.SettingAppRoot] != app {
		t.Fatalf("app root %s, want the generated app %s", env[config.SettingAppRoot], app)
	}
	h := startBinary(t, ctx, exe, env)
	h.tick()
	m := h.deliverUntilFinal(ctx, q, runsStore(t, srv), goldenTimerRun)
	if m.State != ledger.StateSucceeded || m.Trigger != ledger.TriggerTimer || m.Job != "primes" || m.Partitions == 0 {
		t.Fatalf("run %s: state %s, trigger %s, job %s, %d partitions (reason %q); want a succeeded timer run of the app's own job primes (BATON_JOB deployed as %q)",
			m.RunID, m.State, m.Trigger, m.Job, m.Partitions, m.Reason, env[config.SettingJob])
	}
}
