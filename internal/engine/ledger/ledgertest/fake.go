package ledgertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// Fake is an in-memory ledger.Store that keeps every rule of the contract: records are stored
// as JSON (so callers never share memory with it), creates are once-only, updates and report
// writes are conditional on the version read, manifest updates are fenced by epoch, and done
// shards hand out dense ordinals. Like a blob container, it must be ensured before use.
// It is safe for concurrent use.
type Fake struct {
	now     func() time.Time
	retries int

	mu      sync.Mutex
	ensured bool
	version int
	records map[string]fakeRecord
	done    map[string][]int // done shard name → indexes in append order
}

type fakeRecord struct {
	data     []byte
	etag     ledger.ETag
	modified time.Time
}

// NewFake returns an empty fake ledger whose container is already ensured.
func NewFake(opts Options) *Fake {
	f := &Fake{now: opts.Now, retries: opts.UpdateRetries, ensured: true,
		records: map[string]fakeRecord{}, done: map[string][]int{}}
	if f.now == nil {
		f.now = time.Now
	}
	if f.retries <= 0 {
		f.retries = ledger.DefaultUpdateRetries
	}
	return f
}

var _ ledger.Store = (*Fake)(nil)

// Names mirror the blob store's layout, so errors read the same.
func manifestName(run string) string      { return run + "/manifest.json" }
func planName(run string, b int) string   { return fmt.Sprintf("%s/plan/%06d.json", run, b) }
func resultName(run string, i int) string { return fmt.Sprintf("%s/results/%07d.json", run, i) }
func blockName(run string, s ledger.Span) string {
	return fmt.Sprintf("%s/results/%07d+%d.json", run, s.First, s.Size)
}
func reportName(run string) string { return run + "/report.json" }
func doneName(run string, shard int) string {
	return fmt.Sprintf("%s/done/%04d", run, shard)
}
func scheduleName(name string) string { return "_schedules/" + name + ".json" }
func activeName(run string) string    { return activePrefix + run }

// activePrefix holds the index of runs that are not final.
const activePrefix = "_active/"

func partialName(run string, shard int) string {
	return fmt.Sprintf("%s/partials/%03d.json", run, shard)
}

// What the single-schedule ledger of earlier versions kept (see ReadLegacySchedule).
const (
	legacyActiveName = "active.json"
	legacyCursorName = "_schedule.json"
)

func storageErr(kind error, name string) error {
	return &ledger.StorageError{Name: name, Kind: kind, Status: statusOf(kind)}
}

func statusOf(kind error) int {
	switch kind {
	case ledger.ErrNotFound:
		return 404
	case ledger.ErrExists:
		return 409
	case ledger.ErrConflict:
		return 412
	}
	return 0
}

// Unensure makes the fake behave like a container that does not exist yet: every call fails
// with ErrNotFound until EnsureContainer.
func (f *Fake) Unensure() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ensured = false
}

func (f *Fake) EnsureContainer(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ensured = true
	return ctx.Err()
}

// check is called with f.mu held.
func (f *Fake) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !f.ensured {
		return storageErr(ledger.ErrNotFound, "container")
	}
	return nil
}

// put stores v under name; with ifAbsent it fails with ErrExists when name exists; with a
// non-empty ifMatch it fails with ErrConflict unless name is at that version.
func (f *Fake) put(ctx context.Context, name string, v any, ifAbsent bool, ifMatch ledger.ETag) (ledger.ETag, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode %s: %w", name, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(ctx); err != nil {
		return "", err
	}
	cur, exists := f.records[name]
	switch {
	case ifAbsent && exists:
		return "", storageErr(ledger.ErrExists, name)
	case ifMatch != "" && (!exists || cur.etag != ifMatch):
		return "", storageErr(ledger.ErrConflict, name)
	}
	f.version++
	etag := ledger.ETag(strconv.Itoa(f.version))
	f.records[name] = fakeRecord{data: b, etag: etag, modified: f.now().UTC()}
	return etag, nil
}

