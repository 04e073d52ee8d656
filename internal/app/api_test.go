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
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/batonfn/baton/api"
	"github.com/batonfn/baton/config"
	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/election"
	"github.com/batonfn/baton/election/bloblease"
	"github.com/batonfn/baton/internal/azclient"
	"github.com/batonfn/baton/internal/azurite"
	"github.com/batonfn/baton/ledger"
	"github.com/batonfn/baton/ledger/blobstore"
	"github.com/batonfn/baton/protocol"
	"github.com/batonfn/baton/transport/storagequeue"
	"github.com/batonfn/baton/work"
	"github.com/batonfn/baton/work/synthetic"
)

// apiEnv is the handler wired as newApp wires it, over a fresh leases container, runs
// container and work queue on the shared Azurite, with the Storage-queue transport.
type apiEnv struct {
	t      testing.TB
	hs     *httptest.Server
	store  *blobstore.Store
	queue  *azqueue.QueueClient
	leases *coordinatorParts
	logs   *syncBuffer
	// schedule is the Tick schedule the API shows ("0 0 3 * * *").
	schedule coordinator.Schedule
}

// coordinatorParts lets a test add a second contender for the same lease.
type coordinatorParts struct {
	lock *bloblease.BlobLock
}

const testLeaseDuration = 15 * time.Second

