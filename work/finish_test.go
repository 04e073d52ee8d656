package work_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/blobstore"
	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/work"
	"github.com/batonfn/baton/work/synthetic"
)

// completeRun records every result and done record of a synthetic run of n partitions
// without finishing it (as if every worker crashed right after its append).
func (f *fixture) completeRun(run string, n int) {
	f.t.Helper()
	f.createRun(run, synthetic.Params{Partitions: n})
	for i := range n {
		r := ledger.Result{Run: run, Index: i, Epoch: 1, OK: true, Attempts: 1,
			Output: fmt.Appendf(nil, `{"i":%d,"v":%d}`, i, i*i)}
		if err := f.store.PutResult(f.ctx, r); err != nil {
			f.t.Fatal(err)
		}
		if _, err := f.store.AppendDone(f.ctx, run, ledger.DoneStriped, 1, i); err != nil {
			f.t.Fatal(err)
		}
	}
}

// Twenty callers at once, five in each of four processes (workers), aggregate the run once.
func TestTryFinish_ConcurrentCallersAggregateOnce(t *testing.T) {
	const n, callers = 8, 20
	f := newFixture(t)
	f.completeRun("many", n)
	procs := []*work.Worker{f.w, f.newWorker(f.cfg), f.newWorker(f.cfg), f.newWorker(f.cfg)}
	wins := make([]bool, callers)
	errs := make([]error, callers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for k := range callers {
		wg.Go(func() {
			<-start
			wins[k], errs[k] = procs[k%len(procs)].TryFinish(f.ctx, "many")
		})
	}
	close(start)
	wg.Wait()
	won := 0
	for k := range callers {
		if errs[k] != nil {
			t.Errorf("caller %d: %v", k, errs[k])
		}
		if wins[k] {
			won++
		}
	}
	if won != 1 {
		t.Errorf("%d callers report finishing the run, want exactly 1", won)
	}
	checkSucceeded(t, f, "many", n)
}

func TestTryFinish_ReportClaims(t *testing.T) {
	const n = 4
	now := time.Date(2026, 11, 21, 2, 0, 0, 0, time.UTC)
	other := ledger.Holder{App: "other", Instance: "crashed", PID: 9}
	for _, tc := range []struct {
		name         string
		existing     *ledger.Report // written before TryFinish
		wantFinished bool
		wantAgg      int64
	}{
		{"no claim: this call aggregates", nil, true, 1},
		{"fresh claim by another worker: leave it", &ledger.Report{State: ledger.StateRunning, Created: now.Add(-work.DefaultStaleClaim / 2)}, false, 0},
		{"stale claim: take over", &ledger.Report{State: ledger.StateRunning, Created: now.Add(-work.DefaultStaleClaim - time.Second)}, true, 1},
		// A long aggregation renews its claim: its age counts from the last renewal.
		{"old claim renewed lately: leave it", &ledger.Report{State: ledger.StateRunning, Created: now.Add(-time.Hour),
			Renewed: now.Add(-work.DefaultStaleClaim / 2)}, false, 0},
		{"old claim, renewals stopped: take over", &ledger.Report{State: ledger.StateRunning, Created: now.Add(-time.Hour),
			Renewed: now.Add(-work.DefaultStaleClaim - time.Second)}, true, 1},
		{"released claim: take over at once", &ledger.Report{State: ledger.StateRunning}, true, 1},
		// The report's writer finished the run (it crashed between the two writes, or is
		// between them now): this call completes the manifest but did not finish the run.
		{"report written, manifest not final: settle", &ledger.Report{State: ledger.StatePartial, Succeeded: 3, Failed: 1,
			Partitions: n, Created: now.Add(-time.Hour)}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.setClock(now)
			f.completeRun("claims", n)
			if tc.existing != nil {
				r := *tc.existing
				r.Run, r.Job, r.Aggregator = "claims", synthetic.Name, other
				if _, err := f.store.ClaimReport(f.ctx, r); err != nil {
					t.Fatal(err)
				}
			}
			done, err := f.w.TryFinish(f.ctx, "claims")
			if err != nil || done != tc.wantFinished {
				t.Fatalf("TryFinish = %v, %v; want %v, nil", done, err, tc.wantFinished)
			}
			if got := f.job.aggregateCalls.Load(); got != tc.wantAgg {
				t.Errorf("Aggregate ran %d times, want %d", got, tc.wantAgg)
			}
			m := f.manifest("claims")
			rep, _ := f.report("claims")
			switch {
			case tc.existing != nil && tc.existing.State.Final(): // settled from the written report
				if m.State != ledger.StatePartial || m.Succeeded != 3 || m.Failed != 1 || !m.Finished.Equal(now.Add(-time.Hour)) {
					t.Errorf("manifest %s %d/%d finished %v: want the report's partial 3/1 and its time", m.State, m.Succeeded, m.Failed, m.Finished)
				}
			case !tc.wantFinished:
				if m.State.Final() || rep.State.Final() {
					t.Errorf("manifest %s, report %s: want both left in progress", m.State, rep.State)
				}
			default:
				if m.State != ledger.StateSucceeded || rep.State != ledger.StateSucceeded || rep.Aggregator != f.w.Holder() || !rep.Created.Equal(now) {
					t.Errorf("manifest %s, report %s by %v at %v: want succeeded, aggregated by this worker at %v",
						m.State, rep.State, rep.Aggregator, rep.Created, now)
				}
			}
			// Whatever happened, a second call changes nothing.
			if done, err := f.w.TryFinish(f.ctx, "claims"); done || err != nil {
				t.Errorf("second TryFinish = %v, %v; want false, nil", done, err)
			}
		})
	}
}

