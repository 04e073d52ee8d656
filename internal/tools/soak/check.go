package soak

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
)

// Violation kinds, one per promise.
const (
	VUnrecorded  = "occurrence-unrecorded" // a due occurrence has no record
	VBadRecord   = "bad-record"            // a record is malformed for what it is (trigger, schedule, occurrence, reason)
	VUnexpected  = "unexpected-record"     // a record matches no occurrence of a declared schedule, nor a manual call
	VDuplicate   = "duplicate-run"         // two runs or two creations for one occurrence or key
	VManual      = "manual-start"          // an accepted manual start without its run, or replies disagreeing
	VResults     = "results"               // a planned run's results are not exactly one per partition
	VReport      = "report"                // the report is missing or disagrees with the results
	VAggregation = "aggregation"           // a run aggregated more (or less) than once
	VLeadership  = "leadership"            // overlapping leaderships of one lease, or its epochs not rising
	VNotFinal    = "not-final"             // a run not final within its bound
	VPoison      = "poison"                // a poison partition not recorded as failed
	VPolicy      = "overlap-policy"        // a record or a start the schedule's overlap policy does not give
	VPause       = "pause"                 // a paused record outside a pause, or a decision other than paused inside one
	VDelay       = "delayed"               // an occurrence decided late (or missed) with no fault to explain it
	VOwnLease    = "own-lease"             // a run planned outside its own lease
	VEarly       = "early-start"           // a run of an occurrence that began planning before its time
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
	Heartbeats        int // heartbeats fired on at least one instance
	HeartbeatsNowhere int // heartbeats due while no instance was running
	// Schedules are the figures of each declared schedule, by name.
	Schedules    map[string]*ScheduleFigures
	ManualCalls  int
	ManualByCode map[int]int
	ManualRuns   map[string]int // manual runs (ad hoc and run now) by state
	Faults       map[string]int // faults by kind
	Runs         int            // records in the ledger
	Planned      int            // runs that planned
	Partitions   int            // partitions over planned runs
	// InBlocks counts the results recorded in blocks, over planned runs (the rest their own).
	InBlocks int
	// SchedulerEpochs are the scheduler lease's leaderships; RunLeaderships those of the runs'
	// own leases, over RunLeases leases.
	SchedulerEpochs int
	RunLeaderships  int
	RunLeases       int
	// LeasesLostToRestart counts leases of killed holders that an Azurite restart lost before
	// they lapsed (an emulator artifact, reported but not a violation).
	LeasesLostToRestart int
	// EpochsLostToRestart counts epochs acquired twice because an Azurite restart lost the
	// first acquisition's record (see reissuedAfterRestart: an emulator artifact, reported but
	// not a violation).
	EpochsLostToRestart int
	// StartsChecked, TakeoversChecked and RoundsChecked count what supervision's bounds
	// (supervise.go) held for: runs whose first planner came in time (a), planners that stopped
	// with planning left and were replaced in time (b), re-enqueue rounds in time (c).
	// HeartbeatDriven counts the runs a heartbeat drove itself because they had not moved.
	StartsChecked, TakeoversChecked, RoundsChecked int
	HeartbeatDriven                                int
	// CancelByCode counts the driver's cancels by HTTP status; Stopped the runs with a stop.
	CancelByCode map[int]int
	Stopped      int
	// RedriveByCode counts the driver's redrives by HTTP status; Redriven the runs with rounds.
	RedriveByCode map[int]int
	Redriven      int
}

// ScheduleFigures are one schedule's figures.
type ScheduleFigures struct {
	// Occurrences are the due occurrences in the window (each must have one record).
	Occurrences int
	// States are the schedule's occurrence records by state; Queued how many of its runs
	// waited, queued, for the run before them; Now its runs now.
	States map[string]int
	Queued int
	Now    int
	// MaxDelay is the longest time from an occurrence to its record that no fault explains
	// (MaxDelayRun's); MaxDelayFault the longest one a fault explains.
	MaxDelay, MaxDelayFault time.Duration
	MaxDelayRun             string
}

// Result is the checker's verdict.
type Result struct {
	Figures    Figures
	Violations []Violation
}

