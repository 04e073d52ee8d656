package bloblease

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/election/electiontest"
	"github.com/batonfn/baton/internal/lib/latency"
	"github.com/batonfn/baton/internal/tools/azurite"
)

// quietTestLogger drops the BlobLock's own logs (retries, creation) in tests.
var quietTestLogger = slog.New(slog.DiscardHandler)

// testBlobLockDuration is the shortest lease storage allows, to keep expiry tests short.
const testBlobLockDuration = 15 * time.Second

// newTestContainer returns a client for a container unique to this test (not created: the
// lock creates it) on the shared Azurite, deleted at cleanup. transport, when not nil,
// replaces the HTTP transport (fault injection); retry, when not nil, replaces the SDK's
// retry options.
func newTestContainer(t testing.TB, transport policy.Transporter, retry *policy.RetryOptions) *container.Client {
	t.Helper()
	opts := &azblob.ClientOptions{}
	if transport != nil {
		opts.Transport = transport
	}
	if retry != nil {
		opts.Retry = *retry
	}
	return azurite.NewContainer(t, "lease", opts)
}

// newTestContainerAlias returns a plain client (no fault injection) for the same container as c.
func newTestContainerAlias(t testing.TB, c *container.Client) *container.Client {
	t.Helper()
	cl, err := azclient.Blob(azurite.Shared(t).Storage(), nil)
	if err != nil {
		t.Fatalf("blob client: %v", err)
	}
	return cl.ServiceClient().NewContainerClient(containerName(c))
}

// newTestBlobLock returns a BlobLock with 15 s leases in a fresh container.
func newTestBlobLock(t testing.TB) *BlobLock {
	t.Helper()
	return newTestBlobLockOn(t, newTestContainer(t, nil, nil))
}

// newTestBlobLockOn returns a BlobLock with 15 s leases over the lease blob "leader" in c.
func newTestBlobLockOn(t testing.TB, c *container.Client) *BlobLock {
	t.Helper()
	lk, err := NewBlobLock(c, "leader", BlobLockOptions{Duration: testBlobLockDuration, Logger: quietTestLogger})
	if err != nil {
		t.Fatalf("NewBlobLock: %v", err)
	}
	return lk
}

func TestBlobLock_Contract(t *testing.T) {
	t.Parallel()
	electiontest.RunLockContract(t, func(t *testing.T) election.Lock { return newTestBlobLock(t) })
}