func (f *Fake) get(ctx context.Context, name string, v any) (ledger.ETag, int64, error) {
	f.mu.Lock()
	if err := f.check(ctx); err != nil {
		f.mu.Unlock()
		return "", 0, err
	}
	rec, ok := f.records[name]
	f.mu.Unlock()
	if !ok {
		return "", 0, storageErr(ledger.ErrNotFound, name)
	}
	if v != nil {
		if err := json.Unmarshal(rec.data, v); err != nil {
			return "", 0, fmt.Errorf("decode %s: %w", name, err)
		}
	}
	return rec.etag, int64(len(rec.data)), nil
}

func (f *Fake) CreateManifest(ctx context.Context, m *ledger.Manifest) error {
	if err := ledger.ValidateRunID(m.RunID); err != nil {
		return err
	}
	m.Version = ledger.ManifestVersion
	if m.Created.IsZero() {
		m.Created = f.now().UTC()
	}
	m.Updated = m.Created
	if !m.State.Final() {
		if _, err := f.put(ctx, activeName(m.RunID), ledger.ActiveOf(m), false, ""); err != nil {
			return fmt.Errorf("create manifest %s: index it: %w", m.RunID, err)
		}
	}
	if _, err := f.put(ctx, manifestName(m.RunID), m, true, ""); err != nil {
		return fmt.Errorf("create manifest %s: %w", m.RunID, err)
	}
	return nil
}

func (f *Fake) ListActive(ctx context.Context, fn func(ledger.ActiveRun) bool) error {
	f.mu.Lock()
	if err := f.check(ctx); err != nil {
		f.mu.Unlock()
		return err
	}
	var entries []ledger.ActiveRun
	for name, rec := range f.records {
		if strings.HasPrefix(name, activePrefix) && name != backfillName {
			var a ledger.ActiveRun
			if err := json.Unmarshal(rec.data, &a); err != nil {
				f.mu.Unlock()
				return fmt.Errorf("decode %s: %w", name, err)
			}
			entries = append(entries, a)
		}
	}
	f.mu.Unlock()
	slices.SortFunc(entries, func(a, b ledger.ActiveRun) int { return strings.Compare(a.Run, b.Run) })
	for _, a := range entries {
		if !fn(a) {
			return nil
		}
	}
	return nil
}

func (f *Fake) AddActive(ctx context.Context, a ledger.ActiveRun) error {
	if err := ledger.ValidateRunID(a.Run); err != nil {
		return err
	}
	_, err := f.put(ctx, activeName(a.Run), a, false, "")
	return err
}

// backfillName keeps the index's backfill state beside its entries.
const backfillName = activePrefix + "_backfill.json"

func (f *Fake) ReadBackfill(ctx context.Context) (ledger.Backfill, error) {
	return readState[ledger.Backfill](ctx, f, backfillName)
}

// readState reads a bookkeeping record (the zero T when there is none).
func readState[T any](ctx context.Context, f *Fake, name string) (T, error) {
	var v T
	if _, _, err := f.get(ctx, name, &v); err != nil && !errors.Is(err, ledger.ErrNotFound) {
		return v, err
	}
	return v, nil
}

func (f *Fake) WriteBackfill(ctx context.Context, b ledger.Backfill) error {
	_, err := f.put(ctx, backfillName, b, false, "")
	return err
}

func (f *Fake) RemoveActive(ctx context.Context, run string) error {
	if err := ledger.ValidateRunID(run); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(ctx); err != nil {
		return err
	}
	delete(f.records, activeName(run))
	return nil
}

func (f *Fake) ReadManifest(ctx context.Context, run string) (ledger.Manifest, error) {
	m, _, err := f.readManifest(ctx, run)
	return m, err
}

