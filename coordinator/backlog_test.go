package coordinator

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/ledgertest"
	"github.com/batonfn/baton/internal/engine/limit"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/work"
)

// doneCounting is the ledger fake counting DoneCount calls.
type doneCounting struct {
	*ledgertest.Fake
	counts atomic.Int64
}

func (d *doneCounting) DoneCount(ctx context.Context, run string, shard int) (int64, error) {
	d.counts.Add(1)
	return d.Fake.DoneCount(ctx, run, shard)
}

// The backlog check reads the done shards' counts only until they show room for the next plan
// batch under the bound; a full backlog needs them all.
func TestBacklog_CountsUntilThereIsRoomForABatch(t *testing.T) {
	const next, backlog, batch = 32 * ledger.DoneUnit, 4096, 2048 // 16 stripes of 512 enqueued partitions
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	store := &doneCounting{Fake: e.fake}
	c := e.instanceWith("a", func(cfg *Config) { cfg.MaxBacklog, cfg.Store = backlog, store })
	m := ledger.Manifest{RunID: "r", Epoch: 1, Checkpoint: ledger.Checkpoint{Next: next}, DoneLayout: ledger.DoneStriped, BatchSize: batch}
	ctx := context.Background()
	lay := m.DoneLayout
	if shards := lay.Shards(next); shards != ledger.DoneStripes {
		t.Fatalf("Shards(%d) = %d", next, shards)
	}

	// Nothing done: full, after reading every shard.
	if _, full, err := c.backlog(ctx, m, new(ledger.DoneCounts)); err != nil || !full {
		t.Fatalf("nothing done: backlog full = %v, %v; want true", full, err)
	}
	if got := store.counts.Swap(0); got != ledger.DoneStripes {
		t.Errorf("nothing done: %d counts read, want all %d", got, ledger.DoneStripes)
	}

	// Everything done: room for a batch once 6,144 records are counted (2,048 outstanding), 12
	// shards of 512.
	for i := range next {
		if _, err := e.fake.AppendDone(ctx, "r", lay, 1, i); err != nil {
			t.Fatal(err)
		}
	}
	if _, full, err := c.backlog(ctx, m, new(ledger.DoneCounts)); err != nil || full {
		t.Fatalf("all done: backlog full = %v, %v; want false", full, err)
	}
	if got, want := store.counts.Load(), int64((next-(backlog-batch))/512); got != want {
		t.Errorf("all done: %d counts read, want %d", got, want)
	}
}

// workingSender records sends like memSender and, once the backlog bound's worth of
// partitions has been sent, appends their done records message by message, as workers would,
// for every partition sent from then on: the planner finds its backlog full first and must
// wait for room. Unpaced, a goroutine of its own appends them as they come; paced, a message
// completes every `per` of the test clock's time after the one before, as the planner's
// Sleep (sleep) moves that clock on.
type workingSender struct {
	*memSender
	t       *testing.T
	fake    *ledgertest.Fake
	clock   *testClock
	run     string
	backlog int
	per     time.Duration // paced: each message's time (a burst's, with burst); 0: unpaced
	burst   int           // paced: messages that complete together (0: 1)

	mu      sync.Mutex
	sent    int // partitions sent
	worst   int // most outstanding right after a send
	started bool
	queued  [][]int   // paced: messages not yet complete, in order
	next    time.Time // paced: when the first of them completes
	work    chan []int
	stop    chan struct{}
}

func newWorkingSender(t *testing.T, e *schedEnv, backlog, n int, per time.Duration) *workingSender {
	s := &workingSender{memSender: e.sender, t: t, fake: e.fake, clock: e.clock, run: memRun, backlog: backlog, per: per,
		work: make(chan []int, n), stop: make(chan struct{})}
	t.Cleanup(func() { close(s.stop) })
	return s
}

