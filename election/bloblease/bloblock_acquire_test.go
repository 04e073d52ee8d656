package bloblease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/batonfn/baton/election"
	"github.com/batonfn/baton/election/electiontest"
	"github.com/batonfn/baton/internal/azclient"
	"github.com/batonfn/baton/internal/azurite"
	"github.com/batonfn/baton/ledger"
	"github.com/google/uuid"
)

// callLog is a per-call policy that names every storage request a client sends: read (a
// properties read), claim (a metadata write without a lease ID), mark (a metadata write under
// the lease), acquire, renew, release, create-container, create-blob.
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (c *callLog) Do(req *policy.Request) (*http.Response, error) {
	r := req.Raw()
	name := r.Method
	q := r.URL.Query()
	switch {
	case r.Method == http.MethodHead || r.Method == http.MethodGet:
		name = "read"
	case q.Get("comp") == "metadata" && testHeader(r, "x-ms-lease-id") == "":
		name = "claim"
	case q.Get("comp") == "metadata":
		name = "mark"
	case q.Get("comp") == "lease":
		name = testLeaseAction(r)
	case q.Get("restype") == "container":
		name = "create-container"
	case r.Method == http.MethodPut:
		name = "create-blob"
	}
	c.mu.Lock()
	c.calls = append(c.calls, name)
	c.mu.Unlock()
	return req.Next()
}

// take returns the calls logged since the last take.
func (c *callLog) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = nil
	return out
}

// loggedLock is a BlobLock over the blob "leader" in the container named name, with a client
// of its own (as a separate process has) that logs its calls.
func loggedLock(t *testing.T, name string) (*BlobLock, *callLog) {
	t.Helper()
	log := &callLog{}
	cl, err := azclient.Blob(azurite.Shared(t).Storage(), &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{
		PerCallPolicies: []policy.Policy{log}}})
	if err != nil {
		t.Fatal(err)
	}
	return newTestBlobLockOn(t, cl.ServiceClient().NewContainerClient(name)), log
}