// Check verifies h and returns the figures and every violation found.
func Check(h History) Result {
	c := &checker{h: h, slack: h.Slack, schedules: map[string]Schedule{}}
	if c.slack == 0 {
		c.slack = DefaultSlack
	}
	c.fig = Figures{Schedules: map[string]*ScheduleFigures{}, ManualByCode: map[int]int{}, ManualRuns: map[string]int{},
		Faults: map[string]int{}, CancelByCode: map[int]int{}, RedriveByCode: map[int]int{}}
	c.fig.Runs = len(h.Runs)
	for _, s := range h.Schedules {
		c.schedules[s.Name] = s
		c.fig.Schedules[s.Name] = &ScheduleFigures{States: map[string]int{}}
	}
	// Stalls within an injected fault's span are that fault's doing: only the others are kept
	// (and counted), so the figures tell the stalls the driver did not cause.
	for _, f := range StorageStalls(h.Lines) {
		if _, ok := explainedBy(h.Faults, h.LeaseDuration, h.Heartbeat, f.At, f.Until); !ok {
			c.stalls = append(c.stalls, f)
		}
	}
	for _, f := range slices.Concat(h.Faults, c.stalls) {
		c.fig.Faults[f.Kind]++
	}
	for _, f := range h.Fires {
		if len(f.Instances) == 0 {
			c.fig.HeartbeatsNowhere++
		} else {
			c.fig.Heartbeats++
		}
	}
	c.ts, c.dupEpochs = Tenures(h.Lines)
	c.queued = map[string]bool{}
	for _, l := range h.Lines {
		// A run created queued whose create answered with an error (it took effect, the answer
		// was lost) has no "run created" line: the heartbeat that adopts it, or the one that
		// starts it, says it was queued.
		switch {
		case l.Msg == "run created" && l.Str("state") == string(ledger.StateQueued),
			l.Msg == "heartbeat: occurrence decided" && l.Str("state") == string(ledger.StateQueued),
			strings.HasPrefix(l.Msg, "queued run started"):
			c.queued[l.Str("run")] = true
		}
	}
	c.records()
	for _, s := range h.Schedules {
		c.occurrences(s)
		c.policy(s)
	}
	c.manual()
	c.cancels()
	c.redriveCalls()
	c.creations()
	for _, id := range sortedIDs(h.Runs) {
		c.run(id, h.Runs[id])
		c.supervised(id, h.Runs[id])
	}
	for _, l := range h.Lines {
		if l.Msg == "supervision: the run has not moved by its bound; the heartbeat drives it" {
			c.fig.HeartbeatDriven++
		}
	}
	c.leadership()
	sort.SliceStable(c.v, func(i, j int) bool { return c.v[i].Kind < c.v[j].Kind })
	return Result{Figures: c.fig, Violations: c.v}
}

type checker struct {
	h         History
	slack     time.Duration
	fig       Figures
	v         []Violation
	schedules map[string]Schedule
	ts        []Tenure
	dupEpochs []string
	// queued are the runs created queued (buffer-one), from the "run created" lines.
	queued map[string]bool
	// accounted run IDs: a schedule occurrence or a manual call explains them.
	accounted map[string]bool
	// bySchedule are each schedule's occurrence records: their occurrences by run ID.
	bySchedule map[string]map[string]time.Time
	// backlog are the occurrence records decided late behind a fault's backlog (backlogs).
	backlog map[string]string
	// stalls are the heartbeats storage failed (StorageStalls): faults the driver did not
	// inject, which explain a late decision as an injected one does.
	stalls []Fault
	// passes are the heartbeat passes (the scheduler lease's leaderships), by acquisition.
	passes []Tenure
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
	case ledger.StateSkipped, ledger.StateMissed, ledger.StateFailed, ledger.StateTimedOut, ledger.StatePaused, ledger.StateCancelled:
		return true
	}
	return false
}

// early is how long before its time a heartbeat may decide an occurrence (coordinator.MaxEarly,
// at most half the heartbeat).
func (c *checker) early() time.Duration {
	if c.h.Heartbeat <= 0 {
		return coordinator.MaxEarly
	}
	return min(coordinator.MaxEarly, c.h.Heartbeat/2)
}

// lag is how long after a heartbeat's period a decision may still land: the period plus the
// margin for a heartbeat's own storage calls.
func (c *checker) lag() time.Duration { return c.h.Heartbeat + DefaultDelayMargin }

// explained reports whether a fault may have held up the scheduler between from and to, and
// names it.
func (c *checker) explained(from, to time.Time) (string, bool) {
	return explainedBy(slices.Concat(c.h.Faults, c.stalls), c.h.LeaseDuration, c.h.Heartbeat, from, to)
}

