package app

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/batonfn/baton/internal/engine/api"
	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/blobstore"
	"github.com/batonfn/baton/internal/engine/protocol"
	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/work"
)

// prodApp is the production wiring (config.Load, newApp) over the shared Azurite with the
// Storage-queue transport, unique containers and queues, and its ledger and control queue at
// hand for the test.
type prodApp struct {
	t       *testing.T
	hs      *httptest.Server
	store   *blobstore.Store
	control *azqueue.QueueClient
	work    *azqueue.QueueClient
}

// newProdApp serves jobs with env's settings on top of prodApp's; before (when set) runs on the
// ledger before the app starts; tweaks adjust the handler's Options last.
func newProdApp(t *testing.T, env map[string]string, jobs *work.Registry, before func(*blobstore.Store), tweaks ...func(*Options)) *prodApp {
	t.Helper()
	srv := azurite.Shared(t)
	settings := map[string]string{
		"FUNCTIONS_CUSTOMHANDLER_PORT": "7999",
		config.SettingHostStorage:      srv.ConnectionString(),
		config.SettingTransport:        "queue",
		config.SettingHeartbeat:        "0 * * * * *",
		config.SettingRunsContainer:    azurite.UniqueName(t, "runs"),
		config.SettingLeaseContainer:   azurite.UniqueName(t, "leases"),
		config.SettingWorkQueue:        azurite.UniqueName(t, "work"),
		config.SettingControlQueue:     azurite.UniqueName(t, "ctl"),
	}
	maps.Copy(settings, env)
	blobs, err := azclient.Blob(srv.Storage(), nil)
	if err != nil {
		t.Fatal(err)
	}
	queues, err := azclient.Queue(srv.Storage(), nil)
	if err != nil {
		t.Fatal(err)
	}
	runs := blobs.ServiceClient().NewContainerClient(settings[config.SettingRunsContainer])
	p := &prodApp{t: t, store: blobstore.New(runs, blobstore.Options{}),
		control: queues.NewQueueClient(settings[config.SettingControlQueue]), work: queues.NewQueueClient(settings[config.SettingWorkQueue])}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, _ = runs.Delete(ctx, nil)
		_, _ = blobs.ServiceClient().NewContainerClient(settings[config.SettingLeaseContainer]).Delete(ctx, nil)
		_, _ = p.control.Delete(ctx, nil)
		_, _ = p.work.Delete(ctx, nil)
	})
	if before != nil {
		if err := p.store.EnsureContainer(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		before(p.store)
	}
	cfg, err := config.Load(func(k string) string { return settings[k] })
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Jobs: jobs, Getenv: func(k string) string { return settings[k] }}
	for _, tweak := range tweaks {
		tweak(&o)
	}
	app, err := newApp(cfg, slog.New(slog.DiscardHandler), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Close(context.Background()) })
	p.hs = httptest.NewServer(app.server)
	t.Cleanup(p.hs.Close)
	return p
}

// postRun is POST /api/runs with body and, when key is not empty, an Idempotency-Key.
func (p *prodApp) postRun(key, body string) httpOut {
	p.t.Helper()
	return invokeHTTP(p.t, p.hs.URL, fnRuns, goldenHTTP(p.t, "http-runs-post.json", withBody(body), withKey(key)))
}

// runNow is POST /api/schedules/{schedule}/runs with an Idempotency-Key when key is not empty.
func (p *prodApp) runNow(schedule, key string) httpOut {
	p.t.Helper()
	return invokeHTTP(p.t, p.hs.URL, fnSchedules, goldenHTTP(p.t, "http-schedules-run.json", withPath(schedule+"/runs"), withKey(key)))
}

// withKey sets the Idempotency-Key header, or removes it when key is empty.
func withKey(key string) func(map[string]any) {
	return func(req map[string]any) {
		h := req["Headers"].(map[string]any)
		if key == "" {
			delete(h, "Idempotency-Key")
			return
		}
		h["Idempotency-Key"] = []any{key}
	}
}

// tick invokes the Tick function as the timer does.
func (p *prodApp) tick() {
	p.t.Helper()
	if resp, v := post(p.t, p.hs.URL+"/"+fnTick, "", golden(p.t, "timer.json")); resp.StatusCode != http.StatusOK {
		p.t.Fatalf("Tick: %d %v", resp.StatusCode, v)
	}
}

func (p *prodApp) runIDs() []string {
	p.t.Helper()
	var ids []string
	if err := p.store.ListRuns(testCtx(p.t), func(run string) bool { ids = append(ids, run); return true }); err != nil {
		p.t.Fatal(err)
	}
	return ids
}

