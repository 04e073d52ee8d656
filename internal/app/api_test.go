package app

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/api"
	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/election/bloblease"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/blobstore"
	"github.com/batonfn/baton/internal/engine/limit"
	"github.com/batonfn/baton/internal/engine/limit/limitblob"
	"github.com/batonfn/baton/internal/engine/protocol"
	"github.com/batonfn/baton/internal/engine/transport/storagequeue"
	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/work"
)

// apiEnv is the handler wired as newApp wires it, over a fresh leases container, runs
// container and work queue on the shared Azurite, with the Storage-queue transport (check
// messages travel on the work queue), and three schedules (testSchedules).
type apiEnv struct {
	t      testing.TB
	hs     *httptest.Server
	store  *blobstore.Store
	queue  *azqueue.QueueClient
	leases *coordinatorParts
	logs   *syncBuffer
	coord  *coordinator.Coordinator
	// limiter writes the state of the limit testLimit, which the synthetic job runs under.
	limiter *limit.Limiter
}

// coordinatorParts lets a test add a second contender for the same lease.
type coordinatorParts struct {
	lock *bloblease.BlobLock
}

const testLeaseDuration = 15 * time.Second

// testLimit is the limit the test app's synthetic job runs under.
const testLimit = "crm"

// testTraceURL is the env's BATON_TRACE_URL: a run recorded with a trace links to it.
const testTraceURL = "http://jaeger.test/trace/{trace}"

// testSchedules are the test app's schedules, as an app declares them: nightly at 03:00 in
// Berlin (overlap skip), hourly in UTC (buffer-one), reports at 09:30 on weekdays in New York
// (allow; apiEnv pauses it as BATON_SCHEDULES would).
var testSchedules = []Schedule{
	{Name: "nightly", Job: syntheticName, Cron: "0 0 3 * * *", TimeZone: "Europe/Berlin", Params: json.RawMessage(`{"partitions":2}`),
		Overlap: "skip", CatchUp: config.DefaultCatchUp},
	{Name: "hourly", Job: syntheticName, Cron: "0 0 * * * *", Params: json.RawMessage(`{"partitions":1}`), Overlap: "buffer-one",
		CatchUp: config.DefaultCatchUp},
	{Name: "reports", Job: syntheticName, Cron: "0 30 9 * * 1-5", TimeZone: "America/New_York", Params: json.RawMessage(`{"partitions":3}`),
		Overlap: "allow", CatchUp: 30 * time.Minute},
}

// envWithoutSchedule wires the API without the scheduler (as newAPI does when no
// withSchedules option is given).
type envWithoutSchedule struct{}

