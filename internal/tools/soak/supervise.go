package soak

import (
	"slices"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/ledger"
)

// Supervision's bounds (coordinator/supervise.go): each heartbeat drives every run that has not
// moved by its bound, without any message, so that as long as heartbeats fire and storage
// answers, even with every control message of a run lost:
//
//	(a) a run no planner has taken one check delay (lease + CheckMargin) after its start (its
//	    turn, for a run that waited queued) starts planning by the next heartbeat;
//	(b) a planner that died, or whose slice's follow-up check was lost, is replaced within its
//	    lease plus CheckMargin and the next heartbeat;
//	(c) a planned run still missing partitions at a re-enqueue round's time is re-enqueued by
//	    the next heartbeat, round after round;
//	(d) every run is final by the coordinator's FinalBound plus one heartbeat (checker.bound).
//
// "The next heartbeat" after a moment is the first heartbeat pass (a leadership of the scheduler
// lease) that began then or later, that storage served (no outage, injected or seen, overlaps
// it) and whose process no fault hit before it could drive the run; the run must have moved by
// that pass's start plus a heartbeat and SuperviseMargin. Without such a pass (heartbeats did
// not fire) the bound does not apply: the promise is conditional on heartbeats.
const (
	VUnplanned  = "unplanned"       // (a) no planner took a run by its bound
	VNoTakeover = "not-taken-over"  // (b) a dead or silent planner not replaced by its bound
	VNoRound    = "not-re-enqueued" // (c) missing partitions not re-enqueued by a round's bound
	// VLimitWait: a deadline moved for a run not under a limit, without progress, or not
	// when it came due.
	VLimitWait = "limit-wait"
)

// SuperviseMargin is how long after the heartbeat pass that comes due a run must have moved: a
// pass's own storage calls on a loaded machine (DecisionMargin), then the drive budget the pass
// may spend on runs due before this one (5 s: coordinator's heartbeatSlice, its driveBudget at
// a heartbeat of a second).
const SuperviseMargin = DecisionMargin + 5*time.Second

// checkDelay is the coordinator's check delay: a lease plus CheckMargin.
func (c *checker) checkDelay() time.Duration { return c.h.LeaseDuration + CheckMargin }

// nextHeartbeat is the start of the first heartbeat pass at or after t that storage served and
// no fault cut short (see above); ok is false when there is none.
func (c *checker) nextHeartbeat(t time.Time) (time.Time, bool) {
	if c.passes == nil {
		for _, tn := range c.ts {
			if tn.Lease == "" {
				c.passes = append(c.passes, tn)
			}
		}
		slices.SortFunc(c.passes, func(a, b Tenure) int { return a.Acquired.Compare(b.Acquired) })
	}
	i, _ := slices.BinarySearchFunc(c.passes, t, func(tn Tenure, t time.Time) int { return tn.Acquired.Compare(t) })
	for ; i < len(c.passes); i++ {
		if p := c.passes[i]; !c.harmed(p) {
			return p.Acquired, true
		}
	}
	return time.Time{}, false
}

// harmed reports whether a fault may have kept pass p from driving the runs due: storage was
// down or stalled while it ran, or its process was killed, stopped or crashed before it was done.
func (c *checker) harmed(p Tenure) bool {
	from, to := p.Acquired.Add(-LogTolerance), p.Acquired.Add(c.h.Heartbeat+SuperviseMargin)
	for _, f := range slices.Concat(c.h.Faults, c.stalls) {
		switch f.Kind {
		case FaultAzurite, FaultStall:
			until := f.Until
			if until.Before(f.At) {
				until = f.At
			}
			if !f.At.After(to) && !until.Before(from) {
				return true
			}
		case FaultKillLeader, FaultKillOther, FaultPause, FaultTerm, FaultCheckCrash:
			if f.Instance == p.Instance && f.PID == p.PID && !f.At.Before(from) && !f.At.After(to) {
				return true
			}
		}
	}
	return false
}

// superviseBy is the latest time by which a run due at t must have moved (ok false: no heartbeat
// pass came after t, so no bound applies).
func (c *checker) superviseBy(t time.Time) (time.Time, bool) {
	hb, ok := c.nextHeartbeat(t)
	if !ok {
		return time.Time{}, false
	}
	return hb.Add(c.h.Heartbeat + SuperviseMargin), true
}

// runTenures are the leaderships of run id's own lease, in order of acquisition.
func (c *checker) runTenures(id string) []Tenure {
	var out []Tenure
	for _, tn := range c.ts {
		if tn.Lease == ledger.RunLeaseName(id) {
			out = append(out, tn)
		}
	}
	return out
}

