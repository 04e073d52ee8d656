package bloblease

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/election/electiontest"
)

// These tests run the election.Leader over a real BlobLock on Azurite, in real time, with 15 s leases.
// Each is slow (up to ~20 s) and independent, so they run in parallel.

// newTestBlobLeader returns a election.Leader over lk with 15 s leases; cfg adjusts the timing.
func newTestBlobLeader(t *testing.T, lk *BlobLock, cfg election.LeaderConfig) (*election.Leader, *electiontest.LogRecorder) {
	t.Helper()
	cfg.LeaseDuration = lk.Duration()
	return electiontest.NewLeader(t, lk, cfg)
}

// testRenewInterval is the default renew interval of a 15 s lease.
const testRenewInterval = testBlobLockDuration / 3

// waitFor polls cond every 50ms until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestLeader_Azurite_BrokenLeaseCancelsWithinOneRenewInterval(t *testing.T) {
	t.Parallel()
	c := newTestContainer(t, nil, nil)
	lk, other := newTestBlobLockOn(t, c), newTestBlobLockOn(t, c)
	ld, logs := newTestBlobLeader(t, lk, election.LeaderConfig{})

	var calls atomic.Int32
	var cancelledAt atomic.Int64
	started := make(chan election.Lease, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- ld.RunAsLeader(t.Context(), func(ctx context.Context, l election.Lease, beat func()) error {
			calls.Add(1)
			started <- l
			<-ctx.Done()
			cancelledAt.Store(time.Now().UnixNano())
			return ctx.Err()
		})
	}()
	var held election.Lease
	select {
	case held = <-started:
	case err := <-errc:
		t.Fatalf("RunAsLeader: %v", err)
	}

	// Break the lease from outside, as an operator (or a bug) would, and let another take it.
	bl, err := lease.NewBlobClient(c.NewBlockBlobClient("leader"), nil)
	if err != nil {
		t.Fatal(err)
	}
	brokenAt := time.Now()
	if _, err := bl.BreakLease(t.Context(), &lease.BlobBreakOptions{BreakPeriod: to.Ptr(int32(0))}); err != nil {
		t.Fatalf("BreakLease: %v", err)
	}
	taken, err := other.Acquire(t.Context(), electiontest.Holder(2))
	if err != nil {
		t.Fatalf("other contender after the break: %v", err)
	}

	var runErr error
	select {
	case runErr = <-errc:
	case <-time.After(2 * testRenewInterval):
		t.Fatalf("RunAsLeader still running %s after the break", 2*testRenewInterval)
	}
	if !errors.Is(runErr, election.ErrLeaseLost) {
		t.Errorf("RunAsLeader = %v, want ErrLeaseLost", runErr)
	}
	// One renew interval, plus a little for the renewal's own round trip.
	if d := time.Unix(0, cancelledAt.Load()).Sub(brokenAt); d > testRenewInterval+time.Second {
		t.Errorf("task cancelled %s after the break, want within one renew interval (%s)", d, testRenewInterval)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("task started %d times, want once", n)
	}
	st, err := lk.State(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !st.Held || st.Holder != taken.Holder || st.Epoch != held.Epoch+1 {
		t.Errorf("State = %+v, want held by %v at epoch %d (the old leader's release must not disturb it)", st, taken.Holder, held.Epoch+1)
	}
	electiontest.RequireLog(t, logs, "lease renewal failed: leadership lost", held)
}

func TestLeader_Azurite_StalledLeaderLosesTheLease(t *testing.T) {
	t.Parallel()
	const stall = 3 * time.Second
	c := newTestContainer(t, nil, nil)
	lk, other := newTestBlobLockOn(t, c), newTestBlobLockOn(t, c)
	ld, logs := newTestBlobLeader(t, lk, election.LeaderConfig{RenewInterval: 2 * time.Second, StallTimeout: stall})

	var lastBeat, cancelledAt atomic.Int64
	var cause atomic.Value
	started := make(chan election.Lease, 1)
	unblock := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- ld.RunAsLeader(t.Context(), func(ctx context.Context, l election.Lease, beat func()) error {
			context.AfterFunc(ctx, func() {
				cancelledAt.Store(time.Now().UnixNano())
				cause.Store(context.Cause(ctx))
			})
			for range 3 {
				beat()
				lastBeat.Store(time.Now().UnixNano())
				time.Sleep(100 * time.Millisecond) // a little work between progress reports
			}
			started <- l
			<-unblock // stuck, deaf to ctx
			return nil
		})
	}()
	var held election.Lease
	select {
	case held = <-started:
	case err := <-errc:
		t.Fatalf("RunAsLeader: %v", err)
	}

	// Another instance contends every 250 ms until it wins.
	var won election.Lease
	var refusedAfterStall bool
	for deadline := time.Now().Add(stall + testBlobLockDuration + 5*time.Second); ; {
		if time.Now().After(deadline) {
			close(unblock)
			t.Fatalf("no one took over from the stalled leader")
		}
		l, err := other.Acquire(t.Context(), electiontest.Holder(2))
		if err == nil {
			won = l
			break
		}
		if !errors.As(err, new(*election.HeldError)) {
			close(unblock)
			t.Fatalf("contender: %v", err)
		}
		refusedAfterStall = refusedAfterStall || cancelledAt.Load() != 0
		time.Sleep(250 * time.Millisecond)
	}
	wonAt := time.Now()
	close(unblock)
	runErr := <-errc

	c0 := cancelledAt.Load()
	if c0 == 0 {
		t.Fatalf("task context never cancelled")
	}
	stalledAt := time.Unix(0, c0)
	if got, ok := cause.Load().(error); !ok || !errors.Is(got, election.ErrStalled) {
		t.Errorf("task context cause = %v, want ErrStalled", cause.Load())
	}
	if d := stalledAt.Sub(time.Unix(0, lastBeat.Load())); d < stall || d > stall+time.Second {
		t.Errorf("task cancelled %s after its last beat, want %s (+1s)", d, stall)
	}
	if !refusedAfterStall {
		t.Errorf("contender won without being refused after the stall: the lease should outlive the stall until it lapses")
	}
	if d := wonAt.Sub(stalledAt); d > testBlobLockDuration+2*time.Second {
		t.Errorf("new holder won %s after the stall, want within one lease duration + 2s", d)
	}
	if won.Epoch != held.Epoch+1 {
		t.Errorf("new holder's epoch = %d, want %d", won.Epoch, held.Epoch+1)
	}
	if !errors.Is(runErr, election.ErrStalled) {
		t.Errorf("RunAsLeader = %v, want ErrStalled", runErr)
	}
	electiontest.RequireLog(t, logs, "leader task stalled: stopping renewals, lease will lapse", held)
}

