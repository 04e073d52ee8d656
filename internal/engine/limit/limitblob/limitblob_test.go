package limitblob_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/limit"
	"github.com/batonfn/baton/internal/engine/limit/limitblob"
	"github.com/batonfn/baton/internal/lib/eventually"
	"github.com/batonfn/baton/internal/tools/azurite"
)

func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }

// counter counts the requests that reach storage.
type counter struct{ n atomic.Int64 }

func (c *counter) Do(req *policy.Request) (*http.Response, error) {
	c.n.Add(1)
	return req.Next()
}

func newStore(t *testing.T) (*limitblob.Store, *counter) {
	t.Helper()
	stores, calls := newStores(t, 1)
	return stores[0], calls
}

// newStores returns n stores over one container, as n instances have, and a counter of the
// calls of them all. Their clock stands still: what they know never gets older than
// limitblob.FreshFor, so the calls these tests count do not depend on the machine's speed.
func newStores(t *testing.T, n int) ([]*limitblob.Store, *counter) {
	t.Helper()
	return newStoresOn(t, n, func() time.Time { return time.Time{} })
}

// newStoresOn is newStores on the clock now.
func newStoresOn(t *testing.T, n int, now func() time.Time) ([]*limitblob.Store, *counter) {
	t.Helper()
	srv := azurite.Shared(t)
	calls := &counter{}
	client, err := azclient.Blob(srv.Storage(), &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{PerCallPolicies: []policy.Policy{calls}}})
	if err != nil {
		t.Fatal(err)
	}
	cc := client.ServiceClient().NewContainerClient(azurite.UniqueName(t, "limits"))
	if _, err := cc.Create(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	calls.n.Store(0)
	stores := make([]*limitblob.Store, n)
	for k := range stores {
		stores[k] = limitblob.New(cc, now)
	}
	return stores, calls
}