// supervised checks bounds (a), (b) and (c) for one run.
func (c *checker) supervised(id string, r Run) {
	m := r.Manifest
	if m.Lease != ledger.RunLeaseName(id) || m.Deadline.IsZero() || m.State == ledger.StateQueued || m.Stop != nil || m.Round > 0 {
		return // a record (skipped, missed, paused, a misconfigured job), still waiting queued, or stopped (its bound is the stop's)
	}
	ts := c.runTenures(id)
	c.started(id, m, ts)
	c.replaced(id, m, ts)
	c.rounds(id, r)
}

// start is when run id's planning could begin: its creation, or its occurrence when decided
// early, plus its schedule's jitter; for a run that waited queued, when it was started (the
// heartbeat's line), else when the run it waited for ended. ok is false when unknown.
func (c *checker) start(id string, m ledger.Manifest) (time.Time, bool) {
	start := m.Created
	if m.Occurrence.After(start) {
		start = m.Occurrence
	}
	if c.queued[id] {
		start = time.Time{}
		for _, l := range c.h.Lines {
			if l.Str("run") == id && (l.Msg == "queued run started: the run it waited for has ended") {
				start = l.Time
				break
			}
		}
		if start.IsZero() {
			ahead, ok := c.ahead(id)
			if !ok || !ahead.State.Final() {
				return time.Time{}, false
			}
			start = ahead.Finished
		}
	}
	if name, ok := ledger.ParseRunID(id); ok && !name.Manual && !name.Now {
		start = start.Add(c.schedules[name.Schedule].Jitter)
	}
	return start, !start.IsZero()
}

// started: (a), and for a run that waited queued, that the heartbeat after its turn started it.
func (c *checker) started(id string, m ledger.Manifest, ts []Tenure) {
	if c.queued[id] {
		if ahead, ok := c.ahead(id); ok && ahead.State.Final() {
			if by, ok := c.superviseBy(ahead.Finished); ok {
				promoted := time.Time{}
				for _, l := range c.h.Lines {
					if l.Str("run") == id && l.Msg == "queued run started: the run it waited for has ended" {
						promoted = l.Time
						break
					}
				}
				if !promoted.IsZero() && promoted.After(by.Add(LogTolerance)) {
					c.add(VUnplanned, id, "queued behind %s, final at %s, but started only at %s; the next heartbeat after its turn came at %s (bound %s)",
						ahead.RunID, fmtTime(ahead.Finished), fmtTime(promoted), fmtTime(by.Add(-c.h.Heartbeat-SuperviseMargin)), fmtTime(by))
				}
			}
		}
	}
	start, ok := c.start(id, m)
	if !ok {
		return
	}
	due := start.Add(c.checkDelay())
	by, ok := c.superviseBy(due)
	if !ok {
		return
	}
	if len(ts) == 0 {
		if !m.State.Final() && c.h.End.After(by) {
			c.add(VUnplanned, id, "no planner ever took it: start %s, a check delay later %s, the next heartbeat after that due by %s; still %s at the end (%s)",
				fmtTime(start), fmtTime(due), fmtTime(by), m.State, fmtTime(c.h.End))
		}
		return
	}
	first := ts[0]
	if first.Epoch > 1 {
		return // an earlier acquisition was never logged (its process was killed at once): when it was is unknown
	}
	c.fig.StartsChecked++
	if first.Acquired.After(by.Add(LogTolerance)) {
		c.add(VUnplanned, id, "first planner (epoch %d, %s) took it at %s, %s after its start %s; a check delay after the start is %s and the next heartbeat after that had to plan it by %s",
			first.Epoch, first.Holder, fmtTime(first.Acquired), first.Acquired.Sub(start).Round(time.Millisecond), fmtTime(start),
			fmtTime(due), fmtTime(by))
	}
}

