package work_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/ledgertest"
	"github.com/batonfn/baton/internal/engine/limit"
	"github.com/batonfn/baton/internal/engine/limit/limitblob"
	"github.com/batonfn/baton/internal/engine/transport/transporttest"
	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/work"
)

// limitedJob records how many of its partitions run at once; slow makes a partition ask to
// slow down.
type limitedJob struct {
	inFlight, peak atomic.Int64
	mu             sync.Mutex
	ran            map[int]int
	slow           map[int]time.Duration
	// slowFirst, when set, is the slow-down the first partition to run asks for.
	slowFirst time.Duration
	runs      atomic.Int64
}

func (j *limitedJob) Plan(context.Context, json.RawMessage, string, func(json.RawMessage, string) error) error {
	return errors.New("not planned in these tests")
}

func (j *limitedJob) Process(ctx context.Context, p work.Partition) (json.RawMessage, error) {
	k := j.inFlight.Add(1)
	defer j.inFlight.Add(-1)
	for q := j.peak.Load(); k > q && !j.peak.CompareAndSwap(q, k); q = j.peak.Load() {
	}
	j.mu.Lock()
	j.ran[p.Index]++
	d, slow := j.slow[p.Index]
	j.mu.Unlock()
	if first := j.runs.Add(1) == 1; first && j.slowFirst > 0 {
		d, slow = j.slowFirst, true
	}
	if slow {
		return nil, work.SlowDown(d, errors.New("429 Too Many Requests"))
	}
	// Overlap with the bundle's other partitions long enough for a breach to show.
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(5 * time.Millisecond):
	}
	return json.Marshal(p.Index)
}

func (j *limitedJob) Aggregate(ctx context.Context, run work.RunInfo, results iter.Seq2[ledger.Result, error]) (json.RawMessage, error) {
	return json.Marshal(0)
}

type limitFixture struct {
	t      *testing.T
	ctx    context.Context
	store  *ledgertest.Fake
	limits *limitblob.Store
	sender *transporttest.Recorder
	job    *limitedJob
	w      *work.Worker
	spec   limit.Spec
}

const limitRun = "limit-run"

func newLimitFixture(t *testing.T, spec limit.Spec, parts int) *limitFixture {
	t.Helper()
	spec, err := spec.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	client, err := azclient.Blob(azurite.Shared(t).Storage(), nil)
	if err != nil {
		t.Fatal(err)
	}
	cc := client.ServiceClient().NewContainerClient(azurite.UniqueName(t, "limits"))
	if _, err := cc.Create(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	f := &limitFixture{t: t, ctx: t.Context(), store: ledgertest.NewFake(ledgertest.Options{}), limits: limitblob.New(cc, nil),
		sender: &transporttest.Recorder{}, job: &limitedJob{ran: map[int]int{}, slow: map[int]time.Duration{}}, spec: spec}
	f.w = f.worker(limit.Config{Store: f.limits}, f.store)
	m := &ledger.Manifest{RunID: limitRun, Trigger: ledger.TriggerManual, Epoch: 1, Segments: []ledger.Segment{{Epoch: 1, From: 0}},
		Job: "gated", State: ledger.StateRunning, Partitions: parts, PlanDone: true, BatchSize: 100,
		Checkpoint: ledger.Checkpoint{Batches: 1, Next: parts}}
	if err := f.store.CreateManifest(f.ctx, m); err != nil {
		t.Fatal(err)
	}
	return f
}

// worker is a worker of the fixture's job under its limit, on the ledger store, with a
// limiter of cfg (holder w1).
func (f *limitFixture) worker(cfg limit.Config, store ledger.Store) *work.Worker {
	f.t.Helper()
	cfg.Holder = "w1"
	l, err := limit.New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	jobs := work.NewRegistry()
	jobs.Register("gated", f.job)
	jobs.SetLimit("gated", f.spec)
	w, err := work.NewWorker(work.WorkerConfig{Store: store, Jobs: jobs, MaxDeliveries: 3, Retries: f.sender, Limiter: l,
		Holder: ledger.Holder{App: "test", Instance: "w1", PID: 1}})
	if err != nil {
		f.t.Fatal(err)
	}
	return w
}

// bundle is the first delivery of a bundle of partitions 0..n-1 recorded one by one.
func (f *limitFixture) bundle(n int) (work.Envelope, work.Delivery) {
	env := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: limitRun, Epoch: 1, Part: 0, Count: n, Parts: n}
	return env, work.Delivery{MessageID: env.MessageID(), Count: 1}
}