// TestBlobLock_Calls: the storage calls of each path. The last winner takes the lease again in
// two calls (claim, acquire); a contender that last saw the lease held reads first: one call
// when it is still held, three (read, claim, acquire) when it takes over.
func TestBlobLock_Calls(t *testing.T) {
	t.Parallel()
	c := newTestContainer(t, nil, nil)
	if _, err := c.Create(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	a, alog := loggedLock(t, containerName(c))
	b, blog := loggedLock(t, containerName(c))
	step := func(what string, log *callLog, want ...string) {
		t.Helper()
		if got := log.take(); !slices.Equal(got, want) {
			t.Errorf("%s: calls %v, want %v", what, got, want)
		}
	}

	la, err := a.Acquire(ctx, electiontest.Holder(1))
	if err != nil {
		t.Fatalf("first Acquire: %v", err)
	}
	step("first use", alog, "read", "create-blob", "read", "claim", "acquire")
	if err := a.Release(ctx, la); err != nil {
		t.Fatal(err)
	}
	step("release", alog, "mark", "release")

	la2, err := a.Acquire(ctx, electiontest.Holder(1))
	if err != nil {
		t.Fatalf("the last winner again: %v", err)
	}
	step("the last winner again", alog, "claim", "acquire")
	if la2.Epoch != la.Epoch+1 {
		t.Errorf("epoch %d after %d, want one more", la2.Epoch, la.Epoch)
	}

	_, err = b.Acquire(ctx, electiontest.Holder(2))
	var held *election.HeldError
	if !errors.As(err, &held) || held.Holder != electiontest.Holder(1) || held.Epoch != la2.Epoch {
		t.Fatalf("contender while held: got %v, want HeldError naming holder 1 at epoch %d", err, la2.Epoch)
	}
	step("a contender with no knowledge, lease held", blog, "read")
	if _, err := b.Acquire(ctx, electiontest.Holder(2)); !errors.As(err, &held) {
		t.Fatalf("contender while held again: got %v, want HeldError", err)
	}
	step("a contender that saw it held, still held", blog, "read")

	if err := a.Release(ctx, la2); err != nil {
		t.Fatal(err)
	}
	alog.take()
	lb, err := b.Acquire(ctx, electiontest.Holder(2))
	if err != nil {
		t.Fatalf("take over after release: %v", err)
	}
	step("take over after a release", blog, "read", "claim", "acquire")
	if lb.Epoch != la2.Epoch+1 {
		t.Errorf("epoch %d after %d, want one more", lb.Epoch, la2.Epoch)
	}

	// The earlier winner's knowledge is stale now: its claim is refused, it reads and finds
	// the lease held.
	if _, err := a.Acquire(ctx, electiontest.Holder(1)); !errors.As(err, &held) || held.Holder != electiontest.Holder(2) {
		t.Fatalf("earlier winner while held: got %v, want HeldError naming holder 2", err)
	}
	step("an earlier winner, lease held", alog, "claim", "read")

	// The state is one read.
	blog.take()
	st, err := b.State(ctx)
	if err != nil || !st.Held || st.Holder != electiontest.Holder(2) || st.Epoch != lb.Epoch {
		t.Errorf("State = %+v, %v; want held by holder 2 at epoch %d", st, err, lb.Epoch)
	}
	step("State", blog, "read")
}

// TestBlobLock_Race_LastWinnerTwoCalls: contenders race on a free lease, one of them the last
// winner. Whoever wins, exactly one does, the losers name it, and when the last winner wins it
// made two calls.
func TestBlobLock_Race_LastWinnerTwoCalls(t *testing.T) {
	t.Parallel()
	c := newTestContainer(t, nil, nil)
	ctx := t.Context()
	const n = 4
	locks := make([]*BlobLock, n)
	logs := make([]*callLog, n)
	for i := range n {
		locks[i], logs[i] = loggedLock(t, containerName(c))
	}
	last := -1
	twoCalls := 0
	for round := range 6 {
		type result struct {
			l   election.Lease
			err error
		}
		res := make([]result, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			logs[i].take()
			wg.Go(func() {
				<-start
				res[i].l, res[i].err = locks[i].Acquire(ctx, electiontest.Holder(i))
			})
		}
		close(start)
		wg.Wait()
		won := -1
		for i, r := range res {
			switch {
			case r.err == nil && won >= 0:
				t.Fatalf("round %d: contenders %d and %d both won", round, won, i)
			case r.err == nil:
				won = i
			case !errors.As(r.err, new(*election.HeldError)):
				t.Fatalf("round %d: contender %d: %v", round, i, r.err)
			}
		}
		if won < 0 {
			t.Fatalf("round %d: no winner", round)
		}
		calls := logs[won].take()
		if won == last {
			if !slices.Equal(calls, []string{"claim", "acquire"}) {
				t.Errorf("round %d: the last winner won with calls %v, want [claim acquire]", round, calls)
			}
			twoCalls++
		}
		for i, r := range res {
			var held *election.HeldError
			if errors.As(r.err, &held) && (held.Holder != electiontest.Holder(won) || held.Epoch != res[won].l.Epoch) {
				t.Errorf("round %d: contender %d: HeldError = %+v, want holder %d at epoch %d", round, i, held, won, res[won].l.Epoch)
			}
		}
		if err := locks[won].Release(ctx, res[won].l); err != nil {
			t.Fatal(err)
		}
		last = won
	}
	t.Logf("the last winner won again in %d of 5 rounds", twoCalls)
}

// TestBlobLock_Acquire_LostClaimResponse: a claim that reached storage but whose response was
// lost is recognised on the retry (the retry is refused: the record is already ours), and the
// attempt goes on to take the lease at the epoch it claimed.
func TestBlobLock_Acquire_LostClaimResponse(t *testing.T) {
	t.Parallel()
	ft := newTestFaultTransport()
	c := newTestContainer(t, ft, &policy.RetryOptions{MaxRetries: -1})
	lk, err := NewBlobLock(c, "leader", BlobLockOptions{Duration: testBlobLockDuration, AttemptTimeout: time.Second, Logger: quietTestLogger})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	l1, err := lk.Acquire(ctx, electiontest.Holder(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Release(ctx, l1); err != nil {
		t.Fatal(err)
	}
	var lost atomic.Int32
	ft.setRule(func(req *http.Request) int {
		if req.URL.Query().Get("comp") == "metadata" && testHeader(req, "x-ms-lease-id") == "" && lost.Add(1) == 1 {
			return faultLost
		}
		return faultNone
	})
	l2, err := lk.Acquire(ctx, electiontest.Holder(1))
	if err != nil {
		t.Fatalf("Acquire after a lost claim response: %v", err)
	}
	if l2.Epoch != l1.Epoch+1 {
		t.Errorf("epoch %d after %d, want one more (the claim that landed is the one taken)", l2.Epoch, l1.Epoch)
	}
	if got := ft.faults.Load(); got != 1 {
		t.Errorf("%d faults injected, want 1", got)
	}
	other := newTestBlobLockOn(t, newTestContainerAlias(t, c))
	if _, err := other.Acquire(ctx, electiontest.Holder(2)); !errors.As(err, new(*election.HeldError)) {
		t.Errorf("another contender: got %v, want HeldError", err)
	}
	if err := lk.Renew(ctx, l2); err != nil {
		t.Errorf("Renew: %v", err)
	}
}

// claimOnly writes a claim for holder as a contender does before it takes the lease, and does
// not take it: a contender between its two calls, or one that crashed there.
func claimOnly(t *testing.T, c *container.Client, holder ledger.Holder) (leaseRecord, azcore.ETag) {
	t.Helper()
	lk := newTestBlobLockOn(t, c)
	rec, err := lk.read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	a := &attempt{b: lk, holder: holder, start: time.Now()}
	etag, err := a.claim(t.Context(), rec.Epoch+1, rec.ETag)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return leaseRecord{Holder: holder, Epoch: rec.Epoch + 1, AcquiredAt: a.start}, etag
}

// TestBlobLock_ClaimInFlight: a contender that reads another's claim before that claimant took
// the lease waits for it: when the claimant takes the lease, the contender gets HeldError
// naming it; when the claim stays untaken (its claimant crashed), the contender takes over.
func TestBlobLock_ClaimInFlight(t *testing.T) {
	t.Parallel()
	t.Run("the claimant takes the lease", func(t *testing.T) {
		t.Parallel()
		ft := newTestFaultTransport()
		c := newTestContainer(t, ft, nil)
		first := newTestBlobLockOn(t, c)
		l, err := first.Acquire(t.Context(), electiontest.Holder(1))
		if err != nil {
			t.Fatal(err)
		}
		if err := first.Release(t.Context(), l); err != nil {
			t.Fatal(err)
		}
		alias := newTestContainerAlias(t, c)
		claim, etag := claimOnly(t, alias, electiontest.Holder(2))
		// The claimant takes the lease as soon as the contender has read its claim once.
		var reads atomic.Int32
		var took atomic.Bool
		ft.setRule(func(req *http.Request) int {
			if (req.Method == http.MethodHead || req.Method == http.MethodGet) && reads.Add(1) == 2 {
				id := uuid.NewString()
				lc, _ := lease.NewBlobClient(alias.NewBlockBlobClient("leader"), &lease.BlobClientOptions{LeaseID: &id})
				_, err := lc.AcquireLease(context.Background(), int32(testBlobLockDuration/time.Second),
					&lease.BlobAcquireOptions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag}})
				took.Store(err == nil)
			}
			return faultNone
		})
		contender := newTestBlobLockOn(t, c)
		_, err = contender.Acquire(t.Context(), electiontest.Holder(3))
		var held *election.HeldError
		if !took.Load() {
			t.Fatal("the claimant did not take the lease")
		}
		if !errors.As(err, &held) || held.Holder != claim.Holder || held.Epoch != claim.Epoch {
			t.Errorf("contender: got %v, want HeldError naming the claimant at epoch %d", err, claim.Epoch)
		}
	})
	t.Run("the claimant crashed before taking the lease", func(t *testing.T) {
		t.Parallel()
		c := newTestContainer(t, nil, nil)
		first := newTestBlobLockOn(t, c)
		l, err := first.Acquire(t.Context(), electiontest.Holder(1))
		if err != nil {
			t.Fatal(err)
		}
		if err := first.Release(t.Context(), l); err != nil {
			t.Fatal(err)
		}
		claim, _ := claimOnly(t, c, electiontest.Holder(2))
		contender := newTestBlobLockOn(t, c)
		lc, err := contender.Acquire(t.Context(), electiontest.Holder(3))
		if err != nil {
			t.Fatalf("contender after an untaken claim: %v", err)
		}
		if lc.Epoch != claim.Epoch+1 {
			t.Errorf("epoch %d, want %d (above the untaken claim)", lc.Epoch, claim.Epoch+1)
		}
	})
}

// legacyAcquire is Acquire as Baton did it before claims (read the record, take the lease,
// then record holder and epoch+1 with If-Match on the ETag read), kept to test that deployed
// processes and this version share a lease blob safely during a rolling deploy. Release was the
// same then as now.
func legacyAcquire(ctx context.Context, b *BlobLock, holder ledger.Holder) (election.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, b.opts.Duration/3)
	defer cancel()
	id := uuid.NewString()
	lc, err := lease.NewBlobClient(b.blob, &lease.BlobClientOptions{LeaseID: &id})
	if err != nil {
		return election.Lease{}, err
	}
	start := b.opts.Now()
	var rec leaseRecord
	for created := false; ; {
		rec, err = b.read(ctx)
		switch {
		case err == nil:
			if leased(rec) {
				return election.Lease{}, b.heldError(ctx, rec, true)
			}
		case !created && isMissing(err):
			if err := b.create(ctx, errors.Is(err, errContainerNotFound)); err != nil {
				return election.Lease{}, err
			}
			created = true
			continue
		default:
			return election.Lease{}, err
		}
		err = b.do(ctx, "acquire", func(ctx context.Context) error {
			_, err := lc.AcquireLease(ctx, int32(b.opts.Duration/time.Second), nil)
			return err
		})
		switch {
		case err == nil:
		case errors.Is(err, errLeasePresent):
			return election.Lease{}, b.heldError(ctx, rec, false)
		default:
			b.releaseQuietly(lc)
			return election.Lease{}, err
		}
		break
	}
	l := election.Lease{ID: id, Holder: holder, AcquiredAt: start, Duration: b.opts.Duration}
	for try := 0; try < 2; try++ {
		if try > 0 {
			if rec, err = b.read(ctx); err != nil {
				break
			}
		}
		l.Epoch = rec.Epoch + 1
		md := encodeLeaseMetadata(holder, l.Epoch, start, time.Time{})
		etag := rec.ETag
		err = b.do(ctx, "record holder", func(ctx context.Context) error {
			_, err := b.blob.SetMetadata(ctx, md, &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{
				LeaseAccessConditions:    &blob.LeaseAccessConditions{LeaseID: &id},
				ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag}}})
			return err
		})
		if !errors.Is(err, errConditionNotMet) {
			break
		}
	}
	if err != nil {
		b.releaseQuietly(lc)
		return election.Lease{}, err
	}
	b.confirm(id, start)
	return l, nil
}

