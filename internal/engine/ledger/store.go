package ledger

import (
	"context"
	"errors"
	"fmt"
)

// Store is the run ledger's contract. ledger/blobstore keeps it in Azure Blob Storage;
// ledger/ledgertest has an in-memory fake that enforces the same rules, and the contract suite
// both pass. Packages that use a ledger define the (smaller) interface they need; this one is
// the whole contract.
type Store interface {
	// EnsureContainer creates the ledger's container if it is missing; concurrent callers all
	// succeed.
	EnsureContainer(ctx context.Context) error

	// CreateManifest writes a new manifest once; ErrExists when the run already has one.
	CreateManifest(ctx context.Context, m *Manifest) error
	// ReadManifest reads a run's manifest; ErrNotFound when there is none.
	ReadManifest(ctx context.Context, run string) (Manifest, error)
	// UpdateManifest applies fn to the current manifest and writes it back only if nobody
	// wrote it in between (retrying on conflicts, ErrConflict when it keeps losing). When
	// epoch is not NoFence and the manifest's epoch is newer, it fails with ErrFenced without
	// calling fn. fn may return ErrNoChange to skip the write; the current manifest is
	// returned either way. fn may be called more than once (on a copy that turns out old,
	// and again after each conflict); only its last call's changes are written.
	UpdateManifest(ctx context.Context, run string, epoch int64, fn func(*Manifest) error) (Manifest, error)

	// PutPlanBatch stores a plan batch once; ErrExists when it is already stored.
	PutPlanBatch(ctx context.Context, run string, b PlanBatch) error
	// ReadPlanBatch reads a stored plan batch; ErrNotFound when there is none.
	ReadPlanBatch(ctx context.Context, run string, batch int) (PlanBatch, error)

	// PutResult records a partition's result of its own once; ErrExists when one is already
	// recorded. A partition of a span (PlanBatch.Bundle) gets one only under the block rule
	// (see Block; Record does it).
	PutResult(ctx context.Context, r Result) error
	// ReadResult reads a partition's result of its own; ErrNotFound when none is recorded
	// (Reader also looks in its block).
	ReadResult(ctx context.Context, run string, index int) (Result, error)
	// PutBlock writes a span's block once (Block.Validate must pass); ErrExists when the span
	// has one.
	PutBlock(ctx context.Context, b Block) error
	// ReadBlock reads a span's block; ErrNotFound when it has none.
	ReadBlock(ctx context.Context, run string, s Span) (Block, error)
	// ListResults calls fn with where each recorded result is, in index order: a result of
	// its own, or a member of a block (known from the listing, without reading the block).
	ListResults(ctx context.Context, run string, fn func(ResultRef) error) error

	// AppendDone records one completion of each partition index, in one atomic append to
	// their done shard in the run's layout (all indexes must be in one shard: layout.ShardOf,
	// else ErrDoneShards), and returns the completion ordinal of the last record within the
	// shard (1 for the shard's first record; the append's records have the ordinals up to it).
	// Redelivered partitions may be recorded more than once, so an ordinal says "maybe
	// complete"; ListResults is the proof.
	AppendDone(ctx context.Context, run string, layout DoneLayout, epoch int64, indexes ...int) (int64, error)
	// CreateDone creates a done shard with no records unless it exists, so the first append to
	// it needs no create of its own; AppendDone still creates a shard that does not exist.
	CreateDone(ctx context.Context, run string, shard int) error
	// DoneCount returns the number of completion records in a shard (0 if it has none).
	DoneCount(ctx context.Context, run string, shard int) (int64, error)
	// ReadDone returns the partition index of every completion record in a shard, in append
	// order, duplicates included.
	ReadDone(ctx context.Context, run string, shard int) ([]int, error)

	// AppendFailed records, in one append to the run's failure log, that these partitions'
	// results are failures (the count its failure budget is held to), and returns how many
	// records the log holds after it. A partition recorded again (a redelivery) counts again;
	// ReadFailed tells them apart.
	AppendFailed(ctx context.Context, run string, indexes ...int) (int64, error)
	// ReadFailed returns the partition index of every failure record, in append order,
	// duplicates included.
	ReadFailed(ctx context.Context, run string) ([]int, error)

	// ClaimReport creates the report once with the given (in-progress) report; the caller that
	// gets nil is the one aggregator, others get ErrExists.
	ClaimReport(ctx context.Context, r Report) (ETag, error)
	// WriteReport replaces the report if its version is still etag (ErrConflict otherwise),
	// and returns its new version.
	WriteReport(ctx context.Context, r Report, etag ETag) (ETag, error)
	// ReadReport reads a run's report and its version; ErrNotFound when none exists.
	ReadReport(ctx context.Context, run string) (Report, ETag, error)
	// ReadReportBounded reads a report only when it is at most maxBytes long (see ReportRead).
	ReadReportBounded(ctx context.Context, run string, maxBytes int64) (Report, ReportRead, error)

	// ReadPartial reads one partial aggregate and its version; ErrNotFound when none exists.
	ReadPartial(ctx context.Context, run string, shard int) (Partial, ETag, error)
	// WritePartial creates a partial once when etag is "" (ErrExists if it exists), else
	// replaces it only if its version is still etag (ErrConflict otherwise).
	WritePartial(ctx context.Context, p Partial, etag ETag) error

	// ListRuns calls fn with each run ID, in name order, until fn returns false.
	ListRuns(ctx context.Context, fn func(run string) bool) error
	// ListRunPage lists at most max run IDs in name order, from where the page token left off
	// ("" for the first page), and returns the next page's token ("" after the last page). A
	// token stays valid across deletions; runs created behind it show in the next listing
	// from "". One storage call per page.
	ListRunPage(ctx context.Context, token string, max int) (runs []string, next string, err error)
	// DeleteRun deletes everything recorded under run, its manifest last: a run half deleted
	// (the call failed or the process died) still has its manifest, so it is still listed and
	// a later DeleteRun finishes it. Nil when the run has nothing left. It does not look at the
	// run's state: the caller decides (retention deletes final runs only).
	DeleteRun(ctx context.Context, run string) error
	// ReadSweep reads the retention sweep's position (the zero Sweep before the first write);
	// WriteSweep replaces it.
	ReadSweep(ctx context.Context) (Sweep, error)
	WriteSweep(ctx context.Context, s Sweep) error

	// The index of runs that are not final. CreateManifest of a record that is not final
	// writes its entry before the record, and UpdateManifest that makes a record final removes
	// it after the write, so every run that is not final has an entry, while an entry may
	// outlive its run's end or name a record never created (a call that failed half way):
	// readers check the record and repair with RemoveActive.
	//
	// ListActive calls fn with every entry, in run-ID order, until fn returns false; its cost
	// grows with the runs in progress, not with the ledger's history.
	ListActive(ctx context.Context, fn func(ActiveRun) bool) error
	// RemoveActive removes run's entry (nil when it has none).
	RemoveActive(ctx context.Context, run string) error
	// AddActive writes a's entry, replacing any: for runs recorded before the index existed.
	AddActive(ctx context.Context, a ActiveRun) error
	// ReadBackfill reads how far the index has been filled from runs recorded before it
	// existed (the zero Backfill before the first write); WriteBackfill replaces it.
	ReadBackfill(ctx context.Context) (Backfill, error)
	WriteBackfill(ctx context.Context, b Backfill) error

	// ReadSchedule reads a schedule's state; ErrNotFound before its first heartbeat.
	ReadSchedule(ctx context.Context, name string) (ScheduleState, error)
	// UpdateSchedule applies fn to the schedule's state (a zero state naming the schedule when
	// it has none) and writes it back only if nobody wrote it in between, retrying on
	// conflicts (ErrConflict when it keeps losing). fn may return ErrNoChange to skip the
	// write; the current state is returned either way.
	UpdateSchedule(ctx context.Context, name string, fn func(*ScheduleState) error) (ScheduleState, error)
	// ReadLegacySchedule reads what a ledger written before schedules had names kept about
	// its one schedule (ok false when it kept nothing).
	ReadLegacySchedule(ctx context.Context) (LegacySchedule, bool, error)
}