func newAPIEnv(t testing.TB, opts ...envWithoutSchedule) *apiEnv {
	t.Helper()
	srv := azurite.Shared(t)
	blobs, err := azclient.Blob(srv.Storage(), nil)
	if err != nil {
		t.Fatal(err)
	}
	qs, err := azclient.Queue(srv.Storage(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	leases := blobs.ServiceClient().NewContainerClient(azurite.UniqueName(t, "leases"))
	runs := blobs.ServiceClient().NewContainerClient(azurite.UniqueName(t, "runs"))
	q := qs.NewQueueClient(azurite.UniqueName(t, "work"))
	if _, err := leases.Create(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Create(ctx, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, _ = leases.Delete(ctx, nil)
		_, _ = runs.Delete(ctx, nil)
		_, _ = q.Delete(ctx, nil)
	})

	logs := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	lock, err := bloblease.NewBlobLock(leases, "leader", bloblease.BlobLockOptions{Duration: testLeaseDuration, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	runLock := func(name string) (election.Lock, error) {
		return bloblease.NewBlobLock(leases, name, bloblease.BlobLockOptions{Duration: testLeaseDuration, Logger: logger})
	}
	id := ledger.Holder{App: "baton-test", Instance: "inst-a", PID: 101}
	leader, err := election.NewLeader(election.LeaderConfig{Lock: lock, Locks: runLock, Identity: id, LeaseDuration: testLeaseDuration, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	store := blobstore.New(runs, blobstore.Options{})
	jobs := work.NewRegistry()
	jobs.Register(syntheticName, builtin(syntheticName))
	// The synthetic job names testLimit, whose settings BATON_LIMITS raises. The worker has no
	// limiter, so runs never wait on it; the tests write its state through e.limiter.
	jobs.SetLimit(syntheticName, limit.Spec{Name: testLimit, MaxInFlight: 2})
	overrides := map[string]limit.Spec{testLimit: {Name: testLimit, MaxInFlight: 4}}
	if err := applyLimits(config.Config{Limits: overrides}, jobs); err != nil {
		t.Fatal(err)
	}
	limiter, err := limit.New(limit.Config{Store: limitblob.New(runs, nil), Holder: "inst-a/101", Lease: testLeaseDuration})
	if err != nil {
		t.Fatal(err)
	}
	worker := mustWorker(t, work.WorkerConfig{Store: store, Jobs: jobs, Holder: id, MaxDeliveries: 5, Logger: logger})
	var schedules []coordinator.Schedule
	paused := true
	for _, d := range testSchedules {
		var ov config.ScheduleOverride
		if d.Name == "reports" {
			ov.Paused = &paused
		}
		s, err := schedule(d, ov, jobs)
		if err != nil {
			t.Fatal(err)
		}
		schedules = append(schedules, s)
	}
	coord, err := coordinator.New(coordinator.Config{
		Leader: leader, Store: store, Sender: storagequeue.NewQueueSender(q, storagequeue.QueueSenderOptions{}), Jobs: jobs, Finisher: worker,
		Identity: id, Schedules: schedules, HeartbeatPeriod: time.Minute, BatchSize: 100, RunTimeout: time.Hour, CheckRounds: 1, Logger: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(logger, 2*time.Minute, newInvocationID)
	apiOpts := []func(*api.Config){withSchedules(coord, time.Minute), withTraceURL(testTraceURL),
		withLimits(limiter, declaredLimits(jobs, overrides))}
	if len(opts) > 0 {
		apiOpts = nil
	}
	register(s, &functions{coord: coord, worker: worker, leader: leader, store: store, now: time.Now}, apiOpts...)
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return &apiEnv{t: t, hs: hs, store: store, queue: q, leases: &coordinatorParts{lock: lock}, logs: logs, coord: coord, limiter: limiter}
}

// sched is the test app's schedule of that name, as the coordinator runs it.
func (e *apiEnv) sched(name string) coordinator.Schedule {
	e.t.Helper()
	for _, s := range e.coord.Schedules() {
		if s.Name == name {
			return s
		}
	}
	e.t.Fatalf("no schedule %s", name)
	return coordinator.Schedule{}
}

func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// goldenHTTP loads an httpTrigger golden payload and applies edits to its Data.req object.
func goldenHTTP(t testing.TB, name string, edits ...func(req map[string]any)) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var inv map[string]any
	if err := json.Unmarshal(b, &inv); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	req := inv["Data"].(map[string]any)[bindingRequest].(map[string]any)
	for _, edit := range edits {
		edit(req)
	}
	out, err := json.Marshal(inv)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func withID(id string) func(map[string]any) {
	return func(req map[string]any) { req["Params"] = map[string]any{"id": id} }
}

// withPath sets the {*path} route parameter of schedules/{*path} (and the Url to match).
func withPath(p string) func(map[string]any) {
	return func(req map[string]any) {
		req["Params"] = map[string]any{routeParamPath: p}
		req["Url"] = "http://localhost:7071/api/schedules/" + p
	}
}

func withMethod(m string) func(map[string]any) {
	return func(req map[string]any) { req["Method"] = m }
}

func withBody(body string) func(map[string]any) {
	return func(req map[string]any) {
		req["Body"] = body
		req["Headers"].(map[string]any)["Content-Length"] = []any{fmt.Sprint(len(body))}
	}
}

func withHeader(k, v string) func(map[string]any) {
	return func(req map[string]any) { req["Headers"].(map[string]any)[k] = []any{v} }
}

func withQuery(k, v string) func(map[string]any) {
	return func(req map[string]any) { req["Query"].(map[string]any)[k] = v }
}

// httpOut is the `res` output of an HTTP function.
type httpOut struct {
	Status  int
	Headers map[string]string
	Body    string
}

func (o httpOut) json(t testing.TB) map[string]any {
	t.Helper()
	if ct := o.Headers["Content-Type"]; ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(o.Body), &v); err != nil {
		t.Fatalf("body is not a JSON object: %q", o.Body)
	}
	return v
}

// invoke sends an invocation to the handler the way the host does and returns the `res`
// output. The handler itself must answer 200: an HTTP function's status travels in res.
func (e *apiEnv) invoke(fn string, payload []byte) httpOut {
	e.t.Helper()
	return invokeHTTP(e.t, e.hs.URL, fn, payload)
}

func invokeHTTP(t testing.TB, base, fn string, payload []byte) httpOut {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/"+fn, bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(protocol.HeaderInvocationID, newInvocationID())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /%s: handler answered %d %s; an HTTP function's reply must be 200 with res", fn, resp.StatusCode, raw)
	}
	var ir struct {
		Outputs struct {
			Res *protocol.HTTPResponse `json:"res"`
		}
	}
	if err := json.Unmarshal(raw, &ir); err != nil || ir.Outputs.Res == nil {
		t.Fatalf("POST /%s: no Outputs.res in %s (%v)", fn, raw, err)
	}
	return httpOut{Status: ir.Outputs.Res.StatusCode, Headers: ir.Outputs.Res.Headers, Body: ir.Outputs.Res.Body}
}

func errCode(v map[string]any) string {
	e, _ := v["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

// work delivers every visible message to the WorkQueue function, as the queue trigger would,
// until the queue shows none: start checks (which plan their runs and enqueue the partitions)
// and partitions. Checks scheduled for later stay invisible.
func (e *apiEnv) work() { e.t.Helper(); e.deliver(-1) }

// deliver delivers visible messages as work does, but at most max partitions (all when max <
// 0): the first partition past max is made visible again and the rest left in the queue.
func (e *apiEnv) deliver(max int) {
	e.t.Helper()
	ctx := testCtx(e.t)
	for done := 0; ; {
		resp, err := e.queue.DequeueMessages(ctx, &azqueue.DequeueMessagesOptions{NumberOfMessages: to.Ptr(int32(1)), VisibilityTimeout: to.Ptr(int32(600))})
		if err != nil {
			e.t.Fatalf("dequeue: %v", err)
		}
		if len(resp.Messages) == 0 {
			return
		}
		for _, m := range resp.Messages {
			body, err := base64.StdEncoding.DecodeString(*m.MessageText)
			if err != nil {
				e.t.Fatalf("message is not base64: %v", err)
			}
			env, err := work.DecodeEnvelope(body)
			if err != nil {
				e.t.Fatalf("message is not an envelope: %v", err)
			}
			if env.Kind != work.KindCheck {
				if max >= 0 && done >= max {
					if _, err := e.queue.UpdateMessage(ctx, *m.MessageID, *m.PopReceipt, *m.MessageText,
						&azqueue.UpdateMessageOptions{VisibilityTimeout: to.Ptr(int32(0))}); err != nil {
						e.t.Fatalf("put back: %v", err)
					}
					return
				}
				done++
			}
			inv := protocol.InvokeRequest{
				Data: map[string]json.RawMessage{bindingMessage: protocol.EncodeStringData(string(body))},
				Metadata: map[string]json.RawMessage{"Id": protocol.QuoteMeta(*m.MessageID), "DequeueCount": protocol.IntMeta(1),
					"sys": protocol.SysMeta(fnWorkQueue, time.Now(), "00000000-0000-4000-8000-000000000000")},
			}
			payload, _ := json.Marshal(inv)
			req, _ := http.NewRequest(http.MethodPost, e.hs.URL+"/"+fnWorkQueue, bytes.NewReader(payload))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				e.t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				e.t.Fatalf("WorkQueue: %d %s", resp.StatusCode, raw)
			}
			if _, err := e.queue.DeleteMessage(ctx, *m.MessageID, *m.PopReceipt, nil); err != nil {
				e.t.Fatalf("delete: %v", err)
			}
		}
	}
}

func (e *apiEnv) countRuns() int {
	e.t.Helper()
	n := 0
	err := e.store.ListRuns(testCtx(e.t), func(string) bool { n++; return true })
	if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		e.t.Fatal(err)
	}
	return n
}

// POST with the golden payload: 202, Location, the key's run, handed to a planner; once its
// start check is delivered, GET shows it enqueued, then through work to the report.
func TestAPI_PostRun_AcceptedThenProgressThenReport(t *testing.T) {
	e := newAPIEnv(t)
	out := e.invoke(fnRuns, goldenHTTP(t, "http-runs-post.json"))
	v := out.json(t)
	wantRun := ledger.ManualRunID("nightly-rerun-42", time.Time{})
	if out.Status != http.StatusAccepted || v["run"] != wantRun || v["status"] != "started" || v["state"] != "planning" {
		t.Fatalf("POST: got %d %v, want 202 started %s", out.Status, v, wantRun)
	}
	if loc := out.Headers["Location"]; loc != "/api/runs/"+wantRun {
		t.Errorf("Location = %q, want /api/runs/%s", loc, wantRun)
	}

	e.deliver(0) // the start check: planning, under the run's own lease
	out = e.invoke(fnRuns, goldenHTTP(t, "http-runs-get.json", withID(wantRun)))
	v = out.json(t)
	p := v["progress"].(map[string]any)
	if out.Status != http.StatusOK || v["state"] != "running" || v["trigger"] != "manual" || p["total"] != float64(3) ||
		p["enqueued"] != float64(3) || p["completed"] != float64(0) || p["percent"] != float64(0) {
		t.Fatalf("GET before work: %d %v", out.Status, v)
	}
	if l := v["leader"].(map[string]any); l["instance"] != "inst-a" || v["epoch"].(float64) < 1 {
		t.Errorf("leader/epoch = %v %v", v["leader"], v["epoch"])
	}

	e.work()
	out = e.invoke(fnRuns, goldenHTTP(t, "http-runs-get.json", withID(wantRun)))
	v = out.json(t)
	p = v["progress"].(map[string]any)
	if v["state"] != "succeeded" || p["succeeded"] != float64(3) || p["percent"] != float64(100) || p["source"] != "manifest" {
		t.Fatalf("GET after work: %v", v)
	}
	rep, _ := v["report"].(map[string]any)
	if rep == nil || rep["state"] != "succeeded" || rep["aggregate"] == nil {
		t.Errorf("report = %v, want the succeeded report with its aggregate", rep)
	}
	if tm := v["timings"].(map[string]any); tm["created"] == nil || tm["finished"] == nil {
		t.Errorf("timings = %v", tm)
	}

	// The same key again: the same run, 200 existing, no second run.
	out = e.invoke(fnRuns, goldenHTTP(t, "http-runs-post.json"))
	v = out.json(t)
	if out.Status != http.StatusOK || v["run"] != wantRun || v["status"] != "existing" || v["state"] != "succeeded" {
		t.Errorf("repeat POST: got %d %v, want 200 existing %s", out.Status, v, wantRun)
	}
	if n := e.countRuns(); n != 1 {
		t.Errorf("%d runs in the ledger, want 1", n)
	}
}

// concurrently sends payload to fn n times at once and returns the replies.
func (e *apiEnv) concurrently(n int, fn string, payload []byte) []httpOut {
	outs := make([]httpOut, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			outs[i] = e.invoke(fn, payload)
		}()
	}
	close(start)
	wg.Wait()
	return outs
}

// Ten concurrent POSTs with one Idempotency-Key make one run, to /api/runs and to a schedule's
// run now alike: every reply names it, one started it, the ledger holds one run, and once the
// queue is worked it ran once. (Each endpoint gets its own key: a key names one request.)
func TestAPI_TenConcurrentSameKey_OneRun(t *testing.T) {
	e := newAPIEnv(t)
	cases := []struct {
		fn      string
		payload []byte
		want    string
	}{
		{fnRuns, goldenHTTP(t, "http-runs-post.json", withHeader("Idempotency-Key", "concurrent-key-1")), ledger.ManualRunID("concurrent-key-1", time.Time{})},
		{fnSchedules, goldenHTTP(t, "http-schedules-run.json", withHeader("Idempotency-Key", "concurrent-key-2")),
			ledger.ScheduleNowRunID("nightly", "concurrent-key-2", time.Time{})},
	}
	for i, c := range cases {
		started := 0
		for j, out := range e.concurrently(10, c.fn, c.payload) {
			var v map[string]any
			_ = json.Unmarshal([]byte(out.Body), &v)
			if (out.Status != http.StatusAccepted && out.Status != http.StatusOK) || v["run"] != c.want {
				t.Errorf("%s POST %d: got %d %s, want 200/202 for %s", c.fn, j, out.Status, out.Body, c.want)
			}
			if v["status"] == "started" {
				started++
			}
		}
		if started != 1 {
			t.Errorf("%s: %d replies say started, want exactly 1", c.fn, started)
		}
		if got := e.countRuns(); got != i+1 {
			t.Errorf("%s: %d runs in the ledger, want %d", c.fn, got, i+1)
		}
	}
	e.work()
	for _, c := range cases {
		m, err := e.store.ReadManifest(testCtx(t), c.want)
		if err != nil || m.State != ledger.StateSucceeded || m.Succeeded != m.Partitions || len(m.Segments) != 1 {
			t.Errorf("%s: %+v %v, want one planning and succeeded", c.want, m, err)
		}
	}
}

// Run now goes through each schedule's overlap policy: skip refuses a second run while the
// first is in progress (409 naming it and the leader, nothing recorded), buffer-one queues one
// (202 queued) and then refuses, allow starts beside it. GET /api/leader then names this
// instance: run now decides under the scheduler lease.
func TestAPI_RunNow_OverlapPolicies(t *testing.T) {
	e := newAPIEnv(t)
	post := func(name string) (int, map[string]any) {
		out := e.invoke(fnSchedules, goldenHTTP(t, "http-schedules-run.json", withPath(name+"/runs"),
			func(req map[string]any) { delete(req["Headers"].(map[string]any), "Idempotency-Key") }))
		return out.Status, out.json(t)
	}
	st, first := post("nightly")
	if st != http.StatusAccepted || first["status"] != "started" || first["schedule"] != "nightly" ||
		!strings.HasPrefix(first["run"].(string), "nightly-now-") {
		t.Fatalf("nightly: %d %v", st, first)
	}
	st, v := post("nightly")
	l, _ := v["leader"].(map[string]any)
	if st != http.StatusConflict || errCode(v) != "conflict" || v["activeRun"] != first["run"] || l == nil ||
		l["holder"].(map[string]any)["instance"] != "inst-a" || !strings.Contains(v["error"].(map[string]any)["message"].(string), "overlap policy: skip") {
		t.Errorf("nightly again: %d %v, want 409 naming %v and the leader", st, v, first["run"])
	}

	var hourly []string
	for i, want := range []struct {
		status int
		state  string
	}{{http.StatusAccepted, "started"}, {http.StatusAccepted, "queued"}, {http.StatusConflict, ""}} {
		st, v := post("hourly")
		if st != want.status || (want.state != "" && v["status"] != want.state) {
			t.Errorf("hourly %d: %d %v, want %d %s", i, st, v, want.status, want.state)
		}
		if r, ok := v["run"].(string); ok {
			hourly = append(hourly, r)
		}
	}
	if m, err := e.store.ReadManifest(testCtx(t), hourly[1]); err != nil || m.State != ledger.StateQueued {
		t.Errorf("the buffered run: %+v %v, want queued", m.State, err)
	}
	for i := range 2 {
		if st, v := post("reports"); st != http.StatusAccepted || v["status"] != "started" {
			t.Errorf("reports %d: %d %v, want 202 started (overlap allow)", i, st, v)
		}
	}
	if n := e.countRuns(); n != 5 {
		t.Errorf("%d runs in the ledger, want 5 (a refused run now records nothing)", n)
	}
	lv := e.invoke(fnLeader, goldenHTTP(t, "http-leader.json")).json(t)
	if h, _ := lv["holder"].(map[string]any); h["instance"] != "inst-a" || lv["epoch"].(float64) < 6 {
		t.Errorf("leader after six runs now = %v", lv)
	}

	// The schedules page shows it: nightly's last run planning, hourly's queued run.
	out := e.invoke(fnSchedules, goldenHTTP(t, "http-schedules-list.json"))
	v = out.json(t)
	byName := map[string]map[string]any{}
	for _, x := range v["schedules"].([]any) {
		byName[x.(map[string]any)["name"].(string)] = x.(map[string]any)
	}
	if lr, _ := byName["nightly"]["lastRun"].(map[string]any); lr["run"] != first["run"] || byName["hourly"]["queuedRun"] != hourly[1] {
		t.Errorf("schedules = %v", v)
	}
}

// Pause and resume through the host's payloads: the note and the Easy Auth principal are kept
// in the ledger and shown by GET; a heartbeat then records the due occurrence paused with the
// note as its reason.
func TestAPI_PauseResume(t *testing.T) {
	e := newAPIEnv(t)
	// The first heartbeat creates the runs container; a pause before it fails (reported).
	if err := e.store.EnsureContainer(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	out := e.invoke(fnSchedules, goldenHTTP(t, "http-schedules-pause.json"))
	v := out.json(t)
	if out.Status != http.StatusOK {
		t.Log(e.logs.String())
	}
	if out.Status != http.StatusOK || v["name"] != "nightly" || v["paused"] != true || v["note"] != "storage migration until 14:00 UTC" ||
		v["pausedBy"] != "alice@contoso.com" || v["pausedAt"] == nil {
		t.Fatalf("pause: %d %v", out.Status, v)
	}
	st, err := e.store.ReadSchedule(testCtx(t), "nightly")
	if err != nil || !st.Paused || st.Note != "storage migration until 14:00 UTC" || st.PausedBy != "alice@contoso.com" {
		t.Errorf("ledger state = %+v %v", st, err)
	}
	out = e.invoke(fnSchedules, goldenHTTP(t, "http-schedules-get.json"))
	if v := out.json(t); out.Status != http.StatusOK || v["paused"] != true || v["note"] != "storage migration until 14:00 UTC" {
		t.Errorf("GET after pause: %d %v", out.Status, v)
	}
	out = e.invoke(fnSchedules, goldenHTTP(t, "http-schedules-pause.json", withPath("nightly/resume"), withBody("")))
	if v := out.json(t); out.Status != http.StatusOK || v["paused"] != false || v["note"] != nil {
		t.Errorf("resume: %d %v", out.Status, v)
	}
	if st, _ := e.store.ReadSchedule(testCtx(t), "nightly"); st.Paused || st.Note != "" {
		t.Errorf("ledger state after resume = %+v", st)
	}
	// Without Easy Auth, the pause is by "a function key holder".
	out = e.invoke(fnSchedules, goldenHTTP(t, "http-schedules-pause.json", withPath("hourly/pause"), withBody(""),
		func(req map[string]any) { delete(req["Headers"].(map[string]any), api.PrincipalHeader) }))
	if v := out.json(t); out.Status != http.StatusOK || v["pausedBy"] != api.AnonymousOperator || v["note"] != nil {
		t.Errorf("pause without a principal: %d %v", out.Status, v)
	}
}

func TestAPI_BadInputs(t *testing.T) {
	e := newAPIEnv(t)
	long := strings.Repeat("a", 64)
	cases := []struct {
		name    string
		fn      string
		payload []byte
		status  int
		code    string
	}{
		{"traversal", fnRuns, goldenHTTP(t, "http-runs-get.json", withID("../leases/leader")), 400, "invalid_run_id"},
		{"dot dot", fnRuns, goldenHTTP(t, "http-runs-get.json", withID("..")), 400, "invalid_run_id"},
		{"encoded dot dot", fnRuns, goldenHTTP(t, "http-runs-get.json", withID("%2e%2e")), 400, "invalid_run_id"},
		{"encoded slash", fnRuns, goldenHTTP(t, "http-runs-get.json", withID("..%2Fleases")), 400, "invalid_run_id"},
		{"slash", fnRuns, goldenHTTP(t, "http-runs-get.json", withID("tick-1/manifest.json")), 400, "invalid_run_id"},
		{"backslash", fnRuns, goldenHTTP(t, "http-runs-get.json", withID(`..\leases`)), 400, "invalid_run_id"},
		{"uppercase", fnRuns, goldenHTTP(t, "http-runs-get.json", withID("TICK-20261121T100000Z")), 400, "invalid_run_id"},
		{"too long", fnRuns, goldenHTTP(t, "http-runs-get.json", withID(long)), 400, "invalid_run_id"},
		{"unknown run", fnRuns, goldenHTTP(t, "http-runs-get.json", withID("tick-20991231t000000z")), 404, "not_found"},
		{"oversize body", fnRuns, goldenHTTP(t, "http-runs-post.json", withBody(`{"job":"synthetic","params":{"pad":"`+strings.Repeat("x", 70<<10)+`"}}`)), 413, "payload_too_large"},
		{"unknown field", fnRuns, goldenHTTP(t, "http-runs-post.json", withBody(`{"job":"synthetic","parms":{}}`)), 400, "bad_request"},
		{"not JSON", fnRuns, goldenHTTP(t, "http-runs-post.json", withBody(`job=synthetic`)), 400, "bad_request"},
		{"unknown job", fnRuns, goldenHTTP(t, "http-runs-post.json", withBody(`{"job":"nope"}`)), 400, "bad_request"},
		{"bad params", fnRuns, goldenHTTP(t, "http-runs-post.json", withBody(`{"job":"synthetic","params":{"partitions":0}}`)), 400, "bad_request"},
		{"no job", fnRuns, goldenHTTP(t, "http-runs-post-nobody.json"), 400, "bad_request"},
		{"key too long", fnRuns, goldenHTTP(t, "http-runs-post.json", withHeader("Idempotency-Key", strings.Repeat("k", 201))), 400, "invalid_idempotency_key"},
		{"bad limit", fnRuns, goldenHTTP(t, "http-runs-list.json", withQuery("limit", "1000")), 400, "invalid_limit"},
		{"bad continuation", fnRuns, goldenHTTP(t, "http-runs-list.json", withQuery("continuation", "Li4vbGVhc2Vz")), 400, "invalid_continuation"},
		{"bad schedule filter", fnRuns, goldenHTTP(t, "http-runs-list.json", withQuery("schedule", "../x")), 400, "invalid_schedule"},
		{"occurrences moved", fnRuns, goldenHTTP(t, "http-runs-list.json", withQuery("occurrences", "30")), 400, "bad_request"},
		{"DELETE runs", fnRuns, goldenHTTP(t, "http-runs-list.json", withMethod("DELETE")), 405, "method_not_allowed"},
		{"POST a run ID", fnRuns, goldenHTTP(t, "http-runs-get.json", withMethod("POST")), 405, "method_not_allowed"},
		{"POST leader", fnLeader, goldenHTTP(t, "http-leader.json", withMethod("POST")), 405, "method_not_allowed"},
		{"PUT dashboard", fnDashboard, goldenHTTP(t, "http-dashboard.json", withMethod("PUT")), 405, "method_not_allowed"},
		{"unknown schedule", fnSchedules, goldenHTTP(t, "http-schedules-get.json", withPath("weekly")), 404, "not_found"},
		{"run now of an unknown schedule", fnSchedules, goldenHTTP(t, "http-schedules-run.json", withPath("weekly/runs")), 404, "not_found"},
		{"unknown action", fnSchedules, goldenHTTP(t, "http-schedules-run.json", withPath("nightly/start")), 404, "not_found"},
		{"schedule traversal", fnSchedules, goldenHTTP(t, "http-schedules-run.json", withPath("../runs")), 404, "not_found"},
		{"GET pause", fnSchedules, goldenHTTP(t, "http-schedules-get.json", withPath("nightly/pause")), 405, "method_not_allowed"},
		{"POST the list", fnSchedules, goldenHTTP(t, "http-schedules-list.json", withMethod("POST")), 405, "method_not_allowed"},
		{"bad occurrences", fnSchedules, goldenHTTP(t, "http-schedules-get.json", withQuery("occurrences", "101")), 400, "invalid_occurrences"},
		{"note too long", fnSchedules, goldenHTTP(t, "http-schedules-pause.json", withBody(`{"note":"`+strings.Repeat("n", 501)+`"}`)), 400, "bad_request"},
		{"pause with a by", fnSchedules, goldenHTTP(t, "http-schedules-pause.json", withBody(`{"note":"x","by":"mallory"}`)), 400, "bad_request"},
		{"run now with a job", fnSchedules, goldenHTTP(t, "http-schedules-run.json", withBody(`{"job":"synthetic"}`)), 400, "bad_request"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := e.invoke(c.fn, c.payload)
			v := out.json(t)
			if out.Status != c.status || errCode(v) != c.code {
				t.Errorf("got %d %v, want %d %s", out.Status, v, c.status, c.code)
			}
			if ed, _ := v["error"].(map[string]any); ed == nil || ed["message"] == "" {
				t.Errorf("error has no message: %v", v)
			}
		})
	}
	if n := e.countRuns(); n != 0 {
		t.Errorf("%d runs in the ledger after bad requests only, want 0", n)
	}
	if st, err := e.store.ReadSchedule(testCtx(t), "nightly"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("nightly's state after bad requests only: %+v %v, want none", st, err)
	}
}

func TestAPI_ListAndLeader_Golden(t *testing.T) {
	e := newAPIEnv(t)
	lv := e.invoke(fnLeader, goldenHTTP(t, "http-leader.json")).json(t)
	if lv["held"] != false || lv["holder"] != nil || lv["leaseState"] != "none" || lv["epoch"] != float64(0) {
		t.Errorf("leader before anyone contended = %v", lv)
	}
	out := e.invoke(fnRuns, goldenHTTP(t, "http-runs-list.json"))
	if v := out.json(t); out.Status != http.StatusOK || len(v["runs"].([]any)) != 0 {
		t.Fatalf("empty listing: %d %v", out.Status, v)
	}

	// Three runs now of nightly: each finishes before the next starts (skip would refuse it).
	var ids []string
	for i := range 3 {
		out := e.invoke(fnSchedules, goldenHTTP(t, "http-schedules-run.json", withHeader("Idempotency-Key", fmt.Sprintf("list-%d", i))))
		v := out.json(t)
		if out.Status != http.StatusAccepted {
			t.Fatalf("POST %d: %d %v", i, out.Status, v)
		}
		ids = append([]string{v["run"].(string)}, ids...) // newest first
		e.work()
	}

	var got []string
	tok := ""
	for page := 0; page < 5; page++ {
		edits := []func(map[string]any){}
		if tok != "" {
			edits = append(edits, withQuery("continuation", tok))
		}
		out := e.invoke(fnRuns, goldenHTTP(t, "http-runs-list.json", edits...))
		v := out.json(t)
		runs := v["runs"].([]any)
		if out.Status != http.StatusOK || len(runs) > 2 {
			t.Fatalf("page %d: %d %v (limit 2)", page, out.Status, v)
		}
		for _, r := range runs {
			rv := r.(map[string]any)
			got = append(got, rv["run"].(string))
			if rv["state"] != "succeeded" || rv["progress"].(map[string]any)["percent"] != float64(100) {
				t.Errorf("listed run = %v, want succeeded at 100%%", rv)
			}
		}
		tok, _ = v["continuation"].(string)
		if tok == "" {
			break
		}
	}
	if strings.Join(got, ",") != strings.Join(ids, ",") {
		t.Errorf("listing = %v, want newest first %v", got, ids)
	}

	lv = e.invoke(fnLeader, goldenHTTP(t, "http-leader.json")).json(t)
	h, _ := lv["holder"].(map[string]any)
	if lv["held"] != false || lv["leaseState"] != "available" || h["instance"] != "inst-a" || lv["epoch"].(float64) < 3 || lv["since"] == nil || lv["releasedAt"] == nil {
		t.Errorf("leader after three runs now = %v", lv)
	}
}

func TestAPI_Dashboard_Golden(t *testing.T) {
	e := newAPIEnv(t)
	out := e.invoke(fnDashboard, goldenHTTP(t, "http-dashboard.json"))
	if out.Status != http.StatusOK || !strings.HasPrefix(out.Headers["Content-Type"], "text/html") {
		t.Fatalf("got %d %v", out.Status, out.Headers)
	}
	if !strings.Contains(out.Body, "<title>Baton</title>") || !strings.Contains(out.Headers["Content-Security-Policy"], "default-src 'none'") ||
		out.Headers["Cache-Control"] != "no-store" || out.Headers["X-Content-Type-Options"] != "nosniff" {
		t.Errorf("page or headers missing: %v\n%.200s", out.Headers, out.Body)
	}
}

// Every function folder has a route in the handler, of the right kind and binding name.
func TestFunctionFolders_AreRegistered(t *testing.T) {
	s := newServer(slog.New(slog.DiscardHandler), time.Second, newInvocationID)
	register(s, &functions{now: time.Now})
	dirs, err := filepath.Glob(filepath.Join("..", "..", "*", "function.json"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no function.json found: %v", err)
	}
	for _, path := range dirs {
		name := filepath.Base(filepath.Dir(path))
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var fj struct {
			Bindings []struct{ Name, Type, Direction, AuthLevel, Route string }
		}
		if err := json.Unmarshal(b, &fj); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		trigger := fj.Bindings[0]
		if trigger.Type == "httpTrigger" {
			route, ok := s.http[name]
			if !ok || route.binding != trigger.Name {
				t.Errorf("%s: HTTP function not registered with binding %q", name, trigger.Name)
			}
			if trigger.AuthLevel != "function" {
				t.Errorf("%s: authLevel %q, want function", name, trigger.AuthLevel)
			}
			// The local host accepts an optional or catch-all parameter only as the last segment.
			if segs := strings.Split(trigger.Route, "/"); strings.ContainsAny(strings.Join(segs[:len(segs)-1], "/"), "?*") {
				t.Errorf("%s: route %q has an optional or catch-all parameter before its last segment", name, trigger.Route)
			}
			continue
		}
		if _, ok := s.triggers[name]; !ok {
			t.Errorf("%s: %s function not registered", name, trigger.Type)
		}
	}
	for _, fn := range []string{fnSchedules, fnLimits} {
		if _, ok := s.http[fn]; !ok {
			t.Errorf("%s is not registered", fn)
		}
	}
}

// GET /api/runs's filters through the handler on Azurite (state, trigger, schedule), a
// schedule's occurrence strip with a record of each kind and none, and a run's detail with who
// worked on it and its failed partitions; bad values are 400 with a JSON error.
func TestAPI_RunsQuery_FiltersOccurrencesDetail(t *testing.T) {
	e := newAPIEnv(t)
	ctx := testCtx(t)
	out := e.invoke(fnRuns, goldenHTTP(t, "http-runs-post.json", withHeader("Idempotency-Key", "query-params"),
		withBody(`{"job":"synthetic","params":{"partitions":5,"permanent":[1]}}`)))
	v := out.json(t)
	if out.Status != http.StatusAccepted {
		t.Fatalf("POST: %d %v", out.Status, v)
	}
	manual := v["run"].(string)
	out = e.invoke(fnSchedules, goldenHTTP(t, "http-schedules-run.json", withPath("hourly/runs")))
	if out.Status != http.StatusAccepted {
		t.Fatalf("run now: %d %s", out.Status, out.Body)
	}
	runNow := out.json(t)["run"].(string)
	e.work()

	// Nightly's latest occurrence missed, the one before skipped, the one before that with no
	// record; the cursor past all three (the heartbeat decided them).
	nightly := e.sched("nightly")
	occ0, _ := nightly.Cron.Prev(time.Now())
	occ1, _ := nightly.Cron.Prev(occ0.Add(-time.Second))
	occ2, _ := nightly.Cron.Prev(occ1.Add(-time.Second))
	occ3, _ := nightly.Cron.Prev(occ2.Add(-time.Second))
	for _, m := range []ledger.Manifest{
		{RunID: ledger.ScheduleRunID("nightly", occ0), Trigger: ledger.TriggerTimer, Schedule: "nightly", Occurrence: occ0, Job: "synthetic",
			State: ledger.StateMissed, Reason: "no heartbeat decided it within the catch-up window", Created: occ0.Add(time.Hour)},
		{RunID: ledger.ScheduleRunID("nightly", occ1), Trigger: ledger.TriggerTimer, Schedule: "nightly", Occurrence: occ1, Job: "synthetic",
			State: ledger.StateSkipped, Reason: "a run was in progress", Created: occ1},
		{RunID: ledger.ScheduleRunID("nightly", occ3), Trigger: ledger.TriggerTimer, Schedule: "nightly", Occurrence: occ3, Job: "synthetic",
			State: ledger.StatePaused, Reason: "maintenance", Created: occ3},
	} {
		if err := e.store.CreateManifest(ctx, &m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.store.UpdateSchedule(ctx, "nightly", func(st *ledger.ScheduleState) error { st.Cursor = occ0; return nil }); err != nil {
		t.Fatal(err)
	}

	list := func(edits ...func(map[string]any)) (int, map[string]any) {
		out := e.invoke(fnRuns, goldenHTTP(t, "http-runs-list.json", edits...))
		return out.Status, out.json(t)
	}
	ids := func(v map[string]any) []string {
		var s []string
		for _, r := range v["runs"].([]any) {
			s = append(s, r.(map[string]any)["run"].(string))
		}
		return s
	}
	for _, c := range []struct {
		edits []func(map[string]any)
		want  []string
	}{
		{[]func(map[string]any){withQuery("state", "missed")}, []string{ledger.ScheduleRunID("nightly", occ0)}},
		{[]func(map[string]any){withQuery("trigger", "manual"), withQuery("limit", "5")}, []string{runNow, manual}},
		{[]func(map[string]any){withQuery("trigger", "timer"), withQuery("state", "partial,skipped")}, []string{ledger.ScheduleRunID("nightly", occ1)}},
		{[]func(map[string]any){withQuery("schedule", "hourly")}, []string{runNow}},
		{[]func(map[string]any){withQuery("schedule", "nightly"), withQuery("state", "paused")}, []string{ledger.ScheduleRunID("nightly", occ3)}},
	} {
		st, v := list(c.edits...)
		if got := ids(v); st != http.StatusOK || !slices.Equal(got, c.want) {
			t.Errorf("%d %v, want %v", st, got, c.want)
		}
	}

	out = e.invoke(fnSchedules, goldenHTTP(t, "http-schedules-get.json", withQuery("occurrences", "5")))
	v = out.json(t)
	if out.Status != http.StatusOK {
		t.Fatalf("GET /api/schedules/nightly: %d %v", out.Status, v)
	}
	occ := v["occurrences"].([]any)
	want := []struct {
		at    time.Time
		state any
		flag  string
	}{{occ0, "missed", ""}, {occ1, "skipped", ""}, {occ2, nil, ""}, {occ3, "paused", ""}, {time.Time{}, nil, "beforeLedger"}}
	if len(occ) != 5 {
		t.Fatalf("occurrences: %v", occ)
	}
	for i, w := range want {
		o := occ[i].(map[string]any)
		var state any
		if rec, ok := o["record"].(map[string]any); ok {
			state = rec["state"]
		}
		if (!w.at.IsZero() && (o["occurrence"] != w.at.UTC().Format(time.RFC3339) || o["run"] != ledger.ScheduleRunID("nightly", w.at))) ||
			state != w.state || (w.flag != "" && o[w.flag] != true) || (w.flag == "" && (o["beforeLedger"] != nil || o["pending"] != nil)) {
			t.Errorf("occurrence %d = %v, want %s with state %v %s", i, o, w.at, w.state, w.flag)
		}
	}
	if v["expression"] != "0 0 3 * * *" || v["timeZone"] != "Europe/Berlin" || v["overlap"] != "skip" || len(v["next"].([]any)) != 3 {
		t.Errorf("schedule = %v", v)
	}

	// The manual run's detail: five partitions by inst-a, partition 1 failed with its attempts.
	out = e.invoke(fnRuns, goldenHTTP(t, "http-runs-get.json", withID(manual)))
	d := out.json(t)
	if out.Status != http.StatusOK || d["state"] != "partial" {
		t.Fatalf("GET %s: %d %v", manual, out.Status, d)
	}
	w := d["workers"].(map[string]any)
	inst := w["instances"].([]any)
	if w["read"] != float64(5) || w["sampled"] != false || len(inst) != 1 ||
		inst[0].(map[string]any)["worker"].(map[string]any)["instance"] != "inst-a" || inst[0].(map[string]any)["failed"] != float64(1) {
		t.Errorf("workers = %v", w)
	}
	f := d["failures"].([]any)
	if len(f) != 1 || f[0].(map[string]any)["index"] != float64(1) || f[0].(map[string]any)["attempts"].(float64) < 1 ||
		f[0].(map[string]any)["worker"] == nil {
		t.Errorf("failures = %v", f)
	}
	if segs := d["segments"].([]any); len(segs) != 1 || segs[0].(map[string]any)["to"] != float64(5) {
		t.Errorf("segments = %v", segs)
	}

	for _, c := range []struct{ k, v, code string }{
		{"state", "finished", "invalid_state"}, {"trigger", "check", "invalid_trigger"}, {"schedule", "Nightly", "invalid_schedule"},
	} {
		out := e.invoke(fnRuns, goldenHTTP(t, "http-runs-list.json", withQuery(c.k, c.v)))
		if v := out.json(t); out.Status != http.StatusBadRequest || errCode(v) != c.code {
			t.Errorf("%s=%s: %d %v, want 400 %s", c.k, c.v, out.Status, v, c.code)
		}
	}
}

// BenchmarkAPI_ListRuns_Dashboard measures the dashboard's requests over 1,000 finished runs
// on Azurite (half of schedule tick's occurrences, half keyed manual runs): "refresh" is the
// page's poll of the runs (a page of 20) and of the schedules page (three schedules, each
// decided up to now, with 20 occurrences each), warm; "filter-none" is a state filter that matches nothing (the scan stops
// after MaxScanReads manifests per page), on a fresh API each time, and "filter-none-warm" the
// same once this instance has cached the final manifests.
func BenchmarkAPI_ListRuns_Dashboard(b *testing.B) {
	e := newAPIEnv(b)
	seedFinishedRuns(b, e, 1000)
	decideUpToNow(b, e)
	runs := goldenHTTP(b, "http-runs-list.json", withQuery("limit", "20"))
	schedules := goldenHTTP(b, "http-schedules-list.json", withQuery("occurrences", "20"))
	b.Run("refresh", func(b *testing.B) {
		for _, p := range []struct {
			fn      string
			payload []byte
		}{{fnRuns, runs}, {fnSchedules, schedules}} {
			if out := e.invoke(p.fn, p.payload); out.Status != http.StatusOK {
				b.Fatalf("%s: %d %s", p.fn, out.Status, out.Body)
			}
		}
		b.ResetTimer()
		for b.Loop() {
			if out := e.invoke(fnRuns, runs); out.Status != http.StatusOK {
				b.Fatalf("GET /api/runs: %d", out.Status)
			}
			if out := e.invoke(fnSchedules, schedules); out.Status != http.StatusOK {
				b.Fatalf("GET /api/schedules: %d", out.Status)
			}
		}
	})
	b.Run("filter-none", func(b *testing.B) {
		for b.Loop() {
			a, err := api.New(api.Config{Ledger: e.store, Leader: noLeader{}})
			if err != nil {
				b.Fatal(err)
			}
			r := a.Runs(context.Background(), api.Request{Method: http.MethodGet, Query: map[string]string{"state": "failed"}})
			if r.Status != http.StatusOK {
				b.Fatalf("status %d", r.Status)
			}
		}
	})
	b.Run("filter-none-warm", func(b *testing.B) {
		a, err := api.New(api.Config{Ledger: e.store, Leader: noLeader{}})
		if err != nil {
			b.Fatal(err)
		}
		walk := func() {
			q := map[string]string{"state": "failed"}
			for pages := 0; ; pages++ {
				r := a.Runs(context.Background(), api.Request{Method: http.MethodGet, Query: q})
				if r.Status != http.StatusOK || pages > 10 {
					b.Fatalf("status %d after %d pages", r.Status, pages)
				}
				if tok := r.JSON.(api.ListReply).Continuation; tok != "" {
					q["continuation"] = tok
					continue
				}
				return
			}
		}
		walk() // fills the cache
		b.ResetTimer()
		for b.Loop() {
			walk()
		}
	})
}

// newScheduledApp serves the production wiring (config.Load, newApp) over the shared Azurite
// with the app's schedules and env's settings on top of newTestApp's.
func newScheduledApp(t *testing.T, env map[string]string, schedules []Schedule) *httptest.Server {
	t.Helper()
	settings := map[string]string{
		"FUNCTIONS_CUSTOMHANDLER_PORT": "7999",
		config.SettingHostStorage:      azurite.Shared(t).ConnectionString(),
		config.SettingTransport:        "queue",
		config.SettingHeartbeat:        "0 * * * * *",
		config.SettingRunsContainer:    azurite.UniqueName(t, "runs"),
		config.SettingLeaseContainer:   azurite.UniqueName(t, "leases"),
		config.SettingWorkQueue:        azurite.UniqueName(t, "work"),
	}
	maps.Copy(settings, env)
	cfg, err := config.Load(func(k string) string { return settings[k] })
	if err != nil {
		t.Fatal(err)
	}
	app, err := newApp(cfg, slog.New(slog.DiscardHandler), Options{Jobs: builtinJobs(), Schedules: schedules,
		Getenv: func(k string) string { return settings[k] }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Close(context.Background()) })
	hs := httptest.NewServer(app.server)
	t.Cleanup(hs.Close)
	return hs
}

// newApp hands the API every schedule as the settings leave it: the app's own (with their
// zones and policies), the one BATON_SCHEDULE declares (tick), and BATON_SCHEDULES' overrides
// (a pause the API cannot lift, a new expression and zone); the production wiring, through
// config.Load, over Azurite.
func TestNewApp_APIShowsEverySchedule(t *testing.T) {
	hs := newScheduledApp(t, map[string]string{
		config.SettingSchedule:  "0 30 9 * * 1-5",
		config.SettingOverlap:   "allow",
		config.SettingJob:       "synthetic",
		config.SettingJobParams: `{"partitions":2}`,
		config.SettingSchedules: `{"hourly":{"paused":true,"jitter":"10s","autoPause":2},"reports":{"cron":"0 0 18 * * 5","timeZone":"Asia/Tokyo"}}`,
	}, testSchedules)
	out := invokeHTTP(t, hs.URL, fnSchedules, goldenHTTP(t, "http-schedules-list.json", withQuery("occurrences", "2")))
	v := out.json(t)
	if out.Status != http.StatusOK {
		t.Fatalf("GET /api/schedules: %d %v", out.Status, v)
	}
	byName := map[string]map[string]any{}
	var names []string
	for _, x := range v["schedules"].([]any) {
		s := x.(map[string]any)
		byName[s["name"].(string)] = s
		names = append(names, s["name"].(string))
		if occ := s["occurrences"].([]any); len(occ) != 2 || occ[1].(map[string]any)["beforeLedger"] != true {
			t.Errorf("%s: occurrences %v; want 2, the older before the (empty) ledger", s["name"], occ)
		}
	}
	if !slices.Equal(names, []string{"nightly", "hourly", "reports", "tick"}) {
		t.Errorf("schedules %v, want the app's in order, then tick", names)
	}
	if s := byName["tick"]; s["expression"] != "0 30 9 * * 1-5" || s["description"] != "at 09:30:00 on Monday through Friday" ||
		s["timeZone"] != "UTC" || s["overlap"] != "allow" || s["catchUpSeconds"] != float64(600) || s["job"] != "synthetic" {
		t.Errorf("tick = %v", s)
	}
	if s := byName["nightly"]; s["timeZone"] != "Europe/Berlin" || s["paused"] != false || s["autoPause"] != nil {
		t.Errorf("nightly = %v", s)
	}
	if s := byName["hourly"]; s["paused"] != true || s["pausedBySetting"] != "the app setting "+config.SettingSchedules || s["jitter"] != "10s" ||
		s["autoPause"] != float64(2) || s["pausedAutomatically"] != nil {
		t.Errorf("hourly = %v", s)
	}
	if s := byName["reports"]; s["expression"] != "0 0 18 * * 5" || s["timeZone"] != "Asia/Tokyo" ||
		!strings.HasSuffix(s["next"].([]any)[0].(map[string]any)["local"].(string), "T18:00:00+09:00") {
		t.Errorf("reports = %v", s)
	}
	out = invokeHTTP(t, hs.URL, fnSchedules, goldenHTTP(t, "http-schedules-pause.json", withPath("hourly/resume"), withBody("")))
	if v := out.json(t); out.Status != http.StatusConflict || !strings.Contains(v["error"].(map[string]any)["message"].(string), config.SettingSchedules) {
		t.Errorf("resume of hourly: %d %v, want 409 naming %s", out.Status, v, config.SettingSchedules)
	}
}

// A manual run is refused with 400 and a message that says why when it names a job the app
// does not allow by hand, an inventory of the app's own containers or the host's, or synthetic
// params over the app's caps; what the settings allow starts.
func TestNewApp_ManualRunPolicy(t *testing.T) {
	runs := azurite.UniqueName(t, "runs")
	hs := newScheduledApp(t, map[string]string{config.SettingRunsContainer: runs, config.SettingManualJobs: "synthetic",
		config.SettingSyntheticMax: "50", config.SettingSyntheticWork: "100"}, nil)
	for _, c := range []struct {
		name, body string
		status     int
		want       string
	}{
		{"inventory is not allowed by hand", `{"job":"inventory","params":{"container":"data"}}`, http.StatusBadRequest, config.SettingManualJobs},
		{"over the partition cap", `{"job":"synthetic","params":{"partitions":51}}`, http.StatusBadRequest, "cap of 50"},
		{"over the work cap", `{"job":"synthetic","params":{"partitions":1,"workMs":101}}`, http.StatusBadRequest, "cap of 100"},
		{"within the caps", `{"job":"synthetic","params":{"partitions":50,"workMs":100}}`, http.StatusAccepted, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := invokeHTTP(t, hs.URL, fnRuns, goldenHTTP(t, "http-runs-post.json", withBody(c.body)))
			if out.Status != c.status || !strings.Contains(out.Body, c.want) {
				t.Errorf("POST %s: %d %s, want %d saying %q", c.body, out.Status, out.Body, c.status, c.want)
			}
		})
	}
	all := newScheduledApp(t, map[string]string{config.SettingRunsContainer: runs, config.SettingManualJobs: config.AllJobs}, nil)
	for _, container := range []string{runs, "azure-webjobs-secrets"} {
		body := `{"job":"inventory","params":{"container":"` + container + `"}}`
		out := invokeHTTP(t, all.URL, fnRuns, goldenHTTP(t, "http-runs-post.json", withBody(body)))
		if out.Status != http.StatusBadRequest || !strings.Contains(out.Body, "reserved container") {
			t.Errorf("POST %s: %d %s, want 400: reserved container", body, out.Status, out.Body)
		}
	}
}

// mustWorker builds a worker or fails the test.
func mustWorker(t testing.TB, cfg work.WorkerConfig) *work.Worker {
	t.Helper()
	w, err := work.NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}