// TestBlobLock_UpgradeFromEarlierBaton: a lease blob an earlier Baton wrote (its epochs fence
// the runs it planned) is used as it is: the first acquisition by this version continues its
// epochs, and an earlier process holding it is named in HeldError.
func TestBlobLock_UpgradeFromEarlierBaton(t *testing.T) {
	t.Parallel()
	c := newTestContainer(t, nil, nil)
	ctx := t.Context()
	old, now := newTestBlobLockOn(t, c), newTestBlobLockOn(t, c)
	oldHolder := ledger.Holder{App: "baton-test", Instance: "old-version", PID: 7}
	var last election.Lease
	for range 3 {
		l, err := legacyAcquire(ctx, old, oldHolder)
		if err != nil {
			t.Fatalf("earlier version: %v", err)
		}
		last = l
		if err := old.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	l, err := legacyAcquire(ctx, old, oldHolder)
	if err != nil {
		t.Fatal(err)
	}
	_, err = now.Acquire(ctx, electiontest.Holder(1))
	var held *election.HeldError
	if !errors.As(err, &held) || held.Holder != oldHolder || held.Epoch != last.Epoch+1 {
		t.Fatalf("while the earlier version holds it: got %v, want HeldError naming it at epoch %d", err, last.Epoch+1)
	}
	if err := old.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	ln, err := now.Acquire(ctx, electiontest.Holder(1))
	if err != nil {
		t.Fatalf("first acquisition by this version: %v", err)
	}
	if ln.Epoch != l.Epoch+1 {
		t.Errorf("epoch %d, want %d: above every epoch the earlier version recorded", ln.Epoch, l.Epoch+1)
	}
	st, err := now.State(ctx)
	if err != nil || !st.Held || st.Holder != electiontest.Holder(1) || st.Epoch != ln.Epoch {
		t.Errorf("State = %+v, %v", st, err)
	}
	if err := now.Release(ctx, ln); err != nil {
		t.Fatal(err)
	}
	// And back: an earlier process (a rollback) continues above this version's epochs.
	lo, err := legacyAcquire(ctx, old, oldHolder)
	if err != nil || lo.Epoch != ln.Epoch+1 {
		t.Errorf("earlier version after this one: lease %+v, %v; want epoch %d", lo, err, ln.Epoch+1)
	}
}

// TestBlobLock_MixedVersions_OneHolderAtATime: during a rolling deploy, processes of the
// earlier version and of this one contend for the same lease blob. Each contender takes the
// lease a fixed number of times (the earlier version, which takes the lease in its second call,
// wins most races, so without a quota it could take them all); over all of them each tenure
// starts after the previous one ended and has a higher epoch.
func TestBlobLock_MixedVersions_OneHolderAtATime(t *testing.T) {
	t.Parallel()
	c := newTestContainer(t, nil, nil)
	const (
		contenders = 4 // even: earlier version, odd: this one
		quota      = 10
	)
	type tenure struct {
		who        int
		epoch      int64
		start, end time.Time
	}
	var (
		mu       sync.Mutex
		tenures  []tenure
		failures []error
		wg       sync.WaitGroup
		ctx      = t.Context()
	)
	for w := range contenders {
		lk := newTestBlobLockOn(t, c)
		id := electiontest.Holder(w)
		acquire := lk.Acquire
		if w%2 == 0 {
			acquire = func(ctx context.Context, h ledger.Holder) (election.Lease, error) { return legacyAcquire(ctx, lk, h) }
		}
		wg.Go(func() {
			for won := 0; won < quota; {
				l, err := acquire(ctx, id)
				if errors.As(err, new(*election.HeldError)) {
					// Tries come with triggers, not in a tight loop: without a pause the earlier
					// version, which takes the lease in its second call, would win nearly every race.
					time.Sleep(rand.N(5 * time.Millisecond))
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
				won++
				time.Sleep(rand.N(20 * time.Millisecond)) // the next trigger comes later, as in production
			}
		})
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("unexpected failures: %v", failures)
	}
	slices.SortFunc(tenures, func(a, b tenure) int { return a.start.Compare(b.start) })
	// How often the versions alternated: each change is a takeover across versions.
	changes := 0
	for i, cur := range tenures {
		if i > 0 && cur.who%2 != tenures[i-1].who%2 {
			changes++
		}
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
	t.Logf("%d acquisitions, %d of them by the other version than the one before", len(tenures), changes)
	if len(tenures) != contenders*quota {
		t.Errorf("%d acquisitions, want %d", len(tenures), contenders*quota)
	}
}

// TestBlobLock_EarlierBatonTakesOverAClaim: an earlier Baton (which takes the lease first and
// records itself afterwards) takes the lease between a contender's claim and its acquire. The
// contender's HeldError waits for the earlier process's record rather than naming its own
// claim.
func TestBlobLock_EarlierBatonTakesOverAClaim(t *testing.T) {
	t.Parallel()
	ft := newTestFaultTransport()
	c := newTestContainer(t, ft, nil)
	contender := newTestBlobLockOn(t, c)
	if err := contender.create(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	alias := newTestContainerAlias(t, c)
	lb := alias.NewBlockBlobClient("leader")
	old := ledger.Holder{App: "baton-test", Instance: "old-version", PID: 7}
	oldID := uuid.NewString()
	var reads atomic.Int32
	ft.setRule(func(req *http.Request) int {
		ctx := context.Background()
		switch {
		case testLeaseAction(req) == "acquire":
			// The earlier process takes the lease over the claim...
			lc, _ := lease.NewBlobClient(lb, &lease.BlobClientOptions{LeaseID: &oldID})
			if _, err := lc.AcquireLease(ctx, int32(testBlobLockDuration/time.Second), nil); err != nil {
				t.Errorf("earlier process: acquire: %v", err)
			}
		case req.Method == http.MethodHead && reads.Add(1) == 3:
			// ...and records itself only by the contender's second read after losing.
			md := encodeLeaseMetadata(old, 2, time.Now(), time.Time{})
			if _, err := lb.SetMetadata(ctx, md, &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{
				LeaseAccessConditions: &blob.LeaseAccessConditions{LeaseID: &oldID}}}); err != nil {
				t.Errorf("earlier process: record: %v", err)
			}
		}
		return faultNone
	})
	_, err := contender.Acquire(t.Context(), electiontest.Holder(1))
	var held *election.HeldError
	if !errors.As(err, &held) || held.Holder != old || held.Epoch != 2 {
		t.Errorf("contender: got %v, want HeldError naming the earlier process at epoch 2", err)
	}
}