func TestLeader_Azurite_TransientFaults(t *testing.T) {
	t.Parallel()
	const interval = 2 * time.Second
	ft := newTestFaultTransport()
	c := newTestContainer(t, ft, &policy.RetryOptions{MaxRetries: -1})
	lk, err := NewBlobLock(c, "leader", BlobLockOptions{Duration: testBlobLockDuration, AttemptTimeout: time.Second, Logger: quietTestLogger})
	if err != nil {
		t.Fatal(err)
	}
	other := newTestBlobLockOn(t, newTestContainerAlias(t, c))
	// A wide safety margin brings the local deadline (and this test's end) forward: renew
	// every 2 s, give up 8 s after the last successful renewal.
	ld, logs := newTestBlobLeader(t, lk, election.LeaderConfig{RenewInterval: interval, SafetyMargin: 7 * time.Second, StallTimeout: time.Minute})

	// Phase 1: every other renewal request fails (503, then a reset).
	var mu sync.Mutex
	n := 0
	ft.setRule(func(req *http.Request) int {
		if !isTestRenewRequest(req) {
			return faultNone
		}
		mu.Lock()
		defer mu.Unlock()
		n++
		switch n % 4 {
		case 1:
			return 503
		case 3:
			return faultReset
		}
		return faultNone
	})

	var cancelledAt atomic.Int64
	started := make(chan election.Lease, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- ld.RunAsLeader(t.Context(), func(ctx context.Context, l election.Lease, beat func()) error {
			started <- l
			context.AfterFunc(ctx, func() { cancelledAt.Store(time.Now().UnixNano()) })
			for {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(200 * time.Millisecond):
					beat()
				}
			}
		})
	}()
	held := <-started
	waitFor(t, 5*interval, "two renewals through the faults", func() bool { return ft.renewsPassed.Load() >= 2 })
	if cancelledAt.Load() != 0 {
		t.Fatalf("leadership ended during phase 1 (%d faults injected): %v", ft.faults.Load(), <-errc)
	}
	if ft.faults.Load() < 2 {
		t.Errorf("only %d faults injected in phase 1, want at least 2", ft.faults.Load())
	}

	// Phase 2: storage stops answering renewals. Leadership must end before the lease can
	// have expired, and be released cleanly (release requests still get through).
	ft.setRule(func(req *http.Request) int {
		if isTestRenewRequest(req) {
			return 503
		}
		return faultNone
	})
	var runErr error
	select {
	case runErr = <-errc:
	case <-time.After(testBlobLockDuration + 5*time.Second):
		t.Fatalf("RunAsLeader did not give up leadership with renewals failing")
	}
	if !errors.Is(runErr, election.ErrLeaseLost) {
		t.Errorf("RunAsLeader = %v, want ErrLeaseLost", runErr)
	}
	lastPass := time.Unix(0, ft.lastRenewPass.Load())
	if gaveUp := time.Unix(0, cancelledAt.Load()); !gaveUp.Before(lastPass.Add(testBlobLockDuration)) {
		t.Errorf("gave up %s after the last successful renewal was sent, want before the %s lease could expire",
			gaveUp.Sub(lastPass), testBlobLockDuration)
	}
	if _, err := other.Acquire(t.Context(), electiontest.Holder(2)); err != nil {
		t.Errorf("next contender after the clean give-up: %v, want it to win at once", err)
	}
	electiontest.RequireLog(t, logs, "lease renewal failed: leadership lost", held)
}