func (f *limitFixture) recorded() int {
	n := 0
	for i := range f.job.ran {
		if _, err := f.store.ReadResult(f.ctx, limitRun, i); err == nil {
			n++
		}
	}
	return n
}

// A bundle under a limit of 2 in flight runs every partition, never more than 2 at once, and
// gives its slots back.
func TestWorker_LimitBoundsInFlight(t *testing.T) {
	f := newLimitFixture(t, limit.Spec{Name: "crm", MaxInFlight: 2}, 12)
	env, d := f.bundle(12)
	if err := f.w.HandlePartition(f.ctx, env, d); err != nil {
		t.Fatal(err)
	}
	if p := f.job.peak.Load(); p < 1 || p > 2 {
		t.Fatalf("peak %d partitions at once, want 1 to 2", p)
	}
	if n := f.recorded(); n != 12 || len(f.job.ran) != 12 {
		t.Fatalf("%d recorded of %d run, want 12", n, len(f.job.ran))
	}
	if msgs := f.sender.Sent(); len(msgs) != 0 {
		t.Fatalf("%d messages sent, want none", len(msgs))
	}
	st, err := f.limits.Read(f.ctx, "crm")
	if err != nil || len(st.Slots) != 0 || st.Started != 12 {
		t.Fatalf("limit state %+v %v, want its slots back and 12 starts", st, err)
	}
}

