package election_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/election/electiontest"
	"github.com/batonfn/baton/internal/engine/ledger"
)

const (
	testLeaseDuration = 15 * time.Second
	testRenewInterval = testLeaseDuration / 3 // the default
	testSafetyMargin  = testLeaseDuration / 6 // the default
)

func TestLeader_RenewsEveryThirdWithJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lk := election.NewMemoryLock(testLeaseDuration)
		var mu sync.Mutex
		var renewals []time.Time
		var lapsed bool
		lk.RenewHook = func(context.Context, election.Lease) error {
			mu.Lock()
			defer mu.Unlock()
			now := time.Now()
			lapsed = lapsed || lk.Lapsed(now)
			renewals = append(renewals, now)
			return nil
		}
		ld, logs := electiontest.NewLeader(t, lk, election.LeaderConfig{StallTimeout: 30 * time.Second})

		start := time.Now()
		var lease election.Lease
		err := ld.RunAsLeader(t.Context(), func(ctx context.Context, l election.Lease, beat func()) error {
			lease = l
			for range 60 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(time.Second):
					beat()
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("RunAsLeader: %v", err)
		}

		mu.Lock()
		defer mu.Unlock()
		if lapsed {
			t.Errorf("the lease lapsed between renewals")
		}
		if n := len(renewals); n < 12 || n > 15 {
			t.Errorf("%d renewals in 60s, want 12–15 (every 4–5s)", n)
		}
		prev, gaps := start, map[time.Duration]bool{}
		for i, r := range renewals {
			gap := r.Sub(prev)
			if gap < testRenewInterval*4/5 || gap > testRenewInterval {
				t.Errorf("renewal %d came %s after the previous one, want %s–%s", i, gap, testRenewInterval*4/5, testRenewInterval)
			}
			gaps[gap] = true
			prev = r
		}
		if len(gaps) < 2 {
			t.Errorf("renewal gaps %v are all equal, want jitter", gaps)
		}
		if got := lk.Releases.Load(); got != 1 {
			t.Errorf("%d releases, want 1", got)
		}
		if got := lk.ReleaseCtxErr.Load(); got != "<nil>" {
			t.Errorf("release context error = %v, want a live context", got)
		}
		st, _ := lk.State(t.Context())
		if st.Held {
			t.Errorf("lease still held after RunAsLeader returned: %+v", st)
		}
		electiontest.RequireLog(t, logs, "leadership acquired", lease)
		electiontest.RequireLog(t, logs, "leadership released", lease)
	})
}

func TestLeader_RenewalFailure_CancelsWithinOneInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lk := election.NewMemoryLock(testLeaseDuration)
		ld, logs := electiontest.NewLeader(t, lk, election.LeaderConfig{})

		var calls atomic.Int32
		var cancelledAt time.Time
		started := make(chan election.Lease, 1)
		errc := make(chan error, 1)
		go func() {
			errc <- ld.RunAsLeader(t.Context(), func(ctx context.Context, l election.Lease, beat func()) error {
				calls.Add(1)
				started <- l
				<-ctx.Done()
				cancelledAt = time.Now()
				return ctx.Err()
			})
		}()
		lease := <-started
		time.Sleep(7 * time.Second) // between the first and second renewal
		brokenAt := time.Now()
		lk.Break()
		other, err := lk.Acquire(t.Context(), electiontest.Holder(2))
		if err != nil {
			t.Fatalf("other contender after the break: %v", err)
		}

		err = <-errc
		if !errors.Is(err, election.ErrLeaseLost) {
			t.Errorf("RunAsLeader = %v, want ErrLeaseLost", err)
		}
		if d := cancelledAt.Sub(brokenAt); d <= 0 || d > testRenewInterval {
			t.Errorf("task cancelled %s after the break, want within one renew interval (%s)", d, testRenewInterval)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("task started %d times, want 1", n)
		}
		st, _ := lk.State(t.Context())
		if !st.Held || st.Holder != other.Holder || st.Epoch != lease.Epoch+1 {
			t.Errorf("State = %+v, want held by %v at epoch %d", st, other.Holder, lease.Epoch+1)
		}
		electiontest.RequireLog(t, logs, "lease renewal failed: leadership lost", lease)
	})
}