func TestBlobLock_Acquire_Race20_OneWins(t *testing.T) {
	t.Parallel()
	c := newTestContainer(t, nil, nil) // container and blob missing: the race creates them too
	const n = 20
	locks := make([]*BlobLock, n)
	for i := range locks {
		locks[i] = newTestBlobLockOn(t, c) // one lock per contender, as separate processes
	}
	var (
		wins    atomic.Int32
		leases  = make([]election.Lease, n)
		errs    = make([]error, n)
		start   = make(chan struct{})
		wg      sync.WaitGroup
		ctx     = t.Context()
		winners []int
	)
	for i := range n {
		wg.Go(func() {
			<-start
			leases[i], errs[i] = locks[i].Acquire(ctx, electiontest.Holder(i))
			if errs[i] == nil {
				wins.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()

	if got := wins.Load(); got != 1 {
		t.Fatalf("%d contenders won, want exactly 1 (errors: %v)", got, errs)
	}
	for i, err := range errs {
		if err == nil {
			winners = append(winners, i)
		}
	}
	w := leases[winners[0]]
	if w.Epoch != 1 || w.Holder != electiontest.Holder(winners[0]) {
		t.Errorf("winner lease = %+v, want epoch 1 held by contender %d", w, winners[0])
	}
	for i, err := range errs {
		if i == winners[0] {
			continue
		}
		var held *election.HeldError
		if !errors.As(err, &held) {
			t.Errorf("contender %d: got %v, want *HeldError", i, err)
			continue
		}
		if held.Holder != w.Holder || held.Epoch != w.Epoch || !held.Since.Equal(w.AcquiredAt) {
			t.Errorf("contender %d: election.HeldError = %+v, want holder %v epoch %d since %v", i, held, w.Holder, w.Epoch, w.AcquiredAt)
		}
	}
}

func TestBlobLock_Epochs_StrictlyIncreaseWithoutOverlap(t *testing.T) {
	t.Parallel()
	c := newTestContainer(t, nil, nil)
	const (
		contenders   = 5
		acquisitions = 50
	)
	type tenure struct {
		who        int
		epoch      int64
		start, end time.Time // after Acquire returned .. before Release was called
	}
	var (
		mu       sync.Mutex
		tenures  []tenure
		failures []error
		count    atomic.Int32
		wg       sync.WaitGroup
		ctx      = t.Context()
	)
	for w := range contenders {
		lk := newTestBlobLockOn(t, c)
		id := electiontest.Holder(w)
		wg.Go(func() {
			for count.Load() < acquisitions {
				l, err := lk.Acquire(ctx, id)
				if held := (*election.HeldError)(nil); errors.As(err, &held) {
					continue
				}
				start := time.Now()
				if err == nil && l.Epoch%3 == 0 {
					err = lk.Renew(ctx, l)
				}
				end := time.Now()
				if err == nil {
					err = lk.Release(ctx, l)
				}
				mu.Lock()
				if err != nil {
					failures = append(failures, fmt.Errorf("contender %d: %w", w, err))
					mu.Unlock()
					return
				}
				tenures = append(tenures, tenure{w, l.Epoch, start, end})
				mu.Unlock()
				count.Add(1)
				// A contender that just released does not contend again at once (in production
				// the next trigger comes later); without this pause it would usually win again.
				time.Sleep(rand.N(20 * time.Millisecond))
			}
		})
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("unexpected failures: %v", failures)
	}
	if len(tenures) < acquisitions {
		t.Fatalf("%d acquisitions, want at least %d", len(tenures), acquisitions)
	}
	slices.SortFunc(tenures, func(a, b tenure) int { return a.start.Compare(b.start) })
	holders := map[int]int{}
	for i, cur := range tenures {
		holders[cur.who]++
		if i == 0 {
			continue
		}
		prev := tenures[i-1]
		if cur.epoch <= prev.epoch {
			t.Errorf("acquisition %d has epoch %d after epoch %d: want strictly increasing", i, cur.epoch, prev.epoch)
		}
		if cur.start.Before(prev.end) {
			t.Errorf("epoch %d (contender %d) started %s before epoch %d (contender %d) released",
				cur.epoch, cur.who, prev.end.Sub(cur.start), prev.epoch, prev.who)
		}
	}
	t.Logf("acquisitions per contender: %v", holders)
	if len(holders) < 2 {
		t.Errorf("only contenders %v ever won, want the lease to change hands", holders)
	}
}

func TestBlobLock_Crash_NoOneAcquiresBeforeExpiry(t *testing.T) {
	t.Parallel()
	c := newTestContainer(t, nil, nil)
	crashed, next := newTestBlobLockOn(t, c), newTestBlobLockOn(t, c)
	ctx := t.Context()

	sent := time.Now()
	la, err := crashed.Acquire(ctx, electiontest.Holder(1))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	acquired := time.Now()
	// The holder "crashes": it never renews or releases.

	var lb election.Lease
	tries := 0
	for deadline := acquired.Add(testBlobLockDuration + 5*time.Second); ; {
		if time.Now().After(deadline) {
			t.Fatalf("no one acquired within %s of the crash", testBlobLockDuration+5*time.Second)
		}
		tries++
		l, err := next.Acquire(ctx, electiontest.Holder(2))
		if err == nil {
			lb = l
			break
		}
		var held *election.HeldError
		if !errors.As(err, &held) {
			t.Fatalf("contender: %v", err)
		}
		if held.Holder != la.Holder || held.Epoch != la.Epoch {
			t.Errorf("HeldError = %+v, want the crashed holder %v epoch %d", held, la.Holder, la.Epoch)
		}
		time.Sleep(200 * time.Millisecond) // the contender's retry cadence, not a wait for a condition
	}
	won := time.Now()
	// Storage cannot hand the lease on before it expires: the winning call returned at least
	// a full duration after the crashed holder's acquire was sent (5 ms for timer granularity).
	if d := won.Sub(sent); d < testBlobLockDuration-5*time.Millisecond {
		t.Errorf("acquired %s after the crashed holder's acquire, want no earlier than its %s expiry", d, testBlobLockDuration)
	}
	if d := won.Sub(acquired); d > testBlobLockDuration+2*time.Second {
		t.Errorf("acquired %s after the crash, want within duration + 2s", d)
	}
	if tries < 2 {
		t.Errorf("contender won on try %d, want it refused while the lease was live", tries)
	}
	if lb.Epoch != la.Epoch+1 {
		t.Errorf("epoch after expiry = %d, want %d", lb.Epoch, la.Epoch+1)
	}
	if lb.PreviousHolder != la.Holder || !lb.PreviousReleasedAt.IsZero() {
		t.Errorf("lease after expiry: previous holder %v released at %v, want %v and no release (it lapsed)",
			lb.PreviousHolder, lb.PreviousReleasedAt, la.Holder)
	}
	if err := crashed.Renew(ctx, la); !errors.Is(err, election.ErrLeaseLost) {
		t.Errorf("crashed holder's late renewal: got %v, want ErrLeaseLost", err)
	}
}

func TestBlobLock_Release_NextContenderWinsAtOnce(t *testing.T) {
	t.Parallel()
	c := newTestContainer(t, nil, nil)
	a, b := newTestBlobLockOn(t, c), newTestBlobLockOn(t, c)
	ctx := t.Context()
	for round := range 3 {
		la, err := a.Acquire(ctx, electiontest.Holder(1))
		if err != nil {
			t.Fatalf("round %d: a.Acquire: %v", round, err)
		}
		if _, err := b.Acquire(ctx, electiontest.Holder(2)); !errors.As(err, new(*election.HeldError)) {
			t.Fatalf("round %d: b.Acquire while a holds: got %v, want *HeldError", round, err)
		}
		if err := a.Release(ctx, la); err != nil {
			t.Fatalf("round %d: Release: %v", round, err)
		}
		lb, err := b.Acquire(ctx, electiontest.Holder(2))
		if err != nil {
			t.Fatalf("round %d: b.Acquire right after release: %v", round, err)
		}
		if lb.Epoch != la.Epoch+1 {
			t.Errorf("round %d: epoch %d after %d", round, lb.Epoch, la.Epoch)
		}
		if err := b.Release(ctx, lb); err != nil {
			t.Fatalf("round %d: b.Release: %v", round, err)
		}
	}
}

// acquiredBehindFaults returns a lock whose calls go through ft, with SDK retries off (the
// BlobLock's own retry loop must absorb the faults) and a 1 s first try, and the lease it
// acquired.
func acquiredBehindFaults(t *testing.T, ft *testFaultTransport) (*BlobLock, election.Lease) {
	t.Helper()
	c := newTestContainer(t, ft, &policy.RetryOptions{MaxRetries: -1})
	lk, err := NewBlobLock(c, "leader", BlobLockOptions{Duration: testBlobLockDuration, AttemptTimeout: time.Second, Logger: quietTestLogger})
	if err != nil {
		t.Fatal(err)
	}
	l, err := lk.Acquire(t.Context(), electiontest.Holder(1))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return lk, l
}

func TestBlobLock_Renew_RetriesTransientFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		faults []int
	}{
		{"server busy, reset, internal error", []int{503, faultReset, 500}},
		{"a try that hangs past its attempt timeout", []int{faultHang}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ft := newTestFaultTransport()
			lk, l := acquiredBehindFaults(t, ft)
			ft.setRule(failFirstRenewals(tt.faults...))
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			if err := lk.Renew(ctx, l); err != nil {
				t.Fatalf("Renew through %d faults: %v", len(tt.faults), err)
			}
			if got := ft.faults.Load(); got != int64(len(tt.faults)) {
				t.Errorf("%d faults injected, want %d", got, len(tt.faults))
			}
			if got := ft.renewsPassed.Load(); got != 1 {
				t.Errorf("%d renewals reached storage, want 1", got)
			}
		})
	}
}

// TestBlobLock_Renew_SlowStore: when every answer takes longer than AttemptTimeout (storage
// saturated by the run's own workers), the retries' growing timeouts let one renewal through
// within the budget instead of cutting every try short.
func TestBlobLock_Renew_SlowStore(t *testing.T) {
	t.Parallel()
	ft := newTestFaultTransport()
	ft.slowBy = 1600 * time.Millisecond
	lk, l := acquiredBehindFaults(t, ft)
	ft.setRule(func(req *http.Request) int {
		if isTestRenewRequest(req) {
			return faultSlow
		}
		return faultNone
	})
	// The leader's budget for one renewal: the lease less its safety margin, counted from now.
	ctx, cancel := context.WithTimeout(t.Context(), testBlobLockDuration-testBlobLockDuration/6)
	defer cancel()
	if err := lk.Renew(ctx, l); err != nil {
		t.Fatalf("Renew against a store answering in %s (attempt timeout 1s): %v", ft.slowBy, err)
	}
	if got := ft.renewsPassed.Load(); got < 1 {
		t.Errorf("%d renewals answered, want at least 1", got)
	}
}

func TestBlobLock_Acquire_LostResponses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		lose    int  // acquire responses to lose (-1: all)
		wantErr bool // Acquire gives up
	}{
		{"one lost response is retried with the same lease ID", 1, false},
		{"every response lost: give up and hand the lease back", -1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ft := newTestFaultTransport()
			c := newTestContainer(t, ft, &policy.RetryOptions{MaxRetries: -1})
			lk, err := NewBlobLock(c, "leader", BlobLockOptions{Duration: testBlobLockDuration, AttemptTimeout: time.Second, Logger: quietTestLogger})
			if err != nil {
				t.Fatal(err)
			}
			// Create the blob first so that the faults hit only the lease acquisition.
			if err := lk.create(t.Context(), true); err != nil {
				t.Fatal(err)
			}
			var lost atomic.Int32
			ft.setRule(func(req *http.Request) int {
				if testLeaseAction(req) == "acquire" && (tt.lose < 0 || int(lost.Add(1)) <= tt.lose) {
					return faultLost
				}
				return faultNone
			})
			l, err := lk.Acquire(t.Context(), electiontest.Holder(1))
			other := newTestBlobLockOn(t, newTestContainerAlias(t, c))
			if !tt.wantErr {
				if err != nil {
					t.Fatalf("Acquire after a lost response: %v", err)
				}
				if l.Epoch != 1 {
					t.Errorf("epoch = %d, want 1", l.Epoch)
				}
				if err := lk.Renew(t.Context(), l); err != nil {
					t.Errorf("Renew of the retried acquisition: %v (the retry must reuse the lease ID)", err)
				}
				return
			}
			if err == nil || errors.As(err, new(*election.HeldError)) {
				t.Fatalf("Acquire with every response lost: got %v, lease %+v; want a gave-up error", err, l)
			}
			if _, err := other.Acquire(t.Context(), electiontest.Holder(2)); err != nil {
				t.Errorf("next contender after the give-up: %v, want the silently granted lease handed back", err)
			}
		})
	}
}

