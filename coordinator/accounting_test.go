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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/batonfn/baton/election"
	"github.com/batonfn/baton/internal/azclient"
	"github.com/batonfn/baton/ledger"
	"github.com/batonfn/baton/ledger/blobstore"
	"github.com/batonfn/baton/transport"
	"github.com/batonfn/baton/work"
)

// These tests prove that every schedule occurrence ends with exactly one record, that no run
// can stay unfinished and block the schedule, and that the coordinator recognises its own
// writes whose responses were lost.

// testClock is a settable clock shared by a test's instances.
type testClock struct{ ns atomic.Int64 }

func newClock(s string) *testClock   { c := &testClock{}; c.set(at(s)); return c }
func (c *testClock) Now() time.Time  { return time.Unix(0, c.ns.Load()).UTC() }
func (c *testClock) set(t time.Time) { c.ns.Store(t.UnixNano()) }

// blockingJob plans one partition, but only once release is closed; entered is closed when a
// plan starts. It holds the lease as a long planning would.
type blockingJob struct {
	entered, release chan struct{}
	once             sync.Once
}

func newBlockingJob() *blockingJob {
	return &blockingJob{entered: make(chan struct{}), release: make(chan struct{})}
}

func (j *blockingJob) Plan(ctx context.Context, params json.RawMessage, cursor string, emit func(json.RawMessage, string) error) error {
	j.once.Do(func() { close(j.entered) })
	select {
	case <-j.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return emit(json.RawMessage(`{}`), "1")
}

func (j *blockingJob) Process(ctx context.Context, p work.Partition) (json.RawMessage, error) {
	return p.Payload, nil
}

func (j *blockingJob) Aggregate(ctx context.Context, run work.RunInfo, results iter.Seq2[ledger.Result, error]) (json.RawMessage, error) {
	return json.RawMessage(`{}`), nil
}

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

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func readManifest(t *testing.T, e *runEnv, run string) ledger.Manifest {
	t.Helper()
	m, err := e.store.ReadManifest(context.Background(), run)
	if err != nil {
		t.Fatalf("run %s: %v", run, err)
	}
	return m
}

// A Tick that fires while another instance holds the lease (here: planning a manual run) and
// cannot get the lease within its wait still accounts for its occurrence: it records it in
// the inbox, and the holder decides it before it lets go.
func TestTick_OccurrenceFiredWhileTheLeaseIsBusyIsDecidedByTheHolder(t *testing.T) {
	e := newRunEnv(t)
	ctx := testCtx(t)
	clock := newClock("2026-11-21T10:05:01Z")
	block := newBlockingJob()
	e.jobs.Register("block", block)
	b := e.instanceWith("b", nil, func(c *Config) { c.Now = clock.Now })
	a := e.instanceWith("a", nil, func(c *Config) { c.Now = clock.Now; c.TickWait = time.Second })

	manual := make(chan Outcome, 1)
	go func() {
		out, err := b.c.StartManual(ctx, ManualRequest{Job: "block", IdempotencyKey: "busy"})
		if err != nil {
			t.Errorf("manual run: %v", err)
		}
		manual <- out
	}()
	<-block.entered // b holds the lease and is planning

	out, err := a.c.Tick(ctx, tick)
	if err != nil {
		t.Fatalf("tick: %v", err)
	}
	if out.Status != StatusDeferred {
		t.Fatalf("tick status %q, want %q (the lease was busy for the whole wait)", out.Status, StatusDeferred)
	}
	pending, err := e.store.ListPending(ctx)
	if err != nil || len(pending) != 1 || pending[0].Run != tickRun || pending[0].FiredBy.Instance != "a" {
		t.Fatalf("inbox = %+v, %v; want the tick's occurrence, fired by a", pending, err)
	}
	if _, err := e.store.ReadManifest(ctx, tickRun); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the occurrence was decided before the holder let go: %v", err)
	}

	close(block.release)
	mo := <-manual
	if mo.Status != StatusStarted {
		t.Fatalf("manual run: %+v", mo)
	}
	m := readManifest(t, e, tickRun)
	if m.State != ledger.StateSkipped || !strings.Contains(m.Reason, mo.Run) || m.Occurrence.IsZero() {
		t.Fatalf("occurrence record: state %q reason %q occurrence %v; want skipped because %s is in progress", m.State, m.Reason, m.Occurrence, mo.Run)
	}
	if pending, err := e.store.ListPending(ctx); err != nil || len(pending) != 0 {
		t.Fatalf("inbox after the holder let go: %+v, %v", pending, err)
	}
}