func TestLeader_LocalDeadline_CancelsBeforeExpiryWhenStorageHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lk := election.NewMemoryLock(testLeaseDuration)
		lk.RenewHook = func(ctx context.Context, _ election.Lease) error {
			<-ctx.Done() // storage never answers; Renew gives up when its budget ends
			return ctx.Err()
		}
		ld, _ := electiontest.NewLeader(t, lk, election.LeaderConfig{})

		var lease election.Lease
		var cancelledAt time.Time
		err := ld.RunAsLeader(t.Context(), func(ctx context.Context, l election.Lease, beat func()) error {
			lease = l
			<-ctx.Done()
			cancelledAt = time.Now()
			return ctx.Err()
		})
		if !errors.Is(err, election.ErrLeaseLost) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("RunAsLeader = %v, want election.ErrLeaseLost wrapping the renewal's deadline", err)
		}
		want := lease.AcquiredAt.Add(testLeaseDuration - testSafetyMargin)
		if !cancelledAt.Equal(want) {
			t.Errorf("task cancelled at +%s, want at the local deadline +%s",
				cancelledAt.Sub(lease.AcquiredAt), want.Sub(lease.AcquiredAt))
		}
		if n := lk.Renews.Load(); n != 1 {
			t.Errorf("%d renewals attempted, want 1 (it hangs until the deadline)", n)
		}
	})
}

func TestLeader_Stall_StopsRenewingAndLetsTheLeaseLapse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const stall = 8 * time.Second
		lk := election.NewMemoryLock(testLeaseDuration)
		var mu sync.Mutex
		var lastRenewal time.Time
		lk.RenewHook = func(context.Context, election.Lease) error {
			mu.Lock()
			defer mu.Unlock()
			lastRenewal = time.Now()
			return nil
		}
		ld, logs := electiontest.NewLeader(t, lk, election.LeaderConfig{StallTimeout: stall})

		var lease election.Lease
		var lastBeat, cancelledAt time.Time
		var cause error
		unblock := make(chan struct{})
		errc := make(chan error, 1)
		go func() {
			errc <- ld.RunAsLeader(t.Context(), func(ctx context.Context, l election.Lease, beat func()) error {
				lease = l
				context.AfterFunc(ctx, func() { cancelledAt, cause = time.Now(), context.Cause(ctx) })
				for range 3 {
					time.Sleep(time.Second)
					beat()
				}
				lastBeat = time.Now()
				<-unblock // stuck, and deaf to ctx
				return nil
			})
		}()

		// Contend every 100ms, as ticks on other instances would, until someone wins.
		other := electiontest.Holder(2)
		var won election.Lease
		for giveUp := time.Now().Add(time.Minute); ; {
			time.Sleep(100 * time.Millisecond)
			l, err := lk.Acquire(t.Context(), other)
			if err == nil {
				won = l
				break
			}
			if held := (*election.HeldError)(nil); !errors.As(err, &held) {
				t.Fatalf("contender: %v", err)
			}
			if time.Now().After(giveUp) {
				close(unblock)
				t.Fatalf("no contender won within a minute: the stalled leader kept its lease")
			}
		}
		synctest.Wait()

		if !errors.Is(cause, election.ErrStalled) {
			t.Errorf("task context cause = %v, want ErrStalled", cause)
		}
		if want := lastBeat.Add(stall); !cancelledAt.Equal(want) {
			t.Errorf("task cancelled %s after its last beat, want %s", cancelledAt.Sub(lastBeat), stall)
		}
		mu.Lock()
		renewedAfterStall := lastRenewal.After(cancelledAt)
		expiry := lastRenewal.Add(testLeaseDuration)
		mu.Unlock()
		if renewedAfterStall {
			t.Errorf("renewed at %v, after the stall at %v", lastRenewal, cancelledAt)
		}
		if won.AcquiredAt.Before(expiry) || won.AcquiredAt.Sub(expiry) > 100*time.Millisecond {
			t.Errorf("new holder won %s after the stalled lease's expiry, want within one 100ms contention tick",
				won.AcquiredAt.Sub(expiry))
		}
		if won.Epoch != lease.Epoch+1 {
			t.Errorf("new holder's epoch = %d, want %d", won.Epoch, lease.Epoch+1)
		}

		close(unblock)
		if err := <-errc; !errors.Is(err, election.ErrStalled) {
			t.Errorf("RunAsLeader = %v, want ErrStalled", err)
		}
		electiontest.RequireLog(t, logs, "leader task stalled: stopping renewals, lease will lapse", lease)
		if st, _ := lk.State(t.Context()); st.Holder != other || !st.Held {
			t.Errorf("State = %+v: the stalled leader's late release must not affect the new holder %v", st, other)
		}
	})
}