// A holder record whose every answer is lost may still have taken effect. On the read-first
// path the lock reads the record back under its lease: its own record (its holder, its
// acquired-at, the next epoch) is the one it leads under. When it cannot read it back either,
// storage may show the new epoch and holder although Acquire failed and nobody leads under it:
// the lock says so in its log (the epoch and holder it tried to record), then gives the lease
// back.
func TestBlobLock_Acquire_RecordLostIsReadBackOrLoggedAsAbandoned(t *testing.T) {
	t.Parallel()
	for _, failReads := range []bool{false, true} {
		t.Run(fmt.Sprintf("failReads=%v", failReads), func(t *testing.T) {
			t.Parallel()
			ft := newTestFaultTransport()
			c := newTestContainer(t, ft, &policy.RetryOptions{MaxRetries: -1})
			var logged strings.Builder
			var mu sync.Mutex
			lk, err := NewBlobLock(c, "leader", BlobLockOptions{Duration: testBlobLockDuration, AttemptTimeout: time.Second,
				Logger: slog.New(slog.NewJSONHandler(lockedWriter{&mu, &logged}, nil))})
			if err != nil {
				t.Fatal(err)
			}
			if err := lk.create(t.Context(), true); err != nil {
				t.Fatal(err)
			}
			var recorded atomic.Bool
			ft.setRule(func(req *http.Request) int {
				switch {
				case req.Method == http.MethodPut && req.URL.Query().Get("comp") == "metadata":
					recorded.Store(true)
					return faultLost
				case req.Method == http.MethodHead && failReads && recorded.Load():
					return http.StatusInternalServerError
				}
				return faultNone
			})
			holder := electiontest.Holder(1)
			ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
			defer cancel()
			l, err := lk.Acquire(ctx, holder)
			switch {
			case !failReads && (err != nil || l.Epoch != 1):
				t.Fatalf("Acquire whose record's answers were all lost: %v, lease %+v; want epoch 1, read back", err, l)
			case failReads && err == nil:
				t.Fatal("Acquire that could not confirm its record succeeded; want an error")
			}
			st, err := newTestBlobLockOn(t, newTestContainerAlias(t, c)).State(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if st.Epoch != 1 || st.Holder != holder {
				t.Fatalf("storage shows epoch %d held by %v; want the lost record's epoch 1 by %v", st.Epoch, st.Holder, holder)
			}
			mu.Lock()
			defer mu.Unlock()
			want := []int64{}
			if failReads {
				want = []int64{1}
			}
			if got := abandonedEpochs(t, logged.String(), lk.name, holder); !slices.Equal(got, want) && len(got)+len(want) > 0 {
				t.Errorf("abandoned epochs in the log %v, want %v; the log:\n%s", got, want, logged.String())
			}
		})
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestBlobLock_Renew_GivesUpWithinBudget(t *testing.T) {
	t.Parallel()
	ft := newTestFaultTransport()
	// The SDK's default retries (0.8 s, 1.6 s, ... apart) stay on: the budget must bound them.
	lk := newTestBlobLockOn(t, newTestContainer(t, ft, nil))
	l, err := lk.Acquire(t.Context(), electiontest.Holder(1))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	ft.setRule(func(req *http.Request) int {
		if isTestRenewRequest(req) {
			return 503
		}
		return faultNone
	})
	const budget = 2 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), budget)
	defer cancel()
	start := time.Now()
	err = lk.Renew(ctx, l)
	took := time.Since(start)
	if err == nil || errors.Is(err, election.ErrLeaseLost) || !strings.Contains(err.Error(), "gave up") {
		t.Errorf("Renew against a failing store: got %v, want a gave-up error that is not ErrLeaseLost", err)
	}
	if took > budget+1500*time.Millisecond {
		t.Errorf("Renew took %s, want it to stop at its %s budget", took, budget)
	}
	ft.setRule(nil)
	if err := lk.Renew(t.Context(), l); err != nil {
		t.Errorf("Renew once storage recovered: %v (the lease should still be ours)", err)
	}
}

func TestBlobLock_AccessError_NamesTheSetting(t *testing.T) {
	t.Parallel()
	srv := azurite.Shared(t)
	tests := []struct {
		name       string
		connection string
		wantStatus int
		wantText   string
	}{
		{"wrong account key", strings.Replace(srv.ConnectionString(), config.AzuriteAccountKey,
			base64.StdEncoding.EncodeToString([]byte("not the azurite account key at all")), 1),
			http.StatusForbidden, "storage refused access"},
		{"account that does not exist", strings.ReplaceAll(srv.ConnectionString(), "devstoreaccount1", "nosuchaccount"),
			http.StatusNotFound, "storage account not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl, err := azblob.NewClientFromConnectionString(tt.connection, &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{
				Retry: policy.RetryOptions{MaxRetries: -1}}})
			if err != nil {
				t.Fatal(err)
			}
			c := cl.ServiceClient().NewContainerClient(azurite.UniqueName(t, "lease"))
			lk, err := NewBlobLock(c, "leader", BlobLockOptions{Duration: testBlobLockDuration, Setting: "MY_STORAGE", Logger: quietTestLogger})
			if err != nil {
				t.Fatal(err)
			}
			for op, call := range map[string]func() error{
				"Acquire": func() error { _, err := lk.Acquire(t.Context(), electiontest.Holder(1)); return err },
				"State":   func() error { _, err := lk.State(t.Context()); return err },
			} {
				err := call()
				var ae *AccessError
				if !errors.As(err, &ae) || ae.Status != tt.wantStatus ||
					!strings.Contains(err.Error(), tt.wantText) || !strings.Contains(err.Error(), "check the MY_STORAGE setting") {
					t.Errorf("%s: got %v, want *AccessError %d %q naming MY_STORAGE", op, err, tt.wantStatus, tt.wantText)
				}
			}
		})
	}
}

