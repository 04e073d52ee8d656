package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/work"
)

// stopEnv is a schedEnv whose instances finish runs with a real worker over the fake ledger.
type stopEnv struct {
	*schedEnv
	c *Coordinator
}

func newStopEnv(t *testing.T) *stopEnv {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	c := e.instanceWith("a", func(cfg *Config) { cfg.Finisher = e.worker("a") })
	return &stopEnv{schedEnv: e, c: c}
}

// worker is a worker of instance name on the env's ledger and clock.
func (e *schedEnv) worker(name string) *work.Worker {
	e.t.Helper()
	w, err := work.NewWorker(work.WorkerConfig{Store: e.store, Jobs: e.jobs, MaxDeliveries: 5, Now: e.clock.Now, CopyTTL: 15 * time.Second,
		Holder: ledger.Holder{App: "sched", Instance: name, PID: 2}})
	if err != nil {
		e.t.Fatal(err)
	}
	return w
}

// partitionMessages returns the partition messages sent for run, in order.
func (e *schedEnv) partitionMessages(run string) []work.Envelope {
	e.t.Helper()
	var out []work.Envelope
	for _, m := range e.sender.messages() {
		env, err := work.DecodeEnvelope(m.Body)
		if err != nil {
			e.t.Fatal(err)
		}
		if env.Kind == work.KindPartition && env.Run == run {
			out = append(out, env)
		}
	}
	return out
}

