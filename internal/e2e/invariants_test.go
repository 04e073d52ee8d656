package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/election/bloblease"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/tools/devhost"
	"github.com/batonfn/baton/internal/tools/soak"
	"github.com/batonfn/baton/work"
)

// leaseSample is one read of the lease blob, kept when it differs from the previous one.
type leaseSample struct {
	At    time.Time
	State election.LeaderState
}

// leaseSampler reads a lease blob's state and holder record every 50 ms: the storage side of
// the leadership log.
type leaseSampler struct {
	// lease names the lease as the log does: "" for the scheduler lease, runs/<run> for a run's.
	lease   string
	mu      sync.Mutex
	samples []leaseSample
	cancel  context.CancelFunc
	done    chan struct{}
}

func startSampler(lock *bloblease.BlobLock, lease string) *leaseSampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &leaseSampler{lease: lease, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for ctx.Err() == nil {
			rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := lock.State(rctx)
			rcancel()
			if err == nil {
				s.mu.Lock()
				if n := len(s.samples); n == 0 || s.samples[n-1].State != st {
					s.samples = append(s.samples, leaseSample{At: time.Now(), State: st})
				}
				s.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return s
}

func (s *leaseSampler) stop() { s.cancel(); <-s.done }

func (s *leaseSampler) all() []leaseSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]leaseSample(nil), s.samples...)
}

// waitEpoch waits until storage shows a held lease with an epoch above `above`.
func (s *leaseSampler) waitEpoch(ctx context.Context, above int64) (leaseSample, error) {
	var got leaseSample
	err := waitFor(ctx, 25*time.Millisecond, fmt.Sprintf("a lease epoch above %d", above), func() (bool, error) {
		for _, x := range s.all() {
			if x.State.Held && x.State.Epoch > above {
				got = x
				return true, nil
			}
		}
		return false, nil
	})
	return got, err
}

// tenure is one leadership of one lease as the handlers' own log lines tell it (internal/soak
// reads them).
type tenure = soak.Tenure

// tenures builds the leadership log from the handler lines; an epoch of one lease acquired
// twice is an error.
func tenures(lines []devhost.LogLine) ([]tenure, error) {
	ts, dup := soak.Tenures(lines)
	if len(dup) > 0 {
		return nil, fmt.Errorf("an epoch was acquired twice: %s", strings.Join(dup, "; "))
	}
	return ts, nil
}

// runTenures are the leaderships of run's own lease, by epoch.
func runTenures(ts []tenure, run string) map[int64]tenure {
	out := map[int64]tenure{}
	for _, tn := range ts {
		if tn.Lease == ledger.RunLeaseName(run) {
			out[tn.Epoch] = tn
		}
	}
	return out
}

// checkLeadership proves invariant 1 for every lease — the scheduler's, which heartbeats and
// runs now take, and each run's own — from both sides: the handlers' own log (every epoch of a
// lease acquired once, its epochs rising with acquisition time, each leadership valid only until
// the next epoch of that lease was acquired) and the sampled lease blobs (epochs never go back;
// each epoch shows the holder that logged it).
func checkLeadership(t *testing.T, c *cluster) []tenure {
	t.Helper()
	// The samplers read storage while each handler logs what it did only after its storage
	// call returns, and its lines reach the host through a pipe: on a loaded machine the line
	// naming an epoch can trail the sample that shows it by seconds. So the samples are taken
	// once, first, and a sampled epoch no line names yet is looked for again in the lines that
	// came in since, until logCatchUp has passed.
	c.mu.Lock()
	samplers := append([]*leaseSampler{c.sampler}, c.samplers...)
	c.mu.Unlock()
	samples := make([][]leaseSample, len(samplers))
	for i, sm := range samplers {
		samples[i] = sm.all()
	}
	const logCatchUp = 30 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), logCatchUp)
	defer cancel()
	var (
		ts                 []tenure
		overlaps, unlogged []string
		logErr             error
	)
	_ = waitFor(ctx, 200*time.Millisecond, "the log to name every sampled epoch", func() (bool, error) {
		if ts, logErr = tenures(c.h.Lines()); logErr != nil {
			return true, nil
		}
		overlaps, unlogged = leadershipViolations(c, ts, samplers, samples)
		return len(unlogged) == 0, nil
	})
	if logErr != nil {
		t.Fatalf("leadership log: %v", logErr)
	}
	for _, v := range append(overlaps, unlogged...) {
		t.Error(v)
	}
	return ts
}

