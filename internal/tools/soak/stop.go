package soak

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/work"
)

// StepCancel cancels a run in progress (POST /api/runs/{id}/cancel): the driver picks among the
// runs planning or running at that moment.
const StepCancel = "cancel"

// VStop: a run stopped by a cancel broke a rule of the stop: a partition started after the
// cancel's bound, a second outcome for a partition, a final state other than the stop's (with
// partitions left), a report that does not count what was recorded, or planning that went on.
const VStop = "stop"

// Cancel is one POST /api/runs/{id}/cancel the driver made.
type Cancel struct {
	At     time.Time
	Run    string
	Status int // 0 when the call itself failed
	Err    string
}

// cancelSteps are the plan's cancels: every 10–25 s from a random source of their own, so a
// seed's other steps are what they were before cancels existed.
func cancelSteps(o PlanOptions) []Step {
	return operatorSteps(o, 0xca9c, StepCancel, 5*time.Second, 10*time.Second, 25*time.Second)
}

// operatorSteps are steps of kind from a random source of their own (salted): the first between
// first and first+hi-lo into the span, then one every lo to hi, each with its pick.
func operatorSteps(o PlanOptions, salt uint64, kind string, first, lo, hi time.Duration) []Step {
	rng := rand.New(rand.NewPCG(uint64(o.Seed), salt))
	dur := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	var steps []Step
	for at := dur(first, first+hi-lo); at < o.Span; at += dur(lo, hi) {
		steps = append(steps, Step{At: at, Kind: kind, Pick: rng.Uint64()})
	}
	return steps
}

// CancelCandidates are the runs a cancel step may pick, in ID order: planning, enqueuing or
// running, not stopped yet, in their first round (a redrive round's cancel is the coordinator
// tests'; the checker holds rounds to redrive's rules).
func CancelCandidates(ms []ledger.Manifest) []string {
	var out []string
	for _, m := range ms {
		switch m.State {
		case ledger.StatePlanning, ledger.StateEnqueuing, ledger.StateRunning:
			if m.Stop == nil && m.Round == 0 {
				out = append(out, m.RunID)
			}
		}
	}
	slices.Sort(out)
	return out
}

// stopGrace is the coordinator's StopGrace: a check delay and a stop poll.
func stopGrace(lease time.Duration) time.Duration { return lease + CheckMargin + work.DefaultStopPoll }

// stoppedBound is the latest time a stopped run may still be non-final: its stop grace, a check
// delay more when another aggregator held the report claim, and a lease for a claim whose
// aggregator died.
func stoppedBound(m ledger.Manifest, lease time.Duration) time.Time {
	return m.Stop.At.Add(stopGrace(lease) + lease + CheckMargin + lease)
}

// cancels checks the driver's cancels against the ledger: a 202 names a run that has a stop.
func (c *checker) cancels() {
	for _, k := range c.h.Cancels {
		c.fig.CancelByCode[k.Status]++
		if k.Status != http.StatusAccepted {
			continue
		}
		if r, ok := c.h.Runs[k.Run]; !ok || r.Manifest.Stop == nil {
			c.add(VStop, k.Run, "cancel at %s answered 202, but the run has no stop", fmtTime(k.At))
		}
	}
}

// stoppedRun checks a run with a stop (m.Stop): no partition started after the stop's bound (at
// most a lease: a worker's copy of the manifest), each partition recorded at most once, no
// planning after the grace, and once final: the stop's state (or, every partition having a
// result, the run's own), a report counting exactly what was recorded, one aggregation.
func (c *checker) stoppedRun(id string, r Run) {
	m := r.Manifest
	c.fig.Stopped++
	bound := m.Stop.At.Add(c.h.LeaseDuration + LogTolerance)
	idx := slices.Clone(r.Indexes)
	slices.Sort(idx)
	for k := 1; k < len(idx); k++ {
		if idx[k] == idx[k-1] && (k == 1 || idx[k-2] != idx[k]) {
			c.add(VStop, id, "partition %d has more than one recorded outcome", idx[k])
		}
	}
	ok, failed := 0, 0
	for _, i := range slices.Compact(idx) {
		res, have := r.Results[i]
		if !have {
			continue
		}
		if res.Started.After(bound) && !res.TimedOut {
			c.add(VStop, id, "partition %d started at %s, after the stop's bound %s (stopped at %s)", i, fmtTime(res.Started),
				fmtTime(bound), fmtTime(m.Stop.At))
		}
		if res.OK {
			ok++
		} else {
			failed++
		}
	}
	for _, l := range c.h.Lines {
		if l.Str("run") == id && l.Msg == "run enqueued" && l.Time.After(m.Stop.At.Add(stopGrace(c.h.LeaseDuration)+LogTolerance)) {
			c.add(VStop, id, "planning ended at %s, past the stop grace after the stop at %s", fmtTime(l.Time), fmtTime(m.Stop.At))
		}
	}
	if !m.State.Final() {
		return
	}
	complete := m.PlanDone && len(slices.Compact(idx)) == m.Partitions
	if m.State != m.Stop.State && !complete {
		c.add(VStop, id, "ended %s with %d of its partitions recorded; a stopped run ends %s", m.State, ok+failed, m.Stop.State)
	}
	if r.Report == nil {
		c.add(VReport, id, "%s, but there is no report.json", m.State)
		return
	}
	rep := *r.Report
	if rep.State != m.State || rep.Succeeded != ok || rep.Failed != failed || rep.Succeeded+rep.Failed+rep.Cancelled != rep.Partitions {
		c.add(VReport, id, "report says %s, %d partitions: %d ok, %d failed, %d cancelled; ledger: manifest %s, results %d ok, %d failed",
			rep.State, rep.Partitions, rep.Succeeded, rep.Failed, rep.Cancelled, m.State, ok, failed)
	}
	c.aggregation(id, rep)
}

// withCancels merges the cancel and redrive steps into a plan.
func withCancels(steps []Step, o PlanOptions) []Step {
	steps = append(steps, cancelSteps(o)...)
	steps = append(steps, redriveSteps(o)...)
	slices.SortStableFunc(steps, func(a, b Step) int { return cmp.Compare(a.At, b.At) })
	return steps
}

func (k Cancel) String() string {
	return fmt.Sprintf("%s cancel %s: %d %s", fmtTime(k.At), k.Run, k.Status, k.Err)
}
