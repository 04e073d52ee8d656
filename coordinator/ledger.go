package coordinator

import (
	"context"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// Ledger is the part of the run ledger (ledger.Store) the coordinator uses: run records, plan
// batches, timeout results, each schedule's state, the index of runs in progress, and what
// retention needs to list and delete old runs.
type Ledger interface {
	EnsureContainer(ctx context.Context) error
	CreateManifest(ctx context.Context, m *ledger.Manifest) error
	ReadManifest(ctx context.Context, run string) (ledger.Manifest, error)
	UpdateManifest(ctx context.Context, run string, epoch int64, fn func(*ledger.Manifest) error) (ledger.Manifest, error)
	PutPlanBatch(ctx context.Context, run string, b ledger.PlanBatch) error
	ReadPlanBatch(ctx context.Context, run string, batch int) (ledger.PlanBatch, error)
	PutResult(ctx context.Context, r ledger.Result) error
	ReadResult(ctx context.Context, run string, index int) (ledger.Result, error)
	PutBlock(ctx context.Context, b ledger.Block) error
	ReadBlock(ctx context.Context, run string, s ledger.Span) (ledger.Block, error)
	ListResults(ctx context.Context, run string, fn func(ledger.ResultRef) error) error
	AppendDone(ctx context.Context, run string, layout ledger.DoneLayout, epoch int64, indexes ...int) (int64, error)
	CreateDone(ctx context.Context, run string, shard int) error
	DoneCount(ctx context.Context, run string, shard int) (int64, error)
	ReadSchedule(ctx context.Context, name string) (ledger.ScheduleState, error)
	UpdateSchedule(ctx context.Context, name string, fn func(*ledger.ScheduleState) error) (ledger.ScheduleState, error)
	ReadLegacySchedule(ctx context.Context) (ledger.LegacySchedule, bool, error)
	ListRuns(ctx context.Context, fn func(run string) bool) error
	ListActive(ctx context.Context, fn func(ledger.ActiveRun) bool) error
	RemoveActive(ctx context.Context, run string) error
	AddActive(ctx context.Context, a ledger.ActiveRun) error
	ReadBackfill(ctx context.Context) (ledger.Backfill, error)
	WriteBackfill(ctx context.Context, b ledger.Backfill) error
	ListRunPage(ctx context.Context, token string, max int) ([]string, string, error)
	DeleteRun(ctx context.Context, run string) error
	ReadSweep(ctx context.Context) (ledger.Sweep, error)
	WriteSweep(ctx context.Context, s ledger.Sweep) error
}