// envelopes returns the messages visible on q, oldest first, without taking them.
func envelopes(t *testing.T, q *azqueue.QueueClient) []work.Envelope {
	t.Helper()
	resp, err := q.PeekMessages(testCtx(t), &azqueue.PeekMessagesOptions{NumberOfMessages: to.Ptr(int32(32))})
	if err != nil {
		t.Fatal(err)
	}
	var out []work.Envelope
	for _, m := range resp.Messages {
		body, err := base64.StdEncoding.DecodeString(*m.MessageText)
		if err != nil {
			t.Fatal(err)
		}
		env, err := work.DecodeEnvelope(body)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, env)
	}
	return out
}

// deliverControlUntil delivers the control queue's messages to the ControlQueue function, oldest
// first as the queue trigger takes them, until the check of run has been delivered; it returns
// how many checks of other runs went first.
func (p *prodApp) deliverControlUntil(run string) int {
	p.t.Helper()
	ctx := testCtx(p.t)
	for ahead := 0; ; {
		resp, err := p.control.DequeueMessages(ctx, &azqueue.DequeueMessagesOptions{NumberOfMessages: to.Ptr(int32(1)),
			VisibilityTimeout: to.Ptr(int32(600))})
		if err != nil {
			p.t.Fatal(err)
		}
		if len(resp.Messages) == 0 {
			p.t.Fatalf("the control queue ran dry before the check of %s (%d others delivered)", run, ahead)
		}
		m := resp.Messages[0]
		body, err := base64.StdEncoding.DecodeString(*m.MessageText)
		if err != nil {
			p.t.Fatal(err)
		}
		env, err := work.DecodeEnvelope(body)
		if err != nil {
			p.t.Fatal(err)
		}
		inv := protocol.InvokeRequest{
			Data: map[string]json.RawMessage{bindingMessage: protocol.EncodeStringData(string(body))},
			Metadata: map[string]json.RawMessage{"Id": protocol.QuoteMeta(*m.MessageID), "DequeueCount": protocol.IntMeta(1),
				"sys": protocol.SysMeta(fnControlQueue, time.Now(), "00000000-0000-4000-8000-000000000000")},
		}
		payload, _ := json.Marshal(inv)
		hr, err := http.Post(p.hs.URL+"/"+fnControlQueue, "application/json", bytes.NewReader(payload))
		if err != nil {
			p.t.Fatal(err)
		}
		raw, _ := io.ReadAll(hr.Body)
		hr.Body.Close()
		if hr.StatusCode != http.StatusOK {
			p.t.Fatalf("ControlQueue %s: %d %s", env.Run, hr.StatusCode, raw)
		}
		if _, err := p.control.DeleteMessage(ctx, *m.MessageID, *m.PopReceipt, nil); err != nil {
			p.t.Fatal(err)
		}
		if env.Run == run {
			return ahead
		}
		ahead++
	}
}

