package baton

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
)

// Part is one partition as a typed job's process function sees it.
type Part[P, T any] struct {
	Run     string // the run's ID
	Index   int    // the partition's index in the run, from 0
	Attempt int    // the delivery: 1 first, more on a redelivery or a retry
	Params  P
	Payload T
}

// RunOf is the run a typed job's aggregate or merge function reports on.
type RunOf[P any] struct {
	Run        string // the run's ID
	Job        string // the job's registered name
	Params     P
	Partitions int // the run's partition count (0 while planning goes on, for a merge)
}

// Outcome is one partition's recorded result as a typed job's aggregate function reads it.
type Outcome[O any] struct {
	Index    int
	OK       bool
	Output   O      // when OK
	Error    string // when not OK: the error that failed the partition
	TimedOut bool   // when not OK because the run's deadline passed without a result
	Attempts int
	Errors   []string // the failed tries' errors, shortened, oldest first (see RetryPolicy)
}

// PlanFunc plans a run with typed params and payloads: it emits each partition's payload and
// the cursor that resumes planning right after it, starting after cursor ("" at the start).
// The same params and cursor must give the same partitions while the input is unchanged.
type PlanFunc[P, T any] func(ctx context.Context, params P, cursor string, emit func(payload T, next string) error) error

// ProcessFunc does one partition's work and returns its output. It may run more than once for
// the same partition and must then give the same output; wrap an error retrying cannot fix
// with Permanent.
type ProcessFunc[P, T, O any] func(ctx context.Context, part Part[P, T]) (O, error)

// AggregateFunc makes a run's report from its results, in index order (failed partitions
// included, OK false). It must be a pure function of the results.
type AggregateFunc[P, O, A any] func(ctx context.Context, run RunOf[P], results iter.Seq2[Outcome[O], error]) (A, error)

// MergeFunc combines aggregates of disjoint sets of results into the aggregate of their union.
// It must be associative and ignore order, so a run's report is the same however the results
// are grouped.
type MergeFunc[P, A any] func(ctx context.Context, run RunOf[P], parts []A) (A, error)

// Typed is a Job written with Go types: P params, T payloads, O outputs, A the aggregate. Baton
// decodes params strictly (an unknown field is an error naming it; a P or *P with a Validate()
// error method is validated too), so a run with bad params is refused before it starts, and
// encodes payloads, outputs and the aggregate as JSON. Build it with TypedJob.
type Typed[P, T, O, A any] struct {
	plan      PlanFunc[P, T]
	process   ProcessFunc[P, T, O]
	aggregate AggregateFunc[P, O, A]
}

// TypedJob returns the Job made of plan, process and aggregate, with JSON handled by Baton
// (see Typed). Add an associative merge with WithMerge.
func TypedJob[P, T, O, A any](plan PlanFunc[P, T], process ProcessFunc[P, T, O], aggregate AggregateFunc[P, O, A]) *Typed[P, T, O, A] {
	return &Typed[P, T, O, A]{plan: plan, process: process, aggregate: aggregate}
}

// WithMerge returns the job with merge as its Merger, so Baton folds results as they arrive
// and finishing a run does not read every result.
func (j *Typed[P, T, O, A]) WithMerge(merge MergeFunc[P, A]) Job {
	return &typedMerger[P, T, O, A]{Typed: j, merge: merge}
}

// check is Register's test of a typed job: every function is there.
func (j *Typed[P, T, O, A]) check() error {
	if j == nil || j.plan == nil || j.process == nil || j.aggregate == nil {
		return fmt.Errorf("%w: TypedJob needs a plan, a process and an aggregate function", ErrNilJob)
	}
	return nil
}

// ValidateParams implements ParamsValidator: params must decode into P with no unknown field
// and pass P's Validate, when it has one.
func (j *Typed[P, T, O, A]) ValidateParams(params json.RawMessage) error {
	_, err := decodeParams[P](params)
	return err
}

// Plan implements Job.
func (j *Typed[P, T, O, A]) Plan(ctx context.Context, params json.RawMessage, cursor string, emit func(json.RawMessage, string) error) error {
	p, err := decodeParams[P](params)
	if err != nil {
		return Permanent(err)
	}
	return j.plan(ctx, p, cursor, func(payload T, next string) error {
		b, err := json.Marshal(payload)
		if err != nil {
			return Permanent(fmt.Errorf("encode payload: %w", err))
		}
		return emit(b, next)
	})
}