// A run's lease lives in a folder of the lease container ("runs/<run>"): each name is a lock
// of its own, with epochs of its own, beside the scheduler's lease; a name that could leave the
// container's folders is refused.
func TestBlobLock_NamesInFolders(t *testing.T) {
	c := newTestContainer(t, nil, nil)
	ctx := t.Context()
	for _, name := range []string{"baton-leader", "runs/a", "runs/b"} {
		lk, err := NewBlobLock(c, name, BlobLockOptions{Duration: testBlobLockDuration, Logger: quietTestLogger})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		l, err := lk.Acquire(ctx, electiontest.Holder(1))
		if err != nil {
			t.Fatalf("acquire %s: %v", name, err)
		}
		if l.Epoch != 1 {
			t.Errorf("%s: epoch %d, want 1 (a lock of its own)", name, l.Epoch)
		}
		t.Cleanup(func() { _ = lk.Release(context.Background(), l) })
	}
	for _, bad := range []string{"runs/../x", "runs//a", "/a", "runs/a b"} {
		if _, err := NewBlobLock(c, bad, BlobLockOptions{}); err == nil {
			t.Errorf("lease name %q accepted", bad)
		}
	}
}

// callKinds counts a lock's storage calls by kind: the lease's actions by name, "read" for a
// GetProperties, "record" for a metadata write.
type callKinds struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *callKinds) rule(req *http.Request) int {
	kind := testLeaseAction(req)
	switch {
	case kind != "":
	case req.Method == http.MethodHead:
		kind = "read"
	case req.URL.Query().Get("comp") == "metadata":
		kind = "record"
	default:
		kind = req.Method + " " + req.URL.Query().Get("comp")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[kind]++
	return faultNone
}

// take returns the counts since the last take.
func (c *callKinds) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

// A lock that released the lease itself knows the record it left: its next Acquire takes the
// lease and records the next epoch in two calls, without the read. When another holder came
// and went in between, the record sent beside the acquire is refused, the acquire's ETag says
// why, and the record is read under the lease (the epoch follows the other holder's, not the
// one it knew). A lock whose last sight was a live
// lease reads first, as before: one call when the lease is still held.
func TestBlobLock_Acquire_SkipsTheReadWhenItKnowsTheRecord(t *testing.T) {
	t.Parallel()
	ft := newTestFaultTransport()
	calls := &callKinds{n: map[string]int{}}
	ft.setRule(calls.rule)
	pipe := &orderedPipeline{next: ft, holdFor: 3 * time.Second} // storage serves the acquire first
	c := newTestContainer(t, pipe, nil)
	a, b := newTestBlobLockOn(t, c), newTestBlobLockOn(t, newTestContainerAlias(t, c))
	ctx := t.Context()
	acquire := func(lk *BlobLock, who int) election.Lease {
		t.Helper()
		l, err := lk.Acquire(ctx, electiontest.Holder(who))
		if err != nil {
			t.Fatalf("Acquire by %d: %v", who, err)
		}
		return l
	}
	release := func(lk *BlobLock, l election.Lease) {
		t.Helper()
		if err := lk.Release(ctx, l); err != nil {
			t.Fatalf("Release of epoch %d: %v", l.Epoch, err)
		}
	}

	release(a, acquire(a, 1)) // creates the blob; epoch 1
	calls.take()
	pipe.arm(acquireFirst)
	l2 := acquire(a, 1)
	pipe.overlapped()
	if got, want := calls.take(), map[string]int{"acquire": 1, "record": 1}; !maps.Equal(got, want) {
		t.Errorf("Acquire after its own release made calls %v, want %v", got, want)
	}
	if l2.Epoch != 2 || l2.PreviousHolder != electiontest.Holder(1) || l2.PreviousReleasedAt.IsZero() {
		t.Errorf("lease %+v: want epoch 2 after holder 1's release of epoch 1", l2)
	}
	release(a, l2)

	release(b, acquire(b, 2)) // epoch 3, which a has not seen
	calls.take()
	pipe.arm(acquireFirst)
	l4 := acquire(a, 1)
	pipe.overlapped()
	// The record sent beside the acquire bumps the epoch a knew, and is refused.
	if got, want := calls.take(), map[string]int{"acquire": 1, "read": 1, "record": 2}; !maps.Equal(got, want) {
		t.Errorf("Acquire after another holder came and went made calls %v, want %v", got, want)
	}
	if l4.Epoch != 4 || l4.PreviousHolder != electiontest.Holder(2) {
		t.Errorf("lease %+v: want epoch 4 after holder 2's epoch 3", l4)
	}
	release(a, l4)

	lb := acquire(b, 2) // epoch 5, held
	var held *election.HeldError
	if _, err := a.Acquire(ctx, electiontest.Holder(1)); !errors.As(err, &held) || held.Holder != electiontest.Holder(2) || held.Epoch != 5 {
		t.Fatalf("Acquire while another holds the lease: %v; want HeldError naming holder 2, epoch 5", err)
	}
	calls.take()
	if _, err := a.Acquire(ctx, electiontest.Holder(1)); !errors.As(err, &held) {
		t.Fatalf("second Acquire while another holds the lease: %v; want HeldError", err)
	}
	if got, want := calls.take(), map[string]int{"read": 1}; !maps.Equal(got, want) {
		t.Errorf("Acquire after seeing a live lease made calls %v, want %v (one read)", got, want)
	}
	release(b, lb)
}

// stepClock is a clock that moves one step at every reading, shared by the locks of a test: the
// times locks compare (a lease's start, an attempt's, a read's latency) come out the same on
// every run, however loaded the machine.
type stepClock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(c.step)
	return c.now
}

