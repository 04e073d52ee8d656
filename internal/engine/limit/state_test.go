package limit

import (
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

var rules = Rules{Lease: 30 * time.Second, Horizon: 2 * time.Second, MinWait: time.Second, MaxWait: 30 * time.Second}

func mustSpec(t *testing.T, s Spec) Spec {
	t.Helper()
	s, err := s.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A bundle takes min(n, free) slots; with none free it waits, within the bounds; a release
// frees them.
func TestAcquire_InFlight(t *testing.T) {
	spec := mustSpec(t, Spec{Name: "crm", MaxInFlight: 3})
	var st State
	g, wait := acquire(&st, rules, spec, "b1", "i1", "t1", 2, 2, 0, t0, 0)
	if g.Partitions != 2 || g.Slots != 2 || wait != 0 || !g.Expires.Equal(t0.Add(rules.Lease)) {
		t.Fatalf("first grant %+v wait %s, want 2 slots for 2 partitions", g, wait)
	}
	g2, _ := acquire(&st, rules, spec, "b2", "i2", "t2", 5, 5, 0, t0, 0)
	if g2.Partitions != 5 || g2.Slots != 1 {
		t.Fatalf("second grant %+v, want 1 slot for the bundle's 5 partitions", g2)
	}
	if st.InFlight(t0) != 3 {
		t.Fatalf("in flight %d, want 3", st.InFlight(t0))
	}
	g3, wait := acquire(&st, rules, spec, "b3", "i1", "t3", 4, 4, 0, t0, 0.5)
	if g3.Partitions != 0 || wait < rules.MinWait || wait > rules.MaxWait*12/10 {
		t.Fatalf("third grant %+v wait %s, want a refusal with a bounded wait", g3, wait)
	}
	if st.WaitingAt(t0) != 4 {
		t.Fatalf("waiting %d, want the refused bundle's 4", st.WaitingAt(t0))
	}
	release(&st, g, 2, 4*time.Second, t0.Add(4*time.Second))
	if st.Hold != 4*time.Second {
		t.Fatalf("hold %s, want 4s per partition", st.Hold)
	}
	g3, _ = acquire(&st, rules, spec, "b3", "i1", "t3", 4, 4, 0, t0.Add(4*time.Second), 0)
	if g3.Slots != 2 || st.WaitingAt(t0.Add(4*time.Second)) != 0 {
		t.Fatalf("after the release: grant %+v, waiting %d; want 2 slots and no waiter", g3, st.WaitingAt(t0))
	}
}

// Slots whose holder stopped renewing come back one lease after their last renewal, and the
// holder can no longer renew them.
func TestAcquire_ExpiredSlotsReturn(t *testing.T) {
	spec := mustSpec(t, Spec{Name: "crm", MaxInFlight: 1})
	var st State
	g, _ := acquire(&st, rules, spec, "b1", "dead", "t1", 10, 10, 0, t0, 0)
	at := t0.Add(10 * time.Second)
	if err := renew(&st, rules, &g, 10, 0, false, 0, at); err != nil {
		t.Fatal(err)
	}
	if g2, _ := acquire(&st, rules, spec, "b2", "live", "t2", 1, 1, 0, at.Add(rules.Lease-time.Millisecond), 0); g2.Partitions != 0 {
		t.Fatalf("granted %+v before the renewed lease ran out", g2)
	}
	back := at.Add(rules.Lease)
	g2, _ := acquire(&st, rules, spec, "b2", "live", "t2", 1, 1, 0, back, 0)
	if g2.Slots != 1 {
		t.Fatalf("one lease after the last renewal: grant %+v, want the slot back", g2)
	}
	if err := renew(&st, rules, &g, 10, 0, false, 0, back); !errors.Is(err, ErrLost) {
		t.Fatalf("the dead holder's renewal: %v, want ErrLost", err)
	}
}

// A rate reserves starts within the horizon, at most burst at once and rate per period in
// any window, continuing where the last grant stopped.
func TestAcquire_Rate(t *testing.T) {
	spec := mustSpec(t, Spec{Name: "api", Rate: 10, Per: time.Second, Burst: 5})
	var st State
	var starts []time.Time
	now := t0
	for range 20 {
		g, wait := acquire(&st, rules, spec, "b", "i", "t", 7, 7, 0, now, 0)
		if g.Partitions == 0 {
			if wait <= 0 {
				t.Fatalf("refused without a wait at %s", now)
			}
			now = now.Add(wait)
			continue
		}
		starts = append(starts, g.Starts...)
		for _, s := range g.Starts {
			if s.Before(now) || s.After(now.Add(rules.Horizon)) {
				t.Fatalf("start %s outside [%s, +horizon]", s, now)
			}
		}
		now = now.Add(300 * time.Millisecond)
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	if len(starts) < 40 {
		t.Fatalf("%d starts, want the rate's worth", len(starts))
	}
	for i := range starts {
		n := 0
		for j := i; j < len(starts) && starts[j].Sub(starts[i]) < time.Second; j++ {
			n++
		}
		if n > spec.Rate+spec.Burst {
			t.Fatalf("%d starts in the second from %s, want at most rate+burst %d", n, starts[i], spec.Rate+spec.Burst)
		}
	}
	first := 0
	for _, s := range starts {
		if s.Equal(t0) {
			first++
		}
	}
	if first != spec.Burst {
		t.Fatalf("%d starts at once at first, want the burst %d", first, spec.Burst)
	}
}

// A slow-down refuses every bundle until its time.
func TestAcquire_SlowDown(t *testing.T) {
	spec := mustSpec(t, Spec{Name: "api", MaxInFlight: 100, Rate: 100})
	var st State
	slowDown(&st, t0.Add(20*time.Second), t0, "429")
	g, wait := acquire(&st, rules, spec, "b", "i", "t", 1, 1, 0, t0.Add(5*time.Second), 0)
	if g.Partitions != 0 || wait < 15*time.Second || wait > 18*time.Second {
		t.Fatalf("grant %+v wait %s, want a refusal for the 15 s left", g, wait)
	}
	if g, _ := acquire(&st, rules, spec, "b", "i", "t", 1, 1, 0, t0.Add(20*time.Second), 0); g.Partitions != 1 {
		t.Fatalf("after the slow-down: %+v", g)
	}
}

func TestSpec_Normalize(t *testing.T) {
	for _, c := range []struct {
		spec  Spec
		field string
	}{
		{Spec{Name: "Bad", MaxInFlight: 1}, "name"},
		{Spec{Name: "x"}, "maxInFlight"},
		{Spec{Name: "x", MaxInFlight: -1}, "maxInFlight"},
		{Spec{Name: "x", Rate: 5, Burst: 6}, "burst"},
		{Spec{Name: "x", Rate: 5, Per: time.Microsecond}, "per"},
		{Spec{Name: "x", MaxInFlight: 2, Burst: 2}, "rate"},
	} {
		_, err := c.spec.Normalize()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%+v: %v, want a FieldError for %s", c.spec, err, c.field)
		}
	}
	s, err := Spec{Name: "x", Rate: 5}.Normalize()
	if err != nil || s.Per != time.Second || s.Burst != 1 {
		t.Fatalf("%+v %v, want per 1s and burst 1 by default", s, err)
	}
}

// A bundle never takes more slots than it runs at once (its concurrency), so a large limit
// is shared by as many bundles as can use it.
func TestAcquire_SlotsUpToTheBundlesConcurrency(t *testing.T) {
	spec := mustSpec(t, Spec{Name: "crm", MaxInFlight: 100})
	var st State
	for k, want := range []int{32, 32, 32, 4} {
		g, _ := acquire(&st, rules, spec, fmt.Sprint("b", k), "i", fmt.Sprint("t", k), 256, 32, 0, t0, 0)
		if g.Slots != want || g.Partitions != 256 {
			t.Fatalf("bundle %d: %+v, want %d slots for its 256 partitions", k, g, want)
		}
	}
}

// Refused bundles come back when the holders expect to give slots back (whoever asks first
// then takes them), spread by a fraction of a hold, each keeping its place in the line the
// dashboard shows; while a holder's end is not known, they come back after a probe's wait.
func TestAcquire_WaitersComeBackAtTheFirstRelease(t *testing.T) {
	spec := mustSpec(t, Spec{Name: "crm", MaxInFlight: 8})
	r := rules
	r.Probe = 5 * time.Second
	var st State
	if g, _ := acquire(&st, r, spec, "unknown", "i", "t0", 256, 32, 0, t0, 0); g.Slots != 8 {
		t.Fatalf("first bundle: %+v, want all 8 slots", g)
	}
	if _, wait := acquire(&st, r, spec, "w", "i", "x", 256, 32, 0, t0, 0); wait != r.Probe {
		t.Fatalf("with the holder's end unknown: wait %s, want the probe's %s", wait, r.Probe)
	}
	st = State{Hold: 50 * time.Millisecond}
	if g, _ := acquire(&st, r, spec, "running", "i", "t", 256, 32, 0, t0, 0); g.Slots != 8 {
		t.Fatalf("first bundle: %+v, want all 8 slots", g)
	}
	// The running bundle: 256 at 8 at a time, 1.6 s; then at most a fifth of a hold.
	for k := range 4 {
		_, wait := acquire(&st, r, spec, fmt.Sprint("w", k), "i", "x", 256, 32, 0, t0, 0.999)
		if want := 1600 * time.Millisecond; wait < want || wait > want+10*time.Millisecond {
			t.Fatalf("waiter %d waits %s, want %s to %s", k, wait, want, want+10*time.Millisecond)
		}
	}
	if _, wait := acquire(&st, r, spec, "w2", "i", "x", 256, 32, 0, t0.Add(time.Millisecond), 0); wait != 1599*time.Millisecond {
		t.Fatalf("the third waiter asking again waits %s, want 1.599 s", wait)
	}
	if st.Waiting[2].ID != "w2" || len(st.Waiting) != 4 {
		t.Fatalf("line %+v, want w2 kept third", st.Waiting)
	}
}

// A holder late for its expected end may give its slots back any moment: a bundle refused
// then comes back once the holder has been late that long again (at least MinWait and a
// hold, at most a probe's wait), not a whole probe later.
func TestAcquire_WaitersOfALateHolderComeBackSoon(t *testing.T) {
	spec := mustSpec(t, Spec{Name: "crm", MaxInFlight: 8})
	r := rules
	r.Probe = 5 * time.Second
	st := State{Hold: 50 * time.Millisecond}
	if g, _ := acquire(&st, r, spec, "running", "i", "t", 256, 32, 0, t0, 0); g.Slots != 8 {
		t.Fatalf("first bundle: %+v, want all 8 slots", g)
	}
	end := t0.Add(1600 * time.Millisecond) // 256 at 8 at a time
	for _, tc := range []struct {
		late, want time.Duration
	}{
		{100 * time.Millisecond, r.MinWait},
		{3 * time.Second, 3 * time.Second},
		{10 * time.Second, r.Probe},
	} {
		if _, wait := acquire(&st, r, spec, "w", "i", "x", 256, 32, 0, end.Add(tc.late), 0); wait != tc.want {
			t.Errorf("the holder %s late: wait %s, want %s", tc.late, wait, tc.want)
		}
	}
}

// A renewal moves the slots' tenure (how long they go from bundle to bundle of their process)
// to a lease from now, and counts the process's waiting bundles in their expected end, while
// no other process waits in the line that holds no more than the holder would without them;
// otherwise the tenure stays, and the expected end is the grant's own partitions'.
func TestRenew_FairlyHeldSlotsKeepGoingFromBundleToBundle(t *testing.T) {
	spec := mustSpec(t, Spec{Name: "crm", MaxInFlight: 10})
	hold := time.Second
	for _, tc := range []struct {
		name  string
		line  []Waiter // besides the grants below: i1 holds 4 (the renewed 2 and 2 more), i2 holds 3, i3 2
		keeps bool
	}{
		{"nobody else waits", nil, true},
		{"only its own bundles wait", []Waiter{{ID: "own", N: 4, Holder: "i1"}}, true},
		{"a process holding more waits", []Waiter{{ID: "w", N: 4, Holder: "i2"}}, true},
		{"a process holding as many as it would keep waits", []Waiter{{ID: "w", N: 4, Holder: "i3"}}, false},
		{"a process holding none waits", []Waiter{{ID: "w", N: 4, Holder: "i4"}}, false},
		{"a waiter of an unknown process", []Waiter{{ID: "w", N: 4}}, false},
		{"an expired waiter", []Waiter{{ID: "w", N: 4, Holder: "i4", Until: t0}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := State{Hold: hold}
			g, _ := acquire(&st, rules, spec, "b1", "i1", "t1", 2, 2, 0, t0, 0)
			acquire(&st, rules, spec, "b2", "i1", "t2", 2, 2, 0, t0, 0)
			acquire(&st, rules, spec, "b3", "i2", "t3", 3, 3, 0, t0, 0)
			acquire(&st, rules, spec, "b4", "i3", "t4", 2, 2, 0, t0, 0)
			if g.Slots != 2 || !g.tenure.Equal(t0.Add(rules.Lease)) {
				t.Fatalf("grant %+v, want 2 slots handed on until a lease after the grant", g)
			}
			now := t0.Add(10 * time.Second)
			for _, w := range tc.line {
				if w.Until.IsZero() {
					w.Until = now.Add(time.Minute)
				}
				st.Waiting = append(st.Waiting, w)
			}
			// 2 partitions of its own (1 s on 2 slots) and 6 waiting here (3 s more).
			if err := renew(&st, rules, &g, 2, 6, false, hold, now); err != nil {
				t.Fatal(err)
			}
			tenure, ends := t0.Add(rules.Lease), now.Add(time.Second)
			if tc.keeps {
				tenure, ends = now.Add(rules.Lease), now.Add(4*time.Second)
			}
			if !g.tenure.Equal(tenure) || !st.Slots[0].Ends.Equal(ends) {
				t.Errorf("tenure %s, expected end %s; want %s, %s", g.tenure.Sub(t0), st.Slots[0].Ends.Sub(t0), tenure.Sub(t0), ends.Sub(t0))
			}
		})
	}
}

// A refused bundle is in the line with its process, which holders read to share fairly.
func TestAcquire_TheLineNamesTheWaitersProcess(t *testing.T) {
	spec := mustSpec(t, Spec{Name: "crm", MaxInFlight: 1})
	var st State
	acquire(&st, rules, spec, "b1", "i1", "t1", 1, 1, 0, t0, 0)
	if g, _ := acquire(&st, rules, spec, "b2", "i2", "t2", 1, 1, 0, t0, 0); g.Partitions != 0 {
		t.Fatalf("second bundle %+v, want refused", g)
	}
	if len(st.Waiting) != 1 || st.Waiting[0].Holder != "i2" {
		t.Fatalf("line %+v, want b2 waiting in i2", st.Waiting)
	}
}

// A limit's first grants write their hold time early when they hold half its slots or more.
func TestWritesHoldEarly(t *testing.T) {
	for _, c := range []struct {
		slots, limit int
		limitHold    time.Duration
		hereHold     time.Duration
		want         bool
	}{
		{1, 1, 0, 0, true},
		{4, 8, 0, 0, true},
		{3, 8, 0, 0, false},
		{32, 500, 0, 0, false},
		{1, 1, time.Second, 0, false}, // the limit knows a hold
		{1, 1, 0, time.Second, false}, // this process knows one
	} {
		g := Grant{Spec: Spec{Name: "crm", MaxInFlight: c.limit}, Slots: c.slots, Partitions: c.slots, Hold: c.limitHold}
		if got := writesHoldEarly(g, c.hereHold); got != c.want {
			t.Errorf("%d of %d slots, hold %s / here %s: %v, want %v", c.slots, c.limit, c.limitHold, c.hereHold, got, c.want)
		}
	}
}