func (f *Fake) readManifest(ctx context.Context, run string) (ledger.Manifest, ledger.ETag, error) {
	var m ledger.Manifest
	if err := ledger.ValidateRunID(run); err != nil {
		return m, "", err
	}
	etag, _, err := f.get(ctx, manifestName(run), &m)
	if err != nil {
		return m, "", fmt.Errorf("read manifest %s: %w", run, err)
	}
	return m, etag, nil
}

func (f *Fake) UpdateManifest(ctx context.Context, run string, epoch int64, fn func(*ledger.Manifest) error) (ledger.Manifest, error) {
	for attempt := 0; ; attempt++ {
		m, etag, err := f.readManifest(ctx, run)
		if err != nil {
			return m, err
		}
		if epoch != ledger.NoFence && m.Epoch > epoch {
			return m, fmt.Errorf("update manifest %s at epoch %d (run is at %d): %w", run, epoch, m.Epoch, ledger.ErrFenced)
		}
		wasFinal := m.State.Final()
		if err := fn(&m); errors.Is(err, ledger.ErrNoChange) {
			return m, nil
		} else if err != nil {
			return m, err
		}
		m.Updated = f.now().UTC()
		_, err = f.put(ctx, manifestName(run), &m, false, etag)
		if err == nil {
			if m.State.Final() && !wasFinal {
				_ = f.RemoveActive(ctx, run) // an entry left behind is repaired by its readers
			}
			return m, nil
		}
		if !isConflict(err) {
			return m, fmt.Errorf("update manifest %s: %w", run, err)
		}
		if attempt+1 >= f.retries {
			return m, fmt.Errorf("update manifest %s: %d attempts: %w", run, attempt+1, ledger.ErrConflict)
		}
	}
}

func (f *Fake) PutPlanBatch(ctx context.Context, run string, b ledger.PlanBatch) error {
	if _, err := f.put(ctx, planName(run, b.Batch), b, true, ""); err != nil {
		return fmt.Errorf("store plan batch %s/%d: %w", run, b.Batch, err)
	}
	return nil
}

func (f *Fake) ReadPlanBatch(ctx context.Context, run string, batch int) (ledger.PlanBatch, error) {
	var b ledger.PlanBatch
	if _, _, err := f.get(ctx, planName(run, batch), &b); err != nil {
		return b, fmt.Errorf("read plan batch %s/%d: %w", run, batch, err)
	}
	return b, nil
}

func (f *Fake) PutResult(ctx context.Context, r ledger.Result) error {
	if _, err := f.put(ctx, resultName(r.Run, r.Index), r, true, ""); err != nil {
		return fmt.Errorf("record result %s/%d: %w", r.Run, r.Index, err)
	}
	return nil
}

func (f *Fake) ReadResult(ctx context.Context, run string, index int) (ledger.Result, error) {
	var r ledger.Result
	if _, _, err := f.get(ctx, resultName(run, index), &r); err != nil {
		return r, fmt.Errorf("read result %s/%d: %w", run, index, err)
	}
	return r, nil
}

func (f *Fake) PutBlock(ctx context.Context, b ledger.Block) error {
	if err := b.Validate(); err != nil {
		return err
	}
	if _, err := f.put(ctx, blockName(b.Run, b.Span), b, true, ""); err != nil {
		return fmt.Errorf("record results of %s/%s: %w", b.Run, b.Span, err)
	}
	return nil
}

func (f *Fake) ReadBlock(ctx context.Context, run string, sp ledger.Span) (ledger.Block, error) {
	var b ledger.Block
	if _, _, err := f.get(ctx, blockName(run, sp), &b); err != nil {
		return b, fmt.Errorf("read results of %s/%s: %w", run, sp, err)
	}
	return b, nil
}

