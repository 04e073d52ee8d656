package batontest

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/work"
)

// checkFailedPartition: Aggregate copes with a partition recorded as failed, as Baton records
// one that failed on its last delivery or that the run's deadline overtook. A failure is data
// in the report, so an error or a panic here would leave the run without one.
func (c *checker) checkFailedPartition(results []ledger.Result) {
	c.t.Helper()
	failed := slices.Clone(results)
	failed[0] = ledger.Result{Run: results[0].Run, Index: 0, Epoch: 1, OK: false, TimedOut: true,
		Error: "batontest: timed out: the run's deadline passed without a result"}
	run := work.RunInfo{Run: "batontest-failed", Job: jobName, Params: c.params, Partitions: len(results)}
	var out json.RawMessage
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		out, err = c.job.Aggregate(c.ctx, run, func(yield func(ledger.Result, error) bool) {
			for _, r := range failed {
				if !yield(r, nil) {
					return
				}
			}
		})
		return err
	}()
	switch {
	case err != nil:
		c.errorf("failed partition", "partition 0 recorded as failed (timed out): Aggregate returned %v; a failure is data in the report, not an error", err)
	case !json.Valid(out):
		c.errorf("failed partition", "partition 0 recorded as failed (timed out): Aggregate returned %q, which is not JSON", out)
	}
}