// explainedBy names the first of faults whose effect (Fault.Effect) overlaps from..to.
func explainedBy(faults []Fault, lease, heartbeat time.Duration, from, to time.Time) (string, bool) {
	for _, f := range faults {
		a, b := f.Effect(lease, heartbeat)
		if !a.After(to) && !b.Before(from) && b.After(a) {
			return fmt.Sprintf("%s at %s", f.Kind, f.At.UTC().Format("15:04:05.000")), true
		}
	}
	return "", false
}

// backlogs finds the occurrences a fault's backlog explains, by record ID, with the fault's
// name. A heartbeat pass decides every occurrence due before it began; those that come due
// while it runs wait for the next pass. After a long fault the first pass has a backlog to
// decide, a storage write each, and on a loaded machine it takes tens of seconds (23.6 s after
// an 18.6 s Azurite restart at a load average of 13 on 2 cores), so the occurrences that come
// due meanwhile are decided late by the next pass, which may run long in turn. So an
// occurrence is explained by a fault when it came due while the scheduler lease was held by a
// pass that decided late an occurrence the fault explains, directly or, in turn, this way.
func (c *checker) backlogs() map[string]string {
	type rec struct {
		id           string
		occ, created time.Time
	}
	var recs []rec
	for id, r := range c.h.Runs {
		name, ok := ledger.ParseRunID(id)
		if !ok || name.Manual || name.Now || r.Manifest.Created.IsZero() {
			continue
		}
		if _, declared := c.schedules[name.Schedule]; declared {
			recs = append(recs, rec{id, name.Occurrence, r.Manifest.Created})
		}
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].occ.Before(recs[j].occ) })
	var passes []Tenure // the scheduler lease's leaderships: heartbeat passes
	for _, tn := range c.ts {
		if tn.Lease == "" {
			passes = append(passes, tn)
		}
	}
	end := func(tn Tenure) time.Time {
		if !tn.Released.IsZero() {
			return tn.Released
		}
		return tn.ValidUntil(c.h.LeaseDuration)
	}
	// during returns the pass holding the lease at t (-1 for none), widened by the log's
	// tolerance: a decision is logged a moment after its write.
	during := func(t time.Time) int {
		for i, tn := range passes {
			if !tn.Acquired.After(t.Add(LogTolerance)) && !end(tn).Before(t.Add(-LogTolerance)) {
				return i
			}
		}
		return -1
	}
	busy := map[int]string{} // pass → the fault whose backlog it was deciding
	out := map[string]string{}
	for _, r := range recs {
		why, ok := c.explained(r.occ, r.created)
		if !ok {
			if p := during(r.occ); p >= 0 && busy[p] != "" {
				why, ok = busy[p], true
				out[r.id] = why
			}
		}
		// Only a pass that was still behind (it decided this one later than a heartbeat and
		// the margin) passes the excuse on: once the passes catch up, the chain ends.
		if ok && r.created.Sub(r.occ) > c.h.Heartbeat+DecisionMargin {
			if p := during(r.created); p >= 0 && busy[p] == "" {
				busy[p] = why
			}
		}
	}
	return out
}

// records classifies every record by its ID: a schedule's occurrence, a schedule's run now, or
// an ad-hoc run; anything else, or a schedule that is not declared, is unexpected.
func (c *checker) records() {
	c.bySchedule = map[string]map[string]time.Time{}
	c.backlog = c.backlogs()
	for _, id := range sortedIDs(c.h.Runs) {
		m := c.h.Runs[id].Manifest
		name, ok := ledger.ParseRunID(id)
		switch {
		case !ok:
			c.add(VUnexpected, id, "no run ID format gives this ID")
			continue
		case name.Manual:
			continue // manual() accounts for it
		}
		s, declared := c.schedules[name.Schedule]
		if !declared {
			if !(name.Now && name.Schedule == coordinator.LegacySchedule) {
				c.add(VUnexpected, id, "a record of schedule %q, which the app does not declare", name.Schedule)
			}
			continue
		}
		if m.Schedule != s.Name {
			c.add(VBadRecord, id, "manifest names schedule %q", m.Schedule)
		}
		if name.Now {
			c.fig.Schedules[s.Name].Now++
			continue // manual() accounts for it
		}
		c.account(id)
		occ := name.Occurrence
		if c.bySchedule[s.Name] == nil {
			c.bySchedule[s.Name] = map[string]time.Time{}
		}
		c.bySchedule[s.Name][id] = occ
		c.fig.Schedules[s.Name].States[string(m.State)]++
		if c.queued[id] {
			c.fig.Schedules[s.Name].Queued++
		}
		c.occurrenceRecord(s, id, occ, m)
	}
}

