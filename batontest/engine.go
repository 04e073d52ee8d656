package batontest

import (
	"github.com/batonfn/baton"
	"github.com/batonfn/baton/internal/enginejob"
	"github.com/batonfn/baton/work"
)

// engineJob is j as Baton's worker runs it.
func engineJob(j baton.Job) work.Job { return enginejob.Of(j) }

// publicResult is a recorded result as a job reads it.
var publicResult = enginejob.Result
