package bloblease

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/batonfn/baton/internal/engine/election/electiontest"
	"github.com/batonfn/baton/internal/engine/ledger"
)

// lostAnswers is a transport for a lock's acquire-first path whose answers are lost. Armed,
// it lets storage serve the next acquire and then the holder record sent beside it, both for
// real, and loses the record's answer; with loseAcquire it loses the acquire's answer too, and
// holds the acquire's retry until the record has taken effect, so the retry's answer carries
// the record's ETag. With failReads every read after that record fails (500). It counts the
// calls it forwards by kind (see callKinds).
type lostAnswers struct {
	next        policy.Transporter
	loseAcquire bool
	failReads   bool
	calls       callKinds

	mu        sync.Mutex
	armed     bool
	acquires  int
	acqServed chan struct{} // closed when storage has served the first acquire
	recorded  chan struct{} // closed when storage has served the first record
}

func newLostAnswers(loseAcquire, failReads bool) *lostAnswers {
	return &lostAnswers{next: &http.Client{}, loseAcquire: loseAcquire, failReads: failReads, calls: callKinds{n: map[string]int{}}}
}

// arm makes the next acquire and record go through as described.
func (g *lostAnswers) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed, g.acquires = true, 0
	g.acqServed, g.recorded = make(chan struct{}), make(chan struct{})
	g.calls.take()
}

// errLostAnswer is what the lock sees of a request whose answer was lost.
var errLostAnswer = &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}