// occurrenceRecord checks one occurrence's record: what it says it is, when it was decided,
// and, for a decision the schedule's pauses or policies rule, that they allowed it.
func (c *checker) occurrenceRecord(s Schedule, id string, occ time.Time, m ledger.Manifest) {
	if m.RunID != id {
		c.add(VBadRecord, id, "manifest names run %q", m.RunID)
	}
	if m.Trigger != ledger.TriggerTimer {
		c.add(VBadRecord, id, "trigger %q, want timer", m.Trigger)
	}
	if !m.Occurrence.Equal(occ) {
		c.add(VBadRecord, id, "occurrence %s, its ID says %s", fmtTime(m.Occurrence), fmtTime(occ))
	}
	if prev, ok := s.Cron.Prev(occ); !ok || !prev.Equal(occ) {
		c.add(VUnexpected, id, "%s is not an occurrence of %s (%s)", fmtTime(occ), s.Name, s.Cron)
		return
	}
	if !c.h.Started.IsZero() && !occ.After(c.h.Started) {
		c.add(VUnexpected, id, "occurrence %s is before the app started (%s): nothing before a schedule's first heartbeat is its to run",
			fmtTime(occ), fmtTime(c.h.Started))
	}
	if m.State.Final() && needsReason(m.State) && m.Reason == "" {
		c.add(VBadRecord, id, "%s without a reason", m.State)
	}
	if m.Created.IsZero() {
		c.add(VBadRecord, id, "no creation time")
		return
	}
	if m.Created.After(c.h.End) {
		c.add(VBadRecord, id, "created at %s, after the end of the soak", fmtTime(m.Created))
	}
	if m.Created.Before(occ.Add(-c.early() - LogTolerance)) {
		c.add(VBadRecord, id, "decided at %s, more than %s before its occurrence %s", fmtTime(m.Created), c.early(), fmtTime(occ))
	}
	delay := m.Created.Sub(occ)
	_, isExplained := c.explained(occ, m.Created)
	if !isExplained {
		_, isExplained = c.backlog[id]
	}
	fig := c.fig.Schedules[s.Name]
	switch {
	case m.State == ledger.StateMissed:
		if delay <= s.CatchUp {
			c.add(VBadRecord, id, "recorded missed %s after its occurrence, within the catch-up window of %s", delay.Round(time.Millisecond), s.CatchUp)
		}
		// Missed is what a scheduler that fell behind by more than the catch-up window
		// records, so, like a late decision, it needs a fault to explain it only past the
		// decision margin: a short catch-up window (8 s in the e2e app) is shorter than a
		// heartbeat on a loaded machine (9-12 s seen with a load average of 10-15 on 2 cores).
		if delay > c.h.Heartbeat+DecisionMargin && !isExplained {
			c.add(VDelay, id, "missed (decided %s after its occurrence, over the heartbeat %s + %s) with no fault to explain it",
				delay.Round(time.Millisecond), c.h.Heartbeat, DecisionMargin)
		}
		return
	case delay > c.h.Heartbeat+DecisionMargin && !isExplained:
		c.add(VDelay, id, "decided (%s) %s after its occurrence, over the heartbeat %s + %s, with no fault to explain it",
			m.State, delay.Round(time.Millisecond), c.h.Heartbeat, DecisionMargin)
	}
	if isExplained {
		fig.MaxDelayFault = max(fig.MaxDelayFault, delay)
	} else if delay > fig.MaxDelay {
		fig.MaxDelay, fig.MaxDelayRun = delay, id
	}
	c.paused(s, id, m)
	// A heartbeat may decide an occurrence a little early; its run still starts no earlier than
	// its occurrence (its planning begins when its first planner takes its lease).
	for _, tn := range c.ts {
		if tn.Lease == ledger.RunLeaseName(id) && tn.Acquired.Before(occ) {
			c.add(VEarly, id, "planning began at %s (epoch %d of %s, by %s), %s before its occurrence %s (decided at %s)", fmtTime(tn.Acquired),
				tn.Epoch, tn.Lease, tn.Holder, occ.Sub(tn.Acquired).Round(time.Millisecond), fmtTime(occ), fmtTime(m.Created))
		}
	}
}