func (s *workingSender) Send(ctx context.Context, msgs []transport.Message) error {
	if err := s.memSender.Send(ctx, msgs); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		env, err := work.DecodeEnvelope(m.Body)
		if err != nil || env.Kind != work.KindPartition {
			continue
		}
		var idx []int
		for k := range max(env.Count, 1) {
			idx = append(idx, env.Part+k)
		}
		s.sent += len(idx)
		if s.per > 0 {
			if len(s.queued) == 0 {
				s.next = s.clock.Now().Add(s.per)
			}
			s.queued = append(s.queued, idx)
		} else {
			s.work <- idx
		}
	}
	done, err := ledger.CountDone(ctx, s.fake, s.run, ledger.DoneStriped, s.sent, 0)
	if err != nil {
		return err
	}
	s.worst = max(s.worst, s.sent-int(done))
	if !s.started && s.sent >= s.backlog {
		s.started = true
		if s.per > 0 {
			s.next = s.clock.Now().Add(s.per)
		} else {
			go s.drain()
		}
	}
	return nil
}

// drain appends the done records of each message sent, in order (unpaced).
func (s *workingSender) drain() {
	for {
		select {
		case <-s.stop:
			return
		case idx := <-s.work:
			s.complete(idx)
		}
	}
}

// sleep is the planner's Sleep (paced): it moves the test clock d on and completes the
// messages due by then.
func (s *workingSender) sleep(ctx context.Context, d time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now().Add(d)
	s.clock.set(now)
	for s.started && len(s.queued) > 0 && !s.next.After(now) {
		for k := max(s.burst, 1); k > 0 && len(s.queued) > 0; k-- {
			s.complete(s.queued[0])
			s.queued = s.queued[1:]
		}
		s.next = s.next.Add(s.per)
	}
	return ctx.Err() == nil
}

func (s *workingSender) complete(idx []int) {
	for _, i := range idx {
		if _, err := s.fake.AppendDone(context.Background(), s.run, ledger.DoneStriped, 1, i); err != nil {
			s.t.Error(err)
		}
	}
}

// A run larger than its backlog is fed as workers drain it, in the one invocation that plans
// it: the leader waits in it for room for each next batch (polling the done count), never
// leaves the run to a wave check, and never has more than the bound outstanding.
func TestWaves_RefilledInTheInvocationAsWorkersDrain(t *testing.T) {
	const n, backlog = 40, 8
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	ws := newWorkingSender(t, e, backlog, n, 0)
	store := &doneCounting{Fake: e.fake}
	c := e.instanceWith("a", func(cfg *Config) {
		cfg.MaxBacklog, cfg.Sender, cfg.Store = backlog, ws, store
		cfg.RefillWait = time.Minute // a loaded machine's goroutine may take a while; the run is quick
	}, countSchedule("s", n, config.OverlapSkip))
	e.startAlone(c)
	m := e.manifest(memRun)
	if !m.PlanDone || m.Partitions != n {
		t.Fatalf("run planned %v with %d partitions; want all %d in the one invocation", m.PlanDone, m.Partitions, n)
	}
	e.sender.wantOnce(t, n)
	if ws.worst > backlog {
		t.Errorf("%d partitions outstanding after a send, bound %d", ws.worst, backlog)
	}
	// Each of the 8 batches after the first two waited for room: a count at least, and one
	// more for a poll that still found the backlog full.
	if got := store.counts.Load(); got < n/4-2 {
		t.Errorf("%d done counts read, want the leader to have polled for room for each batch", got)
	}
	for _, msg := range e.sender.messages() {
		if env, err := work.DecodeEnvelope(msg.Body); err == nil && env.Kind == work.KindCheck && env.Round >= continueRound {
			t.Errorf("a wave check was sent (%+v): the leader should have waited for room", env)
		}
	}
}

// A striped run of 64 units, 4 a stripe, fed in batches of 512 (8 messages of 64) under a
// backlog of 2,048, its workers completing a message every 10 ms of the test's clock, which
// the planner's waits move on: room for a batch comes every 80 ms.
const drainN, drainBacklog, drainBatch = 64 * ledger.DoneUnit, 2048, 512

// drainRun plans that run with refillWait and checks that the one invocation planned it all
// under the bound; it returns the environment and the done counts read.
func drainRun(t *testing.T, refillWait time.Duration) (*schedEnv, *doneCounting) {
	t.Helper()
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	ws := newWorkingSender(t, e, drainBacklog, drainN, 10*time.Millisecond)
	store := &doneCounting{Fake: e.fake}
	c := e.instanceWith("a", func(cfg *Config) {
		cfg.MaxBacklog, cfg.BatchSize, cfg.Sender, cfg.Store, cfg.Sleep = drainBacklog, drainBatch, ws, store, ws.sleep
		cfg.RefillWait = refillWait
	}, countSchedule("s", drainN, config.OverlapSkip))
	e.startAlone(c)
	if m := e.manifest(memRun); !m.PlanDone || m.Partitions != drainN {
		t.Fatalf("run planned %v with %d partitions; want all %d in the one invocation", m.PlanDone, m.Partitions, drainN)
	}
	if ws.worst > drainBacklog {
		t.Errorf("%d partitions outstanding after a send, bound %d", ws.worst, drainBacklog)
	}
	return e, store
}