// ListResults lists results of their own and blocks' members, as the blob store's listing
// does from the blocks' metadata.
func (f *Fake) ListResults(ctx context.Context, run string, fn func(ledger.ResultRef) error) error {
	prefix := run + "/results/"
	f.mu.Lock()
	if err := f.check(ctx); err != nil {
		f.mu.Unlock()
		return err
	}
	var refs []ledger.ResultRef
	for name, rec := range f.records {
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		rest = strings.TrimSuffix(rest, ".json")
		if strings.Contains(rest, "+") {
			var b ledger.Block
			if err := json.Unmarshal(rec.data, &b); err != nil {
				f.mu.Unlock()
				return fmt.Errorf("decode %s: %w", name, err)
			}
			for _, r := range b.Results {
				refs = append(refs, ledger.ResultRef{Index: r.Index, Block: b.Span, Modified: rec.modified})
			}
			continue
		}
		if i, err := strconv.Atoi(rest); err == nil {
			refs = append(refs, ledger.ResultRef{Index: i, Modified: rec.modified})
		}
	}
	f.mu.Unlock()
	slices.SortStableFunc(refs, func(a, b ledger.ResultRef) int { return a.Index - b.Index })
	for _, r := range refs {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

func (f *Fake) AppendDone(ctx context.Context, run string, layout ledger.DoneLayout, epoch int64, indexes ...int) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(ctx); err != nil {
		return 0, err
	}
	shard, err := layout.ShardOf(indexes)
	if err != nil {
		return 0, err
	}
	name := doneName(run, shard)
	f.done[name] = append(f.done[name], indexes...)
	return int64(len(f.done[name])), nil
}

// CreateDone checks ctx and the store's availability: a shard without records and one not
// created read alike here.
func (f *Fake) CreateDone(ctx context.Context, run string, shard int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.check(ctx)
}

func (f *Fake) DoneCount(ctx context.Context, run string, shard int) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(ctx); err != nil {
		return 0, err
	}
	return int64(len(f.done[doneName(run, shard)])), nil
}

func (f *Fake) ReadDone(ctx context.Context, run string, shard int) ([]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(ctx); err != nil {
		return nil, err
	}
	return slices.Clone(f.done[doneName(run, shard)]), nil
}

func (f *Fake) AppendFailed(ctx context.Context, run string, indexes ...int) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(ctx); err != nil {
		return 0, err
	}
	name := run + "/failed"
	f.done[name] = append(f.done[name], indexes...)
	return int64(len(f.done[name])), nil
}

func (f *Fake) ReadFailed(ctx context.Context, run string) ([]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(ctx); err != nil {
		return nil, err
	}
	return slices.Clone(f.done[run+"/failed"]), nil
}

func (f *Fake) ClaimReport(ctx context.Context, r ledger.Report) (ledger.ETag, error) {
	etag, err := f.put(ctx, reportName(r.Run), r, true, "")
	if err != nil {
		return "", fmt.Errorf("claim report %s: %w", r.Run, err)
	}
	return etag, nil
}

func (f *Fake) WriteReport(ctx context.Context, r ledger.Report, etag ledger.ETag) (ledger.ETag, error) {
	if etag == "" {
		return "", fmt.Errorf("write report %s: no version to write against: %w", r.Run, ledger.ErrConflict)
	}
	next, err := f.put(ctx, reportName(r.Run), r, false, etag)
	if err != nil {
		return "", fmt.Errorf("write report %s: %w", r.Run, err)
	}
	return next, nil
}

func (f *Fake) ReadReport(ctx context.Context, run string) (ledger.Report, ledger.ETag, error) {
	var r ledger.Report
	etag, _, err := f.get(ctx, reportName(run), &r)
	if err != nil {
		return r, "", fmt.Errorf("read report %s: %w", run, err)
	}
	return r, etag, nil
}

func (f *Fake) ReadReportBounded(ctx context.Context, run string, maxBytes int64) (ledger.Report, ledger.ReportRead, error) {
	var r ledger.Report
	var info ledger.ReportRead
	if err := ledger.ValidateRunKey(run); err != nil {
		return r, info, err
	}
	_, size, err := f.get(ctx, reportName(run), nil)
	if err != nil {
		return r, info, fmt.Errorf("read report %s: %w", run, err)
	}
	info.Size = size
	if size > maxBytes {
		return r, info, nil
	}
	if _, _, err := f.get(ctx, reportName(run), &r); err != nil {
		return r, info, fmt.Errorf("read report %s: %w", run, err)
	}
	info.Decoded = true
	return r, info, nil
}