// A bundle whose limit has no free slot is sent back whole, later, under a new message ID,
// without running anything or failing the delivery.
func TestWorker_LimitFullSendsTheMessageBack(t *testing.T) {
	f := newLimitFixture(t, limit.Spec{Name: "crm", MaxInFlight: 2}, 4)
	other, err := limit.New(limit.Config{Store: f.limits, Holder: "w2"})
	if err != nil {
		t.Fatal(err)
	}
	held, _, err := other.Acquire(f.ctx, f.spec, "elsewhere", 5)
	if err != nil || held.Slots != 2 {
		t.Fatalf("the other holder: %+v %v", held, err)
	}
	env, d := f.bundle(4)
	before := time.Now()
	if err := f.w.HandlePartition(f.ctx, env, d); err != nil {
		t.Fatal(err)
	}
	msgs := f.sender.Sent()
	if len(msgs) != 1 || len(f.job.ran) != 0 {
		t.Fatalf("%d messages sent, %d partitions run; want the message back and none run", len(msgs), len(f.job.ran))
	}
	back, err := work.DecodeEnvelope(msgs[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	if back.Wait != 1 || back.Count != 4 || back.Part != 0 || msgs[0].ID != env.MessageID()+"/w1" || !msgs[0].NotBefore.After(before) {
		t.Fatalf("sent back %+v as %s at %s", back, msgs[0].ID, msgs[0].NotBefore)
	}
	st, err := f.limits.Read(f.ctx, "crm")
	if err != nil || st.WaitingAt(time.Now()) != 4 {
		t.Fatalf("limit state %+v %v, want the bundle's 4 partitions waiting", st, err)
	}
	// Once the slots are back, the message sent back runs, and no longer waits.
	if err := other.Release(f.ctx, held, 5, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := f.w.HandlePartition(f.ctx, back, work.Delivery{MessageID: msgs[0].ID, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if n := f.recorded(); n != 4 || len(f.sender.Sent()) != 1 {
		t.Fatalf("%d recorded, %d messages sent; want all 4 recorded and nothing more sent", n, len(f.sender.Sent()))
	}
	if st, err = f.limits.Read(f.ctx, "crm"); err != nil || st.WaitingAt(time.Now()) != 0 || len(st.Slots) != 0 {
		t.Fatalf("limit state %+v %v, want no waiter and no slot", st, err)
	}
}

// A partition that asks to slow down is sent back for that long on the same try, nothing is
// recorded failed, the bundle starts nothing more (its partitions not run go back for as
// long, consecutive ones in one message), and the limit refuses every other holder.
func TestWorker_SlowDownHoldsTheLimitBack(t *testing.T) {
	f := newLimitFixture(t, limit.Spec{Name: "api", MaxInFlight: 1}, 6)
	f.job.slow[2] = 20 * time.Second
	env, d := f.bundle(6)
	if err := f.w.HandlePartition(f.ctx, env, d); err != nil {
		t.Fatal(err)
	}
	recorded := f.recorded()
	msgs := f.sender.Sent()
	parts := map[int]bool{}
	for _, m := range msgs {
		e, err := work.DecodeEnvelope(m.Body)
		if err != nil {
			t.Fatal(err)
		}
		if e.Wait != 1 || e.Attempt > 1 || len(e.Errors) != 0 || !strings.HasSuffix(m.ID, "/w1") {
			t.Fatalf("sent back %+v as %s: want the same try", e, m.ID)
		}
		if m.NotBefore.Before(time.Now().Add(15 * time.Second)) {
			t.Fatalf("partition %d back at %s, want about 20 s from now", e.Part, m.NotBefore)
		}
		for i := e.Part; i < e.Part+max(e.Count, 1); i++ {
			if parts[i] {
				t.Fatalf("partition %d sent back twice", i)
			}
			parts[i] = true
		}
	}
	if len(parts)+recorded != 6 || !parts[2] {
		t.Fatalf("sent back %v, %d recorded: want partition 2 and every partition not run sent back once", parts, recorded)
	}
	runs := 0 // maximal runs of consecutive partitions sent back: one message each
	for i := range 6 {
		if parts[i] && !parts[i-1] {
			runs++
		}
	}
	if len(msgs) != runs {
		t.Fatalf("%d messages for the partitions %v sent back, want %d (one per run of consecutive ones)", len(msgs), parts, runs)
	}
	for i, n := range f.job.ran {
		if n != 1 || parts[i] && i != 2 {
			t.Fatalf("partition %d ran %d times (sent back: %v): the bundle started partitions after the slow-down", i, n, parts[i])
		}
	}
	if _, err := f.store.ReadResult(f.ctx, limitRun, 2); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("partition 2's result: %v, want none", err)
	}
	st, err := f.limits.Read(f.ctx, "api")
	if err != nil || st.SlowUntil.Before(time.Now().Add(15*time.Second)) || !strings.Contains(st.SlowReason, "429") || len(st.Slots) != 0 {
		t.Fatalf("limit state %+v %v, want a slow-down of about 20 s and no slot held", st, err)
	}
	other, err := limit.New(limit.Config{Store: f.limits, Holder: "w2"})
	if err != nil {
		t.Fatal(err)
	}
	if g, wait, err := other.Acquire(f.ctx, f.spec, "elsewhere", 1); err != nil || g.Partitions != 0 || wait < 15*time.Second {
		t.Fatalf("another instance: %+v wait %s %v, want a refusal", g, wait, err)
	}
}

// A bundle whose first partition to run asks to slow down goes back whole as one message (its
// partitions' first try, recording one by one), not as a message per partition.
func TestWorker_ABundleStoppedByItsLimitGoesBackAsOne(t *testing.T) {
	f := newLimitFixture(t, limit.Spec{Name: "api", MaxInFlight: 1}, 200)
	f.job.slowFirst = 20 * time.Second
	env, d := f.bundle(200)
	if err := f.w.HandlePartition(f.ctx, env, d); err != nil {
		t.Fatal(err)
	}
	msgs := f.sender.Sent()
	if len(msgs) != 1 || len(f.job.ran) != 1 || f.recorded() != 0 {
		t.Fatalf("%d messages sent, %d partitions run, %d recorded: want the bundle back as one message after one partition ran", len(msgs), len(f.job.ran), f.recorded())
	}
	back, err := work.DecodeEnvelope(msgs[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	if back.Part != 0 || back.Count != 200 || back.Block != 0 || back.Wait != 1 || back.Attempt > 1 || msgs[0].NotBefore.Before(time.Now().Add(15*time.Second)) {
		t.Fatalf("sent back %+v at %s, want partitions 0-199 on their first try in about 20 s", back, msgs[0].NotBefore)
	}
	// It runs whole once the slow-down is over (here: another limit's worker, no slow-down).
	f.job.slowFirst = 0
	g := newLimitFixture(t, limit.Spec{Name: "api2", MaxInFlight: 4}, 200)
	if err := g.w.HandlePartition(g.ctx, back, work.Delivery{MessageID: msgs[0].ID, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if n := g.recorded(); n != 200 || len(g.sender.Sent()) != 0 {
		t.Fatalf("%d recorded, %d sent: want the bundle sent back recorded whole", n, len(g.sender.Sent()))
	}
}

// contendedStore is a limit store whose updates always lose the race.
type contendedStore struct{ limit.Store }

func (contendedStore) Update(context.Context, string, func(*limit.State) error) (limit.State, error) {
	return limit.State{}, fmt.Errorf("50 attempts: %w", limitblob.ErrConflict)
}

// A bundle whose limit's state stays contended (its acquire's updates kept losing the race)
// is sent back whole to ask again a second or two later, like a bundle refused by a full
// limit: the delivery succeeds, nothing runs, no try is spent.
func TestWorker_LimitContendedSendsTheMessageBack(t *testing.T) {
	f := newLimitFixture(t, limit.Spec{Name: "crm", MaxInFlight: 2}, 4)
	w := f.worker(limit.Config{Store: contendedStore{f.limits}}, f.store)
	env, d := f.bundle(4)
	before := time.Now()
	if err := w.HandlePartition(f.ctx, env, d); err != nil {
		t.Fatalf("the delivery failed (a delivery spent): %v", err)
	}
	msgs := f.sender.Sent()
	if len(msgs) != 1 || len(f.job.ran) != 0 {
		t.Fatalf("%d messages sent, %d partitions run; want the message back and none run", len(msgs), len(f.job.ran))
	}
	back, err := work.DecodeEnvelope(msgs[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	wait := msgs[0].NotBefore.Sub(before)
	if back.Wait != 1 || back.Count != 4 || back.Attempt > 1 || wait < work.LimitWait || wait > 2*work.LimitWait+time.Second {
		t.Fatalf("sent back %+v to wait %s, want the same bundle on its first try, back after 1–2 s", back, wait)
	}
}

// pausingStore is a ledger whose ReadResult runs pause first.
type pausingStore struct {
	ledger.Store
	pause func()
}

func (s pausingStore) ReadResult(ctx context.Context, run string, index int) (ledger.Result, error) {
	s.pause()
	return s.Store.ReadResult(ctx, run, index)
}

// A partition whose slots are lost between its start and its call (a retry reads for its
// result first; its process is paused past the lease meanwhile) does not make the call: it
// goes back to wait for its limit on the same try, and the hold's slots are not given back
// (they are no longer its own).
func TestWorker_ASlotLostBeforeTheCallSendsThePartitionBack(t *testing.T) {
	f := newLimitFixture(t, limit.Spec{Name: "crm", MaxInFlight: 2}, 4)
	var mu sync.Mutex
	var ahead time.Duration
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return time.Now().Add(ahead) }
	pause := func() { mu.Lock(); defer mu.Unlock(); ahead += limit.DefaultLease }
	w := f.worker(limit.Config{Store: f.limits, Now: now}, pausingStore{f.store, pause})
	env := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: limitRun, Epoch: 1, Part: 2, Attempt: 2,
		Errors: []string{"try 1: boom"}}
	if err := w.HandlePartition(f.ctx, env, work.Delivery{MessageID: env.MessageID(), Count: 1}); err != nil {
		t.Fatalf("the delivery failed (a delivery spent): %v", err)
	}
	if n := f.job.runs.Load(); n != 0 {
		t.Fatalf("the job ran %d time(s) after its slot was lost, want none", n)
	}
	msgs := f.sender.Sent()
	if len(msgs) != 1 {
		t.Fatalf("%d messages sent, want the partition back", len(msgs))
	}
	back, err := work.DecodeEnvelope(msgs[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	if back.Part != 2 || back.Attempt != 2 || back.Wait != 1 || len(back.Errors) != 1 {
		t.Fatalf("sent back %+v, want partition 2 on the same try (2), waiting once, its error kept", back)
	}
	if _, err := f.store.ReadResult(f.ctx, limitRun, 2); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a result for the partition sent back: %v", err)
	}
}
