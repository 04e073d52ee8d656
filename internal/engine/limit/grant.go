package limit

import (
	"slices"
	"time"
)

// Grant is what Acquire gave a bundle: Slots partitions may run at once, and Partitions of
// them may start, the k-th not before Starts[k] (a rate's reserved starts; nil without a
// rate). Slots and the reserved starts are the holder's until Expires, renewable with Renew;
// a grant without an in-flight bound holds no slot and needs no renewal.
type Grant struct {
	Spec       Spec
	Token      string
	Slots      int
	Partitions int
	Starts     []time.Time
	Expires    time.Time
	// SlowUntil is the limit's slow-down time as the grant last saw it.
	SlowUntil time.Time
	// Hold is the limit's mean hold of a slot per partition as the grant (or refusal) saw it.
	Hold time.Duration
	// Acquired is when the limit granted the slots.
	Acquired time.Time

	// tenure is until when this process may hand the slots from one of its bundles to the
	// next waiting in it (Limiter.AcquireWaiting): a lease after the grant, or after a
	// renewal that found the slots fairly held (see keeps).
	tenure time.Time
	served []string // the waiters its hand-offs served, taken out of the line at its next write
	handed int      // the partitions its hand-offs started, counted at its release
}

// Holds reports whether the grant holds in-flight slots (and so must be renewed and released).
func (g Grant) Holds() bool { return g.Spec.MaxInFlight > 0 && g.Partitions > 0 }

// Rules are a limiter's timings.
type Rules struct {
	// Lease is how long a grant's slots last unless renewed: the bound on how long a dead or
	// paused holder keeps them.
	Lease time.Duration
	// Horizon is how far ahead a grant reserves a rate's starts.
	Horizon time.Duration
	// MinWait and MaxWait bound a refused bundle's wait (a slow-down's excepted).
	MinWait, MaxWait time.Duration
	// Probe is the wait of a bundle refused while a holder's expected end is not known.
	Probe time.Duration
}

// acquire is Acquire's decision on st at now, for the bundle id of n partitions that runs at
// most most of them at once, with queued more partitions of the limit waiting in the same
// process: a grant (Partitions above 0), or the wait before the bundle asks again. jitter in
// [0, 1) spreads the waits.
func acquire(st *State, rules Rules, spec Spec, id, holder, token string, n, most, queued int, now time.Time, jitter float64) (Grant, time.Duration) {
	st.prune(now)
	g := Grant{Spec: spec, Token: token, SlowUntil: st.SlowUntil, Hold: st.Hold}
	wait := func(d, spread time.Duration, clamp bool) (Grant, time.Duration) {
		if clamp {
			d = min(max(d, rules.MinWait), rules.MaxWait)
		}
		d += time.Duration(float64(min(spread, d)) * 0.2 * jitter)
		w := Waiter{ID: id, N: n, Until: now.Add(d + rules.Lease), Holder: holder}
		if k := slices.IndexFunc(st.Waiting, func(w Waiter) bool { return w.ID == id }); k >= 0 {
			// It keeps its place in the line; an entry good for half a lease more stays as
			// it is (a refusal that changes nothing writes nothing).
			if old := st.Waiting[k]; old.N != n || old.Holder != holder || old.Until.Before(w.Until.Add(-rules.Lease/2)) {
				st.Waiting[k] = w
			}
		} else {
			st.Waiting = append(st.Waiting, w)
		}
		return g, d
	}
	if now.Before(st.SlowUntil) {
		d := st.SlowUntil.Sub(now)
		return wait(d, d, false)
	}
	slots := min(n, max(most, 1))
	if spec.MaxInFlight > 0 {
		free := spec.MaxInFlight - st.InFlight(now)
		if free <= 0 {
			hold := st.Hold
			if hold <= 0 {
				hold = rules.MinWait
			}
			// The first slot's expected release: whoever asks first then takes it. A holder
			// late for its expected end may give its slots back any moment: ask again after a
			// hold, or once it has been late that long again (at most Probe).
			first := max(hold, rules.Probe)
			switch e, late := st.firstEnd(now); {
			case !e.IsZero():
				first = e.Sub(now)
			case late > 0:
				first = min(max(hold, late), rules.Probe)
			}
			return wait(first, hold, true)
		}
		slots = min(slots, free)
	}
	parts := n
	if spec.Rate > 0 {
		iv := spec.interval()
		tau := iv * time.Duration(spec.Burst-1)
		next := st.Next
		var starts []time.Time
		for len(starts) < n {
			s := next.Add(-tau)
			if s.Before(now) {
				s = now
			}
			if s.After(now.Add(rules.Horizon)) {
				break
			}
			starts = append(starts, s)
			if next.Before(s) {
				next = s
			}
			next = next.Add(iv)
		}
		if len(starts) == 0 {
			d := next.Add(-tau).Sub(now.Add(rules.Horizon / 2))
			return wait(d, d, true)
		}
		st.Next, g.Starts, parts = next, starts, len(starts)
	}
	st.Waiting = slices.DeleteFunc(st.Waiting, func(w Waiter) bool { return w.ID == id })
	g.Slots, g.Partitions, g.Expires, g.Acquired = min(slots, parts), parts, now.Add(rules.Lease), now
	g.tenure = g.Expires
	if spec.MaxInFlight > 0 {
		st.Slots = append(st.Slots, Slot{Token: token, Holder: holder, Slots: g.Slots, Expires: g.Expires,
			Ends: expectedEnd(st.Hold, g.Slots, parts, queued, g.tenure, now)})
	}
	st.Started += int64(parts)
	return g, 0
}

