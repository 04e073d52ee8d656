package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/blobstore"
	"github.com/batonfn/baton/work"
)

// These tests prove that every schedule occurrence ends with exactly one record, that no run
// can stay unfinished and block the schedule, and that the coordinator recognises its own
// writes whose responses were lost.

// payloadJob plans one partition per payload.
type payloadJob struct{ payloads []json.RawMessage }

func (j *payloadJob) Plan(ctx context.Context, params json.RawMessage, cursor string, emit func(json.RawMessage, string) error) error {
	for i, p := range j.payloads {
		if err := emit(p, fmt.Sprint(i+1)); err != nil {
			return err
		}
	}
	return nil
}

func (j *payloadJob) Process(ctx context.Context, p work.Partition) (json.RawMessage, error) {
	return json.RawMessage(`{}`), nil
}

func (j *payloadJob) Aggregate(ctx context.Context, run work.RunInfo, results iter.Seq2[ledger.Result, error]) (json.RawMessage, error) {
	return json.RawMessage(`{}`), nil
}

// unreachable makes every request fail as if storage were down.
type unreachable struct{}

func (unreachable) Do(req *policy.Request) (*http.Response, error) {
	return nil, errors.New("injected: connection refused")
}

// loseResponse lets the first request that match accepts reach storage, then reports it as
// failed, as when a response is lost on the way back: the SDK retries it.
type loseResponse struct {
	match func(*http.Request) bool
	lost  atomic.Int32
}

func (l *loseResponse) Do(req *policy.Request) (*http.Response, error) {
	resp, err := req.Next()
	if err == nil && l.match(req.Raw()) && l.lost.CompareAndSwap(0, 1) {
		resp.Body.Close()
		return nil, errors.New("injected: response lost")
	}
	return resp, err
}

// storeWith is a ledger over the test's runs container through a client with extra policies.
func (e *runEnv) storeWith(p ...policy.Policy) *blobstore.Store {
	e.t.Helper()
	blobs, err := azclient.Blob(e.srv.Storage(), &azblob.ClientOptions{ClientOptions: policy.ClientOptions{
		PerRetryPolicies: p, Retry: policy.RetryOptions{RetryDelay: 10 * time.Millisecond, MaxRetries: 2}}})
	if err != nil {
		e.t.Fatal(err)
	}
	return blobstore.New(blobs.ServiceClient().NewContainerClient(e.runsName), blobstore.Options{})
}

// A heartbeat that cannot reach storage fails (so the host logs it) rather than returning
// success with nothing recorded; once storage is back, the next heartbeat records the
// occurrence it could not decide as missed (found past its catch-up window) and decides the
// current one, and the run in progress is left as it is.
func TestHeartbeat_StorageDownFailsAndTheGapIsRecordedLater(t *testing.T) {
	e := newRunEnv(t)
	ctx := testCtx(t)
	s := schedule(1)
	s.CatchUp = 2 * time.Minute
	ok := e.instanceWith("ok", nil, func(c *Config) { c.Schedules = []Schedule{s} })
	down := e.instanceWith("down", nil, func(c *Config) { c.Schedules, c.Store = []Schedule{s}, e.storeWith(unreachable{}) })
	if d := e.startOccurrence(ok); d.Status != StatusStarted {
		t.Fatalf("first occurrence: %+v", d)
	}
	e.clock.set(e.occ.Add(5*time.Minute + 300*time.Millisecond))
	if out, err := down.c.Heartbeat(ctx); err == nil {
		t.Fatalf("heartbeat with storage down succeeded: %+v", out)
	}
	out := e.heartbeat(ok, e.occ.Add(10*time.Minute+300*time.Millisecond))
	var got []string
	for _, d := range out.Decisions {
		got = append(got, fmt.Sprintf("%s %s", d.Occurrence.Sub(e.occ), d.State))
	}
	if want := "5m0s missed, 10m0s skipped"; strings.Join(got, ", ") != want {
		t.Fatalf("heartbeat once storage is back decided %v, want %s", got, want)
	}
	gap := e.manifest(ledger.ScheduleRunID("s", e.occ.Add(5*time.Minute)))
	if gap.State != ledger.StateMissed || !strings.Contains(gap.Reason, "catch-up window") {
		t.Fatalf("the gap: state %q reason %q, want missed with a reason", gap.State, gap.Reason)
	}
	if m := e.manifest(e.run); m.State.Final() {
		t.Fatalf("the run in progress was overwritten: %q", m.State)
	}
}