// Waiting for room costs a count of the backlog and a few single HEADs a batch, not a count
// per look: the leader looks at the sentinel shard (the one recording the last partition that
// must be done) until it says there is likely room.
func TestWaves_WaitingForRoomLooksAtOneShard(t *testing.T) {
	_, store := drainRun(t, time.Minute)
	// 29 batches waited for room: a count each (at most 16 HEADs) plus the sentinel's looks.
	waited := int64(drainN/drainBatch - drainBacklog/drainBatch + 1)
	if got, most := store.counts.Load(), waited*(ledger.DoneStripes+8); got > most {
		t.Errorf("%d done counts read for %d batches that waited, want at most %d (a count and a few looks each)", got, waited, most)
	}
}

// A backlog that drains more slowly than RefillWait frees room for the next batch (a limited
// job's, say) is still refilled in the invocation, as long as counts see it drain: no wave
// check, no WavePause with the queue run dry. Here RefillWait is 30 ms, room comes every 80.
func TestWaves_ASlowlyDrainingBacklogIsRefilledInTheInvocation(t *testing.T) {
	e, _ := drainRun(t, 30*time.Millisecond)
	for _, msg := range e.sender.messages() {
		if env, err := work.DecodeEnvelope(msg.Body); err == nil && env.Kind == work.KindCheck && env.Round >= continueRound {
			t.Fatalf("a wave check was sent (%+v): the leader should have waited for the draining backlog", env)
		}
	}
}

// The next wait of a leader whose backlog is full follows the completions its counts have
// seen (kept from one batch to the next: the mean since the first), and backs off while it
// knows no rate.
func TestDrainRate(t *testing.T) {
	var r drainRate
	if got := r.wait(100, 50*time.Millisecond); got != 50*time.Millisecond {
		t.Errorf("no count yet: wait %s, want the backoff", got)
	}
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	r.observe(500, t0)
	if got := r.wait(100, 80*time.Millisecond); got != 80*time.Millisecond {
		t.Errorf("one count: wait %s, want the backoff", got)
	}
	r.observe(500, t0.Add(time.Second)) // nothing completed: still no rate
	if got := r.wait(100, 80*time.Millisecond); got != 80*time.Millisecond {
		t.Errorf("no progress: wait %s, want the backoff", got)
	}
	r.observe(1500, t0.Add(2*time.Second)) // 1,000 in 2 s: 500 a second
	for _, tc := range []struct {
		over int64
		want time.Duration
	}{
		{500, time.Second},          // a second more at 500/s
		{5, 200 * time.Millisecond}, // never less than 100 partitions' time
		{2048, 4096 * time.Millisecond},
	} {
		if got := r.wait(tc.over, time.Hour); got != tc.want {
			t.Errorf("at 500/s, %d over: wait %s, want %s", tc.over, got, tc.want)
		}
	}
	if fast := (drainRate{perSec: 100_000}); fast.wait(5, time.Hour) != refillPoll {
		t.Errorf("at 100,000/s, 5 over: wait %s, want the poll floor %s", fast.wait(5, time.Hour), refillPoll)
	}
	// A burst of 4,000 just after: the mean, not the burst's pace (40,000/s).
	r.observe(5500, t0.Add(2100*time.Millisecond))
	if got := r.wait(5000, time.Hour); got < 2*time.Second {
		t.Errorf("after a burst, 5,000 over: wait %s, want the mean's 2.1 s", got)
	}
}

