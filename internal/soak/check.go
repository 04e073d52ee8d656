package soak

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/ledger"
)

// Violation kinds, one per promise.
const (
	VUnrecorded  = "occurrence-unrecorded" // a schedule occurrence has no record
	VBadRecord   = "bad-record"            // a record is malformed for what it is (trigger, occurrence, reason)
	VUnexpected  = "unexpected-record"     // a record matches no occurrence or manual call
	VDuplicate   = "duplicate-run"         // two runs or two creations for one occurrence or key
	VManual      = "manual-start"          // an accepted manual start without its run, or replies disagreeing
	VResults     = "results"               // a planned run's results are not exactly one per partition
	VReport      = "report"                // the report is missing or disagrees with the results
	VAggregation = "aggregation"           // a run aggregated more (or less) than once
	VLeadership  = "leadership"            // overlapping leaderships or epochs not rising
	VNotFinal    = "not-final"             // a run not final within the bound
	VPoison      = "poison"                // a poison partition not recorded as failed
)

// Violation is one broken promise, with the run or occurrence it concerns and why.
type Violation struct {
	Kind    string
	Subject string
	Why     string
}

func (v Violation) String() string { return fmt.Sprintf("%s %s: %s", v.Kind, v.Subject, v.Why) }

// Figures summarise a soak.
type Figures struct {
	Fired        int            // occurrences fired on at least one instance
	FiredNowhere int            // occurrences due while no instance was running
	Occurrences  int            // schedule occurrences from the first fire to the last fired one
	TimerStates  map[string]int // timer records by state
	ManualCalls  int
	ManualByCode map[int]int
	ManualRuns   map[string]int // manual runs by state
	Faults       map[string]int // faults by kind
	Runs         int            // records in the ledger
	Planned      int            // runs that planned
	Partitions   int            // partitions over planned runs
	Epochs       int            // leaderships
	// LeasesLostToRestart counts leases of killed holders that an Azurite restart lost before
	// they lapsed (an emulator artifact, reported but not a violation).
	LeasesLostToRestart int
}

// Result is the checker's verdict.
type Result struct {
	Figures    Figures
	Violations []Violation
}

// Check verifies h and returns the figures and every violation found.
func Check(h History) Result {
	c := &checker{h: h, slack: h.Slack}
	if c.slack == 0 {
		c.slack = DefaultSlack
	}
	c.fig = Figures{TimerStates: map[string]int{}, ManualByCode: map[int]int{}, ManualRuns: map[string]int{}, Faults: map[string]int{}}
	c.fig.Runs = len(h.Runs)
	for _, f := range h.Faults {
		c.fig.Faults[f.Kind]++
	}
	c.occurrences()
	c.manual()
	c.creations()
	for _, id := range sortedIDs(h.Runs) {
		c.run(id, h.Runs[id])
	}
	c.leadership()
	sort.SliceStable(c.v, func(i, j int) bool { return c.v[i].Kind < c.v[j].Kind })
	return Result{Figures: c.fig, Violations: c.v}
}

type checker struct {
	h     History
	slack time.Duration
	fig   Figures
	v     []Violation
	// accounted run IDs: a fired occurrence or a manual call explains them.
	accounted map[string]bool
}

func (c *checker) add(kind, subject, format string, args ...any) {
	c.v = append(c.v, Violation{Kind: kind, Subject: subject, Why: fmt.Sprintf(format, args...)})
}

func (c *checker) account(id string) {
	if c.accounted == nil {
		c.accounted = map[string]bool{}
	}
	c.accounted[id] = true
}

