package e2e_test

import (
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/tools/devhost"
	"github.com/batonfn/baton/work"
)

// resumeLine is what the coordinator logs when a check takes over a run left mid-enqueue.
const resumeLine = "check: resuming a run its leader left mid-enqueue"

// controlResume finds the line of the check that resumed run and the invocation it came in:
// it must be a ControlQueue invocation on the same process, carrying a check for run, that
// lasted until the leadership it took ended (so not another check of the run that ran beside
// it: with the Service Bus delivery, a check the stopped planner was running is redelivered at
// once). The host records an invocation once it returns, and the run can be final before the
// invocation that resumed it has released the lease and returned, so it waits for the record.
func controlResume(t *testing.T, c *cluster, run string) (devhost.LogLine, devhost.InvokeRecord, work.Envelope) {
	t.Helper()
	var line devhost.LogLine
	found := false
	for _, l := range c.h.Lines() {
		if l.Msg == resumeLine && l.Str("run") == run {
			line, found = l, true
			break
		}
	}
	if !found {
		t.Fatalf("no check resumed run %s", run)
	}
	const slack = 50 * time.Millisecond
	var fns []string
	var rec devhost.InvokeRecord
	var env work.Envelope
	err := waitFor(testCtx(t, time.Minute), 20*time.Millisecond, "the resuming invocation returns", func() (bool, error) {
		// The end of the leadership the resuming check took (epoch of the run's lease).
		var ended time.Time
		for _, l := range c.h.Lines() {
			if l.Instance == line.Instance && l.PID == line.PID && l.Str("lease") == ledger.RunLeaseName(run) && l.Int("epoch") == line.Int("epoch") &&
				(l.Msg == "leadership released" || strings.HasPrefix(l.Msg, "leadership ended") || strings.HasPrefix(l.Msg, "lease release failed")) {
				ended = l.Time
			}
		}
		if ended.IsZero() {
			return false, nil
		}
		fns = fns[:0]
		for _, r := range c.Records() {
			if r.Instance != line.Instance || r.PID != line.PID || line.Time.Before(r.Started.Add(-slack)) || ended.After(r.End.Add(slack)) {
				continue
			}
			fns = append(fns, r.Function)
			e, _, ok := envelopeOf(r)
			if r.Function == c.controlFunction() && ok && e.Kind == work.KindCheck && e.Run == run {
				rec, env = r, e
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the check that resumed %s (%s pid %d at %s) did not come through the ControlQueue function (%v); invocations then: %v",
			run, line.Instance, line.PID, line.Time.Format(time.StampMilli), err, fns)
	}
	return line, rec, env
}

// lastRenewal is when the planner of epoch of run's lease on instance last confirmed that
// lease: its last renewal line, else its acquisition.
func lastRenewal(t *testing.T, c *cluster, run, instance string, epoch int64) time.Time {
	t.Helper()
	var at time.Time
	for _, l := range c.h.Lines() {
		if l.Instance == instance && l.Str("lease") == ledger.RunLeaseName(run) && l.Int("epoch") == epoch &&
			(l.Msg == "lease renewed" || l.Msg == "leadership acquired") && l.Time.After(at) {
			at = l.Time
		}
	}
	if at.IsZero() {
		t.Fatalf("no acquisition or renewal of epoch %d of %s on %s", epoch, ledger.RunLeaseName(run), instance)
	}
	return at
}

// TestChaos_TermLeaderMidEnqueue: SIGTERM the run's planner while it is enqueueing. It
// releases the run's lease and sends an immediate check on the control queue; another
// instance's ControlQueue function resumes the run from the checkpoint before the stopped
// planner's lease could have lapsed, and the run completes with every partition. (With the
// Service Bus delivery the check the stopped planner was running is delivered again at once and
// may take the released lease first: that resumes the run just as well.) (Before runs
// had leases of their own, the test first waited for every instance's Tick to give up its wait
// for the one lease; a heartbeat now never waits and never plans.)
func TestChaos_TermLeaderMidEnqueue(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{params: slowEnqueueParams, batch: slowEnqueueBatch})
	ctx := testCtx(t, slowEnqueueBudget)
	run, _, created := planner(ctx, t, c)
	before := waitMidEnqueue(ctx, t, c, run, 3)
	epoch := created.Int("epoch")
	termAt := time.Now()
	if err := c.h.Instance(created.Instance).Term(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.h.WaitLine(ctx, func(l devhost.LogLine) bool { return l.Msg == resumeLine && l.Str("run") == run }); err != nil {
		t.Fatal(err)
	}
	m, err := c.waitFinal(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	line, rec, env := controlResume(t, c, run)
	handedOver := env.Round == 0 && env.Epoch == epoch && env.Handover
	if !handedOver && !redeliveredFromStopped(c, rec, env, created) {
		t.Errorf("resumed by %+v, want the handover check (round 0, handover) of epoch %d", env, epoch)
	}
	if line.Instance == created.Instance && line.PID == created.PID {
		t.Errorf("the stopped process resumed its own run")
	}
	// Causality: the stopped leader released its lease before the lease could have lapsed,
	// and the run was resumed after that release, so the lease was handed over, not left to
	// expire. (How soon after the release another instance picks the check up depends on the
	// machine's load, so that delay is a figure, not a test.)
	released := time.Time{}
	for _, l := range c.h.Lines() {
		if l.Msg == "leadership released" && l.Str("lease") == ledger.RunLeaseName(run) && l.Int("epoch") == epoch &&
			l.Instance == created.Instance && l.PID == created.PID {
			released = l.Time
		}
	}
	expiry := lastRenewal(t, c, run, created.Instance, epoch).Add(leaseDuration)
	switch {
	case released.IsZero():
		t.Errorf("the stopped leader logged no release of epoch %d: no handover", epoch)
	case !released.Before(expiry):
		t.Errorf("the stopped leader released epoch %d at %s, after its lease would have lapsed (%s)", epoch, released.Format(time.StampMilli), expiry.Format(time.StampMilli))
	case line.Time.Before(released):
		t.Errorf("resumed at %s, before the stopped leader released its lease (%s)", line.Time.Format(time.StampMilli), released.Format(time.StampMilli))
	}
	handover := false
	for _, l := range c.h.Lines() {
		if l.Msg == "handover: check sent; another instance resumes the run once the lease is released" && l.Str("run") == run &&
			l.Instance == created.Instance && l.Time.Before(rec.Started) {
			handover = true
		}
	}
	if !handover {
		t.Error("the stopped leader logged no handover check before the ControlQueue invocation")
	}
	ts := checkLeadership(t, c)
	checkNoPolling(t, c, ts)
	fig := checkRun(t, c, run, runWant{partitions: slowEnqueueParts, state: ledger.StateSucceeded}, ts)
	failovers := checkSegments(t, run, m.Segments, 2, ts)
	if len(m.Segments) < 2 || m.Segments[1].From < before.Checkpoint.Next {
		t.Errorf("segments %v: want the stopped leader's and one takeover from at least its checkpoint %d", m.Segments, before.Checkpoint.Next)
	}
	figures(t, "run=%s SIGTERM to %s at checkpoint %d/%d, released %s and resumed by %s through ControlQueue %s after the signal, duplicates=%d staleDropped=%d leaseLossesUnderLoad=%d",
		run, created.Instance, before.Checkpoint.Next, slowEnqueueParts, released.Sub(termAt).Round(time.Millisecond), line.Instance, line.Time.Sub(termAt).Round(time.Millisecond), fig.Duplicates, fig.StaleDropped, failovers)
}

// redeliveredFromStopped reports whether rec, the invocation that resumed the run, carried the
// check the stopped planner's own invocation was running when it was stopped: with the Service
// Bus delivery a failed invocation's message is abandoned and delivered again at once, so it
// can reach the run's lease, just released, before the handover check does. Either is a
// resumption after the release.
func redeliveredFromStopped(c *cluster, rec devhost.InvokeRecord, env work.Envelope, stopped devhost.LogLine) bool {
	if c.delivery != devhost.DeliveryServiceBus {
		return false
	}
	if _, count, ok := envelopeOf(rec); !ok || count < 2 {
		return false
	}
	for _, r := range c.Records() {
		if e, _, ok := envelopeOf(r); ok && r.Instance == stopped.Instance && r.PID == stopped.PID && r.Err != nil &&
			r.Function == c.controlFunction() && e.Run == env.Run && e.Round == env.Round && e.Epoch == env.Epoch && !e.Handover {
			return true
		}
	}
	return false
}

// checkProbeResume asserts that a killed planner's run was resumed by a lease probe through the
// ControlQueue function, after the run's lease lapsed (the lease's floor: the probe is due then),
// and returns how long after.
func checkProbeResume(t *testing.T, c *cluster, run string, created devhost.LogLine) time.Duration {
	t.Helper()
	epoch := created.Int("epoch")
	line, _, env := controlResume(t, c, run)
	if env.Round != 0 || env.Epoch != epoch || env.Handover {
		t.Errorf("resumed by %+v, want a lease probe (round 0) of epoch %d", env, epoch)
	}
	expiry := lastRenewal(t, c, run, created.Instance, epoch).Add(leaseDuration)
	if line.Time.Before(expiry.Add(-100 * time.Millisecond)) { // log times vs the lease's: within a request
		t.Errorf("resumed at %s, before the killed leader's lease lapsed (%s)", line.Time.Format(time.StampMilli), expiry.Format(time.StampMilli))
	}
	return line.Time.Sub(expiry)
}
