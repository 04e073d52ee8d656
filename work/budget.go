package work

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// FailureBudgetStopper names the failure budget as who stopped a run (ledger.Stop.By).
const FailureBudgetStopper = "the failure budget"

// spend counts the failures among rs, results recorded for m's run, against its failure budget
// (Manifest.Budget): one append to the run's failure log per delivery with failures. Past the
// budget, the log's distinct partitions are counted (a redelivery may have appended a
// partition twice), and the run gets a Stop in state failed: it ends early, its remaining
// partitions never run.
func (w *Worker) spend(ctx context.Context, m *ledger.Manifest, rs []ledger.Result, log *slog.Logger) error {
	b := m.Budget
	if b == nil || m.Stop != nil {
		return nil
	}
	var failed []int
	for _, r := range rs {
		if !r.OK && !r.TimedOut {
			failed = append(failed, r.Index)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	total, err := w.cfg.Store.AppendFailed(ctx, m.RunID, failed...)
	if err != nil {
		return fmt.Errorf("failure budget of %s: %w", m.RunID, err)
	}
	planned := 0
	if m.PlanDone {
		planned = m.Partitions
	} else {
		planned = w.facts.count(m.RunID)
	}
	if !b.Exceeded(int(total), planned) {
		return nil
	}
	idx, err := w.cfg.Store.ReadFailed(ctx, m.RunID)
	if err != nil {
		return fmt.Errorf("failure budget of %s: %w", m.RunID, err)
	}
	distinct := map[int]bool{}
	for _, i := range idx {
		distinct[i] = true
	}
	if !b.Exceeded(len(distinct), planned) {
		return nil
	}
	note := fmt.Sprintf("%d partitions failed, past its budget of %s", len(distinct), b)
	if planned > 0 {
		note = fmt.Sprintf("%d of %d partitions failed, past its budget of %s", len(distinct), planned, b)
	}
	stopped := false
	cur, err := w.cfg.Store.UpdateManifest(ctx, m.RunID, ledger.NoFence, func(cur *ledger.Manifest) error {
		stopped = false
		if cur.State.Final() || cur.Stop != nil {
			return ledger.ErrNoChange
		}
		cur.Stop = &ledger.Stop{State: ledger.StateFailed, By: FailureBudgetStopper, At: w.now(), Note: note}
		stopped = true
		return nil
	})
	if err != nil {
		return fmt.Errorf("failure budget of %s: stop the run: %w", m.RunID, err)
	}
	if cur.Stop != nil {
		w.stopped(cur)
	}
	if stopped {
		log.Error("failure budget exceeded: the run stops; its remaining partitions will not run", "failed", len(distinct),
			"planned", planned, "budget", b.String())
	}
	return nil
}