func sortedIDs(runs map[string]Run) []string {
	ids := make([]string, 0, len(runs))
	for id := range runs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// needsReason lists the final states that must say why.
func needsReason(s ledger.State) bool {
	switch s {
	case ledger.StateSkipped, ledger.StateMissed, ledger.StateFailed, ledger.StateTimedOut:
		return true
	}
	return false
}

// occurrences: every schedule occurrence from the first fire to the last one fired on an
// instance has exactly one timer record. Outside that window a timer record must be a real
// occurrence: before it, recorded as missed; after it, not later than the end of the soak (a
// past-due fire of a resumed instance lands on the latest occurrence passed).
func (c *checker) occurrences() {
	h := c.h
	fired := map[time.Time][]string{}
	var first, last time.Time
	for _, f := range h.Fires {
		occ := f.Occurrence.UTC()
		if first.IsZero() || occ.Before(first) {
			first = occ
		}
		if len(f.Instances) == 0 {
			c.fig.FiredNowhere++
			continue
		}
		c.fig.Fired++
		fired[occ] = f.Instances
		if occ.After(last) {
			last = occ
		}
	}
	if last.IsZero() {
		return
	}
	inWindow := map[string]bool{}
	for occ := first; !occ.After(last); {
		c.fig.Occurrences++
		id := coordinator.TimerRunID(occ)
		inWindow[id] = true
		c.account(id)
		r, ok := h.Runs[id]
		on, wasFired := fired[occ]
		switch {
		case !ok && wasFired:
			c.add(VUnrecorded, id, "occurrence %s fired on %s has no record", occ.Format(time.RFC3339), strings.Join(on, ","))
		case !ok:
			c.add(VUnrecorded, id, "occurrence %s was never fired (no instance running) and is not recorded as missed", occ.Format(time.RFC3339))
		default:
			c.timerRecord(id, occ, r)
		}
		next, err := h.Schedule.Next(occ)
		if err != nil {
			c.add(VBadRecord, id, "schedule: %v", err)
			break
		}
		occ = next
	}
	for _, id := range sortedIDs(h.Runs) {
		m := h.Runs[id].Manifest
		if inWindow[id] || m.Trigger != ledger.TriggerTimer {
			continue
		}
		c.account(id)
		occ := m.Occurrence.UTC()
		prev, err := h.Schedule.Prev(occ)
		switch {
		case m.Occurrence.IsZero() || err != nil || !prev.Equal(occ) || coordinator.TimerRunID(occ) != id:
			c.add(VUnexpected, id, "timer record for occurrence %s, which is not a schedule occurrence named by this ID", occ.Format(time.RFC3339))
		case occ.After(last) && occ.After(h.End):
			c.add(VUnexpected, id, "timer record for occurrence %s, after the last fired occurrence %s and after the end of the soak", occ.Format(time.RFC3339), last.Format(time.RFC3339))
		case occ.After(last):
			// A past-due fire (an instance resumed after the host's last fire) belongs to the
			// latest occurrence passed: a real occurrence of the schedule, recorded once.
			c.timerRecord(id, occ, h.Runs[id])
		case m.State != ledger.StateMissed:
			c.add(VUnexpected, id, "occurrence %s before the first fire is recorded as %s, want missed", occ.Format(time.RFC3339), m.State)
		default:
			c.fig.TimerStates[string(m.State)]++
		}
	}
}

func (c *checker) timerRecord(id string, occ time.Time, r Run) {
	m := r.Manifest
	c.fig.TimerStates[string(m.State)]++
	if m.RunID != id {
		c.add(VBadRecord, id, "manifest names run %q", m.RunID)
	}
	if m.Trigger != ledger.TriggerTimer {
		c.add(VBadRecord, id, "trigger %q, want timer", m.Trigger)
	}
	if !m.Occurrence.Equal(occ) {
		c.add(VBadRecord, id, "occurrence %s, want %s", m.Occurrence.UTC().Format(time.RFC3339), occ.Format(time.RFC3339))
	}
	if m.State.Final() && needsReason(m.State) && m.Reason == "" {
		c.add(VBadRecord, id, "%s without a reason", m.State)
	}
}

// manual: each key maps to one run (its ManualRunID) and every reply for it names that run;
// every accepted start names a run in the ledger; every manual run was asked for.
func (c *checker) manual() {
	h := c.h
	c.fig.ManualCalls = len(h.Manual)
	byKey := map[string][]ManualCall{}
	unsure := false // a call without an answer may have started a run nobody saw named
	for _, call := range h.Manual {
		c.fig.ManualByCode[call.Status]++
		if call.Status == 0 || call.Status >= 500 {
			unsure = true
		}
		if call.Key != "" {
			byKey[call.Key] = append(byKey[call.Key], call)
		}
		if call.Status/100 != 2 {
			continue
		}
		if call.Run == "" {
			c.add(VManual, "POST /api/runs", "%d reply at %s names no run", call.Status, call.At.Format(time.StampMilli))
			continue
		}
		c.account(call.Run)
		r, ok := h.Runs[call.Run]
		switch {
		case !ok:
			c.add(VManual, call.Run, "accepted (%d) at %s but the run has no record", call.Status, call.At.Format(time.StampMilli))
		case r.Manifest.Trigger != ledger.TriggerManual:
			c.add(VBadRecord, call.Run, "manual start's run has trigger %q", r.Manifest.Trigger)
		case call.Key != "" && r.Manifest.IdempotencyKey != call.Key:
			c.add(VBadRecord, call.Run, "run records Idempotency-Key %q, the call sent %q", r.Manifest.IdempotencyKey, call.Key)
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		want := coordinator.ManualRunID(k, time.Time{})
		c.account(want)
		for _, call := range byKey[k] {
			if call.Status/100 == 2 && call.Run != want {
				c.add(VDuplicate, want, "Idempotency-Key %q answered with run %s, want %s (one run per key)", k, call.Run, want)
			}
		}
	}
	perKey := map[string][]string{}
	for _, id := range sortedIDs(h.Runs) {
		m := h.Runs[id].Manifest
		if m.Trigger != ledger.TriggerManual {
			continue
		}
		c.fig.ManualRuns[string(m.State)]++
		if m.IdempotencyKey != "" {
			perKey[m.IdempotencyKey] = append(perKey[m.IdempotencyKey], id)
		}
		if !c.accounted[id] && !unsure {
			c.add(VUnexpected, id, "manual run that no accepted POST /api/runs named")
		}
	}
	for k, ids := range perKey {
		if len(ids) > 1 {
			c.add(VDuplicate, ids[0], "Idempotency-Key %q has %d runs: %v", k, len(ids), ids)
		}
	}
}

// creations: at most one "run created" per run.
func (c *checker) creations() {
	created := map[string][]string{}
	for _, l := range c.h.Lines {
		if l.Msg == "run created" {
			created[l.Str("run")] = append(created[l.Str("run")], fmt.Sprintf("%s/%d epoch %d", l.Instance, l.PID, l.Int("epoch")))
		}
	}
	for id, by := range created {
		if len(by) > 1 {
			c.add(VDuplicate, id, "created %d times: %s", len(by), strings.Join(by, "; "))
		}
	}
}

// run checks one run's records: results, report, aggregation, bound.
func (c *checker) run(id string, r Run) {
	m := r.Manifest
	if m.Trigger != ledger.TriggerTimer && m.Trigger != ledger.TriggerManual {
		c.add(VBadRecord, id, "trigger %q", m.Trigger)
	}
	if m.Trigger == ledger.TriggerManual && m.State.Final() && needsReason(m.State) && m.Reason == "" {
		c.add(VBadRecord, id, "%s without a reason", m.State)
	}
	c.bound(id, m)
	if !m.PlanDone {
		if len(r.Indexes) > 0 && m.State.Final() {
			c.add(VResults, id, "%s before planning finished, yet %d results exist", m.State, len(r.Indexes))
		}
		return
	}
	c.fig.Planned++
	c.fig.Partitions += m.Partitions

	idx := slices.Clone(r.Indexes)
	sort.Ints(idx)
	exact := len(idx) == m.Partitions
	for k := 0; exact && k < len(idx); k++ {
		exact = idx[k] == k
	}
	if !exact && m.State.Final() {
		c.add(VResults, id, "%s with %d partitions, but results/ lists %s", m.State, m.Partitions, summarize(idx))
	}
	ok, failed := 0, 0
	var failedIdx []int
	for _, i := range idx {
		res, have := r.Results[i]
		if !have {
			continue
		}
		if res.Index != i || res.Run != id {
			c.add(VResults, id, "result file %d holds run %q index %d", i, res.Run, res.Index)
		}
		if res.OK {
			ok++
		} else {
			failed++
			failedIdx = append(failedIdx, i)
		}
	}
	c.poison(id, m, r)

	if !m.State.Final() {
		return
	}
	if r.Report == nil {
		c.add(VReport, id, "%s after planning %d partitions, but there is no report.json", m.State, m.Partitions)
		return
	}
	rep := *r.Report
	if rep.State != m.State || rep.Partitions != m.Partitions || rep.Succeeded != ok || rep.Failed != failed {
		c.add(VReport, id, "report says %s, %d partitions, %d ok, %d failed; ledger: manifest %s, %d partitions, results %d ok, %d failed %v",
			rep.State, rep.Partitions, rep.Succeeded, rep.Failed, m.State, m.Partitions, ok, failed, failedIdx)
	}
	if m.Succeeded != ok || m.Failed != failed {
		c.add(VReport, id, "manifest counts %d ok, %d failed; results %d ok, %d failed", m.Succeeded, m.Failed, ok, failed)
	}
	c.aggregation(id, rep)
}

// poison: a synthetic run asked to fail a partition always must record that partition as failed.
func (c *checker) poison(id string, m ledger.Manifest, r Run) {
	if m.Job != "synthetic" || len(m.Params) == 0 || !m.State.Final() {
		return
	}
	var p struct {
		FailAlways []int `json:"failAlways"`
	}
	if json.Unmarshal(m.Params, &p) != nil {
		return
	}
	for _, i := range p.FailAlways {
		if i < 0 || i >= m.Partitions {
			continue
		}
		if res, ok := r.Results[i]; ok && res.OK {
			c.add(VPoison, id, "partition %d always fails, yet its result is a success", i)
		}
	}
}

// aggregation: one "run finished" (or settled) line per finished run; none missing unless the
// aggregating process was killed.
func (c *checker) aggregation(id string, rep ledger.Report) {
	finished, settled := 0, 0
	for _, l := range c.h.Lines {
		if l.Str("run") != id {
			continue
		}
		switch l.Msg {
		case "run finished":
			finished++
		case "report was written but the manifest was not final; settled it":
			settled++
		}
	}
	switch {
	case finished > 1:
		c.add(VAggregation, id, "aggregated %d times (\"run finished\" logged %d times)", finished, finished)
	case finished == 0 && settled == 0 && !c.killed(rep.Aggregator.Instance, rep.Aggregator.PID):
		c.add(VAggregation, id, "report by %s/%d, but no aggregation was logged", rep.Aggregator.Instance, rep.Aggregator.PID)
	}
}

// killed reports whether the driver killed or stopped this process.
func (c *checker) killed(instance string, pid int) bool {
	for _, f := range c.h.Faults {
		if f.Instance == instance && f.PID == pid && (f.Kind == FaultKillLeader || f.Kind == FaultKillOther || f.Kind == FaultTerm) {
			return true
		}
	}
	return false
}

// bound: final by the documented bound (DocumentedBound) + slack.
func (c *checker) bound(id string, m ledger.Manifest) {
	if m.Deadline.IsZero() {
		if !m.State.Final() {
			c.add(VNotFinal, id, "still %s at the end and has no deadline", m.State)
		}
		return
	}
	bound := DocumentedBound(m.Expires, m.Deadline, c.h.LeaseDuration)
	limit := bound.Add(c.slack)
	switch {
	case !m.State.Final():
		c.add(VNotFinal, id, "still %s at %s; deadline %s, bound %s (+%s slack)", m.State, c.h.End.UTC().Format(time.TimeOnly),
			m.Deadline.UTC().Format(time.TimeOnly), bound.UTC().Format(time.TimeOnly), c.slack)
	case !m.Finished.IsZero() && m.Finished.After(limit):
		c.add(VNotFinal, id, "%s at %s, %s after its bound %s (+%s slack)", m.State, m.Finished.UTC().Format(time.TimeOnly),
			m.Finished.Sub(limit).Round(time.Millisecond), bound.UTC().Format(time.TimeOnly), c.slack)
	}
}

// summarize prints a sorted index list briefly.
func summarize(idx []int) string {
	if len(idx) <= 12 {
		return fmt.Sprint(idx)
	}
	return fmt.Sprintf("%d indexes %v…%v", len(idx), idx[:6], idx[len(idx)-6:])
}