func (f *Fake) ListRuns(ctx context.Context, fn func(run string) bool) error {
	f.mu.Lock()
	if err := f.check(ctx); err != nil {
		f.mu.Unlock()
		return err
	}
	seen := map[string]bool{}
	for name := range f.records {
		add(seen, name)
	}
	for name := range f.done {
		add(seen, name)
	}
	f.mu.Unlock()
	runs := make([]string, 0, len(seen))
	for r := range seen {
		runs = append(runs, r)
	}
	sort.Strings(runs)
	for _, r := range runs {
		if !fn(r) {
			return nil
		}
	}
	return nil
}

// add records the run a blob name belongs to, as a hierarchical listing would show it.
func add(seen map[string]bool, name string) {
	dir, _, ok := strings.Cut(name, "/")
	if ok && ledger.ValidateRunID(dir) == nil {
		seen[dir] = true
	}
}

func (f *Fake) ReadSchedule(ctx context.Context, name string) (ledger.ScheduleState, error) {
	var st ledger.ScheduleState
	if err := ledger.ValidateScheduleName(name); err != nil {
		return st, err
	}
	if _, _, err := f.get(ctx, scheduleName(name), &st); err != nil {
		return st, fmt.Errorf("read schedule %s: %w", name, err)
	}
	return st, nil
}

func (f *Fake) UpdateSchedule(ctx context.Context, name string, fn func(*ledger.ScheduleState) error) (ledger.ScheduleState, error) {
	if err := ledger.ValidateScheduleName(name); err != nil {
		return ledger.ScheduleState{}, err
	}
	for attempt := 0; ; attempt++ {
		var st ledger.ScheduleState
		etag, _, err := f.get(ctx, scheduleName(name), &st)
		absent := isNotFound(err)
		switch {
		case absent:
			st = ledger.ScheduleState{Schedule: name}
		case err != nil:
			return st, fmt.Errorf("read schedule %s: %w", name, err)
		}
		if err := fn(&st); errors.Is(err, ledger.ErrNoChange) {
			return st, nil
		} else if err != nil {
			return st, err
		}
		st.Schedule, st.Updated = name, f.now().UTC()
		_, err = f.put(ctx, scheduleName(name), &st, absent, etagIf(!absent, etag))
		if err == nil {
			return st, nil
		}
		if !isConflict(err) && !isExists(err) {
			return st, fmt.Errorf("update schedule %s: %w", name, err)
		}
		if attempt+1 >= f.retries {
			return st, fmt.Errorf("update schedule %s: %d attempts: %w", name, attempt+1, ledger.ErrConflict)
		}
	}
}

// SetLegacySchedule writes what a single-schedule ledger of earlier versions kept (its cursor,
// its latest run), as that code wrote it: for tests of the upgrade.
func (f *Fake) SetLegacySchedule(ctx context.Context, l ledger.LegacySchedule) error {
	if !l.Cursor.IsZero() {
		if _, err := f.put(ctx, legacyCursorName, map[string]any{"last": l.Cursor.UTC(), "updated": l.Cursor.UTC()}, false, ""); err != nil {
			return err
		}
	}
	if l.Latest != "" {
		if _, err := f.put(ctx, legacyActiveName, map[string]any{"run": l.Latest, "epoch": 1, "started": l.Cursor.UTC()}, false, ""); err != nil {
			return err
		}
	}
	return nil
}