func (g *lostAnswers) Do(req *http.Request) (*http.Response, error) {
	g.calls.rule(req)
	g.mu.Lock()
	armed, acqServed, recorded := g.armed, g.acqServed, g.recorded
	g.mu.Unlock()
	if !armed {
		return g.next.Do(req)
	}
	switch {
	case testLeaseAction(req) == "acquire":
		g.mu.Lock()
		g.acquires++
		n := g.acquires
		g.mu.Unlock()
		if n > 1 {
			awaitClosed(recorded)
			return g.next.Do(req)
		}
		resp, err := g.next.Do(req)
		close(acqServed)
		if !g.loseAcquire {
			awaitClosed(recorded) // answer once the record is served, as a slow network would
			return resp, err
		}
		if err == nil {
			resp.Body.Close()
		}
		return nil, errLostAnswer
	case req.Method == http.MethodPut && req.URL.Query().Get("comp") == "metadata":
		g.mu.Lock()
		first := g.recorded != nil && !isClosed(g.recorded)
		g.mu.Unlock()
		if !first {
			return g.next.Do(req)
		}
		awaitClosed(acqServed)
		resp, err := g.next.Do(req)
		close(recorded)
		if err == nil {
			resp.Body.Close()
		}
		return nil, errLostAnswer
	case req.Method == http.MethodHead && g.failReads && isClosed(recorded):
		return &http.Response{StatusCode: http.StatusInternalServerError, Status: "500 Internal Server Error",
			Header: http.Header{"X-Ms-Error-Code": {"InternalError"}}, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
	}
	return g.next.Do(req)
}

// awaitClosed waits for ch to close, at most 10 s (a test that would wait longer fails on its
// own assertions).
func awaitClosed(ch chan struct{}) {
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// abandonedEpochs are the epochs the "lease acquisition abandoned" lines in log name for holder
// on lease.
func abandonedEpochs(t *testing.T, log string, lease string, holder ledger.Holder) []int64 {
	t.Helper()
	var out []int64
	for line := range strings.Lines(log) {
		var rec struct {
			Msg, Lease, Holder string
			Epoch              int64
		}
		if json.Unmarshal([]byte(line), &rec) == nil && strings.HasPrefix(rec.Msg, "lease acquisition abandoned") &&
			rec.Lease == lease && rec.Holder == holder.String() {
			out = append(out, rec.Epoch)
		}
	}
	return out
}

// A lock that knows the record it left sends the next record beside its acquire. When that
// record takes effect but its answer is lost, the lock finds it when it reads the record back
// under its lease — its holder, its acquired-at, the next epoch — and leads under it: no
// second record, so no epoch that storage showed but nobody led under. Whether the acquire's
// own answer came back (its ETag is the record it knew: the record is written again, refused,
// and read back) or was lost too (its retry's ETag is the new record's: read back at once).
func TestBlobLock_Acquire_LeadsUnderItsOwnRecordWhoseAnswerWasLost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		loseAcquire bool
		calls       map[string]int
	}{
		{"acquire answered", false, map[string]int{"acquire": 1, "record": 2, "read": 1}},
		{"acquire's answer lost too", true, map[string]int{"acquire": 2, "record": 1, "read": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newLostAnswers(tc.loseAcquire, false)
			lk := newTestBlobLockOn(t, newTestContainer(t, g, &policy.RetryOptions{MaxRetries: -1}))
			ctx := t.Context()
			holder := electiontest.Holder(1)
			first, err := lk.Acquire(ctx, holder)
			if err != nil {
				t.Fatal(err)
			}
			if err := lk.Release(ctx, first); err != nil {
				t.Fatal(err)
			}
			g.arm()
			l, err := lk.Acquire(ctx, holder)
			if err != nil {
				t.Fatalf("Acquire whose record took effect with its answer lost: %v", err)
			}
			if got := g.calls.take(); !maps.Equal(got, tc.calls) {
				t.Errorf("calls %v, want %v", got, tc.calls)
			}
			if l.Epoch != first.Epoch+1 || l.PreviousHolder != holder || l.PreviousReleasedAt.IsZero() {
				t.Errorf("lease %+v: want epoch %d after holder 1's release of epoch %d (the lost record's)", l, first.Epoch+1, first.Epoch)
			}
			st, err := newTestBlobLockOn(t, newTestContainerAlias(t, lk.container)).State(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !st.Held || st.Holder != holder || st.Epoch != l.Epoch || !st.Since.Equal(l.AcquiredAt) {
				t.Errorf("storage shows %+v; want held by holder 1 at epoch %d since %s", st, l.Epoch, l.AcquiredAt)
			}
			if err := lk.Renew(ctx, l); err != nil {
				t.Errorf("Renew: %v", err)
			}
		})
	}
}

// When the lock cannot read the record back (storage fails every read after it), it cannot
// tell whether its record took effect: it gives the lease back and says, in a "lease
// acquisition abandoned" line, which epoch and holder storage may show with nobody leading
// under them — the epoch after the record it knew, which is what storage does show here.
func TestBlobLock_Acquire_AbandonedRecordIsNamedInTheLog(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		loseAcquire bool
	}{
		{"acquire answered", false},
		{"acquire's answer lost too", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newLostAnswers(tc.loseAcquire, true)
			var logged strings.Builder
			var mu sync.Mutex
			lk, err := NewBlobLock(newTestContainer(t, g, &policy.RetryOptions{MaxRetries: -1}), "leader",
				BlobLockOptions{Duration: testBlobLockDuration, AttemptTimeout: time.Second,
					Logger: slog.New(slog.NewJSONHandler(lockedWriter{&mu, &logged}, nil))})
			if err != nil {
				t.Fatal(err)
			}
			holder := electiontest.Holder(1)
			first, err := lk.Acquire(t.Context(), holder)
			if err != nil {
				t.Fatal(err)
			}
			if err := lk.Release(t.Context(), first); err != nil {
				t.Fatal(err)
			}
			g.arm()
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second) // the reads fail until the budget ends
			defer cancel()
			if l, err := lk.Acquire(ctx, holder); err == nil {
				t.Fatalf("Acquire that could not read its record back succeeded: %+v", l)
			}
			st, err := newTestBlobLockOn(t, newTestContainerAlias(t, lk.container)).State(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			want := first.Epoch + 1
			if st.Epoch != want || st.Holder != holder {
				t.Fatalf("storage shows epoch %d held by %v; want the unconfirmed record's epoch %d by holder 1", st.Epoch, st.Holder, want)
			}
			mu.Lock()
			defer mu.Unlock()
			if got := abandonedEpochs(t, logged.String(), lk.name, holder); len(got) != 1 || got[0] != want {
				t.Errorf("abandoned epochs in the log %v, want [%d]; the log:\n%s", got, want, logged.String())
			}
		})
	}
}