// renew extends g's slots by a lease from now, or reports ErrLost when they expired or are
// gone; left of its partitions are yet to run, and queued more of the process's may follow
// by hand-off (counted when the process holds every slot (all) or the slots are fairly held
// (see keeps), whose tenure then moves to a lease from now too), at hold a partition per
// slot (the process's own mean; zero: the limit's).
func renew(st *State, rules Rules, g *Grant, left, queued int, all bool, hold time.Duration, now time.Time) error {
	g.SlowUntil = st.SlowUntil
	k := st.slot(g.Token)
	if k < 0 || !now.Before(st.Slots[k].Expires) {
		return ErrLost
	}
	st.Slots[k].Expires = now.Add(rules.Lease)
	if hold <= 0 {
		hold = st.Hold
	} else if st.Hold <= 0 {
		st.Hold = hold // a limit's first grants: what their first partitions took
	}
	if keeps(st, st.Slots[k].Holder, g.Slots, now) {
		g.tenure = st.Slots[k].Expires
	} else if !all {
		queued = 0 // they may take slots elsewhere first
	}
	st.Slots[k].Ends = expectedEnd(hold, g.Slots, left, queued, g.tenure, now)
	g.Expires = st.Slots[k].Expires
	st.served(g.served)
	return nil
}

// expectedEnd is when slots holding parts partitions at now are expected back, with queued
// more handed on to until tenure, at hold a partition per slot (zero: hold not known yet).
func expectedEnd(hold time.Duration, slots, parts, queued int, tenure, now time.Time) time.Time {
	if hold <= 0 || slots <= 0 {
		return time.Time{}
	}
	rounds := func(n int) time.Duration { return hold * time.Duration((n+slots-1)/slots) }
	end := now.Add(rounds(max(parts, 1)))
	if queued > 0 {
		// Handed on until the tenure ends, then back to the limit.
		if more := end.Add(rounds(queued)); more.Before(tenure) {
			end = more
		} else if tenure.After(end) {
			end = tenure
		}
	}
	return end
}

// keeps reports whether holder, renewing a grant of slots, may go on handing them from
// bundle to bundle: no other holder with a bundle in the line holds no more than holder
// would without them. Slots that are fairly shared then stay where they are, and cost no
// release and no grant; a holder that holds more than another that waits gives some back.
func keeps(st *State, holder string, slots int, now time.Time) bool {
	held := map[string]int{}
	for _, s := range st.Slots {
		if now.Before(s.Expires) {
			held[s.Holder] += s.Slots
		}
	}
	for _, w := range st.Waiting {
		if w.Holder != holder && now.Before(w.Until) && held[w.Holder] <= held[holder]-slots {
			return false
		}
	}
	return true
}

// firstEnd is the earliest expected release of the slots held at now that is still ahead;
// zero when a holder's is not known or has passed (the slots may come back any time), with
// late, how long ago the latest of those that passed did (0: a holder's is not known).
func (st *State) firstEnd(now time.Time) (first time.Time, late time.Duration) {
	unknown := false
	for _, s := range st.Slots {
		switch {
		case !now.Before(s.Expires):
		case s.Ends.IsZero():
			unknown = true
		case !s.Ends.After(now):
			if d := max(now.Sub(s.Ends), time.Nanosecond); late == 0 || d < late {
				late = d
			}
		case first.IsZero() || s.Ends.Before(first):
			first = s.Ends
		}
	}
	switch {
	case unknown:
		return time.Time{}, 0
	case late > 0:
		return time.Time{}, late
	}
	return first, 0
}

// served takes the bundles served by hand-offs out of the line.
func (st *State) served(ids []string) {
	if len(ids) > 0 {
		st.Waiting = slices.DeleteFunc(st.Waiting, func(w Waiter) bool { return slices.Contains(ids, w.ID) })
	}
}

// release frees g's slots; ran partitions ran under them in elapsed, which feeds the mean hold
// time a waiter's delay is estimated from. It reports whether the state changed.
func release(st *State, g Grant, ran int, elapsed time.Duration, now time.Time) bool {
	k := st.slot(g.Token)
	if k >= 0 {
		st.Slots = slices.Delete(st.Slots, k, k+1)
	}
	st.served(g.served)
	st.Started += int64(g.handed)
	if ran > 0 && elapsed > 0 {
		per := elapsed * time.Duration(max(g.Slots, 1)) / time.Duration(ran)
		if st.Hold <= 0 {
			st.Hold = per
		} else {
			st.Hold = (4*st.Hold + per) / 5
		}
	}
	st.prune(now)
	return true
}

// slowDown holds the limit back until until (later only), noting when and why.
func slowDown(st *State, until, now time.Time, reason string) {
	if until.After(st.SlowUntil) {
		st.SlowUntil = until
	}
	st.SlowAt, st.SlowReason = now, reason
}