func TestLeader_ReleaseAll_HandsOverAndCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lk := election.NewMemoryLock(testLeaseDuration)
		ld, logs := electiontest.NewLeader(t, lk, election.LeaderConfig{})

		started := make(chan election.Lease, 1)
		errc := make(chan error, 1)
		go func() {
			errc <- ld.RunAsLeader(t.Context(), func(ctx context.Context, l election.Lease, beat func()) error {
				started <- l
				<-ctx.Done()
				return ctx.Err()
			})
		}()
		lease := <-started
		if got := ld.Held(); len(got) != 1 || got[0].ID != lease.ID {
			t.Errorf("Held = %+v, want the running lease", got)
		}

		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		if err := ld.ReleaseAll(ctx); err != nil {
			t.Fatalf("ReleaseAll: %v", err)
		}
		if err := <-errc; !errors.Is(err, election.ErrHandover) {
			t.Errorf("RunAsLeader = %v, want ErrHandover", err)
		}
		if got := ld.Held(); len(got) != 0 {
			t.Errorf("Held after ReleaseAll = %+v, want none", got)
		}
		if _, err := lk.Acquire(t.Context(), electiontest.Holder(2)); err != nil {
			t.Errorf("next contender right after ReleaseAll: %v, want it to win at once", err)
		}
		if err := ld.RunAsLeader(t.Context(), func(context.Context, election.Lease, func()) error {
			t.Error("task ran after ReleaseAll")
			return nil
		}); !errors.Is(err, election.ErrLeaderClosed) {
			t.Errorf("RunAsLeader after ReleaseAll = %v, want ErrLeaderClosed", err)
		}
		electiontest.RequireLog(t, logs, "leadership released", lease)
	})
}

func TestLeader_ReleaseAll_KeepsTheLeaseOfATaskThatDoesNotStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lk := election.NewMemoryLock(testLeaseDuration)
		ld, _ := electiontest.NewLeader(t, lk, election.LeaderConfig{})
		started := make(chan struct{})
		unblock := make(chan struct{})
		errc := make(chan error, 1)
		go func() {
			errc <- ld.RunAsLeader(t.Context(), func(ctx context.Context, l election.Lease, beat func()) error {
				close(started)
				<-unblock // deaf to ctx
				return nil
			})
		}()
		<-started
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		if err := ld.ReleaseAll(ctx); err == nil || !strings.Contains(err.Error(), "did not stop") {
			t.Errorf("ReleaseAll = %v, want an error naming the task that did not stop", err)
		}
		if n := lk.Releases.Load(); n != 0 {
			t.Errorf("%d releases while the task still runs, want 0", n)
		}
		close(unblock)
		if err := <-errc; !errors.Is(err, election.ErrHandover) {
			t.Errorf("RunAsLeader = %v, want ErrHandover", err)
		}
		if n := lk.Releases.Load(); n != 1 {
			t.Errorf("%d releases after the task returned, want 1", n)
		}
	})
}

func TestLeader_HeldReturnsAtOnceWithoutRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lk := election.NewMemoryLock(testLeaseDuration)
		holder := electiontest.Holder(9)
		theirs, err := lk.Acquire(t.Context(), holder)
		if err != nil {
			t.Fatal(err)
		}
		ld, _ := electiontest.NewLeader(t, lk, election.LeaderConfig{})
		start := time.Now()
		err = ld.RunAsLeader(t.Context(), func(context.Context, election.Lease, func()) error {
			t.Error("task ran without the lease")
			return nil
		})
		var held *election.HeldError
		if !errors.As(err, &held) || held.Holder != holder || held.Epoch != theirs.Epoch {
			t.Errorf("RunAsLeader = %v, want *election.HeldError naming %v epoch %d", err, holder, theirs.Epoch)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("RunAsLeader waited %s, want an immediate answer", d)
		}
		if r, rel := lk.Renews.Load(), lk.Releases.Load(); r != 0 || rel != 0 {
			t.Errorf("%d renewals and %d releases for a lease never held, want none", r, rel)
		}
	})
}

func TestLeader_ReleasesWithAFreshContextAfterCancellation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lk := election.NewMemoryLock(testLeaseDuration)
		ld, _ := electiontest.NewLeader(t, lk, election.LeaderConfig{})
		ctx, cancel := context.WithCancel(t.Context())
		err := ld.RunAsLeader(ctx, func(ctx context.Context, l election.Lease, beat func()) error {
			cancel()
			<-ctx.Done()
			return ctx.Err()
		})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("RunAsLeader = %v, want context.Canceled", err)
		}
		if got := lk.ReleaseCtxErr.Load(); got != "<nil>" {
			t.Errorf("release context error = %v, want a fresh live context", got)
		}
		if st, _ := lk.State(t.Context()); st.Held {
			t.Errorf("lease still held: %+v", st)
		}
	})
}