// stopped is when tenure tn's holder stopped planning, and how: a fault that hit its process (a
// kill, a pause, a SIGTERM, a crash) while it held the lease, its release, or the moment it saw
// the lease lost, whichever came first; else its last sign of life (ok false when the lease
// was still valid at the end: it may be planning yet).
func (c *checker) stopped(tn Tenure) (at time.Time, how string, ok bool) {
	end := tn.ValidUntil(c.h.LeaseDuration)
	if !tn.Lost.IsZero() && tn.Lost.Before(end) {
		end = tn.Lost
	}
	for _, f := range c.h.Faults {
		switch f.Kind {
		case FaultKillLeader, FaultKillOther, FaultPause, FaultTerm, FaultCheckCrash:
		default:
			continue
		}
		if f.Instance == tn.Instance && f.PID == tn.PID && !f.At.Before(tn.Acquired.Add(-LogTolerance)) && !f.At.After(end) &&
			(at.IsZero() || f.At.Before(at)) {
			at, how = f.At, f.Kind
		}
	}
	for _, e := range []struct {
		t   time.Time
		how string
	}{{tn.Released, "released"}, {tn.Lost, "lost: " + tn.LostMsg}} {
		if !e.t.IsZero() && (at.IsZero() || e.t.Before(at)) {
			at, how = e.t, e.how
		}
	}
	if !at.IsZero() {
		return at, how, true
	}
	if end.After(c.h.End) {
		return time.Time{}, "", false
	}
	return tn.LastConfirm, "silent after its last renewal", true
}

// replaced: (b) every planner that stopped while the run still had planning to do was followed
// by another within its lease plus CheckMargin and the next heartbeat.
func (c *checker) replaced(id string, m ledger.Manifest, ts []Tenure) {
	for i, tn := range ts {
		at, how, ok := c.stopped(tn)
		if !ok {
			continue
		}
		if m.PlanDone && !m.Enqueued.IsZero() && !m.Enqueued.After(at.Add(LogTolerance)) {
			continue // planning was over
		}
		if m.State.Final() && !m.Finished.After(at.Add(LogTolerance)) {
			continue
		}
		due := at.Add(c.checkDelay())
		by, ok := c.superviseBy(due)
		if !ok {
			continue
		}
		var next *Tenure
		for j := i + 1; j < len(ts); j++ {
			if ts[j].Epoch > tn.Epoch {
				next = &ts[j]
				break
			}
		}
		switch {
		case next != nil && !next.Acquired.After(by.Add(LogTolerance)):
			c.fig.TakeoversChecked++
		case m.PlanDone && !m.Enqueued.IsZero() && !m.Enqueued.After(by), m.State.Final() && !m.Finished.After(by):
			c.fig.TakeoversChecked++
		case next != nil:
			c.add(VNoTakeover, id, "planner epoch %d (%s) stopped at %s (%s) with planning left; replaced only at %s (epoch %d, %s), past its lease and margin (%s) and the next heartbeat after that (bound %s)",
				tn.Epoch, tn.Holder, fmtTime(at), how, fmtTime(next.Acquired), next.Epoch, next.Holder, fmtTime(due), fmtTime(by))
		case c.h.End.After(by):
			c.add(VNoTakeover, id, "planner epoch %d (%s) stopped at %s (%s) with planning left; never replaced (bound %s: its lease and margin %s and the next heartbeat after that); %s at the end",
				tn.Epoch, tn.Holder, fmtTime(at), how, fmtTime(by), fmtTime(due), m.State)
		}
	}
}

// retryInterval is the coordinator's spacing of re-enqueue rounds: half the run timeout, never
// less than a check delay.
func (c *checker) retryInterval() time.Duration {
	return max(c.h.RunTimeout/2, c.checkDelay())
}