// paused: a paused record was decided while the schedule was paused, naming the pause's note;
// any other decision (not a missed record) was not made while it was. One heartbeat and the
// margin of lag are allowed at each edge (a heartbeat reads the state, then decides), more when
// a fault held that heartbeat up.
func (c *checker) paused(s Schedule, id string, m ledger.Manifest) {
	lag := c.lag()
	at := m.Created
	var pauses []Pause
	for _, p := range c.h.Pauses {
		if p.Schedule == s.Name {
			pauses = append(pauses, p)
		}
	}
	if m.State == ledger.StatePaused {
		for _, p := range pauses {
			if at.Before(p.From) {
				continue
			}
			end := c.h.End
			if !p.To.IsZero() {
				end = p.ToDone.Add(lag)
			}
			_, heldUp := c.explained(p.ToDone, at)
			if !at.After(end) || !p.To.IsZero() && heldUp {
				if p.Note != "" && !strings.Contains(m.Reason, p.Note) {
					c.add(VPause, id, "paused with reason %q, which does not name the pause's note %q", m.Reason, p.Note)
				}
				return
			}
		}
		c.add(VPause, id, "recorded paused at %s, when the schedule was not paused", fmtTime(at))
		return
	}
	for _, p := range pauses {
		to := p.To
		if to.IsZero() {
			to = c.h.End
		}
		if !at.After(p.FromDone.Add(lag)) || !at.Before(to) {
			continue
		}
		if _, heldUp := c.explained(p.FromDone, at); heldUp {
			continue
		}
		c.add(VPause, id, "decided %s at %s, while the schedule was paused (from %s to %s)", m.State, fmtTime(at),
			fmtTime(p.FromDone), fmtTimeOr(p.To, "the end"))
	}
}

// occurrences: every occurrence of s after its first cursor and up to the window's end has a
// record.
func (c *checker) occurrences(s Schedule) {
	first := c.h.First[s.Name]
	if first.IsZero() {
		first = c.h.Started
	}
	if first.IsZero() || c.h.WindowEnd.IsZero() {
		return
	}
	fig := c.fig.Schedules[s.Name]
	have := c.bySchedule[s.Name]
	for occ, ok := s.Cron.Next(first); ok && !occ.After(c.h.WindowEnd); occ, ok = s.Cron.Next(occ) {
		fig.Occurrences++
		if _, ok := have[ledger.ScheduleRunID(s.Name, occ)]; !ok {
			c.add(VUnrecorded, ledger.ScheduleRunID(s.Name, occ), "occurrence %s of %s has no record (due after its first cursor %s, before the window's end %s)",
				fmtTime(occ), s.Name, fmtTime(first), fmtTime(c.h.WindowEnd))
		}
	}
}

// policy: what the schedule's overlap policy recorded. A skip names the run in progress, of the
// same schedule, created before and not yet final when the skip was decided; allow never skips;
// under skip and buffer-one no run starts before the one before it is final (a queued run
// starts planning only once it is).
func (c *checker) policy(s Schedule) {
	type started struct {
		id            string
		start, finish time.Time
		final         bool
	}
	var runs []started
	for _, id := range slices.Sorted(maps.Keys(c.bySchedule[s.Name])) {
		m := c.h.Runs[id].Manifest
		switch m.State {
		case ledger.StateSkipped:
			c.skip(s, id, m)
			continue
		case ledger.StateMissed, ledger.StatePaused:
			continue
		case ledger.StateFailed:
			if m.Lease == "" && m.Epoch == 0 && !m.PlanDone {
				continue // a misconfigured job's record: no run was started
			}
		}
		st := started{id: id, start: m.Created, finish: m.Finished, final: m.State.Final()}
		if r := c.h.Runs[id]; len(m.Redrives) > 0 && r.Report != nil {
			// A redrive reopened the run after it was final, which the policy does not
			// look at: it was first final just after its first report's claim (Finished is
			// its latest round's).
			st.finish = r.Report.ClaimedAt()
		}
		if c.queued[id] {
			if s.Overlap != config.OverlapBufferOne {
				c.add(VPolicy, id, "queued, but the policy of %s is %s", s.Name, s.Overlap)
			}
			// A queued run starts when its first planner takes its lease (logged after the
			// acquisition, which follows the promotion, which follows the end of the run before).
			st.start = time.Time{}
			for _, tn := range c.ts {
				if tn.Lease == ledger.RunLeaseName(id) && (st.start.IsZero() || tn.Acquired.Before(st.start)) {
					st.start = tn.Acquired
				}
			}
			if st.start.IsZero() {
				continue // never started (still queued at the end: the bound says whether that is late)
			}
		}
		runs = append(runs, st)
	}
	if s.Overlap == config.OverlapAllow {
		return
	}
	slices.SortFunc(runs, func(a, b started) int { return a.start.Compare(b.start) })
	for i := 1; i < len(runs); i++ {
		prev, next := runs[i-1], runs[i]
		switch {
		case !prev.final:
			c.add(VPolicy, next.id, "started at %s while %s was never final (policy %s)", fmtTime(next.start), prev.id, s.Overlap)
		case next.start.Before(prev.finish):
			c.add(VPolicy, next.id, "started at %s, before %s was final at %s (policy %s)", fmtTime(next.start), prev.id,
				fmtTime(prev.finish), s.Overlap)
		}
	}
}

