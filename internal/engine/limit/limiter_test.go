package limit

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/lib/eventually"
)

// memStore is a Store in memory that counts its updates; while block is set, an update
// waits for it to close, after telling entered.
type memStore struct {
	mu      sync.Mutex
	st      map[string]State
	updates int
	// left is, for each update, how long its context had left (zero: no deadline).
	left    []time.Duration
	block   chan struct{}
	entered chan struct{}
	// conflict, when set, makes the next update lose its first attempt: fn runs on the
	// state, then conflict changes the stored state (another process's write), and fn runs
	// again on that.
	conflict func(*State)
}

func newMemStore() *memStore { return &memStore{st: map[string]State{}} }

func (m *memStore) Read(_ context.Context, name string) (State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st[name].Clone(), nil
}

func (m *memStore) Update(ctx context.Context, name string, fn func(*State) error) (State, error) {
	m.mu.Lock()
	m.updates++
	var left time.Duration
	if d, ok := ctx.Deadline(); ok {
		left = time.Until(d)
	}
	m.left = append(m.left, left)
	block, entered := m.block, m.entered
	m.mu.Unlock()
	if block != nil {
		entered <- struct{}{}
		<-block
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conflict != nil {
		lost := m.st[name].Clone()
		_ = fn(&lost)
		st := m.st[name].Clone()
		m.conflict(&st)
		m.st[name], m.conflict = st, nil
	}
	st := m.st[name].Clone()
	if err := fn(&st); errors.Is(err, ErrNoChange) {
		return m.st[name].Clone(), nil
	} else if err != nil {
		return st, err
	}
	m.st[name] = st.Clone()
	return st, nil
}

func (m *memStore) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.updates
}

// queuedOps is the updates of the limit waiting in this process's lane.
func (l *Limiter) queuedOps(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ln := l.lanes[name]; ln != nil {
		return len(ln.next)
	}
	return 0
}