// A full backlog that does not drain at all (a message lost, say) holds planning back for a
// quarter of the run timeout, not for good: then the bound is lifted for the run and the rest
// is sent, so the run is planned and its re-enqueue rounds can bring back what was lost,
// instead of timing out while planning.
func TestWaves_ABacklogThatDoesNotDrainIsLifted(t *testing.T) {
	const n, backlog = 22, 8
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	c := e.instanceWith("a", func(cfg *Config) { cfg.MaxBacklog, cfg.RefillWait = backlog, -1 }, countSchedule("s", n, config.OverlapSkip))
	e.startAlone(c)
	ctx := testCtx(t)
	stall := c.stallAfter(e.manifest(memRun))
	if stall != time.Hour/4 {
		t.Fatalf("stallAfter = %s, want a quarter of the 1h run timeout", stall)
	}
	// Nothing completes. Wave checks before the stall bound keep waiting.
	for _, after := range []time.Duration{c.cfg.WavePause, stall / 2, stall - time.Minute} {
		envs, msgs := e.sender.checksSent(t)
		wave, msg := envs[len(envs)-1], msgs[len(msgs)-1]
		if wave.Round < continueRound {
			t.Fatalf("the last check %+v is not a wave check", wave)
		}
		e.clock.set(at2(memOccurrence).Add(after))
		if err := c.Check(ctx, wave, firstDelivery); err != nil {
			t.Fatal(err)
		}
		if m := e.manifest(memRun); m.Checkpoint.Next != backlog || m.Checkpoint.Unbounded {
			t.Fatalf("%s in: %d enqueued, unbounded %v; want the bound to hold (%d)", after, m.Checkpoint.Next, m.Checkpoint.Unbounded, backlog)
		}
		_ = msg
	}
	envs, _ := e.sender.checksSent(t)
	e.clock.set(at2(memOccurrence).Add(stall + time.Second))
	if err := c.Check(ctx, envs[len(envs)-1], firstDelivery); err != nil {
		t.Fatal(err)
	}
	m := e.manifest(memRun)
	if !m.PlanDone || m.Partitions != n || !m.Checkpoint.Unbounded || m.State.Final() {
		t.Fatalf("after the stall: planned %v, %d partitions, unbounded %v, state %s; want the rest sent, the run going on",
			m.PlanDone, m.Partitions, m.Checkpoint.Unbounded, m.State)
	}
	e.sender.wantOnce(t, n)
}

// startAlone starts schedule s's run at memOccurrence on c and delivers its start check, which
// must be the only check delivered: the run is planned in that one invocation, or it left a
// wave check for later.
func (e *schedEnv) startAlone(c *Coordinator) {
	e.t.Helper()
	e.startCursor("s")
	e.heartbeat(c, memOccurrence)
	if got := e.deliverChecks(c); got != 1 {
		e.t.Fatalf("delivered %d checks, want the start check alone", got)
	}
}

// A job under an in-flight limit gets a backlog bound of at least twice what its limit keeps
// outstanding at once: a bundle holds all of its partitions while it runs up to
// BundleConcurrency of them, so 500 in flight in bundles of 256 takes 16 bundles, 4,096
// partitions, and the bound of 4,096 would leave the slots they give back nothing queued. A
// job under any limit gets at least two plan batches: one queued behind the one running.
func TestBacklog_ALimitRaisesTheBound(t *testing.T) {
	for _, tc := range []struct {
		name           string
		limit          *limit.Spec
		backlog, batch int
		want           int
	}{
		{"no limit", nil, 4096, 2048, 4096},
		{"a rate only", &limit.Spec{Name: "api", Rate: 100, Per: time.Second}, 4096, 2048, 4096},
		{"8 in flight: one bundle of 256", &limit.Spec{Name: "api", MaxInFlight: 8}, 4096, 2048, 4096},
		{"500 in flight: 16 bundles of 256", &limit.Spec{Name: "api", MaxInFlight: 500}, 4096, 2048, 8192},
		{"500 in flight, a larger bound kept", &limit.Spec{Name: "api", MaxInFlight: 500}, 50000, 2048, 50000},
		{"10 in flight in bundles of 1", &limit.Spec{Name: "api", MaxInFlight: 10}, 8, 4, 20},
		{"unbounded stays unbounded", &limit.Spec{Name: "api", MaxInFlight: 500}, 0, 2048, 0},
		{"a rate, a bound of one batch: two", &limit.Spec{Name: "api", Rate: 100, Per: time.Second}, 1024, 1024, 2048},
		{"8 in flight, a bound of one batch: two", &limit.Spec{Name: "api", MaxInFlight: 8}, 1024, 1024, 2048},
		{"no limit, a bound of one batch: kept", nil, 1024, 1024, 1024},
		{"a rate, unbounded stays unbounded", &limit.Spec{Name: "api", Rate: 100, Per: time.Second}, 0, 1024, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newSchedEnv(t, "2026-11-21T10:00:01Z")
			if tc.limit != nil {
				e.jobs.SetLimit("count", *tc.limit)
			}
			c := e.instanceWith("a", func(cfg *Config) { cfg.MaxBacklog, cfg.BatchSize = tc.backlog, tc.batch })
			if got := c.maxBacklog(ledger.Manifest{Job: "count", BatchSize: tc.batch}); got != tc.want {
				t.Errorf("bound = %d, want %d", got, tc.want)
			}
		})
	}
}