// When the lease frees up within its wait, the Tick takes it and runs its occurrence itself.
func TestTick_WaitsForALeaseThatFreesUp(t *testing.T) {
	e := newRunEnv(t)
	ctx := testCtx(t)
	clock := newClock("2026-11-21T10:05:01Z")
	a := e.instanceWith("a", nil, func(c *Config) { c.Now = clock.Now })
	b := e.instanceWith("b", nil, func(c *Config) { c.Now = clock.Now })

	held := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- b.leader.RunAsLeader(ctx, func(ctx context.Context, lease election.Lease, beat func()) error {
			close(held)
			<-release
			return nil
		})
	}()
	<-held
	tickDone := make(chan Outcome, 1)
	go func() {
		out, err := a.c.Tick(ctx, tick)
		if err != nil {
			t.Errorf("tick: %v", err)
		}
		tickDone <- out
	}()
	// Let b go once a has seen the lease held and recorded its occurrence.
	waitFor(t, 30*time.Second, "the occurrence in the inbox", func() bool {
		p, err := e.store.ListPending(ctx)
		return err == nil && len(p) == 1
	})
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out := <-tickDone
	if out.Status != StatusStarted {
		t.Fatalf("tick status %q, want started once the lease was free", out.Status)
	}
	if m := readManifest(t, e, tickRun); m.State != ledger.StateRunning || m.Leader.Instance != "a" {
		t.Fatalf("run: state %q leader %q", m.State, m.Leader.Instance)
	}
	if pending, _ := e.store.ListPending(ctx); len(pending) != 0 {
		t.Fatalf("inbox not cleared: %+v", pending)
	}
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

