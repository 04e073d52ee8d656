package soak

import (
	"fmt"
	"slices"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// StepRedrive redrives a run that ended with partitions that did not succeed (POST
// /api/runs/{id}/redrive): the driver picks among the runs partial, failed or timed out then.
const StepRedrive = "redrive"

// VRedrive: a redriven run broke a rule of redrive: a round that ran a partition it does not
// name, or one twice; a round's report that does not count each partition's latest outcome, or
// aggregated other than once; a final round missing results.
const VRedrive = "redrive"

// RedriveCall is one POST /api/runs/{id}/redrive the driver made.
type RedriveCall struct {
	At     time.Time
	Run    string
	Key    string
	Status int // 0 when the call itself failed
	Round  int // the round a 2xx answer named
	Err    string
}

// redriveSteps are the plan's redrives: every 15–30 s from a random source of their own.
func redriveSteps(o PlanOptions) []Step {
	steps := operatorSteps(o, 0x4ed4, StepRedrive, 20*time.Second, 15*time.Second, 30*time.Second)
	for i := range steps {
		steps[i].Key = fmt.Sprintf("soak-%d-redrive-%d", o.Seed, i+1)
	}
	return steps
}

// RedriveCandidates are the runs a redrive step may pick, in ID order: final partial, failed
// or timed out, planned, not stopped.
func RedriveCandidates(ms []ledger.Manifest) []string {
	var out []string
	for _, m := range ms {
		switch m.State {
		case ledger.StatePartial, ledger.StateFailed, ledger.StateTimedOut:
			if m.Stop == nil && m.PlanDone {
				out = append(out, m.RunID)
			}
		}
	}
	slices.Sort(out)
	return out
}

// redriveCalls checks the driver's redrives: a 2xx names a round the run has.
func (c *checker) redriveCalls() {
	for _, k := range c.h.Redrives {
		c.fig.RedriveByCode[k.Status]++
		if k.Status/100 != 2 {
			continue
		}
		if r, ok := c.h.Runs[k.Run]; !ok || k.Round < 1 || k.Round > len(r.Manifest.Redrives) || r.Manifest.Redrives[k.Round-1].Key != k.Key {
			c.add(VRedrive, k.Run, "redrive at %s answered %d round %d, but the run has no such round of key %s", fmtTime(k.At), k.Status, k.Round, k.Key)
		}
	}
}

// redriven checks a run with redrive rounds: each round's results are of its own partitions,
// each once; a final run's latest round has them all, and its report counts each partition's
// latest outcome over the rounds; each round is aggregated once (its "run finished" line).
func (c *checker) redriven(id string, r Run) {
	m := r.Manifest
	c.fig.Redriven++
	latest := map[int]bool{} // partition → OK, by its latest outcome
	for i, res := range r.Results {
		latest[i] = res.OK
	}
	for k, rd := range m.Redrives {
		if k >= len(r.Rounds) {
			break
		}
		round := r.Rounds[k]
		key := ledger.RoundRun(id, rd.Round)
		idx := slices.Clone(round.Indexes)
		slices.Sort(idx)
		for j := 1; j < len(idx); j++ {
			if idx[j] == idx[j-1] && (j == 1 || idx[j-2] != idx[j]) {
				c.add(VRedrive, key, "partition %d has more than one recorded outcome in the round", idx[j])
			}
		}
		for _, i := range slices.Compact(idx) {
			if _, ok := slices.BinarySearch(rd.Indexes, i); !ok {
				c.add(VRedrive, key, "partition %d has a result in the round, which does not run it again", i)
			}
			if res, ok := round.Results[i]; ok {
				latest[i] = res.OK
			}
		}
		final := m.State.Final() || rd.Round < m.Round
		if final && len(slices.Compact(idx)) != len(rd.Indexes) {
			c.add(VRedrive, key, "the round ended with %d of its %d partitions recorded", len(slices.Compact(idx)), len(rd.Indexes))
		}
		if final {
			rep := ledger.Report{}
			if round.Report != nil {
				rep = *round.Report
			}
			c.aggregation(key, rep)
		}
		if !final || round.Report == nil {
			continue
		}
		ok := 0
		for _, good := range latest {
			if good {
				ok++
			}
		}
		if rep := *round.Report; rep.Succeeded != ok || rep.Failed != len(latest)-ok || rep.Partitions != m.Partitions {
			c.add(VReport, key, "the round's report says %d partitions, %d ok, %d failed; the latest outcomes: %d ok, %d failed",
				rep.Partitions, rep.Succeeded, rep.Failed, ok, len(latest)-ok)
		}
	}
	if m.State.Final() && len(r.Rounds) > 0 {
		if rep := r.Rounds[len(r.Rounds)-1].Report; rep == nil || rep.State != m.State {
			c.add(VReport, id, "ended %s in round %d, but the round's report is %v", m.State, m.Round, rep)
		}
	}
}

func (k RedriveCall) String() string {
	return fmt.Sprintf("%s redrive %s key %s: %d round %d %s", fmtTime(k.At), k.Run, k.Key, k.Status, k.Round, k.Err)
}