// skip checks one skipped record against the policy.
func (c *checker) skip(s Schedule, id string, m ledger.Manifest) {
	if s.Overlap == config.OverlapAllow {
		c.add(VPolicy, id, "skipped, but %s allows overlapping runs: %q", s.Name, m.Reason)
		return
	}
	rest, ok := strings.CutPrefix(m.Reason, "run ")
	if !ok || !strings.Contains(m.Reason, " is still in progress") {
		c.add(VPolicy, id, "skipped for a reason no policy gives: %q", m.Reason)
		return
	}
	named := []string{strings.Fields(rest)[0]}
	if s.Overlap == config.OverlapBufferOne {
		// "... and <queued> is already waiting for it (overlap policy: buffer-one)"
		if _, after, ok := strings.Cut(m.Reason, " and "); ok {
			named = append(named, strings.Fields(after)[0])
		}
	}
	for i, other := range named {
		r, ok := c.h.Runs[other]
		name, _ := ledger.ParseRunID(other)
		switch {
		case !ok:
			c.add(VPolicy, id, "skipped for run %s, which is not in the ledger", other)
			continue
		case name.Schedule != s.Name:
			c.add(VPolicy, id, "skipped for run %s, which is not a run of %s", other, s.Name)
			continue
		case r.Manifest.Created.After(m.Created):
			c.add(VPolicy, id, "skipped at %s for run %s, created later (%s)", fmtTime(m.Created), other, fmtTime(r.Manifest.Created))
			continue
		}
		if i > 0 || r.Manifest.Finished.IsZero() {
			continue
		}
		// The heartbeat read the run in progress at the start of its pass over the schedule.
		if stale := m.Created.Sub(r.Manifest.Finished); stale > c.lag() {
			if _, ok := c.explained(r.Manifest.Finished, m.Created); !ok {
				c.add(VPolicy, id, "skipped at %s for run %s, which was final %s before (%s)", fmtTime(m.Created), other,
					stale.Round(time.Millisecond), fmtTime(r.Manifest.Finished))
			}
		}
	}
}