// knownHold writes the limit's hold time through s, as earlier grants' releases would have:
// its first grants then renew on their schedule only (see TestLimiter_RenewalsKeepAndLoseSlots).
func knownHold(t *testing.T, s *limitblob.Store, names ...string) {
	t.Helper()
	for _, name := range names {
		if _, err := s.Update(context.Background(), name, func(st *limit.State) error { st.Hold = 10 * time.Millisecond; return nil }); err != nil {
			t.Fatal(err)
		}
	}
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// paused never returns before its context ends: a holder whose renewals never run.
func paused(ctx context.Context, _ time.Duration) error { <-ctx.Done(); return context.Cause(ctx) }

func spec(t *testing.T, s limit.Spec) limit.Spec {
	t.Helper()
	s, err := s.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Holders on many goroutines, each its own limiter and store (instance), never run more than the
// limit's slots at once, and all their partitions run.
func TestLimiter_ConcurrentHoldersNeverExceedTheLimit(t *testing.T) {
	const holders, bundles, size = 6, 4, 5
	stores, _ := newStores(t, holders)
	store := stores[0]
	sp := spec(t, limit.Spec{Name: "crm", MaxInFlight: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var inFlight, peak, done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, holders)
	for h := range holders {
		l, err := limit.New(limit.Config{Store: stores[h], Holder: fmt.Sprint("i", h), MinWait: 2 * time.Millisecond, MaxWait: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for b := range bundles {
				left := size
				for left > 0 {
					g, wait, err := l.Acquire(ctx, sp, fmt.Sprintf("b%d-%d", h, b), left)
					if err != nil {
						errs <- err
						return
					}
					if g.Partitions == 0 {
						if err := sleep(ctx, wait); err != nil {
							errs <- err
							return
						}
						continue
					}
					hold := l.Hold(ctx, g)
					var pw sync.WaitGroup
					for range g.Partitions {
						if err := hold.Start(ctx); err != nil {
							errs <- err
							return
						}
						pw.Go(func() {
							defer hold.Done()
							k := inFlight.Add(1)
							for p := peak.Load(); k > p && !peak.CompareAndSwap(p, k); p = peak.Load() {
							}
							runtime.Gosched()
							inFlight.Add(-1)
							done.Add(1)
						})
					}
					pw.Wait()
					if err := hold.Close(ctx); err != nil {
						errs <- err
						return
					}
					left -= g.Partitions
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if done.Load() != holders*bundles*size {
		t.Fatalf("%d partitions ran, want %d", done.Load(), holders*bundles*size)
	}
	if peak.Load() > int64(sp.MaxInFlight) || peak.Load() < 1 {
		t.Fatalf("peak %d in flight, want 1 to %d", peak.Load(), sp.MaxInFlight)
	}
	st, err := store.Read(ctx, sp.Name)
	if err != nil || len(st.Slots) != 0 {
		t.Fatalf("after every release: %+v %v, want no slot held", st, err)
	}
}

// A holder that stops renewing (killed or paused) loses its slots one lease after it took
// them: another holder gets them, and the first can neither renew nor start under its grant,
// and its partitions' context is cancelled with ErrLost.
func TestLimiter_ExpiredHolderIsFenced(t *testing.T) {
	store, _ := newStore(t)
	sp := spec(t, limit.Spec{Name: "crm", MaxInFlight: 2})
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	mk := func(holder string) *limit.Limiter {
		l, err := limit.New(limit.Config{Store: store, Holder: holder, Lease: 30 * time.Second, Now: clk.Now, Sleep: paused})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	ctx := context.Background()
	a, b := mk("a"), mk("b")
	ga, _, err := a.Acquire(ctx, sp, "ba", 10)
	if err != nil || ga.Slots != 2 {
		t.Fatalf("a: %+v %v", ga, err)
	}
	hold := a.Hold(ctx, ga)
	if err := hold.Start(ctx); err != nil {
		t.Fatalf("a's first start: %v", err)
	}
	hold.Done()
	if gb, wait, err := b.Acquire(ctx, sp, "bb", 1); err != nil || gb.Partitions != 0 || wait <= 0 {
		t.Fatalf("b while a holds both slots: %+v wait %s %v, want a refusal", gb, wait, err)
	}
	clk.Add(30*time.Second - a.Margin())
	if err := hold.Start(ctx); !errors.Is(err, limit.ErrLost) {
		t.Fatalf("a's start within the margin of its expiry: %v, want ErrLost", err)
	}
	clk.Add(a.Margin())
	gb, _, err := b.Acquire(ctx, sp, "bb", 1)
	if err != nil || gb.Slots != 1 {
		t.Fatalf("b one lease later: %+v %v, want a slot", gb, err)
	}
	if err := a.Renew(ctx, &ga); !errors.Is(err, limit.ErrLost) {
		t.Fatalf("a's renewal after expiry: %v, want ErrLost", err)
	}
	if err := hold.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := store.Read(ctx, sp.Name)
	if err != nil || st.InFlight(clk.Now()) != 1 {
		t.Fatalf("state %+v %v, want b's one slot", st, err)
	}
}

// A live holder's renewals keep its slots past one lease; a renewal that finds them gone
// cancels its context with ErrLost. The limit's first grant renews as soon as its first
// partition is done, writing how long that took and when it expects to give its slot back.
func TestLimiter_RenewalsKeepAndLoseSlots(t *testing.T) {
	store, _ := newStore(t)
	sp := spec(t, limit.Spec{Name: "crm", MaxInFlight: 1})
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ticks := make(chan chan struct{})
	// step lets the hold's renewal loop through one sleep at a time.
	step := func(ctx context.Context, d time.Duration) error {
		ack := make(chan struct{})
		select {
		case ticks <- ack:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		clk.Add(d)
		close(ack)
		return nil
	}
	l, err := limit.New(limit.Config{Store: store, Holder: "a", Lease: 30 * time.Second, Now: clk.Now, Sleep: step})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	g, _, err := l.Acquire(ctx, sp, "b", 3)
	if err != nil {
		t.Fatal(err)
	}
	hold := l.Hold(ctx, g)
	if err := hold.Start(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Second)
	hold.Done()
	eventually.True(t, func() bool {
		st, err := store.Read(ctx, sp.Name)
		return err == nil && st.Hold == time.Second && len(st.Slots) == 1 && st.Slots[0].Ends.Equal(clk.Now().Add(2*time.Second))
	})
	for range 4 { // 40 s of renewals every 10 s
		<-<-ticks
	}
	// The fourth renewal is in (a lease from now), and the loop sleeps again.
	eventually.True(t, func() bool { return !hold.Grant().Expires.Before(clk.Now().Add(30 * time.Second)) })
	if err := hold.Start(ctx); err != nil {
		t.Fatalf("a start 40 s in, renewed: %v", err)
	}
	hold.Done()
	// Someone removes the grant (as if it had expired and been taken).
	if _, err := store.Update(ctx, sp.Name, func(st *limit.State) error { st.Slots = nil; return nil }); err != nil {
		t.Fatal(err)
	}
	<-<-ticks // the next renewal finds them gone
	select {
	case <-hold.Context().Done():
	case <-time.After(time.Minute):
		t.Fatal("the hold's context was not cancelled after its slots were lost")
	}
	if !errors.Is(context.Cause(hold.Context()), limit.ErrLost) {
		t.Fatalf("cause %v, want ErrLost", context.Cause(hold.Context()))
	}
	if err := hold.Start(ctx); !errors.Is(err, limit.ErrLost) {
		t.Fatalf("start after the loss: %v, want ErrLost", err)
	}
	if err := hold.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// A slow-down by one instance refuses every other instance's bundles until its time, and
// stops the asking hold's own starts.
func TestLimiter_SlowDownHoldsEveryInstanceBack(t *testing.T) {
	store, _ := newStore(t)
	sp := spec(t, limit.Spec{Name: "api", MaxInFlight: 10, Rate: 100})
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	mk := func(holder string) *limit.Limiter {
		l, err := limit.New(limit.Config{Store: store, Holder: holder, Now: clk.Now, Sleep: paused})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	ctx := context.Background()
	a, b := mk("a"), mk("b")
	g, _, err := a.Acquire(ctx, sp, "ba", 5)
	if err != nil {
		t.Fatal(err)
	}
	hold := a.Hold(ctx, g)
	if err := hold.SlowDown(ctx, clk.Now().Add(20*time.Second), "429 Too Many Requests"); err != nil {
		t.Fatal(err)
	}
	if err := hold.Start(ctx); !errors.Is(err, limit.ErrSlowedDown) {
		t.Fatalf("a's start after its slow-down: %v", err)
	}
	gb, wait, err := b.Acquire(ctx, sp, "bb", 1)
	if err != nil || gb.Partitions != 0 || wait < 20*time.Second {
		t.Fatalf("b: %+v wait %s %v, want a refusal for 20 s", gb, wait, err)
	}
	if err := hold.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := b.Read(ctx, sp.Name)
	if err != nil || st.SlowReason != "429 Too Many Requests" || !st.SlowUntil.Equal(clk.Now().Add(20*time.Second)) || st.WaitingAt(clk.Now()) != 1 {
		t.Fatalf("state %+v %v", st, err)
	}
	clk.Add(20 * time.Second)
	if gb, _, err := b.Acquire(ctx, sp, "bb", 1); err != nil || gb.Partitions != 1 {
		t.Fatalf("b after the slow-down: %+v %v", gb, err)
	}
}

// A bundle costs a few storage calls whatever its size: its grant a read and a write, its
// release one write under the ETag of the grant's; the next bundle of the same process, the
// limit written last by it, one write each; another instance the same as the first; and
// after that, this process's first write under its old ETag fails: a call more, and what
// the other wrote is kept.
func TestLimiter_CallsPerBundle(t *testing.T) {
	stores, calls := newStores(t, 3)
	knownHold(t, stores[2], "one", "many")
	l, err := limit.New(limit.Config{Store: stores[0], Holder: "a"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := limit.New(limit.Config{Store: stores[1], Holder: "b"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	bundle := func(name string, l *limit.Limiter, sp limit.Spec, id string) {
		t.Helper()
		g, _, err := l.Acquire(ctx, sp, id, 256)
		if err != nil || g.Partitions != 256 {
			t.Fatalf("%s: %+v %v", name, g, err)
		}
		hold := l.Hold(ctx, g)
		for range g.Partitions {
			err := hold.Start(ctx)
			if errors.Is(err, limit.ErrLate) {
				// A stall of the test's goroutine past a reserved start (a loaded machine): that
				// start is refused, with no call; the count stays the bundle's.
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			hold.Done()
		}
		if err := hold.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, sp := range []limit.Spec{spec(t, limit.Spec{Name: "one", MaxInFlight: 1}), spec(t, limit.Spec{Name: "many", MaxInFlight: 500, Rate: 100000, Burst: 1000})} {
		for _, step := range []struct {
			l    *limit.Limiter
			want int64
		}{{l, 3}, {l, 2}, {other, 3}, {l, 4}} {
			calls.n.Store(0)
			bundle(sp.Name, step.l, sp, fmt.Sprint("b", step.want))
			if n := calls.n.Load(); n != step.want {
				t.Fatalf("%s: %d storage calls for a bundle of 256, want %d", sp.Name, n, step.want)
			}
		}
		st, err := stores[0].Read(ctx, sp.Name)
		if err != nil || st.Started != 4*256 || len(st.Slots) != 0 {
			t.Fatalf("%s: %+v %v, want 4 bundles started and no slot held", sp.Name, st, err)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// A rate's reserved starts are made on time or not at all: a holder paused past them (its
// process stopped, or starved of CPU) refuses each start late by more than one interval, so
// it cannot burst on waking; a start on time goes.
func TestLimiter_LateStartsAreRefused(t *testing.T) {
	store, _ := newStore(t)
	sp := spec(t, limit.Spec{Name: "partner", Rate: 10, Per: time.Second, Burst: 2})
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	l, err := limit.New(limit.Config{Store: store, Holder: "a", Lease: 30 * time.Second, Now: clk.Now,
		Sleep: func(ctx context.Context, d time.Duration) error { clk.Add(d); return ctx.Err() }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	g, _, err := l.Acquire(ctx, sp, "b", 6)
	if err != nil || g.Partitions != 6 {
		t.Fatalf("grant %+v %v, want 6 starts reserved", g, err)
	}
	hold := l.Hold(ctx, g)
	defer func() { _ = hold.Close(ctx) }()
	for k := range 2 { // the burst: now
		if err := hold.Start(ctx); err != nil {
			t.Fatalf("start %d on time: %v", k, err)
		}
		hold.Done()
	}
	// Paused: the next starts were due 100 ms and 200 ms ago, 300 ms from the start now.
	clk.Add(300*time.Millisecond + time.Millisecond)
	for k := 2; k < 4; k++ {
		if err := hold.Start(ctx); !errors.Is(err, limit.ErrLate) {
			t.Fatalf("start %d, due %s, at %s: %v, want ErrLate", k, g.Starts[k].Format(time.StampMilli), clk.Now().Format(time.StampMilli), err)
		}
	}
	// Start 4 (due 300 ms after the first) is late by less than an interval; start 5 waits for
	// its time.
	for k := 4; k < 6; k++ {
		if err := hold.Start(ctx); err != nil {
			t.Fatalf("start %d: %v, want it allowed", k, err)
		}
		hold.Done()
		if now := clk.Now(); now.Before(g.Starts[k]) || now.Sub(g.Starts[k]) > 100*time.Millisecond {
			t.Fatalf("start %d at %s, reserved for %s", k, now.Format(time.StampMilli), g.Starts[k].Format(time.StampMilli))
		}
	}
	if err := hold.Start(ctx); !errors.Is(err, limit.ErrUsedUp) {
		t.Fatalf("a seventh start: %v, want ErrUsedUp", err)
	}
}

// A limit nothing has run under has no blob, and before the first run not even a container:
// both read as the zero state, in one call.
func TestStore_ReadBeforeAnyState(t *testing.T) {
	s, calls := newStore(t)
	st, err := s.Read(context.Background(), "crm")
	if err != nil || !reflect.DeepEqual(st, limit.State{}) || calls.n.Load() != 1 {
		t.Fatalf("no blob: %+v %v after %d calls, want the zero state in one", st, err, calls.n.Load())
	}
	client, err := azclient.Blob(azurite.Shared(t).Storage(), nil)
	if err != nil {
		t.Fatal(err)
	}
	none := limitblob.New(client.ServiceClient().NewContainerClient(azurite.UniqueName(t, "absent")), nil)
	if st, err := none.Read(context.Background(), "crm"); err != nil || !reflect.DeepEqual(st, limit.State{}) {
		t.Fatalf("no container: %+v %v, want the zero state", st, err)
	}
}

// One process's concurrent updates of a limit go together: 32 bundles asking at once cost far
// fewer than their 64 calls, and each gets what it would alone.
func TestLimiter_ConcurrentUpdatesInOneProcessGoTogether(t *testing.T) {
	store, calls := newStore(t)
	l, err := limit.New(limit.Config{Store: store, Holder: "a"})
	if err != nil {
		t.Fatal(err)
	}
	sp := spec(t, limit.Spec{Name: "crm", MaxInFlight: 2000})
	ctx := context.Background()
	var wg sync.WaitGroup
	grants := make([]limit.Grant, 32)
	errs := make([]error, 32)
	for k := range grants {
		wg.Go(func() { grants[k], _, errs[k] = l.AcquireUpTo(ctx, sp, fmt.Sprint("b", k), 256, 32) })
	}
	wg.Wait()
	held := 0
	for k, g := range grants {
		if errs[k] != nil || g.Slots != 32 || g.Partitions != 256 {
			t.Fatalf("bundle %d: %+v %v, want 32 slots for 256 partitions", k, g, errs[k])
		}
		held += g.Slots
	}
	st, err := store.Read(ctx, "crm")
	if err != nil || st.InFlight(time.Now()) != held || len(st.Slots) != 32 {
		t.Fatalf("state %+v %v, want the 32 grants' %d slots", st, err, held)
	}
	if n := calls.n.Load(); n >= 64 {
		t.Fatalf("%d storage calls for 32 concurrent acquires, want fewer than one read and write each", n)
	} else {
		t.Logf("%d storage calls for 32 concurrent acquires", n)
	}
}

// waitHere starts bundle id asking l for sp, and returns once it waits in l for a hold there
// to hand it slots; its grant comes on the channel.
func waitHere(t *testing.T, l *limit.Limiter, sp limit.Spec, id string, n, most int) chan limit.Grant {
	t.Helper()
	before := l.Waiting(sp.Name)
	got := make(chan limit.Grant, 1)
	go func() {
		g, _, err := l.AcquireWaiting(context.Background(), sp, id, n, most)
		if err != nil {
			t.Error(err)
		}
		got <- g
	}()
	eventually.True(t, func() bool { return l.Waiting(sp.Name) == before+1 })
	return got
}

// runHold starts and ends each of g's partitions under a hold, then closes it.
func runHold(t *testing.T, l *limit.Limiter, g limit.Grant) {
	t.Helper()
	ctx := context.Background()
	hold := l.Hold(ctx, g)
	for range g.Partitions {
		if err := hold.Start(ctx); err != nil {
			t.Fatal(err)
		}
		hold.Done()
	}
	if err := hold.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// A bundle that finds an in-flight limit's slots held by a bundle of its own process waits in
// its call and gets them when that bundle ends, with no storage call: the grant (its token,
// its lease) goes on, the line in the state loses the served bundle, and the last bundle
// gives the slots back.
func TestLimiter_HandsSlotsToTheNextBundleHere(t *testing.T) {
	stores, calls := newStores(t, 2)
	store := stores[0]
	knownHold(t, stores[1], "crm")
	l, err := limit.New(limit.Config{Store: store, Holder: "a", Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sp := spec(t, limit.Spec{Name: "crm", MaxInFlight: 4})
	ctx := context.Background()
	first, _, err := l.AcquireWaiting(ctx, sp, "b1", 8, 4)
	if err != nil || first.Slots != 4 {
		t.Fatalf("first bundle: %+v %v, want the 4 slots", first, err)
	}
	hold := l.Hold(ctx, first)
	// The second bundle waits here, without asking: the first's grant left no slot free.
	next := waitHere(t, l, sp, "b2", 6, 4)
	before := calls.n.Load()
	for range first.Partitions {
		if err := hold.Start(ctx); err != nil {
			t.Fatal(err)
		}
		hold.Done()
	}
	if err := hold.Close(ctx); err != nil {
		t.Fatal(err)
	}
	g := <-next
	if g.Token != first.Token || g.Partitions != 6 || g.Slots != 4 || !g.Expires.Equal(first.Expires) {
		t.Fatalf("second bundle: %+v, want the first's grant for its 6 partitions", g)
	}
	if n := calls.n.Load() - before; n != 0 {
		t.Fatalf("the hand-off cost %d storage calls, want none", n)
	}
	runHold(t, l, g)
	st, err := store.Read(ctx, "crm")
	if err != nil || len(st.Slots) != 0 || len(st.Waiting) != 0 || st.Started != 14 {
		t.Fatalf("after the last bundle: %+v %v, want no slot, no waiter, 14 started", st, err)
	}
}

// Slots go from bundle to bundle of one process for a lease after the limit granted them,
// then back to the limit, and the bundle waiting here asks for them at once; a bundle whose
// turn here is further off than it may wait in its call is sent away at once, without a call.
func TestLimiter_HandOffsLastALease(t *testing.T) {
	stores, calls := newStores(t, 2)
	store := stores[0]
	knownHold(t, stores[1], "crm")
	clk := &clock{t: time.Now().UTC()}
	lease := 30 * time.Second
	l, err := limit.New(limit.Config{Store: store, Holder: "a", Lease: lease, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	sp := spec(t, limit.Spec{Name: "crm", MaxInFlight: 1})
	ctx := context.Background()
	first, _, err := l.AcquireWaiting(ctx, sp, "b1", 2, 1)
	if err != nil || first.Slots != 1 {
		t.Fatalf("first bundle: %+v %v", first, err)
	}
	hold := l.Hold(ctx, first)
	next := waitHere(t, l, sp, "b2", 2, 1)
	for range 2 {
		if err := hold.Start(ctx); err != nil {
			t.Fatal(err)
		}
		clk.Add(time.Second)
		hold.Done()
	}
	clk.Add(lease) // a lease after the grant: no more hand-offs
	before := calls.n.Load()
	if err := hold.Close(ctx); err != nil {
		t.Fatal(err)
	}
	g := <-next
	if g.Partitions != 2 || g.Token == first.Token {
		t.Fatalf("second bundle: %+v, want a grant of its own", g)
	}
	if n := calls.n.Load() - before; n != 2 {
		t.Fatalf("%d storage calls for the release and the new grant, want 2 (one write each)", n)
	}
	hold = l.Hold(ctx, g)
	defer func() { _ = hold.Close(ctx) }()
	// A bundle of 100 partitions behind it, one at a time: its turn is 100 holds away,
	// beyond the call's 10 s.
	before = calls.n.Load()
	start := time.Now()
	far, wait, err := l.AcquireWaiting(ctx, sp, "b3", 100, 1)
	if err != nil || far.Partitions != 0 || wait <= lease/3 || time.Since(start) > lease/6 {
		t.Fatalf("a bundle far back: %+v, wait %s, after %s, %v; want sent away at once to wait over 10 s", far, wait, time.Since(start), err)
	}
	if n := calls.n.Load() - before; n != 0 {
		t.Fatalf("sending it away cost %d storage calls, want none (the limit was seen full)", n)
	}
}

// A bundle refused again while its place in the line is good for half a lease more costs one
// read: the refusal changes nothing to write.
func TestLimiter_RefusedAgainIsOneRead(t *testing.T) {
	stores, calls := newStores(t, 2)
	store := stores[0]
	holder, err := limit.New(limit.Config{Store: store, Holder: "a"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := limit.New(limit.Config{Store: stores[1], Holder: "b"})
	if err != nil {
		t.Fatal(err)
	}
	sp := spec(t, limit.Spec{Name: "crm", MaxInFlight: 1})
	ctx := context.Background()
	if g, _, err := holder.Acquire(ctx, sp, "held", 4); err != nil || g.Slots != 1 {
		t.Fatalf("holder: %+v %v", g, err)
	}
	for k, want := range []int64{2, 1, 1} {
		before := calls.n.Load()
		g, wait, err := other.Acquire(ctx, sp, "waiting", 4)
		if err != nil || g.Partitions != 0 || wait <= 0 {
			t.Fatalf("ask %d: %+v %s %v, want a refusal", k, g, wait, err)
		}
		if n := calls.n.Load() - before; n != want {
			t.Fatalf("ask %d cost %d storage calls, want %d", k, n, want)
		}
	}
	st, err := store.Read(ctx, "crm")
	if err != nil || len(st.Waiting) != 1 || st.Waiting[0].ID != "waiting" {
		t.Fatalf("line %+v %v, want the refused bundle in it", st.Waiting, err)
	}
}

// A grant handed on within a process is fenced as the grant it is: its lease runs from its
// last renewal, not from the hand-off, so the bundle that took it starts nothing once that
// lease is near its end and another instance gets the slots once it is over; and a grant
// that close to its end is given back, not handed on.
func TestLimiter_AHandedOnGrantIsFencedByItsLease(t *testing.T) {
	stores, _ := newStores(t, 2)
	store := stores[0]
	knownHold(t, stores[1], "crm", "crm2") // no renewal runs: not even a first grant's early one
	sp := spec(t, limit.Spec{Name: "crm", MaxInFlight: 2})
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	lease := 30 * time.Second
	mk := func(holder string) *limit.Limiter {
		l, err := limit.New(limit.Config{Store: store, Holder: holder, Lease: lease, Now: clk.Now, Sleep: paused})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	ctx := context.Background()
	a, b := mk("a"), mk("b")
	first, _, err := a.AcquireWaiting(ctx, sp, "b1", 4, 2)
	if err != nil || first.Slots != 2 {
		t.Fatalf("first bundle: %+v %v", first, err)
	}
	hold := a.Hold(ctx, first)
	next := waitHere(t, a, sp, "b2", 4, 2)
	clk.Add(10 * time.Second)
	if err := hold.Close(ctx); err != nil {
		t.Fatal(err)
	}
	g := <-next
	if g.Token != first.Token || !g.Expires.Equal(first.Expires) {
		t.Fatalf("handed on: %+v, want the first grant and its expiry", g)
	}
	hold = a.Hold(ctx, g)
	if err := hold.Start(ctx); err != nil {
		t.Fatalf("a start under the handed-on grant: %v", err)
	}
	hold.Done()
	// No renewal runs (paused): near the end of the lease from the grant, no start.
	clk.Add(lease - 10*time.Second - a.Margin())
	if err := hold.Start(ctx); !errors.Is(err, limit.ErrLost) {
		t.Fatalf("a start within the margin of the lease's end: %v, want ErrLost", err)
	}
	if gb, _, err := b.Acquire(ctx, sp, "other", 1); err != nil || gb.Partitions != 0 {
		t.Fatalf("another instance before the lease's end: %+v %v, want a refusal", gb, err)
	}
	if err := hold.Close(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Add(a.Margin())
	if gb, _, err := b.Acquire(ctx, sp, "other", 1); err != nil || gb.Slots != 1 {
		t.Fatalf("another instance at the lease's end: %+v %v, want the slot", gb, err)
	}

	// A grant too near its end to start anything is given back, not handed on: the bundle
	// waiting here asks the limit and gets a grant of its own.
	sp2 := spec(t, limit.Spec{Name: "crm2", MaxInFlight: 1})
	g1, _, err := a.AcquireWaiting(ctx, sp2, "c1", 4, 1)
	if err != nil || g1.Slots != 1 {
		t.Fatalf("crm2: %+v %v", g1, err)
	}
	hold = a.Hold(ctx, g1)
	got := waitHere(t, a, sp2, "c2", 4, 1)
	clk.Add(lease - a.Margin())
	if err := hold.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if g2 := <-got; g2.Partitions == 0 || g2.Token == g1.Token {
		t.Fatalf("the bundle waiting when the grant went back: %+v, want a grant of its own", g2)
	}
}

// A bundle whose turn among those waiting here comes after the call's LocalWait, but while
// the holds here still hand slots on (a lease from their grant), waits in its call for its
// hand-off rather than going back to the queue.
func TestLimiter_ABundleBehindAHolderHereWaitsOutItsTenure(t *testing.T) {
	stores, _ := newStores(t, 2)
	knownHold(t, stores[1], "crm")
	clk := &clock{t: time.Now().UTC()}
	lease := 30 * time.Second // LocalWait: 10 s
	l, err := limit.New(limit.Config{Store: stores[0], Holder: "a", Lease: lease, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	sp := spec(t, limit.Spec{Name: "crm", MaxInFlight: 1})
	ctx := context.Background()
	// A first bundle teaches the process its hold: a second a partition.
	g0, _, err := l.AcquireWaiting(ctx, sp, "b0", 1, 1)
	if err != nil || g0.Slots != 1 {
		t.Fatalf("b0: %+v %v", g0, err)
	}
	hold := l.Hold(ctx, g0)
	if err := hold.Start(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Second)
	hold.Done()
	if err := hold.Close(ctx); err != nil {
		t.Fatal(err)
	}
	g1, _, err := l.AcquireWaiting(ctx, sp, "b1", 2, 1)
	if err != nil || g1.Slots != 1 {
		t.Fatalf("b1: %+v %v", g1, err)
	}
	hold = l.Hold(ctx, g1)
	// 15 partitions, one at a time: its turn is 15 s away, past the call's 10 s, within the
	// 30 s the slot is handed on here.
	next := waitHere(t, l, sp, "b2", 15, 1)
	clk.Add(12 * time.Second)
	if err := hold.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if g := <-next; g.Token != g1.Token || g.Partitions != 15 {
		t.Fatalf("b2: %+v, want b1's grant handed on", g)
	}
}

// After a refusal, a process's other bundles of the limit do not ask it until the refused
// one's wait is over (they ask together then): bundles that pile up while another instance
// holds the slots cost no storage call.
func TestLimiter_RefusedBundlesOfAProcessWaitForItsNextAsk(t *testing.T) {
	stores, calls := newStores(t, 2)
	clk := &clock{t: time.Now().UTC()}
	lease := 30 * time.Second
	sp := spec(t, limit.Spec{Name: "crm", MaxInFlight: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	holder, err := limit.New(limit.Config{Store: stores[0], Holder: "a", Lease: lease, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if g, _, err := holder.Acquire(ctx, sp, "held", 100); err != nil || g.Slots != 1 {
		t.Fatalf("holder: %+v %v", g, err)
	}
	var asleep atomic.Int32
	sleepy := func(ctx context.Context, _ time.Duration) error {
		asleep.Add(1)
		<-ctx.Done()
		return context.Cause(ctx)
	}
	l, err := limit.New(limit.Config{Store: stores[1], Holder: "b", Lease: lease, Now: clk.Now, Sleep: sleepy})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 5)
	ask := func(id string) {
		go func() {
			_, _, err := l.AcquireWaiting(ctx, sp, id, 4, 1)
			done <- err
		}()
	}
	before := calls.n.Load()
	ask("w0")
	eventually.True(t, func() bool { return asleep.Load() == 1 })
	if n := calls.n.Load() - before; n != 2 {
		t.Fatalf("the first refusal cost %d calls, want 2 (a read, and its place in the line written)", n)
	}
	for k := 1; k < 5; k++ {
		ask(fmt.Sprint("w", k))
	}
	eventually.True(t, func() bool { return asleep.Load() == 5 })
	if n := calls.n.Load() - before; n != 2 {
		t.Fatalf("4 more bundles waiting here cost %d calls more, want none", n-2)
	}
	cancel()
	for range 5 {
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("a waiting bundle ended with %v, want its context's end", err)
		}
	}
}

// A renewal tells the limit when the hold's slots are expected back, counting the bundles
// waiting in its process for a hand-off; with several holds here, those bundles go to
// whichever ends first, so each hold counts its share of them, not all: other instances'
// bundles come back when slots are really due.
func TestLimiter_ARenewalCountsItsShareOfTheBundlesWaitingHere(t *testing.T) {
	stores, _ := newStores(t, 2)
	if _, err := stores[1].Update(context.Background(), "crm", func(st *limit.State) error { st.Hold = time.Second; return nil }); err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Now().UTC()}
	sleepy := func(ctx context.Context, _ time.Duration) error { // no renewal but the test's
		<-ctx.Done()
		return context.Cause(ctx)
	}
	l, err := limit.New(limit.Config{Store: stores[0], Holder: "a", Lease: time.Minute, Now: clk.Now, Sleep: sleepy})
	if err != nil {
		t.Fatal(err)
	}
	sp := spec(t, limit.Spec{Name: "crm", MaxInFlight: 4})
	ctx := context.Background()
	var gs []limit.Grant
	for _, id := range []string{"b1", "b2"} {
		g, _, err := l.AcquireUpTo(ctx, sp, id, 2, 2)
		if err != nil || g.Slots != 2 {
			t.Fatalf("%s: %+v %v, want 2 slots", id, g, err)
		}
		hold := l.Hold(ctx, g)
		defer func() { _ = hold.Close(ctx) }()
		gs = append(gs, g)
	}
	waitHere(t, l, sp, "w", 8, 2) // 8 partitions wait here, 2 at a time
	if err := l.Renew(ctx, &gs[0]); err != nil {
		t.Fatal(err)
	}
	st, err := stores[0].Read(ctx, "crm")
	if err != nil {
		t.Fatal(err)
	}
	// Its own 2 partitions on 2 slots (1 s), then half of the 8 waiting (4 on 2 slots, 2 s);
	// all 8 would be 5 s.
	k := slices.IndexFunc(st.Slots, func(s limit.Slot) bool { return s.Token == gs[0].Token })
	if k < 0 || !st.Slots[k].Ends.Equal(clk.Now().Add(3*time.Second)) {
		t.Fatalf("slots %+v: want b1's expected back in 3 s", st.Slots)
	}
}

// An update writes on the state its store last read, under that read's ETag: one call when no
// one wrote since, where a write on what it wrote before that would lose the race and read.
func TestStore_WritesOnWhatItLastRead(t *testing.T) {
	stores, calls := newStores(t, 2)
	ctx := context.Background()
	for k, s := range stores { // store 1 writes after store 0: what 0 wrote is stale
		if _, err := s.Update(ctx, "crm", func(st *limit.State) error { st.Started = int64(k + 1); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	// Store 0 reads the state (an update that finds nothing to change).
	if _, err := stores[0].Update(ctx, "crm", func(*limit.State) error { return limit.ErrNoChange }); err != nil {
		t.Fatal(err)
	}
	before := calls.n.Load()
	st, err := stores[0].Update(ctx, "crm", func(st *limit.State) error { st.Started++; return nil })
	if err != nil || st.Started != 3 {
		t.Fatalf("update: %+v %v, want started 3 (on store 1's write)", st, err)
	}
	if n := calls.n.Load() - before; n != 1 {
		t.Fatalf("%d storage calls, want 1: a write on what store 0 last read", n)
	}
	if got, err := stores[1].Read(ctx, "crm"); err != nil || got.Started != 3 {
		t.Fatalf("read back: %+v %v, want started 3", got, err)
	}
}

// A state the store knew longer than FreshFor ago is read before it is written on: one read
// and one write, where a write on it would most likely lose to another instance's and cost a
// call more. Within FreshFor the write goes first.
func TestStore_ReadsFirstWhatItKnewLongAgo(t *testing.T) {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	stores, calls := newStoresOn(t, 2, clk.Now)
	ctx := context.Background()
	bump := func(s *limitblob.Store) {
		t.Helper()
		if _, err := s.Update(ctx, "crm", func(st *limit.State) error { st.Started++; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		after time.Duration
		want  int64
	}{
		{limitblob.FreshFor - time.Millisecond, 3}, // a write that loses, a read, a write
		{limitblob.FreshFor, 2},                    // a read, a write
	} {
		bump(stores[0])
		clk.Add(c.after)
		bump(stores[1]) // another instance writes meanwhile
		before := calls.n.Load()
		bump(stores[0])
		if n := calls.n.Load() - before; n != c.want {
			t.Fatalf("%s after its last write: %d storage calls, want %d", c.after, n, c.want)
		}
	}
	if st, err := stores[1].Read(ctx, "crm"); err != nil || st.Started != 6 {
		t.Fatalf("read back: %+v %v, want started 6", st, err)
	}
}
