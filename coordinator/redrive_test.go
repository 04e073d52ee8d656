package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/work"
)

// flakyJob plans like countJob; while down, its odd partitions fail for good.
type flakyJob struct {
	countJob
	down atomic.Bool
}

func (j *flakyJob) Process(ctx context.Context, p work.Partition) (json.RawMessage, error) {
	if j.down.Load() && p.Index%2 == 1 {
		return nil, work.Permanent(errors.New("dependency is down"))
	}
	return p.Payload, nil
}

// downRun runs n partitions of a flakyJob registered as "flaky" while its dependency is down,
// to the end: the run ends partial, its odd partitions failed.
func (e *stopEnv) downRun(t *testing.T, n int) (*flakyJob, string) {
	t.Helper()
	job := &flakyJob{}
	job.down.Store(true)
	e.jobs.Register("flaky", job)
	out, err := e.c.StartManual(testCtx(t), ManualRequest{Job: "flaky", Params: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))})
	if err != nil {
		t.Fatal(err)
	}
	e.deliverChecks(e.c)
	e.deliverAll(t, e.worker("w"), out.Run, 0)
	if m := e.manifest(out.Run); m.State != ledger.StatePartial {
		t.Fatalf("the run against a dependency down ended %s, want partial", m.State)
	}
	return job, out.Run
}