// leadershipViolations checks invariant 1 on the tenures the lines show (overlaps: two valid
// holders, epochs that do not rise) and on the lease samples (unlogged: a sampled epoch no
// line names, or names with another holder).
func leadershipViolations(c *cluster, ts []tenure, samplers []*leaseSampler, samples [][]leaseSample) (overlaps, unlogged []string) {
	const tolerance = time.Second // log timestamps trail the storage calls
	// A process the test kills with SIGKILL may have released a lease, or taken one, without
	// living to log it: its log is cut short, not its leadership extended. Storage grants an
	// epoch only on a free lease, so the next holder's acquisition stands; the blob samples
	// below still show every epoch's holder.
	// (The host's own "chaos:" log lines are not among the handlers' lines: its record of the
	// signals it sent is.)
	killed := map[string]time.Time{}
	for _, sg := range c.h.Signals() {
		if key := fmt.Sprintf("%s/%d", sg.Instance, sg.PID); sg.Signal == syscall.SIGKILL && killed[key].IsZero() {
			killed[key] = sg.At
		}
	}
	killedBy := func(holder string, at time.Time) bool { // holder: app/instance/pid
		parts := strings.Split(holder, "/")
		if len(parts) < 2 {
			return false
		}
		k, ok := killed[strings.Join(parts[len(parts)-2:], "/")]
		return ok && !k.After(at.Add(tolerance))
	}
	for lease, group := range soak.ByLease(ts) {
		for i := 1; i < len(group); i++ {
			prev, tn := group[i-1], group[i]
			if tn.Epoch <= prev.Epoch {
				overlaps = append(overlaps, fmt.Sprintf("invariant 1: %s epoch %d acquired at %s after epoch %d (%s): epochs must rise", soak.LeaseName(lease), tn.Epoch,
					tn.Acquired.Format(time.StampMilli), prev.Epoch, prev.Acquired.Format(time.StampMilli)))
			}
			if prev.Released.IsZero() && prev.Lost.IsZero() && killedBy(prev.Holder, tn.Acquired) {
				continue
			}
			if end := prev.ValidUntil(leaseDuration); end.After(tn.Acquired.Add(tolerance)) {
				overlaps = append(overlaps, fmt.Sprintf("invariant 1: %s epoch %d (%s) valid until %s, but epoch %d (%s) acquired at %s: two valid holders", soak.LeaseName(lease),
					prev.Epoch, prev.Holder, end.Format(time.StampMilli), tn.Epoch, tn.Holder, tn.Acquired.Format(time.StampMilli)))
			}
		}
	}
	abandoned := soak.Abandoned(c.h.Lines())
	for i, sm := range samplers {
		byEpoch := map[int64]tenure{}
		for _, tn := range ts {
			if tn.Lease == sm.lease {
				byEpoch[tn.Epoch] = tn
			}
		}
		var last int64
		for _, s := range samples[i] {
			if s.State.Epoch < last {
				overlaps = append(overlaps, fmt.Sprintf("invariant 1: storage showed %s epoch %d after epoch %d (at %s)", soak.LeaseName(sm.lease), s.State.Epoch, last, s.At.Format(time.StampMilli)))
			}
			last = max(last, s.State.Epoch)
			if s.State.Epoch == 0 {
				continue
			}
			tn, ok := byEpoch[s.State.Epoch]
			switch {
			case !ok && !killedBy(s.State.Holder.String(), s.At) && !abandoned[soak.Acquisition{Lease: sm.lease, Epoch: s.State.Epoch, Holder: s.State.Holder.String()}]:
				unlogged = append(unlogged, fmt.Sprintf("storage shows %s epoch %d held by %s, which no handler logged acquiring", soak.LeaseName(sm.lease), s.State.Epoch, s.State.Holder))
			case !ok:
				// Taken by a process killed before it could log it, or by one whose holder
				// record was not confirmed (it gave the lease back, leading nothing).
			case tn.Holder != s.State.Holder.String():
				unlogged = append(unlogged, fmt.Sprintf("%s epoch %d: storage says holder %s, the log says %s", soak.LeaseName(sm.lease), s.State.Epoch, s.State.Holder, tn.Holder))
			}
		}
	}
	return overlaps, unlogged
}