// Releases of one process linger for more to write with them; an acquire, which cannot wait,
// ends the linger, and all of them go in one write.
func TestLimiter_ReleasesLingerToWriteTogether(t *testing.T) {
	store := newMemStore()
	l, err := New(Config{Store: store, Holder: "a", Linger: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	sp := mustSpec(t, Spec{Name: "crm", MaxInFlight: 2})
	ctx := context.Background()
	var gs []Grant
	for _, id := range []string{"b1", "b2"} {
		g, _, err := l.Acquire(ctx, sp, id, 1)
		if err != nil || g.Slots != 1 {
			t.Fatalf("%s: %+v %v, want a slot", id, g, err)
		}
		gs = append(gs, g)
	}
	before := store.count()
	errs := make(chan error, len(gs))
	for _, g := range gs {
		go func() { errs <- l.Release(ctx, g, 1, time.Second) }()
	}
	eventually.True(t, func() bool { return l.queuedOps("crm") == 2 || store.count() != before })
	if n := store.count() - before; n != 0 {
		t.Fatalf("%d writes before the second release came, want the first to wait for it", n)
	}
	g, _, err := l.Acquire(ctx, sp, "b3", 2)
	if err != nil || g.Slots != 2 {
		t.Fatalf("b3: %+v %v, want both released slots", g, err)
	}
	for range gs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := store.count() - before; n != 1 {
		t.Fatalf("%d writes for two releases and an acquire, want 1", n)
	}
}

// A bundle's ask lingers for the others of its process that come meanwhile (a host delivers
// a batch of bundles at once): they ask in the same update, not after its answer.
func TestLimiter_BundlesThatComeTogetherAskInOneUpdate(t *testing.T) {
	store := newMemStore()
	l, err := New(Config{Store: store, Holder: "a", Linger: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	sp := mustSpec(t, Spec{Name: "crm", MaxInFlight: 4})
	ctx := context.Background()
	grants := make(chan Grant, 3)
	ask := func(id string) {
		g, _, err := l.AcquireWaiting(ctx, sp, id, 1, 1)
		if err != nil {
			t.Error(err)
		}
		grants <- g
	}
	go ask("b1")
	eventually.True(t, func() bool { return l.queuedOps("crm") == 1 || store.count() != 0 })
	if n := store.count(); n != 0 {
		t.Fatalf("%d updates before the others came, want the first ask to linger", n)
	}
	go ask("b2")
	go ask("b3")
	eventually.True(t, func() bool { return l.queuedOps("crm") == 3 || store.count() != 0 })
	// An ask that cannot wait ends the linger.
	if g, _, err := l.Acquire(ctx, sp, "b4", 1); err != nil || g.Slots != 1 {
		t.Fatalf("b4: %+v %v, want a slot", g, err)
	}
	for range 3 {
		if g := <-grants; g.Slots != 1 {
			t.Fatalf("a bundle got %+v, want a slot", g)
		}
	}
	if n := store.count(); n != 1 {
		t.Fatalf("%d updates for four bundles asking together, want 1", n)
	}
}

// A bundle that asks while another of its process is asking waits for that answer: a refusal
// then holds it back until the process's next ask, with no read of its own.
func TestLimiter_ABundleAskingMeanwhileWaitsForTheAnswer(t *testing.T) {
	store := newMemStore()
	l, err := New(Config{Store: store, Holder: "a", MinWait: time.Hour, MaxWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	sp := mustSpec(t, Spec{Name: "crm", MaxInFlight: 1})
	other, err := New(Config{Store: store, Holder: "b"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if g, _, err := other.Acquire(ctx, sp, "held", 1); err != nil || g.Slots != 1 {
		t.Fatalf("the other process: %+v %v, want the slot", g, err)
	}
	before := store.count()
	store.mu.Lock()
	store.block, store.entered = make(chan struct{}), make(chan struct{}, 2)
	store.mu.Unlock()
	type answer struct {
		g    Grant
		wait time.Duration
		err  error
	}
	answers := make(chan answer, 2)
	ask := func(id string) {
		g, wait, err := l.AcquireWaiting(ctx, sp, id, 1, 1)
		answers <- answer{g, wait, err}
	}
	go ask("first")
	<-store.entered // the first bundle's read is under way
	go ask("second")
	eventually.True(t, func() bool { return l.askers("crm") == 1 || l.queuedOps("crm") > 0 })
	if n := l.queuedOps("crm"); n != 0 {
		t.Fatalf("the second bundle queued an update of its own (%d)", n)
	}
	close(store.block)
	for range 2 {
		a := <-answers
		if a.err != nil || a.g.Partitions != 0 || a.wait < time.Hour/2 {
			t.Fatalf("answer %+v, want a refusal with a long wait", a)
		}
	}
	if n := store.count() - before; n != 1 {
		t.Fatalf("%d updates for two bundles asking at once, want 1", n)
	}
}

// askers is the bundles waiting for the answer to another's ask of the limit.
func (l *Limiter) askers(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.localOf(name).joiners
}

// A bundle waiting here for slots that keep going from bundle to bundle (their tenure moving
// on at each renewal) waits a lease and a LocalWait at most, then goes back to wait as a
// message: a wait in the call stays bounded however long the slots stay here.
func TestLimiter_AWaitForAHandOffIsBoundedByALease(t *testing.T) {
	clock, sleep := fakeTime()
	lease := 30 * time.Second
	l, err := New(Config{Store: newMemStore(), Holder: "a", Lease: lease, Now: clock, Sleep: sleep})
	if err != nil {
		t.Fatal(err)
	}
	sp := mustSpec(t, Spec{Name: "crm", MaxInFlight: 1})
	// This process holds the one slot, and its tenure has moved on far ahead.
	l.opened(sp.Name, 1, t0.Add(10*lease))
	g, wait, err := l.AcquireWaiting(context.Background(), sp, "b", 4, 1)
	if err != nil || g.Partitions != 0 || wait <= 0 {
		t.Fatalf("got %+v, wait %s, %v; want sent back to wait", g, wait, err)
	}
	if waited, most := clock().Sub(t0), lease+lease/3; waited > most {
		t.Fatalf("waited %s in the call, want at most %s", waited, most)
	}
}

// A process that holds slots its bundles hand on asks the limit again, after a refusal, no
// sooner than two of its holds per partition: its waiting bundles get slots by hand-off, and
// its reads are the limit's busiest traffic.
func TestLimiter_AHolderHereAsksAgainAfterTwoHolds(t *testing.T) {
	clock, sleep := fakeTime()
	store := newMemStore()
	sp := mustSpec(t, Spec{Name: "crm", MaxInFlight: 2})
	// Another process holds a slot it expects back in 300 ms; this one holds the other.
	store.st[sp.Name] = State{Hold: 100 * time.Millisecond, Slots: []Slot{
		{Token: "x", Holder: "b", Slots: 1, Expires: t0.Add(time.Minute), Ends: t0.Add(300 * time.Millisecond)},
		{Token: "y", Holder: "a", Slots: 1, Expires: t0.Add(time.Minute), Ends: t0.Add(time.Minute)},
	}}
	l, err := New(Config{Store: store, Holder: "a", Now: clock, Sleep: sleep, LocalWait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l.opened(sp.Name, 1, t0)
	l.closed(sp.Name, 0, 1, time.Second) // its holds took 1 s a partition
	g, _, err := l.AcquireWaiting(context.Background(), sp, "b2", 4, 1)
	if err != nil || g.Partitions != 0 {
		t.Fatalf("got %+v, %v; want refused", g, err)
	}
	if gate := l.gateOf(sp.Name).Sub(t0); gate < 2*time.Second {
		t.Fatalf("the process asks again after %s, want at least 2 s (two holds)", gate)
	}
	// Holds of a minute a partition: it asks again after MaxWait (the lease) at the latest.
	l.closed(sp.Name, 0, 1, 10*time.Minute)
	l.refused(sp.Name, time.Time{})
	start := clock()
	if _, _, err := l.AcquireWaiting(context.Background(), sp, "b3", 4, 1); err != nil {
		t.Fatal(err)
	}
	if gate, most := l.gateOf(sp.Name).Sub(start), DefaultLease*12/10; gate > most {
		t.Fatalf("with long holds the process asks again after %s, want at most %s", gate, most)
	}
}

// steppedSleep is a Sleep that returns at once for no wait, and otherwise tells sleeps how
// long it would wait and returns when wake receives (or its context ends).
func steppedSleep() (sleep func(context.Context, time.Duration) error, sleeps <-chan time.Duration, wake chan<- struct{}) {
	ds, w := make(chan time.Duration), make(chan struct{})
	sleep = func(ctx context.Context, d time.Duration) error {
		if d <= 0 {
			return ctx.Err()
		}
		select {
		case ds <- d:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case <-w:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return sleep, ds, w
}

// fakeTime is a clock starting at t0 and a Sleep that moves it on by the wait at once.
func fakeTime() (now func() time.Time, sleep func(context.Context, time.Duration) error) {
	var mu sync.Mutex
	t := t0
	now = func() time.Time { mu.Lock(); defer mu.Unlock(); return t }
	sleep = func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		t = t.Add(d)
		mu.Unlock()
		return ctx.Err()
	}
	return now, sleep
}

// A write of a limit by a process renews its holds of the limit last renewed a sixth of a
// lease ago or more, in the same write; a hold renewed so does not renew on its own when its
// renewal comes due, but a third of a lease after that write.
func TestLimiter_AWriteHereRenewsTheHoldsDue(t *testing.T) {
	var mu sync.Mutex
	now := t0
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	setClock := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = t0.Add(d) }
	sleep, sleeps, wake := steppedSleep() // the hold's renewal loop
	const lease = 30 * time.Second
	l, store, sp := renewingLimiter(t, lease, clock, sleep)
	ctx := context.Background()
	acquire := func(id string) {
		t.Helper()
		if g, _, err := l.Acquire(ctx, sp, id, 2); err != nil || g.Slots != 2 {
			t.Fatalf("%s: %+v %v, want 2 slots", id, g, err)
		}
	}
	g, _, err := l.Acquire(ctx, sp, "held", 2)
	if err != nil || g.Slots != 2 {
		t.Fatalf("held: %+v %v", g, err)
	}
	h := l.Hold(ctx, g)
	defer func() { _ = h.Close(ctx) }()
	if d := <-sleeps; d != lease/3 {
		t.Fatalf("the hold renews in %s, want a third of the lease", d)
	}
	expires := func() time.Time {
		t.Helper()
		st, _ := store.Read(ctx, sp.Name)
		if k := st.slot(g.Token); k >= 0 {
			return st.Slots[k].Expires
		}
		t.Fatal("the hold's slot is gone")
		return time.Time{}
	}
	setClock(lease / 12)
	acquire("early")
	if got := expires(); !got.Equal(t0.Add(lease)) {
		t.Fatalf("a twelfth of a lease in, the hold expires at %s, want it not renewed", got.Sub(t0))
	}
	setClock(lease / 6)
	acquire("due")
	if got, want := expires(), t0.Add(lease/6+lease); !got.Equal(want) || !h.Grant().Expires.Equal(want) {
		t.Fatalf("a sixth of a lease in, the hold expires at %s (its grant says %s), want %s",
			got.Sub(t0), h.Grant().Expires.Sub(t0), want.Sub(t0))
	}
	if n := store.count(); n != 3 {
		t.Fatalf("%d updates, want 3: the three grants, no renewal of its own", n)
	}
	// Its own renewal was due a third of a lease in: it waits a third of a lease after the
	// write that renewed it instead, with no call.
	setClock(lease / 3)
	wake <- struct{}{}
	if d := <-sleeps; d != lease/6 {
		t.Fatalf("after the renewal along, the hold renews in %s, want %s", d, lease/6)
	}
	if n := store.count(); n != 3 {
		t.Fatalf("%d updates, want no more", n)
	}
}

// A hold is renewed along with another write only when that write is made: an attempt that
// lost its race to another process's write, followed by one that has nothing to write,
// renews nothing, and the hold keeps the expiry the limit has.
func TestLimiter_ALostAttemptRenewsNothingAlong(t *testing.T) {
	var mu sync.Mutex
	now := t0
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	sleeps := make(chan time.Duration, 1)
	sleep := func(ctx context.Context, d time.Duration) error { // the hold's renewal loop
		sleeps <- d
		<-ctx.Done()
		return ctx.Err()
	}
	const lease = 30 * time.Second
	l, store, sp := renewingLimiter(t, lease, clock, sleep)
	ctx := context.Background()
	g, _, err := l.Acquire(ctx, sp, "held", 2)
	if err != nil || g.Slots != 2 {
		t.Fatalf("held: %+v %v", g, err)
	}
	h := l.Hold(ctx, g)
	defer func() { _ = h.Close(ctx) }()
	<-sleeps
	mu.Lock()
	now = t0.Add(lease / 6) // the hold is due a renewal along
	mu.Unlock()
	store.mu.Lock()
	store.conflict = func(st *State) { // another instance slows the limit down first
		st.SlowUntil, st.SlowAt, st.SlowReason = t0.Add(time.Hour), t0.Add(lease/6), "429"
	}
	store.mu.Unlock()
	if err := l.SlowDown(ctx, sp.Name, t0.Add(time.Minute), "429"); err != nil {
		t.Fatal(err)
	}
	st, _ := store.Read(ctx, sp.Name)
	k := st.slot(g.Token)
	if k < 0 || !st.Slots[k].Expires.Equal(t0.Add(lease)) {
		t.Fatalf("the limit has the hold's slot as %+v, want it unrenewed", st.Slots)
	}
	if got := h.Grant().Expires; !got.Equal(t0.Add(lease)) {
		t.Fatalf("the hold thinks its slots expire at %s, the limit at %s", got.Sub(t0), lease)
	}
}

// renewingLimiter is a limiter of holder "a" on a store in memory, with the lease, clock and
// sleep given, and the limit "crm" of 10 in flight whose hold time is known (no renewal
// writes it early).
func renewingLimiter(t *testing.T, lease time.Duration, clock func() time.Time, sleep func(context.Context, time.Duration) error) (*Limiter, *memStore, Spec) {
	t.Helper()
	store := newMemStore()
	l, err := New(Config{Store: store, Holder: "a", Lease: lease, Now: clock, Sleep: sleep})
	if err != nil {
		t.Fatal(err)
	}
	sp := mustSpec(t, Spec{Name: "crm", MaxInFlight: 10})
	store.st[sp.Name] = State{Hold: time.Second}
	return l, store, sp
}

// heldAt is a limiter (renewingLimiter) whose clock the test sets, holding a grant of 4
// partitions on 2 slots taken at t0, whose renewal loop sleeps through sleep.
func heldAt(t *testing.T, lease time.Duration, sleep func(context.Context, time.Duration) error) (*Limiter, *memStore, Grant, func(time.Duration)) {
	t.Helper()
	var mu sync.Mutex
	now := t0
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	set := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = t0.Add(d) }
	l, store, sp := renewingLimiter(t, lease, clock, sleep)
	g, _, err := l.AcquireUpTo(context.Background(), sp, "held", 4, 2)
	if err != nil || g.Slots != 2 || g.Partitions != 4 {
		t.Fatalf("held: %+v %v", g, err)
	}
	return l, store, g, set
}

// lostWith waits for h's context to end and checks that it ended with ErrLost, and that
// Start refuses with ErrLost.
func lostWith(t *testing.T, h *Hold) {
	t.Helper()
	select {
	case <-h.Context().Done():
	case <-time.After(10 * time.Second): // a guard, not a wait: the hold ends it at once
		t.Fatal("the hold's context goes on after its grant's edge")
	}
	if cause := context.Cause(h.Context()); !errors.Is(cause, ErrLost) {
		t.Fatalf("the hold's context ended with %v, want ErrLost", cause)
	}
	if err := h.Start(context.Background()); !errors.Is(err, ErrLost) {
		t.Fatalf("a start after the slots were lost: %v, want ErrLost", err)
	}
}

// A renewal loop that wakes past the grant's edge (its process was paused through its sleep)
// loses the slots without asking the limit: its partitions' context ends with ErrLost.
func TestHold_AWakePastTheEdgeLosesTheSlotsWithoutAWrite(t *testing.T) {
	const lease = 30 * time.Second
	var set func(time.Duration)
	woke := make(chan struct{})
	sleep := func(ctx context.Context, d time.Duration) error {
		select {
		case <-woke: // the second sleep: none is expected
			<-ctx.Done()
			return ctx.Err()
		default:
		}
		close(woke)
		set(lease + time.Second) // paused through the sleep, past the lease
		return nil
	}
	l, store, g, setClock := heldAt(t, lease, sleep)
	set = setClock
	writes := store.count()
	h := l.Hold(context.Background(), g)
	defer func() { _ = h.Close(context.Background()) }()
	lostWith(t, h)
	if n := store.count() - writes; n != 0 {
		t.Fatalf("%d writes of the limit after waking past the edge, want none", n)
	}
}

// A renewal made close to the grant's edge ends by the edge: while the limit's storage
// stalls, it cannot keep partitions running past it.
func TestHold_ARenewalEndsByTheEdge(t *testing.T) {
	const lease = 30 * time.Second
	sleep, waits, wake := steppedSleep()
	l, store, g, set := heldAt(t, lease, sleep)
	toEdge := lease / 12
	opened := lease - l.Margin() - toEdge
	set(opened) // the hold opens late: a twelfth of a lease from its edge
	store.mu.Lock()
	store.block, store.entered = make(chan struct{}), make(chan struct{}, 1) // the storage stalls
	store.mu.Unlock()
	h := l.Hold(context.Background(), g)
	select {
	case d := <-waits:
		if d != toEdge {
			t.Fatalf("the renewal may take %s, want at most the %s to the edge", d, toEdge)
		}
	case <-time.After(10 * time.Second): // a guard, not a wait: the renewal bounds itself at once
		t.Fatal("the renewal runs without a bound on the limiter's clock")
	}
	set(opened + toEdge)
	wake <- struct{}{}
	lostWith(t, h)
	close(store.block)
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// At the grant's edge a start and a started partition's check (just before its call) are
// refused with ErrLost, and the partitions running under the hold are told to stop: its
// context ends with ErrLost. Just before the edge both are allowed.
func TestHold_AtTheEdgeAStartOrACheckStopsTheHold(t *testing.T) {
	const lease = 30 * time.Second
	for name, op := range map[string]func(*Hold) error{
		"start": func(h *Hold) error {
			err := h.Start(context.Background())
			if err == nil {
				h.Done()
			}
			return err
		},
		"check": (*Hold).Check,
	} {
		t.Run(name, func(t *testing.T) {
			sleep := func(ctx context.Context, d time.Duration) error { <-ctx.Done(); return ctx.Err() }
			l, _, g, set := heldAt(t, lease, sleep)
			h := l.Hold(context.Background(), g)
			defer func() { _ = h.Close(context.Background()) }()
			if err := h.Start(context.Background()); err != nil {
				t.Fatalf("a start within the lease: %v", err)
			}
			defer h.Done()
			set(lease - l.Margin() - time.Millisecond)
			if err := op(h); err != nil || h.Context().Err() != nil {
				t.Fatalf("a %s just before the edge: %v (the hold's context: %v), want it allowed", name, err, h.Context().Err())
			}
			set(lease - l.Margin())
			if err := op(h); !errors.Is(err, ErrLost) {
				t.Fatalf("a %s at the edge: %v, want ErrLost", name, err)
			}
			lostWith(t, h)
		})
	}
}