// deliverAll hands every partition message sent for run with the given redrive round to w, once.
func (e *stopEnv) deliverAll(t *testing.T, w *work.Worker, run string, round int) int {
	t.Helper()
	n := 0
	for _, env := range e.partitionMessages(run) {
		if env.Redrive != round {
			continue
		}
		if err := w.HandlePartition(testCtx(t), env, work.Delivery{MessageID: env.MessageID(), Count: 1}); err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}

// A run that ended partial against a dependency that was down is redriven once it is back:
// only its failed partitions run again, in round 1, from the stored plan; the run goes back to
// running and ends succeeded, its report (the round's) aggregated once with each partition's
// latest outcome, the first report kept; each redriven partition shows its attempts over both
// rounds. The same Idempotency-Key answers the same round (sending its partitions again, so a
// request that failed half way is completed by its retry); a message of round 0 delivered
// afterwards is dropped; a succeeded run is not redriven.
func TestRedrive_RunsOnlyTheFailedPartitionsAgain(t *testing.T) {
	e := newStopEnv(t)
	ctx := testCtx(t)
	job := &flakyJob{}
	job.down.Store(true)
	e.jobs.Register("flaky", job)
	out, err := e.c.StartManual(ctx, ManualRequest{Job: "flaky", Params: json.RawMessage(`{"n":6}`)})
	if err != nil {
		t.Fatal(err)
	}
	e.deliverChecks(e.c)
	w := e.worker("w")
	e.deliverAll(t, w, out.Run, 0)
	if m := e.manifest(out.Run); m.State != ledger.StatePartial {
		t.Fatalf("first round ended %s, want partial", m.State)
	}
	first, _, err := e.fake.ReadReport(ctx, out.Run)
	if err != nil || first.Failed != 3 {
		t.Fatalf("first report %+v %v", first, err)
	}

	job.down.Store(false)
	rd, err := e.c.Redrive(ctx, out.Run, "key-1", "alice")
	if err != nil || rd.Round != 1 || rd.Partitions != 3 || rd.Existing || rd.State != ledger.StateRunning {
		t.Fatalf("redrive: %+v %v; want round 1 of the 3 failed, running", rd, err)
	}
	if again, err := e.c.Redrive(ctx, out.Run, "key-1", "alice"); err != nil || !again.Existing || again.Round != 1 {
		t.Fatalf("the same key again: %+v %v; want round 1, existing", again, err)
	}
	m := e.manifest(out.Run)
	if m.Round != 1 || len(m.Redrives) != 1 || m.Redrives[0].From != ledger.StatePartial || m.Redrives[0].By != "alice" ||
		len(m.Redrives[0].Indexes) != 3 || m.Redrives[0].Indexes[0] != 1 {
		t.Fatalf("manifest round %d redrives %+v", m.Round, m.Redrives)
	}
	if got := activeRuns(t, e.schedEnv); len(got) != 1 || got[0] != out.Run {
		t.Errorf("index of active runs %v, want the redriven run", got)
	}
	// A late copy of a first-round message changes nothing.
	before := len(e.results(out.Run))
	e.deliverAll(t, e.worker("late"), out.Run, 0)
	if n := e.deliverAll(t, w, out.Run, 1); n != 6 {
		t.Fatalf("%d round-1 messages, want 6: the 3 failed partitions, sent again by the repeated request", n)
	}
	if got := len(e.results(out.Run)); got != before {
		t.Errorf("round 0 has %d results after the late delivery, want %d", got, before)
	}
	m = e.manifest(out.Run)
	if m.State != ledger.StateSucceeded || m.Succeeded != 6 || m.Failed != 0 {
		t.Fatalf("after the round: %s, %d ok, %d failed; want succeeded 6", m.State, m.Succeeded, m.Failed)
	}
	rep, _, err := e.fake.ReadReport(ctx, ledger.RoundRun(out.Run, 1))
	if err != nil || rep.State != ledger.StateSucceeded || rep.Succeeded != 6 || rep.Partitions != 6 {
		t.Fatalf("round report %+v %v", rep, err)
	}
	if kept, _, _ := e.fake.ReadReport(ctx, out.Run); kept.State != ledger.StatePartial || kept.Failed != 3 {
		t.Errorf("the first report was not kept: %+v", kept)
	}
	r1, err := e.fake.ReadResult(ctx, ledger.RoundRun(out.Run, 1), 1)
	if err != nil || !r1.OK || r1.Attempts != 1 {
		t.Fatalf("partition 1 in round 1: %+v %v", r1, err)
	}
	if _, err := e.c.Redrive(ctx, out.Run, "key-2", "bob"); !errors.Is(err, ledger.ErrReopen) {
		t.Errorf("redrive of a succeeded run: %v, want ErrReopen", err)
	}
	if _, err := e.c.Redrive(ctx, "manual-none", "key-3", "bob"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("redrive of no run: %v, want ErrNotFound", err)
	}
}

// A redrive round whose partitions never come back (their messages lost) is driven by the
// heartbeat alone: re-enqueued for its rounds past its deadline, then recorded timed out in the
// round and aggregated: the run ends timed-out, the partitions' errors saying so.
func TestRedrive_ARoundWhoseMessagesAreLostTimesOut(t *testing.T) {
	e := newStopEnv(t)
	ctx := testCtx(t)
	_, run := e.downRun(t, 4)
	if _, err := e.c.Redrive(ctx, run, "k", "alice"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8 && !e.manifest(run).State.Final(); i++ {
		m := e.manifest(run)
		e.heartbeat(e.c, c2s(m.Deadline.Add(time.Second)))
	}
	m := e.manifest(run)
	if m.State != ledger.StateTimedOut || m.Round != 1 {
		t.Fatalf("the lost round ended %s (round %d), want timed-out", m.State, m.Round)
	}
	if sent := len(e.partitionMessages(run)); sent < 4+2+2*2 {
		t.Errorf("%d partition messages; want the round's 2 sent again on each of its 2 re-enqueue rounds", sent)
	}
	rep, _, err := e.fake.ReadReport(ctx, ledger.RoundRun(run, 1))
	if err != nil || rep.State != ledger.StateTimedOut || rep.Failed != 2 || !strings.Contains(rep.FailedList[0].Error, "redrive round 1") {
		t.Fatalf("round report %+v %v", rep, err)
	}
}

func c2s(t time.Time) string { return t.Format(time.RFC3339Nano) }

// A redrive round can be cancelled like any run in progress: it ends cancelled, its report (the
// round's) counting each partition's latest outcome.
func TestRedrive_ARoundIsCancelled(t *testing.T) {
	e := newStopEnv(t)
	ctx := testCtx(t)
	_, run := e.downRun(t, 4)
	if _, err := e.c.Redrive(ctx, run, "k", "alice"); err != nil {
		t.Fatal(err)
	}
	m, err := e.c.Cancel(ctx, run, "not now", "bob")
	if err != nil {
		t.Fatal(err)
	}
	e.heartbeat(e.c, c2s(m.Stop.At.Add(e.c.StopGrace()+time.Second)))
	m = e.manifest(run)
	if m.State != ledger.StateCancelled || m.Round != 1 {
		t.Fatalf("the cancelled round ended %s (round %d), want cancelled", m.State, m.Round)
	}
	rep, _, err := e.fake.ReadReport(ctx, ledger.RoundRun(run, 1))
	if err != nil || rep.State != ledger.StateCancelled || rep.Succeeded != 2 || rep.Failed != 2 {
		t.Fatalf("round report %+v %v; want cancelled with the first round's 2 ok and 2 failed", rep, err)
	}
}