// results lists the partition indexes with a recorded result.
func (e *schedEnv) results(run string) []int {
	e.t.Helper()
	var out []int
	if err := e.fake.ListResults(testCtx(e.t), run, func(r ledger.ResultRef) error { out = append(out, r.Index); return nil }); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// A running run is cancelled: the partitions delivered after the cancel are dropped, the run
// ends cancelled once the stop grace has passed (driven by the heartbeat alone, no check
// message delivered), its report aggregated from the results it has with the rest counted
// cancelled; a second cancel answers as the first, and a final run refuses one.
func TestCancel_RunningRunEndsCancelledWithTheResultsItHas(t *testing.T) {
	e := newStopEnv(t)
	ctx := testCtx(t)
	out, err := e.c.StartManual(ctx, ManualRequest{Job: "count", Params: json.RawMessage(`{"n":12}`)})
	if err != nil {
		t.Fatal(err)
	}
	e.deliverChecks(e.c)
	msgs := e.partitionMessages(out.Run)
	if len(msgs) != 12 {
		t.Fatalf("%d partition messages, want 12", len(msgs))
	}
	before := e.worker("w1")
	for _, env := range msgs[:4] {
		if err := before.HandlePartition(ctx, env, work.Delivery{Count: 1}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := e.c.Cancel(ctx, out.Run, "the database is down", "alice@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if first.Stop == nil || first.Stop.State != ledger.StateCancelled || first.Stop.By != "alice@example.com" || first.State.Final() {
		t.Fatalf("after the cancel: state %s, stop %+v", first.State, first.Stop)
	}
	e.clock.set(e.clock.Now().Add(time.Second))
	again, err := e.c.Cancel(ctx, out.Run, "another note", "bob")
	if err != nil || !again.Stop.At.Equal(first.Stop.At) || again.Stop.By != "alice@example.com" {
		t.Fatalf("second cancel: %v, stop %+v; want the first one's", err, again.Stop)
	}
	// A worker that reads the manifest now drops the run's messages.
	after := e.worker("w2")
	for _, env := range msgs[4:] {
		if err := after.HandlePartition(ctx, env, work.Delivery{Count: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.results(out.Run); len(got) != 4 {
		t.Fatalf("results after the cancel: %v, want the 4 delivered before it", got)
	}
	// Not finished before the grace; finished by the heartbeat after it.
	e.heartbeat(e.c, first.Stop.At.Add(e.c.StopGrace()-time.Second).Format(time.RFC3339Nano))
	if m := e.manifest(out.Run); m.State.Final() {
		t.Fatalf("finished as %s before the stop grace", m.State)
	}
	e.heartbeat(e.c, first.Stop.At.Add(e.c.StopGrace()+time.Second).Format(time.RFC3339Nano))
	m := e.manifest(out.Run)
	if m.State != ledger.StateCancelled || !strings.Contains(m.Reason, "cancelled by alice@example.com: the database is down") ||
		!strings.Contains(m.Reason, "8 partitions not run") {
		t.Fatalf("manifest: %s (%q), want cancelled with who and the note", m.State, m.Reason)
	}
	rep, _, err := e.fake.ReadReport(ctx, out.Run)
	if err != nil {
		t.Fatal(err)
	}
	if rep.State != ledger.StateCancelled || rep.Partitions != 12 || rep.Succeeded != 4 || rep.Cancelled != 8 || rep.Failed != 0 {
		t.Fatalf("report: %+v, want cancelled, 4 succeeded and 8 cancelled of 12", rep)
	}
	if got, err := e.c.Cancel(ctx, out.Run, "", "carol"); err != nil || got.State != ledger.StateCancelled || got.Stop.By != "alice@example.com" {
		t.Fatalf("cancel of the cancelled run: %v, %+v", err, got.Stop)
	}
	done, err := e.c.StartManual(ctx, ManualRequest{Job: "count", Params: json.RawMessage(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	e.finish(done.Run)
	if _, err := e.c.Cancel(ctx, done.Run, "", "carol"); !errors.Is(err, ErrFinal) {
		t.Fatalf("cancel of a succeeded run: %v, want ErrFinal", err)
	}
	if _, err := e.c.Cancel(ctx, "manual-nosuchrun", "", "carol"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("cancel of no run: %v, want ErrNotFound", err)
	}
}

// A run cancelled before its planner took it up is never planned: nothing is sent, and it
// ends cancelled with no partitions.
func TestCancel_BeforePlanningNothingIsSent(t *testing.T) {
	e := newStopEnv(t)
	ctx := testCtx(t)
	out, err := e.c.StartManual(ctx, ManualRequest{Job: "count", Params: json.RawMessage(`{"n":12}`)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.c.Cancel(ctx, out.Run, "", "alice")
	if err != nil {
		t.Fatal(err)
	}
	e.deliverChecks(e.c) // the start check: it finds the stop and waits for its grace
	e.heartbeat(e.c, m.Stop.At.Add(e.c.StopGrace()+time.Second).Format(time.RFC3339Nano))
	if got := e.partitionMessages(out.Run); len(got) != 0 {
		t.Fatalf("%d partition messages sent for a run cancelled before planning", len(got))
	}
	m = e.manifest(out.Run)
	if m.State != ledger.StateCancelled || m.Epoch != 0 || m.Reason != "cancelled by alice" {
		t.Fatalf("manifest: %s epoch %d (%q), want cancelled, never planned", m.State, m.Epoch, m.Reason)
	}
}

// Planning stops at its next checkpoint once the run is stopped: a cancel recorded while the
// planner is between batches leaves the rest of the plan unsent.
func TestCancel_PlanningStopsAtTheNextCheckpoint(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	var c *Coordinator
	var stopAt time.Time
	hook := &sendHook{inner: e.sender, before: partitionSends(func(n int) error {
		if n == 2 { // batch 0 went out; cancel while batch 1 goes
			env, _ := work.DecodeEnvelope(e.sender.messages()[0].Body)
			m, err := c.Cancel(testCtx(t), env.Run, "stop planning", "alice")
			if err != nil {
				t.Error(err)
				return nil
			}
			stopAt = m.Stop.At
		}
		return nil
	})}
	c = e.instanceWith("a", func(cfg *Config) { cfg.Sender, cfg.Finisher = hook, e.worker("a") })
	ctx := testCtx(t)
	out, err := c.StartManual(ctx, ManualRequest{Job: "count", Params: json.RawMessage(`{"n":40}`)})
	if err != nil {
		t.Fatal(err)
	}
	e.deliverChecks(c)
	if got := len(e.partitionMessages(out.Run)); got != 8 {
		t.Fatalf("%d partition messages, want 8 (the batch of 4 being sent when the cancel came, and the one before)", got)
	}
	e.heartbeat(c, stopAt.Add(c.StopGrace()+time.Second).Format(time.RFC3339Nano))
	if got := len(e.partitionMessages(out.Run)); got != 8 {
		t.Fatalf("%d partition messages after the grace, want 8", got)
	}
	m := e.manifest(out.Run)
	if m.State != ledger.StateCancelled || m.PlanDone {
		t.Fatalf("manifest: %s planDone %v, want cancelled with its planning stopped", m.State, m.PlanDone)
	}
	rep, _, err := e.fake.ReadReport(ctx, out.Run)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Partitions != 8 || rep.Cancelled != 8 {
		t.Fatalf("report: %d partitions, %d cancelled; want the 8 sent, none run", rep.Partitions, rep.Cancelled)
	}
}

// A queued run (buffer-one) cancelled ends at once and never starts when its turn comes.
func TestCancel_QueuedRunNeverStarts(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	c := e.instance("a", countSchedule("s", 3, config.OverlapBufferOne))
	e.heartbeat(c, "2026-11-21T10:00:10Z")
	e.heartbeat(c, "2026-11-21T10:00:20Z")
	queued := occ("s", "2026-11-21T10:00:20Z")
	if m := e.manifest(queued); m.State != ledger.StateQueued {
		t.Fatalf("%s is %s, want queued", queued, m.State)
	}
	m, err := c.Cancel(testCtx(t), queued, "not needed", "alice")
	if err != nil || m.State != ledger.StateCancelled {
		t.Fatalf("cancel of the queued run: %v, state %s", err, m.State)
	}
	e.finish(occ("s", "2026-11-21T10:00:10Z"))
	e.heartbeat(c, "2026-11-21T10:00:29Z")
	if m := e.manifest(queued); m.State != ledger.StateCancelled {
		t.Fatalf("the cancelled queued run is %s after its turn came", m.State)
	}
	if st := e.state("s"); st.Buffered != "" || st.Latest == queued {
		t.Fatalf("schedule state %+v: the cancelled run is neither buffered nor latest", st)
	}
	if got := e.startChecks(queued); len(got) != 0 {
		t.Fatalf("%d start checks sent for the cancelled queued run", len(got))
	}
}

// sendHook calls before on every Send to inner.
type sendHook struct {
	inner  Sender
	n      atomic.Int32
	before func(n int32, msgs []transport.Message) error
}

func (s *sendHook) Send(ctx context.Context, msgs []transport.Message) error {
	if err := s.before(s.n.Add(1), msgs); err != nil {
		return err
	}
	return s.inner.Send(ctx, msgs)
}

// downJob plans like countJob; every partition fails for good (its dependency is down).
type downJob struct{ countJob }

func (j *downJob) Process(ctx context.Context, p work.Partition) (json.RawMessage, error) {
	return nil, work.Permanent(errors.New("dependency is down"))
}

// A job with a failure budget of 2 against a dependency that is down: the third failure stops
// the run, the partitions after it never run, and the heartbeat finishes it as failed once the
// stop grace has passed, with the budget as its reason. A schedule's budget replaces the job's,
// and a budget a setting pins replaces both.
func TestFailureBudget_RunStopsEarlyAsFailed(t *testing.T) {
	e := newStopEnv(t)
	ctx := testCtx(t)
	e.jobs.Register("down", &downJob{})
	e.jobs.SetFailureBudget("down", ledger.Budget{MaxFailed: 2}, false)
	out, err := e.c.StartManual(ctx, ManualRequest{Job: "down", Params: json.RawMessage(`{"n":12}`)})
	if err != nil {
		t.Fatal(err)
	}
	e.deliverChecks(e.c)
	w := e.worker("w")
	for _, env := range e.partitionMessages(out.Run) {
		if err := w.HandlePartition(ctx, env, work.Delivery{Count: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.results(out.Run); len(got) != 3 {
		t.Fatalf("results %v: want the 3 failures up to the one past the budget, then nothing", got)
	}
	m := e.manifest(out.Run)
	if m.Stop == nil {
		t.Fatal("the run was not stopped")
	}
	e.heartbeat(e.c, m.Stop.At.Add(e.c.StopGrace()+time.Second).Format(time.RFC3339Nano))
	m = e.manifest(out.Run)
	if m.State != ledger.StateFailed || !strings.Contains(m.Reason, "stopped by the failure budget: 3 of 12 partitions failed") {
		t.Fatalf("manifest %s (%q), want failed by the budget", m.State, m.Reason)
	}
	rep, _, err := e.fake.ReadReport(ctx, out.Run)
	if err != nil || rep.State != ledger.StateFailed || rep.Failed != 3 || rep.Cancelled != 9 {
		t.Fatalf("report %+v %v: want failed, 3 failed and 9 never run", rep, err)
	}

	// Which budget a run gets.
	sched := &ledger.Budget{MaxPercent: 50}
	if b := e.jobs.FailureBudget("down", sched); b == nil || *b != *sched {
		t.Errorf("a schedule's budget: got %v, want the schedule's", b)
	}
	e.jobs.SetFailureBudget("down", ledger.Budget{MaxFailed: 7}, true)
	if b := e.jobs.FailureBudget("down", sched); b == nil || b.MaxFailed != 7 {
		t.Errorf("a setting's budget: got %v, want it over the schedule's", b)
	}
	if b := e.jobs.FailureBudget("count", nil); b != nil {
		t.Errorf("a job without a budget got %v", b)
	}
}
