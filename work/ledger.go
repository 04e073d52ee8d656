package work

import (
	"context"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// Ledger is the part of the run ledger (ledger.Store) a worker uses: it reads the run record,
// records results and completions, and claims and writes the report.
type Ledger interface {
	ReadManifest(ctx context.Context, run string) (ledger.Manifest, error)
	UpdateManifest(ctx context.Context, run string, epoch int64, fn func(*ledger.Manifest) error) (ledger.Manifest, error)
	PutResult(ctx context.Context, r ledger.Result) error
	ReadResult(ctx context.Context, run string, index int) (ledger.Result, error)
	PutBlock(ctx context.Context, b ledger.Block) error
	ReadBlock(ctx context.Context, run string, s ledger.Span) (ledger.Block, error)
	ListResults(ctx context.Context, run string, fn func(ledger.ResultRef) error) error
	AppendDone(ctx context.Context, run string, layout ledger.DoneLayout, epoch int64, indexes ...int) (int64, error)
	DoneCount(ctx context.Context, run string, shard int) (int64, error)
	ReadDone(ctx context.Context, run string, shard int) ([]int, error)
	AppendFailed(ctx context.Context, run string, indexes ...int) (int64, error)
	ReadFailed(ctx context.Context, run string) ([]int, error)
	ClaimReport(ctx context.Context, r ledger.Report) (ledger.ETag, error)
	WriteReport(ctx context.Context, r ledger.Report, etag ledger.ETag) (ledger.ETag, error)
	ReadReport(ctx context.Context, run string) (ledger.Report, ledger.ETag, error)
	ReadPartial(ctx context.Context, run string, shard int) (ledger.Partial, ledger.ETag, error)
	WritePartial(ctx context.Context, p ledger.Partial, etag ledger.ETag) error
}