func TestTryFinish_AggregateErrors(t *testing.T) {
	const n = 3
	t.Run("transient error releases the claim", func(t *testing.T) {
		f := newFixture(t)
		f.completeRun("agg", n)
		f.job.beforeAggregate = func(_ context.Context, call int64) error {
			if call == 1 {
				return errors.New("storage hiccup")
			}
			return nil
		}
		if done, err := f.w.TryFinish(f.ctx, "agg"); done || err == nil {
			t.Fatalf("first TryFinish = %v, %v; want false and the error", done, err)
		}
		rep, _ := f.report("agg")
		if rep.State.Final() || !rep.Created.IsZero() {
			t.Errorf("report after the failure: %s created %v; want an in-progress claim released (zero time)", rep.State, rep.Created)
		}
		if done, err := f.w.TryFinish(f.ctx, "agg"); !done || err != nil {
			t.Fatalf("retry = %v, %v; want true, nil", done, err)
		}
		if m := f.manifest("agg"); m.State != ledger.StateSucceeded {
			t.Errorf("state %s, want succeeded", m.State)
		}
	})
	t.Run("permanent error fails the run", func(t *testing.T) {
		f := newFixture(t)
		f.completeRun("agg", n)
		f.job.beforeAggregate = func(context.Context, int64) error { return work.Permanent(errors.New("cannot combine")) }
		if done, err := f.w.TryFinish(f.ctx, "agg"); !done || err != nil {
			t.Fatalf("TryFinish = %v, %v; want true, nil (the run ends failed)", done, err)
		}
		m := f.manifest("agg")
		rep, _ := f.report("agg")
		if m.State != ledger.StateFailed || rep.State != ledger.StateFailed || m.Reason == "" {
			t.Errorf("manifest %s (%q), report %s: want failed with a reason", m.State, m.Reason, rep.State)
		}
	})
}

func TestTryFinish_ByListingIgnoresALostDoneRecord(t *testing.T) {
	const n = 3
	f := newFixture(t)
	f.completeRun("lost", n-1) // creates the manifest for n-1; replace with n below
	if _, err := f.store.UpdateManifest(f.ctx, "lost", 1, func(m *ledger.Manifest) error { m.Partitions = n; return nil }); err != nil {
		t.Fatal(err)
	}
	// The last partition's worker crashed after its result, on the message's last delivery.
	if err := f.store.PutResult(f.ctx, ledger.Result{Run: "lost", Index: n - 1, Epoch: 1, OK: true, Attempts: 3,
		Output: []byte(`{"i":2,"v":4}`)}); err != nil {
		t.Fatal(err)
	}
	if done, err := f.w.TryFinish(f.ctx, "lost"); done || err != nil {
		t.Fatalf("TryFinish = %v, %v; want false (a done record is missing)", done, err)
	}
	if done, err := f.w.TryFinishByListing(f.ctx, "lost"); !done || err != nil {
		t.Fatalf("TryFinishByListing = %v, %v; want true", done, err)
	}
	checkSucceeded(t, f, "lost", n)
}

