package baton

import (
	"context"
	"encoding/json"
	"iter"

	"github.com/batonfn/baton/work"
)

// Job is one kind of partitioned work, with JSON params, payloads and outputs. See TypedJob for
// the same with Go types.
type Job interface {
	// Plan streams a run's partitions in order, starting after cursor ("" at the start): for
	// each it calls emit with the payload (a JSON value) and the cursor that resumes planning
	// right after it. The same params and cursor must give the same partitions while the input
	// is unchanged. An error from emit must be returned as is.
	Plan(ctx context.Context, params json.RawMessage, cursor string, emit func(payload json.RawMessage, next string) error) error
	// Process does one partition's work and returns its output (a JSON value). It may run more
	// than once for a partition and must then give the same output; wrap an error retrying
	// cannot fix with Permanent.
	Process(ctx context.Context, p Partition) (json.RawMessage, error)
	// Aggregate makes the run's report from its results, in index order, once every partition
	// has one (failures included). It must be a pure function of the results.
	Aggregate(ctx context.Context, run RunInfo, results iter.Seq2[Result, error]) (json.RawMessage, error)
}

// Partition is one unit of work handed to Job.Process.
type Partition struct {
	Run     string          // the run's ID
	Index   int             // the partition's index in the run, from 0
	Attempt int             // 1 on the first try; more on a retry or a redelivery
	Params  json.RawMessage // the run's params
	Payload json.RawMessage // what Plan emitted for this partition
}

// RunInfo is the run Job.Aggregate or Merger.Merge reports on.
type RunInfo struct {
	Run        string          // the run's ID
	Job        string          // the job's registered name
	Params     json.RawMessage // the run's params
	Partitions int             // the run's partition count (0 while planning goes on, in a Merge)
}

// Result is one partition's recorded outcome, as Job.Aggregate reads it.
type Result struct {
	Index    int
	OK       bool
	Output   json.RawMessage // when OK
	Error    string          // when not OK: the error that failed the partition
	TimedOut bool            // when not OK because the run's deadline passed without a result
	Attempts int             // the tries Process had
	Errors   []string        // the failed tries' errors, shortened, oldest first
}

// Merger is a Job whose aggregate is associative: Baton folds each result into a partial
// aggregate as it arrives, so finishing a run does not read every result. Merge combines
// aggregates of disjoint sets of results into the aggregate of their union, whatever the
// grouping and order.
type Merger interface {
	Job
	Merge(ctx context.Context, run RunInfo, parts []json.RawMessage) (json.RawMessage, error)
}

// ParamsValidator is a Job that checks params up front, so a bad BATON_JOB_PARAMS, schedule or
// manual run is refused at once with the reason.
type ParamsValidator interface {
	ValidateParams(params json.RawMessage) error
}

// ErrPermanent marks a job error that retrying cannot fix: the partition is recorded failed at
// once instead of being tried again.
var ErrPermanent = work.ErrPermanent

// Permanent wraps err so that errors.Is(err, ErrPermanent) holds (nil stays nil).
func Permanent(err error) error { return work.Permanent(err) }