func TestLeader_ReturnsTheTaskError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lk := election.NewMemoryLock(testLeaseDuration)
		ld, _ := electiontest.NewLeader(t, lk, election.LeaderConfig{})
		boom := errors.New("boom")
		err := ld.RunAsLeader(t.Context(), func(context.Context, election.Lease, func()) error { return boom })
		if err != boom {
			t.Errorf("RunAsLeader = %v, want the task's error unchanged", err)
		}
		if st, _ := lk.State(t.Context()); st.Held {
			t.Errorf("lease still held after a failed task: %+v", st)
		}
	})
}

func TestNewLeader_Validation(t *testing.T) {
	lk := election.NewMemoryLock(30 * time.Second)
	id := electiontest.Holder(1)
	tests := []struct {
		name    string
		cfg     election.LeaderConfig
		wantErr string // substring; "" means valid
	}{
		{"defaults are valid", election.LeaderConfig{Lock: lk, Identity: id}, ""},
		{"15s lease with defaults", election.LeaderConfig{Lock: election.NewMemoryLock(15 * time.Second), Identity: id, LeaseDuration: 15 * time.Second}, ""},
		{"60s lease with defaults", election.LeaderConfig{Lock: election.NewMemoryLock(60 * time.Second), Identity: id, LeaseDuration: 60 * time.Second}, ""},
		{"lock is required", election.LeaderConfig{Identity: id}, "Lock is required"},
		{"identity instance is required", election.LeaderConfig{Lock: lk, Identity: ledger.Holder{App: "a"}}, "holder instance"},
		{"identity app is required", election.LeaderConfig{Lock: lk, Identity: ledger.Holder{Instance: "i"}}, "holder app"},
		{"lease shorter than 15s", election.LeaderConfig{Lock: lk, Identity: id, LeaseDuration: 14 * time.Second}, "LeaseDuration 14s is out of range"},
		{"lease longer than 60s", election.LeaderConfig{Lock: lk, Identity: id, LeaseDuration: 61 * time.Second}, "LeaseDuration 1m1s is out of range"},
		{"lease differs from the lock's", election.LeaderConfig{Lock: lk, Identity: id, LeaseDuration: 15 * time.Second}, "must equal the lock's lease duration 30s"},
		{"renew interval too long", election.LeaderConfig{Lock: lk, Identity: id, RenewInterval: 13 * time.Second}, "RenewInterval 13s must be positive and at most half"},
		{"renew interval negative", election.LeaderConfig{Lock: lk, Identity: id, RenewInterval: -time.Second}, "RenewInterval -1s"},
		{"renew interval at the limit", election.LeaderConfig{Lock: lk, Identity: id, RenewInterval: 12500 * time.Millisecond}, ""},
		{"negative safety margin", election.LeaderConfig{Lock: lk, Identity: id, SafetyMargin: -time.Second}, "SafetyMargin -1s"},
		{"safety margin of half the lease", election.LeaderConfig{Lock: lk, Identity: id, SafetyMargin: 15 * time.Second}, "SafetyMargin 15s"},
		{"stall timeout not longer than renew interval", election.LeaderConfig{Lock: lk, Identity: id, StallTimeout: 10 * time.Second}, "StallTimeout 10s must be longer than RenewInterval 10s"},
		{"stall timeout absurdly long", election.LeaderConfig{Lock: lk, Identity: id, StallTimeout: 25 * time.Hour}, "StallTimeout 25h0m0s"},
		{"negative release timeout", election.LeaderConfig{Lock: lk, Identity: id, ReleaseTimeout: -time.Second}, "ReleaseTimeout -1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := election.NewLeader(tt.cfg)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("NewLeader: got %v, want no error", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("NewLeader: got %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// Named leaderships are independent of each other and of the leader's own lock: holding one
// run's lease neither blocks another's nor the scheduler's; each renews its own lock, the
// lease carries its name, and ReleaseAll ends them all.
func TestLeader_RunAsLeaderOf_NamedLocksAreIndependent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		own := election.NewMemoryLock(testLeaseDuration)
		named := election.NewMemoryLocks(testLeaseDuration)
		ld, _ := electiontest.NewLeader(t, own, election.LeaderConfig{Locks: named.Lock})
		other, _ := electiontest.NewLeader(t, own, election.LeaderConfig{Locks: named.Lock, Identity: electiontest.Holder(2)})

		started := make(chan election.Lease, 2)
		errc := make(chan error, 2)
		for _, name := range []string{"runs/a", "runs/b"} {
			go func() {
				errc <- ld.RunAsLeaderOf(t.Context(), name, func(ctx context.Context, l election.Lease, beat func()) error {
					started <- l
					<-ctx.Done()
					return ctx.Err()
				})
			}()
		}
		got := map[string]election.Lease{}
		for range 2 {
			l := <-started
			got[l.Name] = l
		}
		if len(got) != 2 || got["runs/a"].Epoch != 1 || got["runs/b"].Epoch != 1 {
			t.Fatalf("leases = %+v, want runs/a and runs/b each at epoch 1", got)
		}
		// The leader's own lock is free, and the held names are held for everyone else.
		if err := other.RunAsLeader(t.Context(), func(context.Context, election.Lease, func()) error { return nil }); err != nil {
			t.Errorf("own lock while named leases are held: %v", err)
		}
		var held *election.HeldError
		if err := other.RunAsLeaderOf(t.Context(), "runs/a", func(context.Context, election.Lease, func()) error {
			t.Error("two holders of runs/a")
			return nil
		}); !errors.As(err, &held) {
			t.Errorf("runs/a from another leader: %v, want HeldError", err)
		}
		time.Sleep(2 * testLeaseDuration) // synctest: virtual time, the renewals keep both
		if r := named.Get("runs/a").Renews.Load(); r < 4 {
			t.Errorf("runs/a renewed %d times in two lease durations, want its own renewals", r)
		}
		if len(ld.Held()) != 2 {
			t.Errorf("Held = %+v, want both named leases", ld.Held())
		}
		if err := ld.ReleaseAll(t.Context()); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := <-errc; !errors.Is(err, election.ErrHandover) {
				t.Errorf("RunAsLeaderOf = %v, want ErrHandover", err)
			}
		}
		if named.Get("runs/a").Releases.Load() != 1 || named.Get("runs/b").Releases.Load() != 1 {
			t.Error("a named lease was not released by ReleaseAll")
		}
	})
}