// A run whose workers never finish (here: 2 of 3 partitions never processed) and whose check
// chain is lost does not block the schedule: its occurrences are skipped while it runs, the
// heartbeats drive it (re-enqueue rounds, then time-out) with no check delivered, it ends
// timed-out with a report of what has results by its bound, and the next occurrence starts.
func TestSupervision_OverdueRunTimesOutAndTheScheduleGoesOn(t *testing.T) {
	e := newRunEnv(t)
	ctx := testCtx(t)
	w, err := work.NewWorker(work.WorkerConfig{Store: e.store, Jobs: e.jobs, Holder: ledger.Holder{Instance: "w"}, Now: e.clock.Now, MaxDeliveries: 5})
	if err != nil {
		t.Fatal(err)
	}
	in := e.instanceWith("a", nil, func(c *Config) { c.Finisher, c.Schedules = w, []Schedule{schedule(3)} })
	e.startOccurrence(in)
	if err := in.c.Check(ctx, startCheck(t, e.drain(), e.run), firstDelivery); err != nil {
		t.Fatal(err)
	}
	var part0 *work.Envelope
	for _, env := range e.drain() { // the partitions; the chain's next check is not due for an hour
		if env.Kind == work.KindPartition && env.Part == 0 {
			part0 = &env // partition 0 alone, or the bundle it starts
		}
	}
	if part0 == nil {
		t.Fatal("partition 0 was not enqueued")
	}
	if err := w.HandlePartition(ctx, *part0, work.Delivery{Count: 1}); err != nil {
		t.Fatal(err)
	}
	m := e.manifest(e.run)

	// Before its bound the run is in progress: the next occurrence is skipped, and no check is
	// sent for it.
	out := e.heartbeat(in, e.occ.Add(5*time.Minute+300*time.Millisecond))
	if len(out.Decisions) != 1 || out.Decisions[0].State != ledger.StateSkipped {
		t.Fatalf("heartbeat while the run is in progress: %+v", out.Decisions)
	}
	if checks := checksOf(e.drain(), e.run, -1); len(checks) != 0 {
		t.Fatalf("%d checks sent for the run before its bound", len(checks))
	}
	// From its deadline on the heartbeats drive it; no check is delivered.
	bound := in.c.FinalBound(m)
	at := m.Deadline
	for ; !e.manifest(e.run).State.Final(); at = at.Add(5 * time.Minute) {
		if at.After(bound.Add(5 * time.Minute)) {
			t.Fatalf("run still %s a heartbeat past its bound %s", e.manifest(e.run).State, bound)
		}
		e.heartbeat(in, at)
		e.drain()
	}
	old := e.manifest(e.run)
	if old.State != ledger.StateTimedOut || old.Succeeded != 1 || old.Failed != 2 || old.Reason == "" {
		t.Fatalf("overdue run: state %q succeeded %d failed %d reason %q", old.State, old.Succeeded, old.Failed, old.Reason)
	}
	rep, _, err := e.store.ReadReport(ctx, e.run)
	if err != nil || rep.State != ledger.StateTimedOut || len(rep.FailedList) != 2 || !strings.Contains(rep.FailedList[0].Error, "timed out") {
		t.Fatalf("report: %+v, %v", rep, err)
	}
	next, _ := every(5 * time.Minute).Next(at.Add(-5 * time.Minute)) // after the heartbeat that ended it
	out = e.heartbeat(in, next.Add(300*time.Millisecond))
	if len(out.Decisions) != 1 || out.Decisions[0].Status != StatusStarted {
		t.Fatalf("the occurrence after the timed-out run: %+v, want started", out.Decisions)
	}
}