// runWant is what a run must look like once final.
type runWant struct {
	partitions int
	state      ledger.State
	failed     []int // partitions recorded as failed
}

// runFigures are counted while checking a run.
type runFigures struct {
	Partitions   int
	DoneRecords  int64
	Duplicates   int // delivery attempts that found the result already recorded
	StaleDropped int
	Redelivered  int // partition invocations with DequeueCount > 1
	// PreTakeover counts results of a segment's older-epoch messages taken before the takeover.
	PreTakeover int
	Segments    []ledger.Segment
	Elapsed     time.Duration
}

// syntheticAggregate mirrors the synthetic job's aggregate.
type syntheticAggregate struct {
	Partitions int   `json:"partitions"`
	OK         int   `json:"ok"`
	Failed     int   `json:"failed"`
	SumV       int64 `json:"sumV"`
}

// checkRun proves invariants 3 and 4 for one finished run from the ledger: every partition has
// exactly one result, no result comes from a stale-epoch message taken after the takeover that
// made it stale (invariant 5), the report
// exists once and agrees with the results (the synthetic sum is recomputed), and exactly one
// instance logged creating the run and exactly one logged finishing it.
func checkRun(t *testing.T, c *cluster, run string, want runWant, ts []tenure) runFigures {
	t.Helper()
	ctx := testCtx(t, 3*time.Minute) // a run of hundreds of partitions is read one result at a time, on a loaded machine
	var fig runFigures
	m, err := c.store.ReadManifest(ctx, run)
	if err != nil {
		t.Fatalf("run %s: %v", run, err)
	}
	fig.Segments = m.Segments
	fig.Partitions = m.Partitions
	if !m.Finished.IsZero() {
		fig.Elapsed = m.Finished.Sub(m.Created)
	}
	if m.State != want.state || !m.PlanDone || m.Partitions != want.partitions {
		t.Errorf("run %s: state %s, planDone %v, partitions %d; want %s, true, %d", run, m.State, m.PlanDone, m.Partitions, want.state, want.partitions)
	}
	if m.Lease != ledger.RunLeaseName(run) {
		t.Errorf("run %s: lease %q, want its own %q", run, m.Lease, ledger.RunLeaseName(run))
	}
	own := runTenures(ts, run)
	// recordedBy bounds when a takeover's segment was in the manifest: a second after the
	// first line its planner logs once it has written it ("lease probe scheduled", ...), or
	// after its acquisition when it logged none (the write can take over a second on a loaded
	// machine, so the acquisition alone is not a bound).
	firstAfter := map[int64]time.Time{}
	for _, l := range c.h.Lines() {
		switch l.Msg {
		case "lease probe scheduled", "backlog full; the next wave goes out later", "run enqueued",
			"planning slice ended; a follow-up invocation continues from the checkpoint":
		default:
			continue
		}
		epoch := l.Int("epoch")
		if tn, ok := own[epoch]; ok && l.Str("run") == run && l.Time.After(tn.Acquired) &&
			(firstAfter[epoch].IsZero() || l.Time.Before(firstAfter[epoch])) {
			firstAfter[epoch] = l.Time
		}
	}
	acquiredAt, recordedBy := map[int64]time.Time{}, map[int64]time.Time{}
	for epoch, tn := range own {
		acquiredAt[epoch] = tn.Acquired
		recordedBy[epoch] = tn.Acquired.Add(time.Second)
		if f := firstAfter[epoch]; f.Add(time.Second).After(recordedBy[epoch]) {
			recordedBy[epoch] = f.Add(time.Second)
		}
	}
	for i, s := range m.Segments {
		if _, ok := own[s.Epoch]; !ok {
			t.Errorf("run %s: segment epoch %d was never acquired on the run's lease by a handler", run, s.Epoch)
		}
		if i > 0 && (s.Epoch <= m.Segments[i-1].Epoch || s.From < m.Segments[i-1].From) {
			t.Errorf("run %s: segments %v do not rise", run, m.Segments)
		}
	}
	if n := len(m.Segments); n > 0 && m.Epoch != m.Segments[n-1].Epoch {
		t.Errorf("run %s: manifest epoch %d, last segment epoch %d", run, m.Epoch, m.Segments[n-1].Epoch)
	}

	// Invariant 3: exactly one result per partition.
	var indexes []int
	if err := c.store.ListResults(ctx, run, func(r ledger.ResultRef) error { indexes = append(indexes, r.Index); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(indexes) != want.partitions {
		t.Errorf("run %s: %d results, want %d", run, len(indexes), want.partitions)
	}
	for k, i := range indexes {
		if i != k {
			t.Errorf("run %s: results are %v, want exactly 0..%d", run, indexes, want.partitions-1)
			break
		}
	}
	failed := map[int]bool{}
	results := ledger.NewReader(c.store, run) // results on their own and in blocks
	for _, i := range want.failed {
		failed[i] = true
	}
	agg := syntheticAggregate{Partitions: want.partitions}
	for _, i := range indexes {
		r, err := results.Read(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		if seg := m.SegmentEpoch(i); r.Epoch < seg {
			// Legitimate only when the worker took the message before its copy of the
			// manifest could show the newer segment (it carries the same stored plan payload):
			// a copy taken while planning is kept for work.PlanningCopyTTL. A stale message
			// processed later than that after the takeover is a fencing failure.
			fig.PreTakeover++
			if by, ok := recordedBy[seg]; !ok || r.Started.After(by.Add(work.PlanningCopyTTL)) {
				t.Errorf("run %s partition %d: result of an epoch-%d message started at %s, after epoch %d took over at %s and recorded its segment by %s, and a worker's copy of the manifest is at most %s old (stale message not fenced)",
					run, i, r.Epoch, r.Started.Format(time.StampMilli), seg, acquiredAt[seg].Format(time.StampMilli), by.Format(time.StampMilli), work.PlanningCopyTTL)
			}
		}
		if r.OK == failed[i] {
			t.Errorf("run %s partition %d: ok=%v, want %v (%s)", run, i, r.OK, !failed[i], r.Error)
		}
		if r.OK {
			agg.OK++
			agg.SumV += int64(i) * int64(i)
		} else {
			agg.Failed++
		}
	}

	// Invariant 4: one report, agreeing with the results.
	rep, _, err := c.store.ReadReport(ctx, run)
	if err != nil {
		t.Fatalf("run %s report: %v", run, err)
	}
	if rep.State != m.State || rep.Partitions != want.partitions || rep.Succeeded != agg.OK || rep.Failed != agg.Failed {
		t.Errorf("run %s report: state %s, %d partitions, %d ok, %d failed; want %s, %d, %d, %d",
			run, rep.State, rep.Partitions, rep.Succeeded, rep.Failed, m.State, want.partitions, agg.OK, agg.Failed)
	}
	var got syntheticAggregate
	if err := json.Unmarshal(rep.Aggregate, &got); err != nil || got != agg {
		t.Errorf("run %s aggregate = %s (%v), want %+v", run, rep.Aggregate, err, agg)
	}
	var listed []int
	for _, f := range rep.FailedList {
		listed = append(listed, f.Index)
	}
	sort.Ints(listed)
	if fmt.Sprint(listed) != fmt.Sprint(sortedCopy(want.failed)) {
		t.Errorf("run %s report names failed partitions %v, want %v", run, listed, want.failed)
	}

	if fig.DoneRecords, err = ledger.CountDone(ctx, c.store, run, m.DoneLayout, want.partitions, 0); err != nil {
		t.Fatal(err)
	}
	if fig.DoneRecords < int64(want.partitions) {
		t.Errorf("run %s: %d done records for %d partitions", run, fig.DoneRecords, want.partitions)
	}

	created, finished, settled := 0, 0, 0
	for _, l := range c.h.Lines() {
		if l.Str("run") != run {
			continue
		}
		switch {
		case l.Msg == "run created":
			created++
		case l.Msg == "run finished":
			finished++
		case l.Msg == "report was written but the manifest was not final; settled it":
			settled++
		case strings.HasPrefix(l.Msg, "duplicate delivery"):
			fig.Duplicates++
		case l.Msg == "stale partition message dropped":
			fig.StaleDropped++
		}
	}
	// The aggregation is logged once: "run finished", or, when its report's write took effect
	// with its answer lost and another process settled the run, that process's settle line.
	if created != 1 || finished > 1 || finished+settled == 0 {
		t.Errorf("run %s: logged \"run created\" %d times, \"run finished\" %d and a settle %d; want 1 created, and 1 finished or a settle",
			run, created, finished, settled)
	}
	for _, r := range c.Records() {
		if env, count, ok := envelopeOf(r); ok && env.Run == run && env.Kind == "partition" && count > 1 {
			fig.Redelivered++
		}
	}
	return fig
}

func sortedCopy(xs []int) []int {
	out := append([]int(nil), xs...)
	sort.Ints(out)
	return out
}

// listRuns returns every run ID in the runs container.
func listRuns(ctx context.Context, c *cluster) ([]string, error) {
	var runs []string
	err := c.store.ListRuns(ctx, func(run string) bool { runs = append(runs, run); return true })
	return runs, err
}

// contends lists the functions in which a lease may be contested: the heartbeat (Tick: the
// scheduler lease), a check message (ControlQueue; Control with Service Bus; WorkQueue and
// Work for checks an older version sent there: a run's lease) and a run now (Runs: the
// scheduler lease).
var contends = map[string]bool{"Tick": true, "WorkQueue": true, "Work": true, "ControlQueue": true, "Control": true, "Runs": true}

// checkNoPolling proves invariant 6: every acquisition, of every lease, happened inside an
// invocation of a function that may contend (contends) on the same process; no instance
// contends on its own.
// An invocation that has not returned yet counts until now: the run a test waited for can be
// final while the invocation whose leader took it over is still doing its housekeeping and
// release, and the host records an invocation only once it returns.
func checkNoPolling(t *testing.T, c *cluster, ts []tenure) {
	t.Helper()
	inFlight := c.h.InFlight()
	now := time.Now()
	recs := c.Records() // after the in-flight ones: an invocation that ends between is in one of them
	for _, tn := range ts {
		if !acquiredInside(tn, recs, inFlight, now) {
			t.Errorf("invariant 6: %s epoch %d acquired by %s at %s outside any Tick, check or manual-start invocation", tn.Name(), tn.Epoch, tn.Holder,
				tn.Acquired.Format(time.StampMilli))
		}
	}
}

// acquiredInside reports whether tn's acquisition lies within a contending invocation on the
// same process: a finished one (recs) or one still running at now (inFlight).
func acquiredInside(tn tenure, recs []devhost.InvokeRecord, inFlight []devhost.Invocation, now time.Time) bool {
	const slack = 50 * time.Millisecond
	within := func(inv devhost.Invocation, end time.Time) bool {
		return inv.Instance == tn.Instance && inv.PID == tn.PID && contends[inv.Function] &&
			!tn.Acquired.Before(inv.Started.Add(-slack)) && !tn.Acquired.After(end.Add(slack))
	}
	for _, r := range recs {
		if within(r.Invocation, r.End) {
			return true
		}
	}
	for _, inv := range inFlight {
		if within(inv, now) {
			return true
		}
	}
	return false
}

// checkSegments asserts a run's segments: the first want of them are the ones the test caused
// (checked by the caller), and any further segment is a failover the log explains: the holder
// of the run's lease at the segment before it logged the loss of its leadership (a renewal that storage did not
// answer in time on a loaded machine) before the next epoch was acquired. It returns the number
// of such failovers, a figure: how often a leader lost its lease is the machine's doing, but
// every loss must be followed by a takeover from the checkpoint, and none may go unexplained.
func checkSegments(t *testing.T, run string, segs []ledger.Segment, want int, ts []tenure) (failovers int) {
	t.Helper()
	if len(segs) < want {
		t.Errorf("run %s: segments %v, want at least %d", run, segs, want)
		return 0
	}
	byEpoch := runTenures(ts, run)
	for i := want; i < len(segs); i++ {
		prev, next := byEpoch[segs[i-1].Epoch], byEpoch[segs[i].Epoch]
		if prev.Lost.IsZero() || next.Acquired.Before(prev.Lost) {
			t.Errorf("run %s: segment %d (epoch %d from %d) follows epoch %d, whose holder logged no loss of its leadership before it (lost %v %q): an unexplained takeover",
				run, i, segs[i].Epoch, segs[i].From, segs[i-1].Epoch, prev.Lost, prev.LostMsg)
			continue
		}
		failovers++
	}
	return failovers
}