func TestTryFinish_ZeroPartitions(t *testing.T) {
	f := newFixture(t)
	f.createRun("empty", synthetic.Params{Partitions: 1}, func(m *ledger.Manifest) { m.Partitions = 0 })
	if done, err := f.w.TryFinish(f.ctx, "empty"); !done || err != nil {
		t.Fatalf("TryFinish = %v, %v; want true", done, err)
	}
	if m := f.manifest("empty"); m.State != ledger.StateSucceeded || m.Succeeded != 0 {
		t.Errorf("state %s, succeeded %d; want succeeded, 0", m.State, m.Succeeded)
	}
}

// loseClaimResponse lets the first create of report.json reach storage, then reports it as
// failed, as when the response is lost: the SDK retries the create and gets "exists".
type loseClaimResponse struct{ lost atomic.Int32 }

func (l *loseClaimResponse) Do(req *policy.Request) (*http.Response, error) {
	resp, err := req.Next()
	r := req.Raw()
	if err == nil && r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/report.json") &&
		r.Header.Get("If-None-Match") == "*" && l.lost.CompareAndSwap(0, 1) {
		resp.Body.Close()
		return nil, errors.New("injected: response lost")
	}
	return resp, err
}

// The aggregator recognises its own report claim when the create's response was lost (the
// claim carries its token) and aggregates at once, instead of backing off from itself until
// the claim goes stale.
func TestTryFinish_LostClaimResponseIsRecognisedAsOurs(t *testing.T) {
	const n = 4
	f := newFixture(t)
	f.completeRun("lost-claim", n)
	lose := &loseClaimResponse{}
	client, err := azclient.Blob(azurite.Shared(t).Storage(), &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{
		PerRetryPolicies: []policy.Policy{lose}, Retry: policy.RetryOptions{RetryDelay: 10 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	name := f.cc.URL()[strings.LastIndex(f.cc.URL(), "/")+1:]
	cfg := f.cfg
	cfg.Store = blobstore.New(client.ServiceClient().NewContainerClient(name), blobstore.Options{})
	w := f.newWorker(cfg)
	done, err := w.TryFinish(f.ctx, "lost-claim")
	if lose.lost.Load() != 1 {
		t.Fatal("no claim response was lost: the test proves nothing")
	}
	if err != nil || !done {
		t.Fatalf("TryFinish = %v, %v; want the run finished by the claimer", done, err)
	}
	checkSucceeded(t, f, "lost-claim", n)
}

// A stopped run whose report another worker wrote before it could settle the manifest is
// settled with the stop's reason (who stopped it, the note, the partitions never run), as its
// aggregator would have.
func TestFinishStopped_SettlingFromAReportKeepsTheStopsReason(t *testing.T) {
	const n = 4
	now := time.Date(2026, 11, 21, 2, 0, 0, 0, time.UTC)
	f := newFixture(t)
	f.setClock(now)
	f.completeRun("stopped", n)
	stop := ledger.Stop{State: ledger.StateCancelled, By: "an operator", At: now.Add(-time.Minute), Note: "the database is down"}
	if _, err := f.store.UpdateManifest(f.ctx, "stopped", ledger.NoFence, func(m *ledger.Manifest) error {
		m.Stop = &stop
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	r := ledger.Report{Run: "stopped", Job: synthetic.Name, State: ledger.StateCancelled, Partitions: n, Succeeded: 3, Cancelled: 1,
		Aggregator: ledger.Holder{App: "other", Instance: "crashed", PID: 9}, Created: now.Add(-time.Second)}
	if _, err := f.store.ClaimReport(f.ctx, r); err != nil {
		t.Fatal(err)
	}
	if done, err := f.w.FinishStopped(f.ctx, "stopped"); done || err != nil {
		t.Fatalf("FinishStopped = %v, %v; want false (settled, not finished), nil", done, err)
	}
	m := f.manifest("stopped")
	if want := stop.Reason(1); m.State != ledger.StateCancelled || m.Reason != want {
		t.Fatalf("manifest %s (%q), want cancelled (%q)", m.State, m.Reason, want)
	}
}