// A create whose response was lost comes back "exists" on the SDK's retry: the heartbeat (or
// the ad-hoc request) takes the run as existing, sends its start check all the same, and the
// run is planned; the schedule's state names it as its latest run.
func TestHeartbeat_LostCreateResponseIsTakenAsExisting(t *testing.T) {
	for _, via := range []string{"heartbeat", "manual"} {
		t.Run(via, func(t *testing.T) {
			e := newRunEnv(t)
			ctx := testCtx(t)
			lose := &loseResponse{match: func(r *http.Request) bool {
				return r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/manifest.json") && r.Header.Get("If-None-Match") == "*"
			}}
			in := e.instanceWith("a", nil, func(c *Config) { c.Store, c.Schedules = e.storeWith(lose), []Schedule{schedule(7)} })
			run := e.run
			if via == "heartbeat" {
				if d := e.startOccurrence(in); d.Status != StatusExisting || d.State != ledger.StatePlanning {
					t.Fatalf("decision %+v, want the run taken as existing, planning", d)
				}
				if st, err := e.store.ReadSchedule(ctx, "s"); err != nil || st.Latest != run || !st.Cursor.Equal(e.occ) {
					t.Fatalf("schedule state %+v, %v; want the run its latest", st, err)
				}
			} else {
				out, err := in.c.StartManual(ctx, ManualRequest{Job: "count", Params: json.RawMessage(`{"n":7}`), IdempotencyKey: "lost"})
				if err != nil || out.Status != StatusExisting || out.State != ledger.StatePlanning {
					t.Fatalf("ad-hoc run: %+v, %v; want it taken as existing, planning", out, err)
				}
				run = out.Run
			}
			if lose.lost.Load() != 1 {
				t.Fatal("no response was lost: the test proves nothing")
			}
			if err := in.c.Check(ctx, startCheck(t, e.drain(), run), firstDelivery); err != nil {
				t.Fatal(err)
			}
			if m := e.manifest(run); !m.PlanDone || m.Partitions != 7 || m.Epoch != 1 {
				t.Fatalf("run not planned by one planner: %+v", m)
			}
			idx, _, _ := partitions(e.drain())
			if len(idx) != 7 {
				t.Fatalf("enqueued %v", idx)
			}
			wantEach(t, idx, 7)
		})
	}
}

// Sizes are measured on the exact bytes sent: a payload full of characters that JSON encoders
// like to escape ('<', '>', '&') is sent as is; a payload that can never fit fails planning
// for good, naming the partition, without failing the check (nothing to retry), and the
// schedule goes on.
func TestPlan_SizeIsMeasuredOnTheSentBytes(t *testing.T) {
	e := newRunEnv(t)
	ctx := testCtx(t)
	html := json.RawMessage(`{"s":"` + strings.Repeat("<&>", 4000) + `"}`) // 12 KB; 72 KB if escaped
	huge := json.RawMessage(`{"s":"` + strings.Repeat("a", work.MaxEnvelopeBytes) + `"}`)
	job := &payloadJob{payloads: []json.RawMessage{html}}
	e.jobs.Register("payloads", job)
	in := e.instanceWith("a", nil, func(c *Config) {
		c.Schedules = []Schedule{{Name: "s", Job: "payloads", Cron: every(5 * time.Minute)}}
	})
	out, err := in.c.StartManual(ctx, ManualRequest{Job: "payloads"})
	if err != nil || out.Status != StatusStarted {
		t.Fatalf("ad-hoc run: %+v, %v", out, err)
	}
	if err := in.c.Check(ctx, startCheck(t, e.drain(), out.Run), firstDelivery); err != nil {
		t.Fatal(err)
	}
	var sent []work.Envelope
	for _, m := range e.drain() {
		if m.Kind == work.KindPartition {
			sent = append(sent, m)
		}
	}
	if len(sent) != 1 || !bytes.Equal(sent[0].Payload, html) {
		t.Fatalf("sent %d partitions; payload intact: %v", len(sent), len(sent) == 1 && bytes.Equal(sent[0].Payload, html))
	}
	if m := e.manifest(out.Run); m.State != ledger.StateRunning {
		t.Fatalf("ad-hoc run %s: %q", m.State, m.Reason)
	}

	job.payloads = []json.RawMessage{html, huge}
	e.startOccurrence(in)
	if err := in.c.Check(ctx, startCheck(t, e.drain(), e.run), firstDelivery); err != nil {
		t.Fatalf("a permanent planning failure must not fail the check (it would be retried for nothing): %v", err)
	}
	m := e.manifest(e.run)
	if m.State != ledger.StateFailed || !strings.Contains(m.Reason, "partition 1") || !strings.Contains(m.Reason, "bytes") {
		t.Fatalf("run with an oversized partition: state %q reason %q", m.State, m.Reason)
	}
	next := e.heartbeat(in, e.occ.Add(5*time.Minute+300*time.Millisecond))
	if len(next.Decisions) != 1 || next.Decisions[0].Status != StatusStarted {
		t.Fatalf("the schedule's next occurrence after the failed run: %+v, want started", next.Decisions)
	}
}