// envWithoutSchedule wires the API without the schedule (as newAPI does when no
// withSchedule option is given).
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
	id := ledger.Holder{App: "baton-test", Instance: "inst-a", PID: 101}
	leader, err := election.NewLeader(election.LeaderConfig{Lock: lock, Identity: id, LeaseDuration: testLeaseDuration, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	store := blobstore.New(runs, blobstore.Options{})
	jobs := work.NewRegistry()
	jobs.Register(synthetic.Name, synthetic.New())
	worker := mustWorker(t, work.WorkerConfig{Store: store, Jobs: jobs, Holder: id, MaxDeliveries: 5, Logger: logger})
	schedule, err := coordinator.ParseSchedule("0 0 3 * * *", os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	coord, err := coordinator.New(coordinator.Config{
		Leader: leader, Store: store, Sender: storagequeue.NewQueueSender(q, storagequeue.QueueSenderOptions{}), Jobs: jobs, Finisher: worker,
		Identity: id, Job: synthetic.Name, Params: json.RawMessage(`{"partitions":2}`), Schedule: schedule,
		BatchSize: 100, RunTimeout: time.Hour, CheckRounds: 1, Logger: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(logger, 2*time.Minute, newInvocationID)
	apiOpts := []func(*api.Config){withSchedule(schedule, config.Config{Overlap: config.OverlapSkip, Misfire: config.MisfireSkip, StartingDeadline: time.Hour})}
	if len(opts) > 0 {
		apiOpts = nil
	}
	register(s, &functions{coord: coord, worker: worker, leader: leader, store: store, now: time.Now}, apiOpts...)
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return &apiEnv{t: t, hs: hs, store: store, queue: q, leases: &coordinatorParts{lock: lock}, logs: logs, schedule: schedule}
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

// work delivers every queued message to the WorkQueue function, as the queue trigger would,
// until the queue is empty.
func (e *apiEnv) work() { e.t.Helper(); e.deliver(-1) }

// deliver hands up to max partition messages (all when max < 0) to the WorkQueue function
// and drops check messages; the rest stay invisible in the queue.
func (e *apiEnv) deliver(max int) {
	e.t.Helper()
	ctx := testCtx(e.t)
	for done := 0; max < 0 || done < max; {
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
			if env, err := work.DecodeEnvelope(body); err == nil && env.Kind == work.KindCheck {
				// The check is scheduled for later (the dead-man's switch); it has nothing to do here.
				_, _ = e.queue.DeleteMessage(ctx, *m.MessageID, *m.PopReceipt, nil)
				continue
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
			done++
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

// POST with the golden payload: 202, Location, the key's run; then GET shows it through
// planning, work and the report.
func TestAPI_PostRun_AcceptedThenProgressThenReport(t *testing.T) {
	e := newAPIEnv(t)
	out := e.invoke(fnRuns, goldenHTTP(t, "http-runs-post.json"))
	v := out.json(t)
	wantRun := coordinator.ManualRunID("nightly-rerun-42", time.Time{})
	if out.Status != http.StatusAccepted || v["run"] != wantRun || v["status"] != "started" {
		t.Fatalf("POST: got %d %v, want 202 started %s", out.Status, v, wantRun)
	}
	if loc := out.Headers["Location"]; loc != "/api/runs/"+wantRun {
		t.Errorf("Location = %q, want /api/runs/%s", loc, wantRun)
	}

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

// Ten concurrent POSTs with one Idempotency-Key make one run: every reply names it, one
// started it, and the ledger and queue hold exactly one run's work.
func TestAPI_PostRun_TenConcurrentSameKey_OneRun(t *testing.T) {
	e := newAPIEnv(t)
	const n = 10
	payload := goldenHTTP(t, "http-runs-post.json", withHeader("Idempotency-Key", "concurrent-key-1"))
	outs := make([]httpOut, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			outs[i] = e.invoke(fnRuns, payload)
		}()
	}
	close(start)
	wg.Wait()

	want := coordinator.ManualRunID("concurrent-key-1", time.Time{})
	started := 0
	for i, out := range outs {
		var v map[string]any
		_ = json.Unmarshal([]byte(out.Body), &v)
		if (out.Status != http.StatusAccepted && out.Status != http.StatusOK) || v["run"] != want {
			t.Errorf("POST %d: got %d %s, want 200/202 for %s", i, out.Status, out.Body, want)
		}
		if v["status"] == "started" {
			started++
		}
	}
	if started != 1 {
		t.Errorf("%d replies say started, want exactly 1", started)
	}
	if got := e.countRuns(); got != 1 {
		t.Errorf("%d runs in the ledger, want 1", got)
	}
	// Exactly one run's partitions were enqueued (3), plus its check message.
	props, err := e.queue.GetProperties(testCtx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if props.ApproximateMessagesCount == nil || *props.ApproximateMessagesCount != 4 {
		t.Errorf("queue holds %v messages, want 4 (3 partitions + 1 check)", props.ApproximateMessagesCount)
	}
}

// While another instance holds the lease, a POST gets 409 naming that holder; while a run is
// in progress, a POST gets 409 naming the run.
func TestAPI_PostRun_Conflicts(t *testing.T) {
	e := newAPIEnv(t)
	other, err := election.NewLeader(election.LeaderConfig{Lock: e.leases.lock,
		Identity: ledger.Holder{App: "baton-test", Instance: "inst-b", PID: 202}, LeaseDuration: testLeaseDuration,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	acquired, release, done := make(chan int64, 1), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- other.RunAsLeader(context.Background(), func(ctx context.Context, l election.Lease, beat func()) error {
			acquired <- l.Epoch
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		})
	}()
	var epoch int64
	select {
	case epoch = <-acquired:
	case err := <-done:
		t.Fatalf("the other instance did not get the lease: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the other instance did not get the lease in time")
	}

	out := e.invoke(fnRuns, goldenHTTP(t, "http-runs-post-nobody.json"))
	v := out.json(t)
	l, _ := v["leader"].(map[string]any)
	h, _ := l["holder"].(map[string]any)
	if out.Status != http.StatusConflict || errCode(v) != "conflict" || h["instance"] != "inst-b" || l["epoch"] != float64(epoch) {
		t.Errorf("POST while held: got %d %v, want 409 naming inst-b at epoch %d", out.Status, v, epoch)
	}

	lv := e.invoke(fnLeader, goldenHTTP(t, "http-leader.json")).json(t)
	if lv["held"] != true || lv["leaseState"] != "leased" || lv["holder"].(map[string]any)["instance"] != "inst-b" || lv["epoch"] != float64(epoch) || lv["since"] == nil {
		t.Errorf("leader while held = %v", lv)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Now a run starts and stays in progress (no worker runs); a second run is refused.
	out = e.invoke(fnRuns, goldenHTTP(t, "http-runs-post-nobody.json"))
	first := out.json(t)
	if out.Status != http.StatusAccepted {
		t.Fatalf("POST after release: got %d %v, want 202", out.Status, first)
	}
	out = e.invoke(fnRuns, goldenHTTP(t, "http-runs-post-nobody.json"))
	v = out.json(t)
	if out.Status != http.StatusConflict || errCode(v) != "conflict" || v["activeRun"] != first["run"] || v["leader"] == nil {
		t.Errorf("POST while %v runs: got %d %v, want 409 with activeRun and leader", first["run"], out.Status, v)
	}
	if n := e.countRuns(); n != 1 {
		t.Errorf("%d runs in the ledger, want 1 (a refused manual start records nothing)", n)
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
		{"key too long", fnRuns, goldenHTTP(t, "http-runs-post.json", withHeader("Idempotency-Key", strings.Repeat("k", 201))), 400, "invalid_idempotency_key"},
		{"bad limit", fnRuns, goldenHTTP(t, "http-runs-list.json", withQuery("limit", "1000")), 400, "invalid_limit"},
		{"bad continuation", fnRuns, goldenHTTP(t, "http-runs-list.json", withQuery("continuation", "Li4vbGVhc2Vz")), 400, "invalid_continuation"},
		{"DELETE runs", fnRuns, goldenHTTP(t, "http-runs-list.json", withMethod("DELETE")), 405, "method_not_allowed"},
		{"POST a run ID", fnRuns, goldenHTTP(t, "http-runs-get.json", withMethod("POST")), 405, "method_not_allowed"},
		{"POST leader", fnLeader, goldenHTTP(t, "http-leader.json", withMethod("POST")), 405, "method_not_allowed"},
		{"PUT dashboard", fnDashboard, goldenHTTP(t, "http-dashboard.json", withMethod("PUT")), 405, "method_not_allowed"},
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

	// Three runs: each finishes before the next starts (the overlap policy would skip it).
	var ids []string
	for i := range 3 {
		out := e.invoke(fnRuns, goldenHTTP(t, "http-runs-post.json", withHeader("Idempotency-Key", fmt.Sprintf("list-%d", i)),
			withBody(`{"job":"synthetic","params":{"partitions":1}}`)))
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
		t.Errorf("leader after three runs = %v", lv)
	}
}

func TestAPI_Dashboard_Golden(t *testing.T) {
	e := newAPIEnv(t)
	out := e.invoke(fnDashboard, goldenHTTP(t, "http-dashboard.json"))
	if out.Status != http.StatusOK || !strings.HasPrefix(out.Headers["Content-Type"], "text/html") {
		t.Fatalf("got %d %v", out.Status, out.Headers)
	}
	if !strings.Contains(out.Body, "<title>Baton</title>") || !strings.Contains(out.Headers["Content-Security-Policy"], "default-src 'none'") {
		t.Errorf("page or CSP missing: %v\n%.200s", out.Headers, out.Body)
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
			Bindings []struct{ Name, Type, Direction, AuthLevel string }
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
			continue
		}
		if _, ok := s.triggers[name]; !ok {
			t.Errorf("%s: %s function not registered", name, trigger.Type)
		}
	}
}

// GET /api/runs's query parameters through the handler on Azurite: filters, the last N
// occurrences with their record or null and the schedule object, and a run's detail with
// who worked on it and its failed partitions; bad values are 400 with a JSON error.
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
	e.work()

	// Two timer records: yesterday's occurrence missed, the one before skipped; the one
	// before that has no record.
	occ0, err := e.schedule.Prev(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	occ1, _ := e.schedule.Prev(occ0.Add(-time.Second))
	occ2, _ := e.schedule.Prev(occ1.Add(-time.Second))
	for _, m := range []ledger.Manifest{
		{RunID: coordinator.TimerRunID(occ0), Trigger: ledger.TriggerTimer, Occurrence: occ0, Job: "synthetic", State: ledger.StateMissed,
			Reason: "no tick fired", Created: occ0.Add(time.Hour)},
		{RunID: coordinator.TimerRunID(occ1), Trigger: ledger.TriggerTimer, Occurrence: occ1, Job: "synthetic", State: ledger.StateSkipped,
			Reason: "a run was in progress", Created: occ1},
	} {
		if err := e.store.CreateManifest(ctx, &m); err != nil {
			t.Fatal(err)
		}
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
	if st, v := list(withQuery("state", "missed")); st != http.StatusOK || fmt.Sprint(ids(v)) != fmt.Sprint([]string{coordinator.TimerRunID(occ0)}) {
		t.Errorf("state=missed: %d %v", st, v)
	}
	if st, v := list(withQuery("trigger", "manual")); st != http.StatusOK || fmt.Sprint(ids(v)) != fmt.Sprint([]string{manual}) {
		t.Errorf("trigger=manual: %d %v", st, v)
	}
	if st, v := list(withQuery("trigger", "timer"), withQuery("state", "partial,skipped")); st != http.StatusOK ||
		fmt.Sprint(ids(v)) != fmt.Sprint([]string{coordinator.TimerRunID(occ1)}) {
		t.Errorf("trigger=timer&state=partial,skipped: %d %v", st, v)
	}

	st, v := list(withQuery("occurrences", "3"), withQuery("limit", "1"))
	if st != http.StatusOK {
		t.Fatalf("occurrences=3: %d %v", st, v)
	}
	occ := v["occurrences"].([]any)
	wantOcc := []struct {
		at    time.Time
		state any
	}{{occ0, "missed"}, {occ1, "skipped"}, {occ2, nil}}
	if len(occ) != 3 {
		t.Fatalf("occurrences: %v", occ)
	}
	for i, w := range wantOcc {
		o := occ[i].(map[string]any)
		var state any
		if rec, ok := o["record"].(map[string]any); ok {
			state = rec["state"]
		} else if o["record"] != nil {
			t.Errorf("occurrence %d record = %v", i, o["record"])
		}
		if o["occurrence"] != w.at.Format(time.RFC3339) || o["run"] != coordinator.TimerRunID(w.at) || state != w.state {
			t.Errorf("occurrence %d = %v, want %s with state %v", i, o, w.at, w.state)
		}
	}
	if s := v["schedule"].(map[string]any); s["expression"] != "0 0 3 * * *" || s["overlap"] != "skip" || len(s["next"].([]any)) != 3 {
		t.Errorf("schedule = %v", s)
	}
	if len(v["runs"].([]any)) != 1 {
		t.Errorf("occurrences changed the listing: %v", v["runs"])
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
		{"state", "finished", "invalid_state"}, {"trigger", "check", "invalid_trigger"},
		{"occurrences", "0", "invalid_occurrences"}, {"occurrences", "1000", "invalid_occurrences"}, {"occurrences", "x", "invalid_occurrences"},
	} {
		out := e.invoke(fnRuns, goldenHTTP(t, "http-runs-list.json", withQuery(c.k, c.v)))
		if v := out.json(t); out.Status != http.StatusBadRequest || errCode(v) != c.code {
			t.Errorf("%s=%s: %d %v, want 400 %s", c.k, c.v, out.Status, v, c.code)
		}
	}
}

// BenchmarkAPI_ListRuns_Dashboard measures the dashboard's requests over 1,000 finished runs
// on Azurite (half timer, half keyed manual; none on the schedule's occurrences, so the
// strip's 30 reads all miss): "refresh" is the page's poll (a page of 20 and the last 30
// occurrences with the schedule), warm; "filter-none" is a state filter that matches nothing
// (the scan stops after MaxScanReads manifests per page), on a fresh API each time, and
// "filter-none-warm" the same once this instance has cached the final manifests.
func BenchmarkAPI_ListRuns_Dashboard(b *testing.B) {
	e := newAPIEnv(b)
	seedFinishedRuns(b, e, 1000)
	refresh := goldenHTTP(b, "http-runs-list.json", withQuery("limit", "20"), withQuery("occurrences", "30"))
	b.Run("refresh", func(b *testing.B) {
		if out := e.invoke(fnRuns, refresh); out.Status != http.StatusOK {
			b.Fatalf("GET /api/runs: %d %s", out.Status, out.Body)
		}
		b.ResetTimer()
		for b.Loop() {
			if out := e.invoke(fnRuns, refresh); out.Status != http.StatusOK {
				b.Fatalf("GET /api/runs: %d", out.Status)
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

// newApp hands the API the schedule and policies it was configured with: the production
// wiring, through config.Load, over Azurite.
func TestNewApp_APIShowsTheConfiguredSchedule(t *testing.T) {
	hs := newTestApp(t, map[string]string{
		config.SettingSchedule:      "0 30 9 * * 1-5",
		config.SettingMisfire:       "run-latest",
		config.SettingStartDeadline: "20m",
		config.SettingOverlap:       "allow",
		config.SettingJob:           "synthetic",
		config.SettingJobParams:     `{"partitions":2}`,
	})
	out := invokeHTTP(t, hs.URL, fnRuns, goldenHTTP(t, "http-runs-list.json", withQuery("occurrences", "2")))
	v := out.json(t)
	if out.Status != http.StatusOK {
		t.Fatalf("GET /api/runs?occurrences=2: %d %v", out.Status, v)
	}
	s := v["schedule"].(map[string]any)
	if s["expression"] != "0 30 9 * * 1-5" || s["description"] != "at 09:30 UTC, Monday through Friday" || s["overlap"] != "allow" ||
		s["misfire"] != "run-latest" || s["startingDeadlineSeconds"] != float64(1200) {
		t.Errorf("schedule = %v", s)
	}
	if occ := v["occurrences"].([]any); len(occ) != 2 || occ[0].(map[string]any)["beforeLedger"] != true {
		t.Errorf("occurrences = %v; want 2 before the (empty) ledger's first run", occ)
	}
}

// A manual run is refused with 400 and a message that says why when it names a job the app
// does not allow by hand, an inventory of the app's own containers or the host's, or synthetic
// params over the app's caps; what the settings allow starts.
func TestNewApp_ManualRunPolicy(t *testing.T) {
	runs := azurite.UniqueName(t, "runs")
	hs := newTestApp(t, map[string]string{config.SettingRunsContainer: runs, config.SettingManualJobs: "synthetic",
		config.SettingSyntheticMax: "50", config.SettingSyntheticWork: "100"})
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
	all := newTestApp(t, map[string]string{config.SettingRunsContainer: runs})
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
