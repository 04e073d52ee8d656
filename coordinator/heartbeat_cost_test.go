package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
)

// countingLedger counts the calls the coordinator makes to its ledger, by method, and the
// entries each listing hands back (under "<method> entries"): what a heartbeat costs in
// storage, whatever the store behind it. It implements Ledger without embedding it, so a
// method added to Ledger is counted or the package does not compile.
type countingLedger struct {
	inner Ledger

	mu     sync.Mutex
	counts map[string]int
}

var _ Ledger = (*countingLedger)(nil)

func newCountingLedger(inner Ledger) *countingLedger {
	return &countingLedger{inner: inner, counts: map[string]int{}}
}

func (l *countingLedger) add(key string, n int) {
	l.mu.Lock()
	l.counts[key] += n
	l.mu.Unlock()
}

// take returns the counts since the last take and starts counting afresh.
func (l *countingLedger) take() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.counts
	l.counts = map[string]int{}
	return out
}

// costString renders counts in a stable order, for failure messages.
func costString(counts map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, counts[k]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func (l *countingLedger) EnsureContainer(ctx context.Context) error {
	l.add("EnsureContainer", 1)
	return l.inner.EnsureContainer(ctx)
}

func (l *countingLedger) CreateManifest(ctx context.Context, m *ledger.Manifest) error {
	l.add("CreateManifest", 1)
	return l.inner.CreateManifest(ctx, m)
}

func (l *countingLedger) ReadManifest(ctx context.Context, run string) (ledger.Manifest, error) {
	l.add("ReadManifest", 1)
	return l.inner.ReadManifest(ctx, run)
}

func (l *countingLedger) UpdateManifest(ctx context.Context, run string, epoch int64, fn func(*ledger.Manifest) error) (ledger.Manifest, error) {
	l.add("UpdateManifest", 1)
	return l.inner.UpdateManifest(ctx, run, epoch, fn)
}

func (l *countingLedger) PutPlanBatch(ctx context.Context, run string, b ledger.PlanBatch) error {
	l.add("PutPlanBatch", 1)
	return l.inner.PutPlanBatch(ctx, run, b)
}

func (l *countingLedger) ReadPlanBatch(ctx context.Context, run string, batch int) (ledger.PlanBatch, error) {
	l.add("ReadPlanBatch", 1)
	return l.inner.ReadPlanBatch(ctx, run, batch)
}

func (l *countingLedger) PutResult(ctx context.Context, r ledger.Result) error {
	l.add("PutResult", 1)
	return l.inner.PutResult(ctx, r)
}

func (l *countingLedger) ListResults(ctx context.Context, run string, fn func(ledger.ResultRef) error) error {
	l.add("ListResults", 1)
	return l.inner.ListResults(ctx, run, func(r ledger.ResultRef) error { l.add("ListResults entries", 1); return fn(r) })
}

func (l *countingLedger) ReadResult(ctx context.Context, run string, i int) (ledger.Result, error) {
	l.add("ReadResult", 1)
	return l.inner.ReadResult(ctx, run, i)
}

func (l *countingLedger) PutBlock(ctx context.Context, b ledger.Block) error {
	l.add("PutBlock", 1)
	return l.inner.PutBlock(ctx, b)
}

func (l *countingLedger) ReadBlock(ctx context.Context, run string, s ledger.Span) (ledger.Block, error) {
	l.add("ReadBlock", 1)
	return l.inner.ReadBlock(ctx, run, s)
}

func (l *countingLedger) AppendDone(ctx context.Context, run string, layout ledger.DoneLayout, epoch int64, indexes ...int) (int64, error) {
	l.add("AppendDone", 1)
	return l.inner.AppendDone(ctx, run, layout, epoch, indexes...)
}

func (l *countingLedger) CreateDone(ctx context.Context, run string, shard int) error {
	l.add("CreateDone", 1)
	return l.inner.CreateDone(ctx, run, shard)
}

func (l *countingLedger) DoneCount(ctx context.Context, run string, shard int) (int64, error) {
	l.add("DoneCount", 1)
	return l.inner.DoneCount(ctx, run, shard)
}

func (l *countingLedger) ReadSchedule(ctx context.Context, name string) (ledger.ScheduleState, error) {
	l.add("ReadSchedule", 1)
	return l.inner.ReadSchedule(ctx, name)
}

func (l *countingLedger) UpdateSchedule(ctx context.Context, name string, fn func(*ledger.ScheduleState) error) (ledger.ScheduleState, error) {
	l.add("UpdateSchedule", 1)
	return l.inner.UpdateSchedule(ctx, name, fn)
}

func (l *countingLedger) ReadLegacySchedule(ctx context.Context) (ledger.LegacySchedule, bool, error) {
	l.add("ReadLegacySchedule", 1)
	return l.inner.ReadLegacySchedule(ctx)
}

func (l *countingLedger) ListRuns(ctx context.Context, fn func(run string) bool) error {
	l.add("ListRuns", 1)
	return l.inner.ListRuns(ctx, func(run string) bool { l.add("ListRuns entries", 1); return fn(run) })
}

func (l *countingLedger) ListActive(ctx context.Context, fn func(ledger.ActiveRun) bool) error {
	l.add("ListActive", 1)
	return l.inner.ListActive(ctx, func(a ledger.ActiveRun) bool { l.add("ListActive entries", 1); return fn(a) })
}

func (l *countingLedger) RemoveActive(ctx context.Context, run string) error {
	l.add("RemoveActive", 1)
	return l.inner.RemoveActive(ctx, run)
}

func (l *countingLedger) AddActive(ctx context.Context, a ledger.ActiveRun) error {
	l.add("AddActive", 1)
	return l.inner.AddActive(ctx, a)
}

func (l *countingLedger) ReadBackfill(ctx context.Context) (ledger.Backfill, error) {
	l.add("ReadBackfill", 1)
	return l.inner.ReadBackfill(ctx)
}

func (l *countingLedger) WriteBackfill(ctx context.Context, b ledger.Backfill) error {
	l.add("WriteBackfill", 1)
	return l.inner.WriteBackfill(ctx, b)
}

func (l *countingLedger) ListRunPage(ctx context.Context, token string, max int) ([]string, string, error) {
	l.add("ListRunPage", 1)
	runs, next, err := l.inner.ListRunPage(ctx, token, max)
	l.add("ListRunPage entries", len(runs))
	return runs, next, err
}

func (l *countingLedger) DeleteRun(ctx context.Context, run string) error {
	l.add("DeleteRun", 1)
	return l.inner.DeleteRun(ctx, run)
}

func (l *countingLedger) ReadSweep(ctx context.Context) (ledger.Sweep, error) {
	l.add("ReadSweep", 1)
	return l.inner.ReadSweep(ctx)
}

func (l *countingLedger) WriteSweep(ctx context.Context, s ledger.Sweep) error {
	l.add("WriteSweep", 1)
	return l.inner.WriteSweep(ctx, s)
}

// withHistory is a scheduler world whose ledger holds n finished runs of schedule "s" (every
// 10 s) and the schedule's state after them, as n heartbeats 10 s apart left them, each run
// finished before the next heartbeat. It returns the time of the last heartbeat.
func withHistory(t *testing.T, n int) (*schedEnv, time.Time) {
	t.Helper()
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	old := e.instance("old", countSchedule("s", 1, config.OverlapSkip))
	at := e.clock.Now()
	for range n {
		at = at.Add(10 * time.Second)
		out := e.heartbeat(old, at.Format(time.RFC3339Nano))
		if len(out.Decisions) != 1 || out.Decisions[0].Status != StatusStarted {
			t.Fatalf("history heartbeat at %s decided %+v, want one run started", at, out.Decisions)
		}
		e.finish(out.Decisions[0].Run)
	}
	return e, at
}

// A heartbeat's storage calls depend on the runs in progress, never on the ledger's history:
// on a ledger of 1,000 finished runs and on one of 10, an instance that starts on it (its
// memory empty, the index to fill as after an upgrade) makes exactly the same calls per
// heartbeat once the one-time backfill is done — one listing of the index, no listing of the
// runs. The backfill itself reads at most maxBackfillReads records a heartbeat.
func TestHeartbeatCost_IndependentOfHistory(t *testing.T) {
	const measured = 3
	cost := map[int][]map[string]int{}
	for _, n := range []int{1000, 10} {
		e, at := withHistory(t, n)
		runs := 0
		if err := e.fake.ListRuns(testCtx(t), func(string) bool { runs++; return true }); err != nil || runs != n {
			t.Fatalf("history of %d: the ledger holds %d runs (%v)", n, runs, err)
		}
		// As a ledger written before the index existed: the new instance fills it first.
		if err := e.fake.WriteBackfill(testCtx(t), ledger.Backfill{}); err != nil {
			t.Fatal(err)
		}
		cl := newCountingLedger(e.fake)
		c := e.instanceWith("new", func(cfg *Config) { cfg.Store = cl }, countSchedule("s", 1, config.OverlapSkip))
		beat := func() map[string]int {
			t.Helper()
			at = at.Add(10 * time.Second)
			cl.take()
			out := e.heartbeat(c, at.Format(time.RFC3339Nano))
			got := cl.take()
			if len(out.Decisions) != 1 || out.Decisions[0].Status != StatusStarted || out.Supervised != 0 {
				t.Fatalf("history of %d: heartbeat at %s decided %+v and drove %d, want one run started and none driven",
					n, at, out.Decisions, out.Supervised)
			}
			e.finish(out.Decisions[0].Run)
			return got
		}
		backfill := 0
		for done := false; !done; {
			got := beat()
			backfill++
			t.Logf("history of %d: backfilling heartbeat %d: %s", n, backfill, costString(got))
			if reads := got["ReadManifest"]; reads > maxBackfillReads+3 {
				t.Errorf("history of %d: a backfilling heartbeat read %d records, want at most %d and the schedule's",
					n, reads, maxBackfillReads)
			}
			b, err := e.fake.ReadBackfill(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			done = b.Done
			if !done && backfill > n/maxBackfillReads+1 {
				t.Fatalf("history of %d: the backfill is not done after %d heartbeats", n, backfill)
			}
		}
		for range measured {
			cost[n] = append(cost[n], beat())
		}
	}
	t.Logf("calls per heartbeat once the backfill is done, on 1,000 finished runs: %s", costString(cost[1000][0]))
	for i := range measured {
		big, small := cost[1000][i], cost[10][i]
		if !maps.Equal(big, small) {
			t.Errorf("heartbeat %d after the backfill: %s on 1,000 finished runs, %s on 10; want the same", i+1,
				costString(big), costString(small))
		}
		if big["ListActive"] != 1 || big["ListRuns"] != 0 || big["ReadBackfill"] != 0 {
			t.Errorf("heartbeat %d after the backfill: %s; want one listing of the index, none of the runs, no backfill read",
				i+1, costString(big))
		}
	}
}

// With N runs in progress none of which is due, a heartbeat lists the index once and reads no
// record: each run is read once per instance (its first heartbeat, memory empty) and then only
// when its bound passes.
func TestHeartbeatCost_ActiveRunsNotDue(t *testing.T) {
	for _, n := range []int{1, 100, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			e := newSchedEnv(t, "2026-11-21T10:00:01Z")
			ctx := testCtx(t)
			starter := e.instance("starter")
			for i := range n {
				if _, err := starter.StartManual(ctx, ManualRequest{Job: "count", Params: json.RawMessage(`{"n":1}`),
					IdempotencyKey: fmt.Sprint(i)}); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.fake.WriteBackfill(ctx, ledger.Backfill{Done: true}); err != nil { // a ledger with its index
				t.Fatal(err)
			}
			cl := newCountingLedger(e.fake)
			c := e.instanceWith("a", func(cfg *Config) { cfg.Store = cl })
			start := e.clock.Now()
			beat := func(after time.Duration) map[string]int {
				t.Helper()
				cl.take()
				out := e.heartbeat(c, start.Add(after).Format(time.RFC3339Nano))
				if out.Supervised != 0 {
					t.Fatalf("heartbeat %s after the starts drove %d runs, want none (none is due)", after, out.Supervised)
				}
				return cl.take()
			}
			if first := beat(time.Second); first["ReadManifest"] != n || first["ListActive"] != 1 || first["ListRuns"] != 0 {
				t.Errorf("the instance's first heartbeat: %s; want one listing and each of the %d runs read once", costString(first), n)
			}
			want := map[string]int{"ListActive": 1, "ListActive entries": n}
			for _, after := range []time.Duration{2 * time.Second, 10 * time.Second, c.checkDelay() - time.Second} {
				if got := beat(after); !maps.Equal(got, want) {
					t.Errorf("heartbeat %s after the starts, %d runs in progress not due: %s; want %s", after, n,
						costString(got), costString(want))
				}
			}
		})
	}
}

// The retention sweep's cost, on a ledger of 300 recent occurrences of a schedule, 250 ad-hoc
// runs that succeeded 40 days ago and 50 that failed 40 days ago (kept 90): each heartbeat of a
// pass makes one sweep read, one listing page of at most DefaultRetentionPage run IDs, one
// manifest read per listed run that is not a recent occurrence (its ID dates it) nor known
// from an earlier pass, one DeleteRun per run deleted, one sweep write. The next day's pass
// reads no manifest at all: the kept runs' deletion times are remembered.
func TestHeartbeatCost_Retention(t *testing.T) {
	e, at := withHistory(t, 300)
	ctx := testCtx(t)
	old := at.Add(-40 * day)
	for i := range 300 {
		state := ledger.StateSucceeded
		if i%6 == 5 {
			state = ledger.StateFailed
		}
		record(t, e, fmt.Sprintf("manual-%024x", i), state, old)
	}
	if err := e.fake.WriteBackfill(ctx, ledger.Backfill{Done: true}); err != nil {
		t.Fatal(err)
	}
	cl := newCountingLedger(e.fake)
	c := e.instanceWith("new", func(cfg *Config) { cfg.Store, cfg.Retention = cl, config.DefaultRetention() })
	e.heartbeat(c, at.Format(time.RFC3339Nano)) // container and backfill, and the pass's first page
	pass := func(name string) (beats int, total map[string]int) {
		total = map[string]int{}
		for {
			at = at.Add(time.Minute)
			cl.take()
			out := e.heartbeat(c, at.Format(time.RFC3339Nano))
			got := cl.take()
			beats++
			t.Logf("%s, heartbeat %d: %+v, calls %s", name, beats, out.Retention, costString(got))
			if got["ReadManifest"] > DefaultRetentionPage || got["DeleteRun"] > DefaultRetentionPage || got["ListRunPage"] != 1 ||
				got["ReadSweep"] != 1 || got["WriteSweep"] != 1 {
				t.Errorf("%s, heartbeat %d: %s; want one page, one sweep read and write, at most %d reads and deletions",
					name, beats, costString(got), DefaultRetentionPage)
			}
			for k, v := range got {
				total[k] += v
			}
			if out.Retention.PassEnded {
				return beats, total
			}
			if beats > 20 {
				t.Fatalf("%s does not end", name)
			}
		}
	}
	_, first := pass("first pass")
	t.Logf("first pass, from its second heartbeat: %s", costString(first))
	if runs := len(runsOf(t, e)); runs != 350 {
		t.Errorf("after the first pass %d runs, want 350 (the 300 occurrences and the 50 failed runs)", runs)
	}
	at = at.Add(day)
	beats, second := pass("next day's pass")
	t.Logf("next day's pass: %d heartbeats, %s", beats, costString(second))
	if second["ReadManifest"] != 0 || second["DeleteRun"] != 0 || beats != 4 {
		t.Errorf("next day's pass over 350 runs: %d heartbeats, %s; want 4 pages and no manifest read", beats, costString(second))
	}
}