// Process implements Job.
func (j *Typed[P, T, O, A]) Process(ctx context.Context, part Partition) (json.RawMessage, error) {
	p, err := decodeParams[P](part.Params)
	if err != nil {
		return nil, Permanent(err)
	}
	var payload T
	if err := json.Unmarshal(part.Payload, &payload); err != nil {
		return nil, Permanent(fmt.Errorf("payload of partition %d: %w", part.Index, err))
	}
	out, err := j.process(ctx, Part[P, T]{Run: part.Run, Index: part.Index, Attempt: part.Attempt, Params: p, Payload: payload})
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, Permanent(fmt.Errorf("encode output of partition %d: %w", part.Index, err))
	}
	return b, nil
}

// Aggregate implements Job.
func (j *Typed[P, T, O, A]) Aggregate(ctx context.Context, run RunInfo, results iter.Seq2[Result, error]) (json.RawMessage, error) {
	r, err := runOf[P](run)
	if err != nil {
		return nil, err
	}
	var decodeErr error
	outcomes := func(yield func(Outcome[O], error) bool) {
		for res, err := range results {
			o := Outcome[O]{Index: res.Index, OK: res.OK, Error: res.Error, TimedOut: res.TimedOut, Attempts: res.Attempts, Errors: res.Errors}
			if err == nil && res.OK {
				if uerr := json.Unmarshal(res.Output, &o.Output); uerr != nil {
					decodeErr = Permanent(fmt.Errorf("output of partition %d: %w", res.Index, uerr))
					err = decodeErr
				}
			}
			if !yield(o, err) || err != nil {
				return
			}
		}
	}
	a, err := j.aggregate(ctx, r, outcomes)
	if decodeErr != nil {
		return nil, decodeErr // whatever the aggregate made of it, an output was unreadable
	}
	if err != nil {
		return nil, err
	}
	return encodeAggregate(a)
}

// typedMerger is a Typed job with an associative merge.
type typedMerger[P, T, O, A any] struct {
	*Typed[P, T, O, A]
	merge MergeFunc[P, A]
}

func (j *typedMerger[P, T, O, A]) check() error {
	if j.merge == nil {
		return fmt.Errorf("%w: WithMerge needs a merge function", ErrNilJob)
	}
	return j.Typed.check()
}

// Merge implements Merger.
func (j *typedMerger[P, T, O, A]) Merge(ctx context.Context, run RunInfo, parts []json.RawMessage) (json.RawMessage, error) {
	r, err := runOf[P](run)
	if err != nil {
		return nil, err
	}
	as := make([]A, len(parts))
	for i, part := range parts {
		if err := json.Unmarshal(part, &as[i]); err != nil {
			return nil, Permanent(fmt.Errorf("partial aggregate: %w", err))
		}
	}
	a, err := j.merge(ctx, r, as)
	if err != nil {
		return nil, err
	}
	return encodeAggregate(a)
}

func runOf[P any](run RunInfo) (RunOf[P], error) {
	p, err := decodeParams[P](run.Params)
	if err != nil {
		return RunOf[P]{}, Permanent(err)
	}
	return RunOf[P]{Run: run.Run, Job: run.Job, Params: p, Partitions: run.Partitions}, nil
}

func encodeAggregate(a any) (json.RawMessage, error) {
	b, err := json.Marshal(a)
	if err != nil {
		return nil, Permanent(fmt.Errorf("encode aggregate: %w", err))
	}
	return b, nil
}

// validator is a params type that checks itself.
type validator interface{ Validate() error }

// decodeParams decodes raw into a P, refusing unknown fields and trailing data; empty params
// are P's zero value. P's Validate runs last.
func decodeParams[P any](raw json.RawMessage) (P, error) {
	var p P
	if len(bytes.TrimSpace(raw)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			return p, fmt.Errorf("params: %w", err)
		}
		if dec.More() {
			return p, errors.New("params: more than one JSON value")
		}
	}
	var v any = &p
	if pv, ok := v.(validator); ok {
		if err := pv.Validate(); err != nil {
			return p, fmt.Errorf("params: %w", err)
		}
	}
	return p, nil
}