// manual: each key maps to one run (ManualRunID, or ScheduleNowRunID of the settings' schedule
// for a call without a job) and every reply for it names that run; every accepted start names a
// run in the ledger; every manual run was asked for.
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
	for _, k := range slices.Sorted(maps.Keys(byKey)) {
		for _, call := range byKey[k] {
			want := ledger.ManualRunID(k, time.Time{})
			if strings.TrimSpace(call.Body) == "" {
				want = ledger.ScheduleNowRunID(coordinator.LegacySchedule, k, time.Time{})
			}
			c.account(want)
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
	for _, k := range slices.Sorted(maps.Keys(perKey)) {
		if ids := perKey[k]; len(ids) > 1 {
			c.add(VDuplicate, ids[0], "Idempotency-Key %q has %d runs: %v", k, len(ids), ids)
		}
	}
}

// creations: at most one "run created" per run.
func (c *checker) creations() {
	created := map[string][]string{}
	for _, l := range c.h.Lines {
		if l.Msg == "run created" {
			created[l.Str("run")] = append(created[l.Str("run")], fmt.Sprintf("%s/%d", l.Instance, l.PID))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(created)) {
		if by := created[id]; len(by) > 1 {
			c.add(VDuplicate, id, "created %d times: %s", len(by), strings.Join(by, "; "))
		}
	}
}

// run checks one run's records: its own lease, results, report, aggregation, bound.
func (c *checker) run(id string, r Run) {
	m := r.Manifest
	if m.Trigger != ledger.TriggerTimer && m.Trigger != ledger.TriggerManual {
		c.add(VBadRecord, id, "trigger %q", m.Trigger)
	}
	if m.Trigger == ledger.TriggerManual && m.State.Final() && needsReason(m.State) && m.Reason == "" {
		c.add(VBadRecord, id, "%s without a reason", m.State)
	}
	c.bound(id, m)
	c.ownLease(id, m)
	if m.Stop != nil {
		c.stoppedRun(id, r)
		return
	}
	if !m.PlanDone {
		if len(r.Indexes) > 0 && m.State.Final() {
			c.add(VResults, id, "%s before planning finished, yet %d results exist", m.State, len(r.Indexes))
		}
		return
	}
	c.fig.Planned++
	c.fig.Partitions += m.Partitions
	c.fig.InBlocks += r.InBlocks

	idx := slices.Clone(r.Indexes)
	sort.Ints(idx)
	exact := len(idx) == m.Partitions
	for k := 0; exact && k < len(idx); k++ {
		exact = idx[k] == k
	}
	if !exact && m.State.Final() {
		c.add(VResults, id, "%s with %d partitions, but results/ lists %s", m.State, m.Partitions, summarize(idx))
	}
	for k := 1; k < len(idx); k++ {
		if idx[k] == idx[k-1] && (k == 1 || idx[k-2] != idx[k]) {
			c.add(VResults, id, "partition %d has more than one recorded outcome", idx[k])
		}
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
	if len(m.Redrives) > 0 {
		// The first round's report stands for the state the first redrive reopened; the
		// rounds after are checked on their own.
		if rep.State != m.Redrives[0].From || rep.Succeeded != ok || rep.Failed != failed {
			c.add(VReport, id, "first report says %s, %d ok, %d failed; the first redrive reopened %s, results %d ok, %d failed",
				rep.State, rep.Succeeded, rep.Failed, m.Redrives[0].From, ok, failed)
		}
		c.aggregation(id, rep)
		c.redriven(id, r)
		return
	}
	if rep.State != m.State || rep.Partitions != m.Partitions || rep.Succeeded != ok || rep.Failed != failed {
		c.add(VReport, id, "report says %s, %d partitions, %d ok, %d failed; ledger: manifest %s, %d partitions, results %d ok, %d failed %v",
			rep.State, rep.Partitions, rep.Succeeded, rep.Failed, m.State, m.Partitions, ok, failed, failedIdx)
	}
	if m.Succeeded != ok || m.Failed != failed {
		c.add(VReport, id, "manifest counts %d ok, %d failed; results %d ok, %d failed", m.Succeeded, m.Failed, ok, failed)
	}
	c.aggregation(id, rep)
}

// ownLease: a run is planned under its own lease, leases/runs/<run>: the manifest names it,
// every segment's epoch is a leadership of that lease, and every line that begins or resumes
// its planning comes from the process holding that lease at that epoch.
func (c *checker) ownLease(id string, m ledger.Manifest) {
	if m.Epoch == 0 && !m.PlanDone {
		return // never planned
	}
	want := ledger.RunLeaseName(id)
	if m.Lease != want {
		c.add(VOwnLease, id, "manifest names lease %q, want its own %q", m.Lease, want)
		return
	}
	byEpoch := map[int64]Tenure{}
	for _, tn := range c.ts {
		if tn.Lease == want {
			byEpoch[tn.Epoch] = tn
		}
	}
	for _, s := range m.Segments {
		if s.Epoch == 0 {
			continue
		}
		if _, ok := byEpoch[s.Epoch]; !ok {
			c.add(VOwnLease, id, "segment from %d has epoch %d, which no handler logged acquiring on %s", s.From, s.Epoch, want)
		}
	}
	for _, l := range c.h.Lines {
		if l.Str("run") != id || !planningLine(l.Msg) {
			continue
		}
		tn, ok := byEpoch[l.Int("epoch")]
		switch {
		case !ok:
			c.add(VOwnLease, id, "%q at %s under epoch %d, which no handler logged acquiring on %s", l.Msg, fmtTime(l.Time), l.Int("epoch"), want)
		case tn.Instance != l.Instance || tn.PID != l.PID:
			c.add(VOwnLease, id, "%q by %s/%d, but epoch %d of %s is held by %s", l.Msg, l.Instance, l.PID, tn.Epoch, want, tn.Holder)
		case l.Time.Before(tn.Acquired.Add(-LogTolerance)):
			c.add(VOwnLease, id, "%q at %s, before epoch %d of %s was acquired (%s)", l.Msg, fmtTime(l.Time), tn.Epoch, want, fmtTime(tn.Acquired))
		}
	}
}

// planningLine reports whether msg begins or resumes a run's planning under its lease.
func planningLine(msg string) bool {
	switch msg {
	case "planning the run", "check: planning the run's next slice", "check: resuming a run its leader left mid-enqueue":
		return true
	}
	return false
}

// poison: a synthetic run asked to fail a partition always must record that partition as failed.
func (c *checker) poison(id string, m ledger.Manifest, r Run) {
	if len(m.Params) == 0 || !m.State.Final() {
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
	_, ok := c.killedAt(instance, pid)
	return ok
}

// killedAt is when the driver killed (kill -9) or stopped (SIGTERM) this process, if it did.
func (c *checker) killedAt(instance string, pid int) (time.Time, bool) {
	for _, f := range c.h.Faults {
		if f.Instance == instance && f.PID == pid && (f.Kind == FaultKillLeader || f.Kind == FaultKillOther || f.Kind == FaultTerm ||
			f.Kind == FaultCheckCrash) {
			return f.At, true
		}
	}
	return time.Time{}, false
}

// bound: (d) final by the documented bound (DocumentedBound) plus one heartbeat (the heartbeat
// that drives a run whose checks were lost) + slack. A run still queued at the end waits for
// the run before it: its bound is that run's, plus a heartbeat to start it, plus its own run.
func (c *checker) bound(id string, m ledger.Manifest) {
	if m.Deadline.IsZero() {
		if !m.State.Final() {
			c.add(VNotFinal, id, "still %s at the end and has no deadline", m.State)
		}
		return
	}
	bound := DocumentedBound(m, c.h.LeaseDuration).Add(c.h.Heartbeat)
	limit := bound.Add(c.slack)
	switch {
	case m.State == ledger.StateQueued:
		if ahead, ok := c.ahead(id); ok && ahead.State.Final() && c.h.End.After(ahead.Finished.Add(c.lag()+c.slack)) {
			c.add(VNotFinal, id, "still queued at %s, though %s, the run it waited for, was final at %s", fmtTime(c.h.End), ahead.RunID,
				fmtTime(ahead.Finished))
		}
	case !m.State.Final():
		c.add(VNotFinal, id, "still %s at %s; deadline %s, hard deadline %s, bound %s (FinalBound and a heartbeat; +%s slack)", m.State,
			fmtTime(c.h.End), fmtTime(m.Deadline), fmtTime(m.Expires), fmtTime(bound), c.slack)
	case !m.Finished.IsZero() && m.Finished.After(limit):
		c.add(VNotFinal, id, "%s at %s, %s after its bound %s (FinalBound and a heartbeat; +%s slack; hard deadline %s)", m.State,
			fmtTime(m.Finished), m.Finished.Sub(limit).Round(time.Millisecond), fmtTime(bound), c.slack, fmtTime(m.Expires))
	}
}

// ahead is the latest run of id's schedule created before it that is not queued: the run a
// queued run waits for.
func (c *checker) ahead(id string) (ledger.Manifest, bool) {
	name, ok := ledger.ParseRunID(id)
	if !ok {
		return ledger.Manifest{}, false
	}
	m := c.h.Runs[id].Manifest
	var best ledger.Manifest
	for rid := range c.bySchedule[name.Schedule] {
		o := c.h.Runs[rid].Manifest
		switch o.State {
		case ledger.StateSkipped, ledger.StateMissed, ledger.StatePaused, ledger.StateQueued:
			continue
		}
		if o.Created.Before(m.Created) && o.Created.After(best.Created) {
			best = o
		}
	}
	return best, best.RunID != ""
}

// summarize prints a sorted index list briefly.
func summarize(idx []int) string {
	if len(idx) <= 12 {
		return fmt.Sprint(idx)
	}
	return fmt.Sprintf("%d indexes %v…%v", len(idx), idx[:6], idx[len(idx)-6:])
}

func fmtTime(t time.Time) string { return t.UTC().Format("15:04:05.000") }

func fmtTimeOr(t time.Time, zero string) string {
	if t.IsZero() {
		return zero
	}
	return fmtTime(t)
}