// ETag is the opaque version of a stored record, for conditional writes.
type ETag string

// DefaultUpdateRetries bounds conflict retries of UpdateManifest.
const DefaultUpdateRetries = 20

// NoFence disables the epoch check of UpdateManifest (for workers, which hold no lease).
const NoFence int64 = -1

// ErrNoChange may be returned by an UpdateManifest mutation to skip the write.
var ErrNoChange = errors.New("no change")

// ReportRead describes a bounded report read (see Store.ReadReportBounded).
type ReportRead struct {
	// Size is the stored report's size in bytes.
	Size int64
	// Decoded is false when Size exceeded the bound: the body was not read and the Report is
	// empty.
	Decoded bool
}

// StorageError is a failed storage call, in one line: which record, and what storage answered
// (callers wrap it with what they were doing). Kind is one of the ledger's sentinels (ErrNotFound, ErrExists,
// ErrConflict, ErrUnavailable) or nil; errors.Is matches it. Cause keeps the storage client's
// own error for errors.As.
type StorageError struct {
	Name   string // the record's name in storage
	Status int    // HTTP status, 0 when none came back
	Code   string // storage error code, e.g. BlobNotFound
	Kind   error
	Cause  error
}

func (e *StorageError) Error() string {
	var what string
	switch {
	case e.Status != 0 && e.Code != "":
		what = fmt.Sprintf("%d %s", e.Status, e.Code)
	case e.Status != 0:
		what = fmt.Sprint(e.Status)
	case e.Cause != nil:
		what = shortCause(e.Cause)
	}
	kind := "storage error"
	if e.Kind != nil {
		kind = e.Kind.Error()
	}
	if e.Name == "" {
		return fmt.Sprintf("%s (%s)", kind, what)
	}
	return fmt.Sprintf("%s: %s (%s)", kind, e.Name, what)
}

// Unwrap exposes the kind for errors.Is and the cause for errors.As.
func (e *StorageError) Unwrap() []error {
	var out []error
	if e.Kind != nil {
		out = append(out, e.Kind)
	}
	if e.Cause != nil {
		out = append(out, e.Cause)
	}
	return out
}

// shortCause is the last line of a cause's text, at most 160 characters: the SDK's transport
// errors end with the one line that matters.
func shortCause(err error) string {
	s := err.Error()
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == ' ') {
		s = s[:len(s)-1]
	}
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '\n' {
			s = s[i+1:]
			break
		}
	}
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}