// A Tick that cannot reach storage for its whole wait fails (so the host logs it) rather than
// returning success with nothing recorded; once storage is back, the next lease holder records
// the occurrence as missed.
func TestTick_StorageDownFailsTheTickAndTheGapIsRecordedLater(t *testing.T) {
	e := newRunEnv(t)
	ctx := testCtx(t)
	clock := newClock("2026-11-21T10:00:01Z")
	ok := e.instanceWith("ok", nil, func(c *Config) { c.Now = clock.Now })
	down := e.instanceWith("down", nil, func(c *Config) {
		c.Now, c.TickWait, c.Store = clock.Now, 2*time.Second, e.storeWith(unreachable{})
	})
	if out, err := ok.c.Tick(ctx, TickInput{Now: clock.Now()}); err != nil || out.Status != StatusStarted {
		t.Fatalf("first tick: %+v, %v", out, err)
	}
	clock.set(at("2026-11-21T10:05:01Z"))
	if out, err := down.c.Tick(ctx, TickInput{Now: clock.Now()}); err == nil {
		t.Fatalf("tick with storage down succeeded: %+v", out)
	}
	clock.set(at("2026-11-21T10:10:01Z"))
	out, err := ok.c.Tick(ctx, TickInput{Now: clock.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != StatusSkipped { // the 10:00 run is still in progress
		t.Fatalf("10:10 tick: %+v", out)
	}
	if m := readManifest(t, e, "tick-20261121t100500z"); m.State != ledger.StateMissed || m.Reason == "" {
		t.Fatalf("10:05: state %q reason %q, want missed with a reason", m.State, m.Reason)
	}
	if m := readManifest(t, e, "tick-20261121t100000z"); m.State != ledger.StateRunning {
		t.Fatalf("10:00 was overwritten: %q", m.State)
	}
}

// Occurrences that never fired are recorded as missed by the next lease holder. With
// run-latest, the most recent one is run instead when the next has not come yet.
func TestMisfire_MissedOccurrencesAreRecordedAndRunLatestRunsTheNewest(t *testing.T) {
	for _, policy := range []Misfire{MisfireSkip, MisfireRunLatest} {
		t.Run(string(policy), func(t *testing.T) {
			e := newRunEnv(t)
			ctx := testCtx(t)
			clock := newClock("2026-11-21T10:00:00.3Z")
			in := e.instanceWith("a", nil, func(c *Config) { c.Now, c.Misfire, c.AllowOverlap = clock.Now, policy, true })
			if _, err := in.c.Tick(ctx, TickInput{Now: clock.Now()}); err != nil {
				t.Fatal(err)
			}
			// Nothing fires for 10:05, 10:10 and 10:15; at 10:16 a manual run takes the lease.
			clock.set(at("2026-11-21T10:16:00Z"))
			if _, err := in.c.StartManual(ctx, ManualRequest{IdempotencyKey: "k"}); err != nil {
				t.Fatal(err)
			}
			for _, run := range []string{"tick-20261121t100500z", "tick-20261121t101000z"} {
				if m := readManifest(t, e, run); m.State != ledger.StateMissed || m.Trigger != ledger.TriggerTimer {
					t.Fatalf("%s: %q/%q, want a missed timer record", run, m.State, m.Trigger)
				}
			}
			latest := readManifest(t, e, "tick-20261121t101500z")
			want := ledger.StateMissed
			if policy == MisfireRunLatest {
				want = ledger.StateRunning
			}
			if latest.State != want || !latest.Occurrence.Equal(at("2026-11-21T10:15:00Z")) {
				t.Fatalf("10:15: state %q occurrence %v, want %q", latest.State, latest.Occurrence, want)
			}
			// A second holder finds nothing new to record.
			if _, err := in.c.StartManual(ctx, ManualRequest{IdempotencyKey: "k2"}); err != nil {
				t.Fatal(err)
			}
			if m := readManifest(t, e, "tick-20261121t101500z"); m.State != want {
				t.Fatalf("10:15 changed to %q", m.State)
			}
		})
	}
}

// A run whose workers never finish (here: 2 of 3 partitions never processed) does not block
// the schedule: the next Tick after its hard deadline finishes it as timed-out, with a report
// of what has results, and runs its own occurrence.
func TestSupervision_OverdueRunTimesOutAndTheScheduleGoesOn(t *testing.T) {
	e := newRunEnv(t)
	ctx := testCtx(t)
	clock := newClock("2026-11-21T10:00:00.3Z")
	w, err := work.NewWorker(work.WorkerConfig{Store: e.store, Jobs: e.jobs, Holder: ledger.Holder{Instance: "w"}, Now: clock.Now, MaxDeliveries: 5})
	if err != nil {
		t.Fatal(err)
	}
	in := e.instanceWith("a", nil, func(c *Config) {
		c.Now, c.Finisher, c.Params, c.RunTimeout = clock.Now, w, json.RawMessage(`{"n":3}`), time.Hour
	})
	first, err := in.c.Tick(ctx, TickInput{Now: clock.Now()})
	if err != nil || first.Status != StatusStarted {
		t.Fatalf("first tick: %+v, %v", first, err)
	}
	idx, _, _ := partitions(e.drain())
	if len(idx) != 3 {
		t.Fatalf("enqueued %v", idx)
	}
	if err := w.HandlePartition(ctx, work.Envelope{Version: 1, Kind: work.KindPartition, Run: first.Run, Epoch: first.Epoch, Part: 0, Parts: 3,
		Payload: json.RawMessage(`{"i":0}`)}, work.Delivery{Count: 1}); err != nil {
		t.Fatal(err)
	}
	m := readManifest(t, e, first.Run)

	// Before the hard deadline the run is in progress and the next occurrence is skipped.
	clock.set(at("2026-11-21T10:05:00.3Z"))
	if out, err := in.c.Tick(ctx, TickInput{Now: clock.Now()}); err != nil || out.Status != StatusSkipped {
		t.Fatalf("10:05 tick: %+v, %v", out, err)
	}
	// After it, the next tick finishes it and starts its own run.
	after := in.c.expires(m).Add(time.Minute)
	next, err := in.c.cfg.Schedule.Next(after)
	if err != nil {
		t.Fatal(err)
	}
	clock.set(next.Add(300 * time.Millisecond))
	out, err := in.c.Tick(ctx, TickInput{Now: clock.Now()})
	if err != nil || out.Status != StatusStarted {
		t.Fatalf("tick after the deadline: %+v, %v", out, err)
	}
	old := readManifest(t, e, first.Run)
	if old.State != ledger.StateTimedOut || old.Succeeded != 1 || old.Failed != 2 || old.Reason == "" {
		t.Fatalf("overdue run: state %q succeeded %d failed %d reason %q", old.State, old.Succeeded, old.Failed, old.Reason)
	}
	rep, _, err := e.store.ReadReport(ctx, first.Run)
	if err != nil || rep.State != ledger.StateTimedOut || len(rep.FailedList) != 2 || !strings.Contains(rep.FailedList[0].Error, "timed out") {
		t.Fatalf("report: %+v, %v", rep, err)
	}
}

// failingFinisher fails every aggregation, as when storage keeps failing for a check.
type failingFinisher struct{}

func (failingFinisher) TryFinish(ctx context.Context, run string) (bool, error) {
	return false, errors.New("injected: finish failed")
}

func (failingFinisher) TryFinishByListing(ctx context.Context, run string) (bool, error) {
	return false, errors.New("injected: finish failed")
}

// A check that fails on every delivery does not end the run's supervision: on its last
// delivery it schedules a fresh check instead of failing (which would dead-letter the chain).
func TestCheck_LastDeliveryKeepsTheChainAlive(t *testing.T) {
	e := newRunEnv(t)
	ctx := testCtx(t)
	clock := newClock("2026-11-21T10:05:00.3Z")
	var sent sync.Map // message ID → envelope
	hook := &senderHook{Sender: e.sender, before: func(_ int32, msgs []transport.Message) error {
		for _, m := range msgs {
			env, err := work.DecodeEnvelope(m.Body)
			if err != nil {
				return err
			}
			sent.Store(m.ID, env)
		}
		return nil
	}}
	in := e.instanceWith("a", hook, func(c *Config) { c.Now, c.Finisher, c.MaxDeliveries = clock.Now, failingFinisher{}, 3 })
	out, err := in.c.Tick(ctx, tick)
	if err != nil {
		t.Fatal(err)
	}
	e.drain()
	check := work.Envelope{Version: 1, Kind: work.KindCheck, Run: out.Run, Epoch: out.Epoch, Round: 4}
	for d := 1; d < 3; d++ {
		if err := in.c.Check(ctx, check, work.Delivery{Count: d}); err == nil {
			t.Fatalf("delivery %d: the failing check succeeded", d)
		}
	}
	if err := in.c.Check(ctx, check, work.Delivery{Count: 3}); err != nil {
		t.Fatalf("last delivery failed (the chain would end): %v", err)
	}
	next := work.Envelope{Version: 1, Kind: work.KindCheck, Run: out.Run, Epoch: out.Epoch, Round: 5}
	if v, ok := sent.Load(next.MessageID()); !ok || v.(work.Envelope).Round != 5 {
		t.Fatalf("no fresh check (round 5) was scheduled by the last delivery")
	}
}

// A create whose response was lost comes back "exists" on the SDK's retry: the leader
// recognises the manifest as its own (same holder and epoch) and goes on with the run.
func TestTick_LostCreateResponseIsRecognisedAsOurs(t *testing.T) {
	e := newRunEnv(t)
	ctx := testCtx(t)
	lose := &loseResponse{match: func(r *http.Request) bool {
		return r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/manifest.json") && r.Header.Get("If-None-Match") == "*"
	}}
	in := e.instanceWith("a", nil, func(c *Config) { c.Store, c.Params = e.storeWith(lose), json.RawMessage(`{"n":7}`) })
	out, err := in.c.Tick(ctx, tick)
	if err != nil {
		t.Fatal(err)
	}
	if lose.lost.Load() != 1 {
		t.Fatal("no response was lost: the test proves nothing")
	}
	if out.Status != StatusStarted {
		t.Fatalf("status %q, want started: the run is ours", out.Status)
	}
	if m := readManifest(t, e, tickRun); !m.PlanDone || m.Partitions != 7 {
		t.Fatalf("run not planned: %+v", m)
	}
	if idx, _, _ := partitions(e.drain()); len(idx) != 7 {
		t.Fatalf("enqueued %v", idx)
	}
	if a, ok, err := e.store.ReadActive(ctx); err != nil || !ok || a.Run != tickRun {
		t.Fatalf("active run: %+v %v %v", a, ok, err)
	}
}

// Sizes are measured on the exact bytes sent: a payload full of characters that JSON encoders
// like to escape ('<', '>', '&') is sent as is; a payload that can never fit fails planning
// for good, naming the partition, and the schedule goes on.
func TestPlan_SizeIsMeasuredOnTheSentBytes(t *testing.T) {
	e := newRunEnv(t)
	ctx := testCtx(t)
	html := json.RawMessage(`{"s":"` + strings.Repeat("<&>", 4000) + `"}`) // 12 KB; 72 KB if escaped
	huge := json.RawMessage(`{"s":"` + strings.Repeat("a", work.MaxEnvelopeBytes) + `"}`)
	job := &payloadJob{payloads: []json.RawMessage{html}}
	e.jobs.Register("payloads", job)
	clock := newClock("2026-11-21T10:05:00.3Z")
	in := e.instanceWith("a", nil, func(c *Config) { c.Now, c.Job, c.Params = clock.Now, "payloads", nil })
	out, err := in.c.Tick(ctx, tick)
	if err != nil || out.Status != StatusStarted || out.State != ledger.StateRunning {
		t.Fatalf("tick: %+v, %v", out, err)
	}
	msgs := e.drain()
	var sent []work.Envelope
	for _, m := range msgs {
		if m.Kind == work.KindPartition {
			sent = append(sent, m)
		}
	}
	if len(sent) != 1 || !bytes.Equal(sent[0].Payload, html) {
		t.Fatalf("sent %d partitions; payload intact: %v", len(sent), len(sent) == 1 && bytes.Equal(sent[0].Payload, html))
	}

	job.payloads = []json.RawMessage{html, huge}
	clock.set(at("2026-11-21T10:10:00.3Z"))
	in2 := e.instanceWith("b", nil, func(c *Config) { c.Now, c.Job, c.Params, c.AllowOverlap = clock.Now, "payloads", nil, true })
	out, err = in2.c.Tick(ctx, TickInput{Now: clock.Now()})
	if err != nil {
		t.Fatalf("a permanent planning failure must not fail the tick for ever: %v", err)
	}
	m := readManifest(t, e, out.Run)
	if m.State != ledger.StateFailed || !strings.Contains(m.Reason, "partition 1") || !strings.Contains(m.Reason, "bytes") {
		t.Fatalf("run with an oversized partition: state %q reason %q", m.State, m.Reason)
	}
}
