package baton

import (
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/work"
)

// Job is one kind of partitioned work, with JSON params, payloads and outputs: Plan streams a
// run's partitions, Process does one partition on any instance (perhaps more than once), and
// Aggregate makes the report once every partition has a result. See TypedJob for the same
// with Go types.
type Job = work.Job

// Partition is one unit of work handed to Job.Process.
type Partition = work.Partition

// RunInfo describes the run Job.Aggregate or Merger.Merge is making a report for.
type RunInfo = work.RunInfo

// Result is one partition's recorded outcome, as Job.Aggregate reads it: its output when OK,
// else the error that failed it.
type Result = ledger.Result

// Merger is implemented by jobs whose aggregate is associative: Baton then folds each result
// into a partial aggregate as it arrives, so finishing a run does not read every result.
type Merger = work.Merger

// ParamsValidator is implemented by jobs that check params up front, so a bad BATON_JOB_PARAMS
// or a manual run with bad params is refused at once, with the reason.
type ParamsValidator = work.ParamsValidator

// ErrPermanent marks a job error that retrying cannot fix: the partition is recorded as failed
// at once instead of being delivered again.
var ErrPermanent = work.ErrPermanent

// Permanent wraps err so that errors.Is(err, ErrPermanent) holds (nil stays nil).
func Permanent(err error) error { return work.Permanent(err) }