func (f *Fake) ReadLegacySchedule(ctx context.Context) (ledger.LegacySchedule, bool, error) {
	var (
		l      ledger.LegacySchedule
		cursor struct {
			Last time.Time `json:"last"`
		}
		active struct {
			Run string `json:"run"`
		}
	)
	found := false
	for _, r := range []struct {
		name string
		v    any
	}{{legacyCursorName, &cursor}, {legacyActiveName, &active}} {
		if _, _, err := f.get(ctx, r.name, r.v); err == nil {
			found = true
		} else if !isNotFound(err) {
			return l, false, fmt.Errorf("read the legacy schedule: %w", err)
		}
	}
	if !cursor.Last.IsZero() {
		l.Cursor = cursor.Last.UTC()
	}
	l.Latest = active.Run
	return l, found, nil
}

func etagIf(ok bool, e ledger.ETag) ledger.ETag {
	if ok {
		return e
	}
	return ""
}

func isNotFound(err error) bool { return errors.Is(err, ledger.ErrNotFound) }
func isExists(err error) bool   { return errors.Is(err, ledger.ErrExists) }
func isConflict(err error) bool { return errors.Is(err, ledger.ErrConflict) }

func (f *Fake) ReadPartial(ctx context.Context, run string, shard int) (ledger.Partial, ledger.ETag, error) {
	var p ledger.Partial
	if err := ledger.ValidateRunID(run); err != nil {
		return p, "", err
	}
	etag, _, err := f.get(ctx, partialName(run, shard), &p)
	if err != nil {
		return p, "", fmt.Errorf("read partial %s/%d: %w", run, shard, err)
	}
	return p, etag, nil
}

func (f *Fake) WritePartial(ctx context.Context, p ledger.Partial, etag ledger.ETag) error {
	if err := ledger.ValidateRunID(p.Run); err != nil {
		return err
	}
	if _, err := f.put(ctx, partialName(p.Run, p.Shard), p, etag == "", etag); err != nil {
		return fmt.Errorf("write partial %s/%d: %w", p.Run, p.Shard, err)
	}
	return nil
}

// ListRunPage lists at most max run IDs after the page token (the fake's token is the last ID
// it returned, behind a marker no run ID has).
func (f *Fake) ListRunPage(ctx context.Context, token string, max int) ([]string, string, error) {
	after, _ := strings.CutPrefix(token, pageTokenPrefix)
	var runs []string
	more := false
	err := f.ListRuns(ctx, func(run string) bool {
		if run <= after {
			return true
		}
		if len(runs) == max {
			more = true
			return false
		}
		runs = append(runs, run)
		return true
	})
	if err != nil || !more {
		return runs, "", err
	}
	return runs, pageTokenPrefix + runs[len(runs)-1], nil
}

const pageTokenPrefix = "after:"

// DeleteRun deletes every record of run, its manifest last.
func (f *Fake) DeleteRun(ctx context.Context, run string) error {
	return f.DeleteRunUntil(ctx, run, -1)
}

// DeleteRunUntil deletes run's records as DeleteRun does (in name order, the manifest last) but
// stops after n of them when n >= 0: what a DeleteRun cut short by a crash leaves behind.
func (f *Fake) DeleteRunUntil(ctx context.Context, run string, n int) error {
	if err := ledger.ValidateRunID(run); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(ctx); err != nil {
		return err
	}
	var names []string
	for name := range f.records {
		if strings.HasPrefix(name, run+"/") && name != manifestName(run) {
			names = append(names, name)
		}
	}
	for name := range f.done {
		if strings.HasPrefix(name, run+"/") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	names = append(names, manifestName(run))
	for k, name := range names {
		if k == n {
			return nil
		}
		delete(f.records, name)
		delete(f.done, name)
	}
	return nil
}

// sweepName keeps the retention sweep's position beside the schedules' states.
const sweepName = "_retention.json"

func (f *Fake) ReadSweep(ctx context.Context) (ledger.Sweep, error) {
	return readState[ledger.Sweep](ctx, f, sweepName)
}

func (f *Fake) WriteSweep(ctx context.Context, s ledger.Sweep) error {
	_, err := f.put(ctx, sweepName, s, false, "")
	return err
}
