// Package enginejob runs a job written against the public API (package baton) on the engine
// directly, as package baton does for a registered job: for the engine's own tests and tools,
// which build registries without an App.
package enginejob

import (
	"github.com/batonfn/baton"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/work"
)

// Of returns j as the engine runs it.
func Of(j baton.Job) work.Job {
	return work.Adapt[baton.Partition, baton.RunInfo, baton.Result](j, work.Conversions[baton.Partition, baton.RunInfo, baton.Result]{
		Partition: func(p work.Partition) baton.Partition {
			return baton.Partition{Run: p.Run, Index: p.Index, Attempt: p.Attempt, Params: p.Params, Payload: p.Payload}
		},
		Run:    RunInfo,
		Result: Result,
	})
}

// RunInfo is the engine's run as a job reads it.
func RunInfo(r work.RunInfo) baton.RunInfo {
	return baton.RunInfo{Run: r.Run, Job: r.Job, Params: r.Params, Partitions: r.Partitions}
}

// Result is a recorded result as a job reads it.
func Result(r ledger.Result) baton.Result {
	return baton.Result{Index: r.Index, OK: r.OK, Output: r.Output, Error: r.Error, TimedOut: r.TimedOut, Attempts: r.Attempts, Errors: r.Errors}
}
