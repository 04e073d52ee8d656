package work

import (
	"context"
	"encoding/json"
	"iter"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// Foreign is a job written over another package's partition (P), run (R) and result (S) types —
// the public package's. Adapt makes it a Job.
type Foreign[P, R, S any] interface {
	Plan(ctx context.Context, params json.RawMessage, cursor string, emit func(payload json.RawMessage, next string) error) error
	Process(ctx context.Context, p P) (json.RawMessage, error)
	Aggregate(ctx context.Context, run R, results iter.Seq2[S, error]) (json.RawMessage, error)
}

// ForeignMerger is a Foreign job whose aggregate is associative.
type ForeignMerger[R any] interface {
	Merge(ctx context.Context, run R, parts []json.RawMessage) (json.RawMessage, error)
}

// Conversions turn the engine's values into a Foreign job's.
type Conversions[P, R, S any] struct {
	Partition func(Partition) P
	Run       func(RunInfo) R
	Result    func(ledger.Result) S
}

// Adapt returns the Job that runs j through c. It is a Merger exactly when j is a
// ForeignMerger[R], and a ParamsValidator that defers to j's ValidateParams when j has one.
func Adapt[P, R, S any](j Foreign[P, R, S], c Conversions[P, R, S]) Job {
	a := &adapted[P, R, S]{j: j, c: c}
	if m, ok := j.(ForeignMerger[R]); ok {
		return &adaptedMerger[P, R, S]{adapted: a, m: m}
	}
	return a
}

// Unwrap returns the job Adapt was given, or j itself when it was not adapted.
func Unwrap(j Job) any {
	if u, ok := j.(interface{ unwrap() any }); ok {
		return u.unwrap()
	}
	return j
}

type adapted[P, R, S any] struct {
	j Foreign[P, R, S]
	c Conversions[P, R, S]
}

func (a *adapted[P, R, S]) unwrap() any { return a.j }

func (a *adapted[P, R, S]) Plan(ctx context.Context, params json.RawMessage, cursor string, emit func(json.RawMessage, string) error) error {
	return a.j.Plan(ctx, params, cursor, emit)
}

func (a *adapted[P, R, S]) Process(ctx context.Context, p Partition) (json.RawMessage, error) {
	return a.j.Process(ctx, a.c.Partition(p))
}

func (a *adapted[P, R, S]) Aggregate(ctx context.Context, run RunInfo, results iter.Seq2[ledger.Result, error]) (json.RawMessage, error) {
	return a.j.Aggregate(ctx, a.c.Run(run), func(yield func(S, error) bool) {
		for r, err := range results {
			if !yield(a.c.Result(r), err) {
				return
			}
		}
	})
}

func (a *adapted[P, R, S]) ValidateParams(params json.RawMessage) error {
	if v, ok := a.j.(ParamsValidator); ok {
		return v.ValidateParams(params)
	}
	return nil
}

type adaptedMerger[P, R, S any] struct {
	*adapted[P, R, S]
	m ForeignMerger[R]
}

func (a *adaptedMerger[P, R, S]) Merge(ctx context.Context, run RunInfo, parts []json.RawMessage) (json.RawMessage, error) {
	return a.m.Merge(ctx, a.c.Run(run), parts)
}
