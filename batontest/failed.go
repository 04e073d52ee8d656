package batontest

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/batonfn/baton"
)

// checkFailedPartition: Aggregate copes with a partition recorded as failed, as Baton records
// one that failed on its last delivery or that the run's deadline overtook. A failure is data
// in the report, so an error or a panic here would leave the run without one.
func (c *checker) checkFailedPartition(results []baton.Result) {
	c.t.Helper()
	failed := slices.Clone(results)
	failed[0] = baton.Result{Index: 0, OK: false, TimedOut: true,
		Error: "batontest: timed out: the run's deadline passed without a result"}
	run := baton.RunInfo{Run: "batontest-failed", Job: jobName, Params: c.params, Partitions: len(results)}
	var out json.RawMessage
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		out, err = c.job.Aggregate(c.ctx, run, func(yield func(baton.Result, error) bool) {
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

// maxShownFailures is how many failed partitions' errors checkSomeSucceeded shows.
const maxShownFailures = 3

// checkSomeSucceeded: a run none of whose partitions succeeded is a broken job (or a test that
// says so with AllowAllFailed), whether they failed permanently or ran out of retries.
func (c *checker) checkSomeSucceeded(ref Report) {
	c.t.Helper()
	if c.allowAllFailed || ref.Partitions == 0 || ref.Succeeded > 0 {
		return
	}
	idx := slices.Sorted(maps.Keys(ref.Failures))
	var first []string
	for _, i := range idx[:min(len(idx), maxShownFailures)] {
		first = append(first, fmt.Sprintf("partition %d: %s", i, ref.Failures[i]))
	}
	c.errorf("all partitions failed", "%d of %d partitions failed (pass batontest.AllowAllFailed() if the test expects it); the first: %s",
		ref.Failed, ref.Partitions, strings.Join(first, "; "))
}
