package baton

import (
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/work"
)

// engineJob is j as the engine runs it: the engine's partitions, runs and results converted to
// the root's at the boundary.
func engineJob(j Job) work.Job {
	return work.Adapt[Partition, RunInfo, Result](j, work.Conversions[Partition, RunInfo, Result]{
		Partition: func(p work.Partition) Partition {
			return Partition{Run: p.Run, Index: p.Index, Attempt: p.Attempt, Params: p.Params, Payload: p.Payload}
		},
		Run: func(r work.RunInfo) RunInfo {
			return RunInfo{Run: r.Run, Job: r.Job, Params: r.Params, Partitions: r.Partitions}
		},
		Result: func(r ledger.Result) Result {
			return Result{Index: r.Index, OK: r.OK, Output: r.Output, Error: r.Error, TimedOut: r.TimedOut, Attempts: r.Attempts, Errors: r.Errors}
		},
	})
}