// A key holder floods the app with manual runs (ad-hoc runs of two jobs, runs now of the app's
// schedule, sequential and then concurrent), up to and beyond the caps BATON_MAX_MANUAL_RUNS=3
// and BATON_MAX_MANUAL_RUNS_PER_JOB=2: the caps' worth are accepted, every other one is answered
// 429 with Retry-After and a JSON error naming the cap, and nothing else is recorded. The
// schedule's next occurrence is then recorded and started by the one heartbeat that finds it
// due, its start check has only the accepted runs' checks ahead of it on the control queue, and
// once those are delivered its partitions have only the accepted runs' partitions ahead of them.
func TestNewApp_ManualFloodLeavesTheScheduleOnTime(t *testing.T) {
	jobs := builtinJobs()
	jobs.Register("synthetic-b", builtin(syntheticName))
	// The schedule tick fires every minute; its cursor stands a minute back, so the heartbeat
	// below finds exactly one occurrence due (the last whole minute) and starts it.
	p := newProdApp(t, map[string]string{
		config.SettingSchedule: "0 * * * * *", config.SettingJobParams: `{"partitions":2,"workMs":0}`,
		config.SettingManualJobs: config.AllJobs, config.SettingMaxManual: "3", config.SettingMaxManualJob: "2",
	}, jobs, func(s *blobstore.Store) {
		if _, err := s.UpdateSchedule(testCtx(t), "tick", func(st *ledger.ScheduleState) error {
			st.Cursor = time.Now().Add(-61 * time.Second).UTC()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	small := `{"job":"synthetic","params":{"partitions":2,"workMs":0}}`
	smallB := `{"job":"synthetic-b","params":{"partitions":2,"workMs":0}}`
	var accepted []string
	refused := func(what string, out httpOut, setting string) {
		t.Helper()
		v := out.json(t)
		msg, _ := v["error"].(map[string]any)["message"].(string)
		if out.Status != http.StatusTooManyRequests || errCode(v) != api.CodeTooManyRuns || out.Headers["Retry-After"] != "30" ||
			!strings.Contains(msg, setting) {
			t.Errorf("%s: %d %v %v; want 429 %s with Retry-After 30 naming %s", what, out.Status, v, out.Headers, api.CodeTooManyRuns, setting)
		}
	}
	for i := range 6 {
		out := p.postRun("", small)
		if i < 2 {
			if out.Status != http.StatusAccepted {
				t.Fatalf("synthetic %d: %d %s; want 202", i, out.Status, out.Body)
			}
			accepted = append(accepted, out.json(t)["run"].(string))
			continue
		}
		refused("a third synthetic run", out, config.SettingMaxManualJob+"=2")
	}
	out := p.postRun("", smallB)
	if out.Status != http.StatusAccepted {
		t.Fatalf("synthetic-b: %d %s; want 202", out.Status, out.Body)
	}
	accepted = append(accepted, out.json(t)["run"].(string))
	refused("a fourth manual run", p.postRun("", smallB), config.SettingMaxManual+"=3")
	// tick's job is synthetic, at its cap.
	refused("a run now of tick", p.runNow("tick", "flood-1"), config.SettingMaxManualJob+"=2")
	refused("a run now of tick through POST /api/runs", p.postRun("flood-2", ""), config.SettingMaxManualJob+"=2")
	// At once, beyond the caps: every one is refused, none recorded.
	flood := goldenHTTP(t, "http-runs-post.json", withBody(small), withKey(""))
	outs := make(chan httpOut, 12)
	for range cap(outs) {
		go func() { outs <- invokeHTTP(t, p.hs.URL, fnRuns, flood) }()
	}
	for range cap(outs) {
		refused("a concurrent synthetic run", <-outs, config.SettingMaxManual)
	}
	if ids := p.runIDs(); len(ids) != 3 {
		t.Fatalf("runs %v after the flood; want the 3 accepted", ids)
	}

	// The heartbeat records the occurrence and sends its start check within its own invocation.
	start := time.Now()
	p.tick()
	took := time.Since(start)
	if took > 10*time.Second {
		t.Errorf("the heartbeat took %s", took)
	}
	sv := invokeHTTP(t, p.hs.URL, fnSchedules, goldenHTTP(t, "http-schedules-get.json", withPath("tick"))).json(t)
	last, _ := sv["lastRun"].(map[string]any)
	occurrence, _ := last["run"].(string)
	if last["trigger"] != "timer" || last["state"] != "planning" || !strings.HasPrefix(occurrence, "tick-") {
		t.Fatalf("after the heartbeat tick's last run is %v; want its occurrence recorded and planning", sv["lastRun"])
	}
	// Its planning starts when its start check is delivered: behind the accepted runs' start
	// checks only (the host runs them side by side; here they go one by one, each waiting out
	// its planner's finish grace).
	ahead := p.deliverControlUntil(occurrence)
	if ahead > len(accepted) {
		t.Errorf("%d checks went before the occurrence's start check; want at most the %d accepted runs'", ahead, len(accepted))
	}
	m, err := p.store.ReadManifest(testCtx(t), occurrence)
	if err != nil || !m.PlanDone || m.Partitions != 2 {
		t.Fatalf("the occurrence after its start check: %+v, %v; want it planned", m, err)
	}
	t.Logf("the occurrence was recorded by its heartbeat in %s and planned behind %d checks", took, ahead)
	// On the work queue only the accepted runs' partitions are ahead of the occurrence's.
	envs := envelopes(t, p.work)
	first := slices.IndexFunc(envs, func(e work.Envelope) bool { return e.Run == occurrence })
	if first < 0 {
		t.Fatalf("no partition of %s on the work queue", occurrence)
	}
	for _, e := range envs[:first] {
		if !slices.Contains(accepted, e.Run) {
			t.Errorf("a partition of %s is ahead of the occurrence's; only the accepted runs' %v may be", e.Run, accepted)
		}
	}
}

// The finding: one Idempotency-Key with a job body started a run, then with an empty body
// (a run now of the schedule tick) a second one. A key now names one request: the same request
// answers its run, whatever the JSON's spelling; an empty body, a run now of tick, another job
// or other params are refused 422 naming the run. A run now's key is bound the same way.
func TestNewApp_IdempotencyKeyBoundToItsRequest(t *testing.T) {
	p := newProdApp(t, map[string]string{config.SettingSchedule: "0 0 3 * * *", config.SettingManualJobs: config.AllJobs}, builtinJobs(), nil)
	first := p.postRun("K", `{"job":"synthetic","params":{"partitions":1}}`)
	if first.Status != http.StatusAccepted {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	run := first.json(t)["run"].(string)
	if out := p.postRun("K", `{"params":{"partitions":1},"job":"synthetic"}`); out.Status != http.StatusOK || out.json(t)["run"] != run {
		t.Errorf("the same request: %d %s; want 200 with %s", out.Status, out.Body, run)
	}
	reused := func(what string, out httpOut, mentions ...string) {
		t.Helper()
		v := out.json(t)
		msg, _ := v["error"].(map[string]any)["message"].(string)
		if out.Status != http.StatusUnprocessableEntity || errCode(v) != api.CodeKeyReused || !strings.Contains(msg, mentions[0]) {
			t.Errorf("%s: %d %v; want 422 %s naming %s", what, out.Status, v, api.CodeKeyReused, mentions[0])
		}
		for _, m := range mentions[1:] {
			if !strings.Contains(msg, m) {
				t.Errorf("%s: the message %q does not say %q", what, msg, m)
			}
		}
	}
	reused("an empty body", p.postRun("K", ""), run, `a run now of schedule "tick"`)
	reused("a run now of tick", p.runNow("tick", "K"), run, `a run now of schedule "tick"`)
	reused("other params", p.postRun("K", `{"job":"synthetic","params":{"partitions":2}}`), run, "other params")
	reused("another job", p.postRun("K", `{"job":"inventory","params":{"container":"data"}}`), run)

	now := p.postRun("L", "")
	if now.Status != http.StatusAccepted {
		t.Fatalf("a run now with L: %d %s", now.Status, now.Body)
	}
	nowRun := now.json(t)["run"].(string)
	if out := p.runNow("tick", "L"); out.Status != http.StatusOK || out.json(t)["run"] != nowRun {
		t.Errorf("the same run now through its own endpoint: %d %s; want 200 with %s", out.Status, out.Body, nowRun)
	}
	reused("an ad-hoc run with a run now's key", p.postRun("L", `{"job":"synthetic","params":{"partitions":1}}`), nowRun, `an ad-hoc run of job "synthetic"`)
	if ids := p.runIDs(); len(ids) != 2 {
		t.Errorf("runs %v; want one per key", ids)
	}
}

// baton validate judges BATON_MANUAL_JOBS as the handler does (a job the app does not register
// fails, naming the setting) and the caps on manual runs.
func TestValidate_ManualRunSettings(t *testing.T) {
	run := func(kv ...string) (int, string) {
		env := map[string]string{config.SettingAppRoot: filepath.Join("..", "..")}
		for i := 0; i+1 < len(kv); i += 2 {
			env[kv[i]] = kv[i+1]
		}
		var out, errb bytes.Buffer
		code := validate(Options{Jobs: builtinJobs(), Getenv: func(k string) string { return env[k] }, Stdout: &out, Stderr: &errb})
		return code, out.String() + errb.String()
	}
	for _, ok := range [][]string{
		{config.SettingManualJobs, "inventory"}, {config.SettingManualJobs, config.AllJobs},
		{config.SettingMaxManual, "20", config.SettingMaxManualJob, "5"},
	} {
		if code, out := run(ok...); code != 0 {
			t.Errorf("%v: exit %d: %s", ok, code, out)
		}
	}
	for _, c := range []struct {
		kv   []string
		want string
	}{
		{[]string{config.SettingManualJobs, "synthetic,nightly"}, config.SettingManualJobs + `="synthetic,nightly" names "nightly"`},
		{[]string{config.SettingMaxManual, "0"}, config.SettingMaxManual + `="0"`},
		{[]string{config.SettingMaxManualJob, "many"}, config.SettingMaxManualJob + `="many"`},
	} {
		if code, out := run(c.kv...); code != 2 || !strings.Contains(out, c.want) {
			t.Errorf("%v: exit %d, output %q; want exit 2 mentioning %q", c.kv, code, out, c.want)
		}
	}
}