// The leader of such a job enqueues up to the raised bound before it waits for room.
func TestWaves_ALimitedJobsBacklogHoldsTheNextBundles(t *testing.T) {
	const n, backlog = 40, 8
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	e.jobs.SetLimit("count", limit.Spec{Name: "api", MaxInFlight: 10}) // 10 bundles of 1 at once
	c := e.instanceWith("a", func(cfg *Config) { cfg.MaxBacklog, cfg.RefillWait = backlog, -1 }, countSchedule("s", n, config.OverlapSkip))
	e.startAlone(c)
	if m := e.manifest(memRun); m.Checkpoint.Next != 20 || m.PlanDone {
		t.Fatalf("%d enqueued (planned %v), want 20: twice the 10 the limit runs at once, over the bound of %d", m.Checkpoint.Next, m.PlanDone, backlog)
	}
}

// Work that completes in bursts further apart than RefillWait (bundles that all take a
// while, a limited job's in step) leaves its wave to a check a few times at most: each leader
// records how long the backlog had been quiet when it left (Checkpoint.Quiet), and the next
// waits twice as long, so the leaders learn the bursts' spacing instead of leaving at each.
// Here the whole backlog completes every 200 ms and RefillWait is 30 ms.
func TestWaves_ABacklogDrainedInBurstsKeepsItsLeaderWaiting(t *testing.T) {
	const burstEvery = 200 * time.Millisecond
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	ws := newWorkingSender(t, e, drainBacklog, drainN, burstEvery)
	ws.burst = drainBacklog / 64 // the backlog's messages of 64
	c := e.instanceWith("a", func(cfg *Config) {
		cfg.MaxBacklog, cfg.BatchSize, cfg.Sender, cfg.Sleep = drainBacklog, drainBatch, ws, ws.sleep
		cfg.RefillWait = 30 * time.Millisecond
	}, countSchedule("s", drainN, config.OverlapSkip))
	e.startAlone(c)
	ctx := testCtx(t)
	leaves, quiet := 0, []time.Duration{}
	for seen := 0; !e.manifest(memRun).PlanDone; {
		envs, _ := e.sender.checksSent(t)
		var wave *work.Envelope
		for i := seen; i < len(envs); i++ {
			if envs[i].Round >= continueRound {
				wave = &envs[i]
			}
		}
		seen = len(envs)
		if wave == nil {
			t.Fatalf("planning stopped without a wave check (%d leaves)", leaves)
		}
		leaves++
		if leaves > 8 {
			t.Fatalf("the leaders left the wave %d times (quiet spells recorded %v); want them to learn the bursts' spacing", leaves, quiet)
		}
		quiet = append(quiet, e.manifest(memRun).Checkpoint.Quiet)
		ws.sleep(ctx, c.cfg.WavePause) // the check comes WavePause later
		if err := c.Check(ctx, *wave, firstDelivery); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("the leaders left the wave %d times, quiet spells recorded %v", leaves, quiet)
	if leaves > 4 {
		t.Errorf("the leaders left the wave %d times (quiet spells recorded %v), want at most 4", leaves, quiet)
	}
	if ws.worst > drainBacklog {
		t.Errorf("%d partitions outstanding after a send, bound %d", ws.worst, drainBacklog)
	}
}

// waitingLeader is a coordinator over store whose backlog of 4,096 is full (8,192 enqueued,
// batches of 2,048, RefillWait 2 s; its waits move e's clock on), and that run's manifest, for
// calling awaitRoom directly.
func waitingLeader(e *schedEnv, store Ledger) (*Coordinator, ledger.Manifest) {
	c := e.instanceWith("a", func(cfg *Config) {
		cfg.MaxBacklog, cfg.BatchSize, cfg.Store, cfg.RefillWait = 4096, 2048, store, 2*time.Second
		cfg.Sleep = func(ctx context.Context, d time.Duration) bool {
			e.clock.set(e.clock.Now().Add(d))
			return ctx.Err() == nil
		}
	})
	return c, ledger.Manifest{RunID: "r", Epoch: 1, Checkpoint: ledger.Checkpoint{Next: 8192}, DoneLayout: ledger.DoneStriped, BatchSize: 2048}
}

// While the sentinel shard stays short, nothing there completing (work that completes in
// bursts, between them), the leader's looks at it back off to RefillWait/4 even when its
// rate says the backlog should have drained long ago: the shard is not polled every 25 ms.
func TestWaves_LooksBackOffWhileTheSentinelShardStaysShort(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	store := &doneCounting{Fake: e.fake}
	c, m := waitingLeader(e, store)
	drain := drainRate{perSec: 1e6, at: e.clock.Now()} // a rate far faster than the work
	// Nothing completes: the leader looks for RefillWait, counts once, and leaves (the run's
	// manifest does not exist here: leaving fails, which this test does not look at).
	_, _ = c.awaitRoom(testCtx(t), election.Lease{Epoch: 1}, func() {}, m, time.Now(), &drain)
	looks := store.counts.Load() - 2*ledger.DoneStripes // two counts read every shard: at RefillWait, and before leaving
	if looks > 12 {
		t.Errorf("%d looks at the sentinel shard in %s, want at most 12", looks, c.cfg.RefillWait)
	}
}

// shardCounting is the ledger fake counting DoneCount calls per shard.
type shardCounting struct {
	*ledgertest.Fake
	mu     sync.Mutex
	counts map[int]int
}

func (d *shardCounting) DoneCount(ctx context.Context, run string, shard int) (int64, error) {
	d.mu.Lock()
	d.counts[shard]++
	d.mu.Unlock()
	return d.Fake.DoneCount(ctx, run, shard)
}

// Once the sentinel shard holds every partition the next batch needs while other shards lag,
// only a count can tell when there is room: the leader stops looking at the sentinel, so that
// shard takes no more calls than any other (one a count); and counting at each look, it still
// leaves once no count has seen the backlog drain for RefillWait.
func TestWaves_ASentinelShardThatIsDoneIsNotLookedAtAgain(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	// The sentinel's shard has all it needs; the others nothing.
	c, m, store, sentinel := countedWait(t, e, func(s, sentinel int) bool { return s == sentinel })
	drain := drainRate{perSec: 1000, at: e.clock.Now()}
	start := e.clock.Now()
	// Nothing more completes: the leader counts at each look, and leaves after RefillWait
	// (the run's manifest does not exist here: leaving fails, which this test does not look at).
	_, _ = c.awaitRoom(testCtx(t), election.Lease{Epoch: 1}, func() {}, m, time.Now(), &drain)
	if waited := e.clock.Now().Sub(start); waited > c.cfg.RefillWait+time.Second {
		t.Errorf("the leader waited %s on a backlog that did not drain, want it to leave after RefillWait (%s)", waited, c.cfg.RefillWait)
	}
	other := store.counts[(sentinel+1)%ledger.DoneStripes]
	if got := store.counts[sentinel]; got > other+1 {
		t.Errorf("the sentinel shard was read %d times, another shard %d: want it looked at once, then only counted", got, other)
	}
}

// A sentinel look that finds its shard full hands its count to the count that follows, which
// reads every other shard the next batch needs but not that one again.
func TestWaves_TheCountAfterAFullSentinelDoesNotReadItAgain(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	c, m, store, sentinel := countedWait(t, e, func(int, int) bool { return true })
	drain := drainRate{perSec: 1000, at: e.clock.Now()}
	full, err := c.awaitRoom(testCtx(t), election.Lease{Epoch: 1}, func() {}, m, time.Now(), &drain)
	if err != nil || full {
		t.Fatalf("awaitRoom = %v, %v; want room", full, err)
	}
	if got := store.counts[sentinel]; got != 1 {
		t.Errorf("the sentinel shard was read %d times, want once (its look)", got)
	}
	lay, target := m.DoneLayout, m.Checkpoint.Next-c.room(m)
	for s := range lay.Shards(target) {
		if s != sentinel && store.counts[s] != 1 {
			t.Errorf("shard %d was read %d times, want once (the count)", s, store.counts[s])
		}
	}
}

// countedWait is a waiting leader over a store counting its done-shard reads, with each
// partition of [0, target) done (target: the next batch's room) whose shard keep takes; it
// returns the sentinel shard too.
func countedWait(t *testing.T, e *schedEnv, keep func(shard, sentinel int) bool) (*Coordinator, ledger.Manifest, *shardCounting, int) {
	t.Helper()
	store := &shardCounting{Fake: e.fake, counts: map[int]int{}}
	c, m := waitingLeader(e, store)
	lay := m.DoneLayout
	target := m.Checkpoint.Next - c.room(m) // [0, target) done leaves room
	sentinel := lay.Shard(target - 1)
	for i := range target {
		if keep(lay.Shard(i), sentinel) {
			if _, err := e.fake.AppendDone(testCtx(t), "r", lay, 1, i); err != nil {
				t.Fatal(err)
			}
		}
	}
	return c, m, store, sentinel
}

// growingDone is the ledger fake whose done shards hold partitions [0, upTo) of a striped run
// (without storing them: a run of millions), counting the reads of each shard.
type growingDone struct {
	*ledgertest.Fake
	mu    sync.Mutex
	upTo  int
	reads map[int]int
}

func (g *growingDone) DoneCount(_ context.Context, _ string, shard int) (int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reads[shard]++
	return ledger.DoneStriped.Expected(g.upTo, shard), nil
}

// A leader feeding a run far into its millions, batch after batch in one slice, reads the done
// shards that already hold every partition they record once, not at every count: a count costs
// the shards still filling (those of the current group), however large the run has grown.
func TestBacklog_ACountReadsOnlyTheShardsStillFilling(t *testing.T) {
	const backlog, batch, batches = config.DefaultMaxBacklog, 2048, 10
	group := ledger.DoneUnit * ledger.DoneStripes * ledger.DoneUnitsPerStripe
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	store := &growingDone{Fake: e.fake, reads: map[int]int{}}
	c := e.instanceWith("a", func(cfg *Config) {
		cfg.MaxBacklog, cfg.BatchSize, cfg.Store, cfg.RefillWait = backlog, batch, store, 2*time.Second
		cfg.Sleep = func(ctx context.Context, d time.Duration) bool { // workers complete 4 units a wait
			e.clock.set(e.clock.Now().Add(d))
			store.mu.Lock()
			store.upTo += 4 * ledger.DoneUnit
			store.mu.Unlock()
			return ctx.Err() == nil
		}
	})
	next := 4*group - 2*batch // in the fourth group of 16 shards, the three before it complete
	store.upTo = next - backlog
	m := ledger.Manifest{RunID: "r", Epoch: 1, Checkpoint: ledger.Checkpoint{Next: next}, DoneLayout: ledger.DoneStriped, BatchSize: batch}
	drain := drainRate{}
	for b := range batches {
		full, err := c.awaitRoom(testCtx(t), election.Lease{Epoch: 1}, func() {}, m, time.Now(), &drain)
		if err != nil || full {
			t.Fatalf("batch %d: awaitRoom = %v, %v; want room", b, full, err)
		}
		m.Checkpoint.Next += batch // sent
	}
	lay := m.DoneLayout
	if first := lay.Shards(next - backlog); first < 3*ledger.DoneStripes {
		t.Fatalf("the test's run holds %d complete shards, want the 48 of three groups", first)
	}
	for s := range 3 * ledger.DoneStripes {
		if store.reads[s] > 1 {
			t.Errorf("shard %d, complete before the slice began, was read %d times over %d batches, want once", s, store.reads[s], batches)
		}
	}
	var total int
	for _, n := range store.reads {
		total += n
	}
	t.Logf("%d done-shard reads over %d batches of %d (%d shards)", total, batches, batch, lay.Shards(m.Checkpoint.Next))
}