// advance moves the clock on by d.
func (c *stepClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// A lock whose last attempt lost a tie (the winner began its attempt within tieWindow of it)
// waits a head start of two round trips (twice its fastest recent read) before its next
// first call, so that the winner, the lease's last holder, which acquires without the read,
// goes first: here the last holder acquires during that wait, and the contender's attempt then
// costs one read that names the new holder and epoch. A loss to a lease taken long before (a
// late tick) leaves the next attempt to read at once; so does remembering nothing, and the
// last holder never waits. The wait is bounded.
func TestBlobLock_Acquire_GivesTheWinnerOfTheLastTieAHeadStart(t *testing.T) {
	t.Parallel()
	ft := newTestFaultTransport()
	calls := &callKinds{n: map[string]int{}}
	ft.setRule(calls.rule)
	c := newTestContainer(t, ft, nil)
	clock := &stepClock{now: time.Now(), step: time.Millisecond}
	newLock := func(c *container.Client) *BlobLock {
		lk, err := NewBlobLock(c, "leader", BlobLockOptions{Duration: testBlobLockDuration, Logger: quietTestLogger, Now: clock.Now})
		if err != nil {
			t.Fatalf("NewBlobLock: %v", err)
		}
		return lk
	}
	last, other := newLock(newTestContainerAlias(t, c)), newLock(c)
	ctx := t.Context()
	noWait := func(who string) func(context.Context, time.Duration) error {
		return func(_ context.Context, d time.Duration) error {
			t.Errorf("%s waited a head start of %s", who, d)
			return nil
		}
	}
	last.pause = noWait("the last holder")
	acquireLast := func() election.Lease {
		t.Helper()
		l, err := last.Acquire(ctx, electiontest.Holder(1))
		if err != nil {
			t.Fatalf("Acquire by the last holder: %v", err)
		}
		return l
	}
	releaseLast := func(l election.Lease) {
		t.Helper()
		if err := last.Release(ctx, l); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	held := func(err error, epoch int64) {
		t.Helper()
		var h *election.HeldError
		if !errors.As(err, &h) || h.Holder != electiontest.Holder(1) || h.Epoch != epoch {
			t.Fatalf("contender's Acquire: %v; want HeldError naming holder 1, epoch %d", err, epoch)
		}
	}

	l1 := acquireLast() // creates the blob; epoch 1
	other.pause = noWait("a lock that remembers nothing")
	_, err := other.Acquire(ctx, electiontest.Holder(2)) // began a few ticks after holder 1: a tie
	held(err, 1)
	releaseLast(l1)
	calls.take()

	var waited, floor time.Duration
	var l2 election.Lease
	other.pause = func(_ context.Context, d time.Duration) error {
		other.mu.Lock()
		waited, floor = d, other.reads.Low()
		other.mu.Unlock()
		if got := calls.take(); len(got) != 0 {
			t.Errorf("calls before the head start: %v, want none", got)
		}
		l2 = acquireLast() // the last holder, fired by the same tick, acquires meanwhile
		return nil
	}
	_, err = other.Acquire(ctx, electiontest.Holder(2))
	held(err, 2)
	if l2.Epoch != 2 || floor != clock.step || waited != 2*floor {
		t.Errorf("head start %s with a read floor of %s (the last holder's epoch %d); want twice the clock's step %s, epoch 2",
			waited, floor, l2.Epoch, clock.step)
	}
	if got, want := calls.take(), map[string]int{"read": 1}; !maps.Equal(got, want) {
		t.Errorf("the contender's calls after the head start: %v, want %v", got, want)
	}

	// Not a tie: the lease was taken a second before the contender's attempt (a late tick).
	releaseLast(l2)
	l3 := acquireLast()
	clock.advance(time.Second)
	waited = 0
	other.pause = func(_ context.Context, d time.Duration) error { waited = d; return nil }
	_, err = other.Acquire(ctx, electiontest.Holder(2)) // still after the tie above: it waits
	held(err, 3)
	if waited <= 0 {
		t.Error("the attempt after a lost tie did not wait")
	}
	other.pause = noWait("a lock that lost to a lease taken long before")
	calls.take()
	_, err = other.Acquire(ctx, electiontest.Holder(2))
	held(err, 3)
	if got, want := calls.take(), map[string]int{"read": 1}; !maps.Equal(got, want) {
		t.Errorf("the contender's calls on a lease held since long before: %v, want %v", got, want)
	}
	releaseLast(l3)

	// The wait is at most tieWindow, however slow the reads were; the winner itself never waits.
	other.mu.Lock()
	other.tiedWith, other.reads = electiontest.Holder(1), latency.Floor{}
	other.mu.Unlock()
	other.observeRead(time.Hour)
	if got := other.headStart(electiontest.Holder(2)); got != tieWindow {
		t.Errorf("head start after hour-long reads: %s, want %s", got, tieWindow)
	}
	if got := other.headStart(electiontest.Holder(1)); got != 0 {
		t.Errorf("head start of the holder the tie was lost to: %s, want none", got)
	}
}
