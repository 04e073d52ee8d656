package app

import (
	"context"
	"encoding/base64"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/transport/storagequeue"
	"github.com/batonfn/baton/internal/tools/azurite"
)

// newTestApp serves the production wiring, built through config.Load over the shared Azurite:
// the Storage-queue transport, unique containers and work queue, a schedule, and env's
// settings on top.
func newTestApp(t *testing.T, env map[string]string) *httptest.Server {
	t.Helper()
	settings := map[string]string{
		"FUNCTIONS_CUSTOMHANDLER_PORT": "7999",
		config.SettingHostStorage:      azurite.Shared(t).ConnectionString(),
		config.SettingTransport:        "queue",
		config.SettingHeartbeat:        "0 * * * * *",
		config.SettingSchedule:         "0 0 3 * * *",
		config.SettingRunsContainer:    azurite.UniqueName(t, "runs"),
		config.SettingLeaseContainer:   azurite.UniqueName(t, "leases"),
		config.SettingWorkQueue:        azurite.UniqueName(t, "work"),
	}
	maps.Copy(settings, env)
	cfg, err := config.Load(func(k string) string { return settings[k] })
	if err != nil {
		t.Fatal(err)
	}
	app, err := newApp(cfg, slog.New(slog.DiscardHandler), Options{Jobs: builtinJobs(), Getenv: func(k string) string { return settings[k] }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Close(context.Background()) })
	hs := httptest.NewServer(app.server)
	t.Cleanup(hs.Close)
	return hs
}

// The production wiring counts the poison messages of the work and control queues: GET
// /api/leader lists both queues with their counts, and the dashboard shows them.
func TestNewApp_LeaderShowsDeadLetters(t *testing.T) {
	workQ, controlQ := azurite.UniqueName(t, "work"), azurite.UniqueName(t, "ctl")
	ctx := testCtx(t)
	poison := azurite.NewQueue(t, workQ+storagequeue.PoisonSuffix)
	if _, err := poison.Create(ctx, nil); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := poison.EnqueueMessage(ctx, base64.StdEncoding.EncodeToString([]byte(`{"v":1}`)), nil); err != nil {
			t.Fatal(err)
		}
	}
	hs := newTestApp(t, map[string]string{config.SettingWorkQueue: workQ, config.SettingControlQueue: controlQ})
	out := invokeHTTP(t, hs.URL, fnLeader, goldenHTTP(t, "http-leader.json"))
	v := out.json(t)
	if out.Status != http.StatusOK {
		t.Fatalf("GET /api/leader: %d %v", out.Status, v)
	}
	dl, _ := v["deadLetters"].([]any)
	if len(dl) != 2 {
		t.Fatalf("deadLetters = %v, want the work and the control queue", v["deadLetters"])
	}
	want := []struct {
		queue string
		count float64
	}{{workQ, 2}, {controlQ, 0}}
	for i, w := range want {
		q := dl[i].(map[string]any)
		if q["queue"] != w.queue || q["count"] != w.count || q["atLeast"] != false || q["error"] != "" {
			t.Errorf("deadLetters[%d] = %v, want queue %s count %v and no error", i, q, w.queue, w.count)
		}
	}

	browser := chromium(t)
	shim := newHostShim(t, hs.URL)
	dom := dumpDOM(t, browser, shim.srv.URL+"/api/dashboard")
	m := regexp.MustCompile(`<dd id="leader-deadletters">(.*?)</dd>`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("no dead-letter field in the dashboard:\n%s", dom)
	}
	text := regexp.MustCompile(`<[^>]+>`).ReplaceAllString(m[1], "")
	if want := workQ + ": 2, " + controlQ + ": 0"; text != want {
		t.Errorf("dashboard dead letters %q, want %q", text, want)
	}
}