func TestLeader_RunAsLeaderOf_NeedsNamedLocks(t *testing.T) {
	ld, _ := electiontest.NewLeader(t, election.NewMemoryLock(testLeaseDuration), election.LeaderConfig{})
	if err := ld.RunAsLeaderOf(t.Context(), "runs/a", func(context.Context, election.Lease, func()) error { return nil }); err == nil {
		t.Error("RunAsLeaderOf without LeaderConfig.Locks ran")
	}
	wrong := election.NewMemoryLocks(2 * testLeaseDuration)
	ld, _ = electiontest.NewLeader(t, election.NewMemoryLock(testLeaseDuration), election.LeaderConfig{Locks: wrong.Lock})
	if err := ld.RunAsLeaderOf(t.Context(), "runs/a", func(context.Context, election.Lease, func()) error { return nil }); err == nil ||
		!strings.Contains(err.Error(), "lease duration") {
		t.Errorf("a named lock with another duration: %v, want refused", err)
	}
}

// The acquisition's log line says who held the lease before and whether that holder released
// it: a handover names the release, a first acquisition names nobody.
func TestLeader_AcquiredLineNamesThePreviousHoldersRelease(t *testing.T) {
	lk := election.NewMemoryLock(testLeaseDuration)
	first, firstLogs := electiontest.NewLeader(t, lk, election.LeaderConfig{})
	second, secondLogs := electiontest.NewLeader(t, lk, election.LeaderConfig{Identity: electiontest.Holder(2)})
	noop := func(context.Context, election.Lease, func()) error { return nil }
	if err := first.RunAsLeader(t.Context(), noop); err != nil {
		t.Fatal(err)
	}
	if err := second.RunAsLeader(t.Context(), noop); err != nil {
		t.Fatal(err)
	}
	r, ok := firstLogs.Find("leadership acquired")
	if _, named := r.Attrs["previousHolder"]; !ok || named {
		t.Errorf("first acquisition: %v; want no previous holder", r.Attrs)
	}
	r, ok = secondLogs.Find("leadership acquired")
	if !ok || r.Attrs["previousHolder"] != electiontest.Holder(1).String() || r.Attrs["previousReleasedAt"] == "" {
		t.Errorf("acquisition after a release: %v; want the previous holder %s and its release time", r.Attrs, electiontest.Holder(1))
	}
}
