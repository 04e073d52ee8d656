package devhost

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/election/bloblease"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/blobstore"
)

// Progress is one look at a run, read from the ledger and the run's own lease blob (never from
// a handler's say-so).
type Progress struct {
	Run string
	// Schedule is the schedule whose occurrence (or run now) made the run; "" for a manual run.
	Schedule string
	State    ledger.State
	// Reason says why a run ended as it did, or why it waits.
	Reason string
	// Partitions is the planned count (0 until planning is done); Enqueued is how many were
	// enqueued so far; Done counts completion records (redeliveries can count twice, so it is
	// capped at Partitions once that is known).
	Partitions, Enqueued int
	PlanDone             bool
	Done                 int64
	// Epoch is the epoch of the run's lease under which it was last planned (0: no planner has
	// taken it up yet); Lease names that lease and Leader is its blob's state now.
	Epoch  int64
	Lease  string
	Leader election.LeaderState
	// Succeeded and Failed are set once the run is final.
	Succeeded, Failed int
}

// Line renders the progress line.
func (p Progress) Line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "progress %s %s", p.Run, p.State)
	switch {
	case p.State.Final() && p.Partitions == 0 && p.Reason != "":
		fmt.Fprintf(&b, ": %s", p.Reason)
	case p.State.Final():
		fmt.Fprintf(&b, ": %d succeeded, %d failed of %d partitions", p.Succeeded, p.Failed, p.Partitions)
	case p.State == ledger.StateQueued:
		b.WriteString(": waits for its schedule's run in progress to end")
	case p.PlanDone:
		fmt.Fprintf(&b, ": %d/%d partitions done", p.Done, p.Partitions)
	case p.Epoch == 0:
		b.WriteString(": waiting for a planner to take the run's lease")
	default:
		fmt.Fprintf(&b, ": %d partitions enqueued so far, %d done", p.Enqueued, p.Done)
	}
	if p.Lease == "" {
		return b.String()
	}
	lead := "none"
	if !p.Leader.Holder.IsZero() {
		lead = p.Leader.Holder.String()
	}
	fmt.Fprintf(&b, " | planned under epoch %d | lease %s: %s, last holder %s epoch %d", p.Epoch, p.Lease, orDash(p.Leader.LeaseState), lead, p.Leader.Epoch)
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// progressWatcher reads the progress of every run the instances report creating ("run created"
// in their logs), whatever made it: an occurrence of any schedule, a run now, a manual run.
type progressWatcher struct {
	store  *blobstore.Store
	leases *container.Client
	opts   bloblease.BlobLockOptions

	mu   sync.Mutex
	runs []string // in the order they were created
}

// track follows a handler's log: each run created is watched from then on.
func (w *progressWatcher) track(l LogLine) {
	if l.Msg != "run created" {
		return
	}
	run := l.Str("run")
	w.mu.Lock()
	defer w.mu.Unlock()
	if run != "" && !slices.Contains(w.runs, run) {
		w.runs = append(w.runs, run)
	}
}

// tracked returns the runs seen created, oldest first.
func (w *progressWatcher) tracked() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.runs)
}

func (w *progressWatcher) readRun(ctx context.Context, run string) (Progress, bool, error) {
	m, err := w.store.ReadManifest(ctx, run)
	if errors.Is(err, ledger.ErrNotFound) {
		return Progress{}, false, nil
	}
	if err != nil {
		return Progress{}, false, err
	}
	p := Progress{Run: run, Schedule: m.Schedule, State: m.State, Reason: m.Reason, Partitions: m.Partitions,
		Enqueued: m.Checkpoint.Next, PlanDone: m.PlanDone, Epoch: m.Epoch, Lease: m.Lease, Succeeded: m.Succeeded, Failed: m.Failed}
	top := max(m.Partitions, m.Checkpoint.Next)
	if p.Done, err = ledger.CountDone(ctx, w.store, run, m.DoneLayout, top, 0); err != nil {
		return p, true, err
	}
	if m.PlanDone && p.Done > int64(m.Partitions) {
		p.Done = int64(m.Partitions)
	}
	if w.leases != nil && m.Lease != "" {
		lock, err := bloblease.NewBlobLock(w.leases, m.Lease, w.opts)
		if err != nil {
			return p, true, err
		}
		if p.Leader, err = lock.State(ctx); err != nil {
			return p, true, err
		}
	}
	return p, true, nil
}

// watchProgress prints a progress line every interval for each run in progress, several
// runs side by side when schedules overlap, and one final line for each when it ends.
func (h *Host) watchProgress(ctx context.Context, w *progressWatcher, every time.Duration) {
	finished := map[string]bool{}
	lastErr := ""
	for {
		// Wait a full interval after each read: a slow read must not bunch the lines up.
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		for _, run := range w.tracked() {
			if finished[run] {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, max(every*5, 10*time.Second))
			p, ok, err := w.readRun(rctx, run)
			cancel()
			if err != nil {
				if msg := firstLine(err.Error()); msg != lastErr && ctx.Err() == nil {
					h.log.Info("progress: cannot read the ledger", "err", msg)
					lastErr = msg
				}
				continue
			}
			lastErr = ""
			if !ok {
				continue
			}
			if p.State.Final() {
				finished[run] = true
			}
			h.progressLine(p)
		}
	}
}