// rounds: (c) a planned run still missing partitions when a re-enqueue round comes due (its
// deadline, the run timeout after planning ended; each later round a retry interval after the
// one before) has that round re-enqueued by the next heartbeat after it, for CheckRounds rounds.
func (c *checker) rounds(id string, r Run) {
	m := r.Manifest
	if !m.PlanDone || m.Enqueued.IsZero() || c.h.RunTimeout <= 0 {
		return
	}
	reenqueued := map[int]time.Time{}
	for _, l := range c.h.Lines {
		if l.Str("run") == id && l.Msg == "check: re-enqueued missing partitions" {
			if k := int(l.Int("round")); reenqueued[k].IsZero() || l.Time.Before(reenqueued[k]) {
				reenqueued[k] = l.Time
			}
		}
	}
	// missingAt lists the partitions without a result by t (a result recorded as timed out
	// counts as none: it is what the last round leaves).
	missingAt := func(t time.Time) []int {
		var out []int
		for i := range m.Partitions {
			res, ok := r.Results[i]
			if !ok || res.TimedOut || res.Finished.After(t) {
				out = append(out, i)
			}
		}
		return out
	}
	due, known := c.limitWaits(id, r, m.Enqueued.Add(c.h.RunTimeout), missingAt)
	if !known {
		return
	}
	for k := 1; k <= c.h.CheckRounds; k++ {
		by, ok := c.superviseBy(due)
		if !ok || m.State.Final() && !m.Finished.After(due) {
			return
		}
		missing := missingAt(due)
		if len(missing) == 0 {
			return
		}
		at, logged := reenqueued[k]
		switch {
		case logged && !at.After(by.Add(LogTolerance)):
			c.fig.RoundsChecked++
			due = at.Add(c.retryInterval())
			continue
		case logged:
			c.add(VNoRound, id, "round %d came due at %s with partitions %s missing; re-enqueued only at %s, after the next heartbeat's bound %s",
				k, fmtTime(due), summarize(missing), fmtTime(at), fmtTime(by))
		case len(missingAt(by)) == 0, m.State.Final() && !m.Finished.After(by), by.After(c.h.End):
			// Every result came in before the round had to be spent (a slow delivery, not a
			// lost one), or the run ended, or the soak did before the bound.
		case m.CheckRound >= k:
			// Claimed (the manifest counts it) by a process killed before it logged it: when is
			// unknown.
		default:
			c.add(VNoRound, id, "round %d came due at %s with partitions %s missing, still missing at %s (the next heartbeat's bound); never re-enqueued (the manifest counts %d rounds)",
				k, fmtTime(due), summarize(missingAt(by)), fmtTime(by), m.CheckRound)
		}
		return
	}
}

// limitWaits checks the moves of run id's deadline (coordinator.DeadlineMovedMsg) before its
// first re-enqueue round: only a run of a job under a limit moves it, each by the next
// heartbeat after it came due, each with fewer partitions missing than at the move before
// (the run's count at the first) and a result in the retry interval before it, and none
// claiming fewer missing than the ledger shows. It
// returns when round 1 came due: the last move's deadline, else due. known is false when the
// manifest counts a move no line logged (its process killed in between): when is unknown.
func (c *checker) limitWaits(id string, r Run, due time.Time, missingAt func(time.Time) []int) (time.Time, bool) {
	m := r.Manifest
	limited := false // the job's schedules say it runs under a limit
	for _, s := range c.schedules {
		limited = limited || s.Job == m.Job && s.Limited
	}
	prev, logged := m.Partitions, 0
	for _, l := range c.h.Lines {
		if l.Str("run") != id || l.Msg != coordinator.DeadlineMovedMsg {
			continue
		}
		missing := int(l.Int("missing"))
		next, err := time.Parse(time.RFC3339Nano, l.Str("deadline"))
		by, bounded := c.superviseBy(due)
		switch {
		case !limited:
			c.add(VLimitWait, id, "its deadline moved at %s, but its job has no limit", fmtTime(l.Time))
		case err != nil:
			c.add(VLimitWait, id, "deadline moved at %s to %q: %v", fmtTime(l.Time), l.Str("deadline"), err)
		case l.Time.Before(due.Add(-LogTolerance)):
			c.add(VLimitWait, id, "deadline moved at %s, before it came due at %s", fmtTime(l.Time), fmtTime(due))
		case missing >= prev:
			c.add(VLimitWait, id, "deadline moved at %s without progress: %d partitions missing, %d at the look before", fmtTime(l.Time), missing, prev)
		case !c.resultBetween(r, l.Time.Add(-c.retryInterval()-LogTolerance), l.Time.Add(LogTolerance)):
			c.add(VLimitWait, id, "deadline moved at %s, but no result came in the retry interval (%s) before", fmtTime(l.Time), c.retryInterval())
		case missing < len(missingAt(l.Time.Add(LogTolerance))):
			c.add(VLimitWait, id, "deadline moved at %s with %d partitions missing, but %d had no result then", fmtTime(l.Time), missing, len(missingAt(l.Time)))
		case bounded && l.Time.After(by.Add(LogTolerance)):
			c.add(VLimitWait, id, "deadline came due at %s; moved only at %s, after the next heartbeat's bound %s", fmtTime(due), fmtTime(l.Time), fmtTime(by))
		}
		if err == nil {
			prev, due, logged = missing, next, missing
		}
	}
	return due, m.Waited == logged
}

// resultBetween reports whether one of r's results finished in [from, to].
func (c *checker) resultBetween(r Run, from, to time.Time) bool {
	for _, res := range r.Results {
		if !res.TimedOut && !res.Finished.Before(from) && !res.Finished.After(to) {
			return true
		}
	}
	return false
}
