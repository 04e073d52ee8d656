package ledgertest

import (
	"context"
	"fmt"
	"sync"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// Fault is what Faulty does to one call.
type Fault int

const (
	// Pass lets the call through.
	Pass Fault = iota
	// Fail fails the call before it reaches the store (a 503, a refused connection): nothing
	// happens, and the caller gets ErrUnavailable.
	Fail
	// LoseResponse lets the call take effect and then fails it with ErrUnavailable, as when
	// the response is lost on the way back (a timeout after the write landed).
	LoseResponse
	// LoseAndRetry lets the call take effect, loses the response, and makes the call again,
	// returning the second answer: what a storage client's automatic retry does (a create
	// then answers ErrExists for its own write).
	LoseAndRetry
)

// Faulty wraps a ledger.Store and injects faults chosen per call by Decide (op is the method
// name, e.g. "CreateManifest"; name the run or record it concerns). It makes failure tests
// fast and deterministic on the fake, and works over any store.
type Faulty struct {
	ledger.Store
	// Decide picks the fault for a call; nil passes every call.
	Decide func(op, name string) Fault

	mu       sync.Mutex
	injected map[Fault]int
}

var _ ledger.Store = (*Faulty)(nil)

// Injected counts the faults injected so far, by kind.
func (f *Faulty) Injected(kind Fault) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.injected[kind]
}

// FaultOnce returns a Decide that injects kind into the first call of op on name (any name
// when name is ""), and passes everything else.
func FaultOnce(kind Fault, op, name string) func(string, string) Fault {
	var once sync.Once
	return func(o, n string) Fault {
		fault := Pass
		if o == op && (name == "" || n == name) {
			once.Do(func() { fault = kind })
		}
		return fault
	}
}

func unavailable(op, name string, k Fault) error {
	what := "injected: connection refused"
	if k != Fail {
		what = "injected: response lost"
	}
	return fmt.Errorf("%s %s: %w", op, name, &ledger.StorageError{Name: name, Kind: ledger.ErrUnavailable, Cause: fmt.Errorf("%s", what)})
}

// call runs fn under the fault Decide picks; fn is the real call (it may run twice).
func (f *Faulty) call(op, name string, fn func() error) error {
	k := Pass
	if f.Decide != nil {
		k = f.Decide(op, name)
	}
	if k != Pass {
		f.mu.Lock()
		if f.injected == nil {
			f.injected = map[Fault]int{}
		}
		f.injected[k]++
		f.mu.Unlock()
	}
	switch k {
	case Fail:
		return unavailable(op, name, k)
	case LoseResponse:
		_ = fn()
		return unavailable(op, name, k)
	case LoseAndRetry:
		_ = fn()
		return fn()
	}
	return fn()
}

func (f *Faulty) EnsureContainer(ctx context.Context) error {
	return f.call("EnsureContainer", "", func() error { return f.Store.EnsureContainer(ctx) })
}

func (f *Faulty) CreateManifest(ctx context.Context, m *ledger.Manifest) error {
	return f.call("CreateManifest", m.RunID, func() error { c := *m; err := f.Store.CreateManifest(ctx, &c); *m = c; return err })
}

func (f *Faulty) ReadManifest(ctx context.Context, run string) (m ledger.Manifest, err error) {
	err = f.call("ReadManifest", run, func() (e error) { m, e = f.Store.ReadManifest(ctx, run); return })
	return
}

func (f *Faulty) UpdateManifest(ctx context.Context, run string, epoch int64, fn func(*ledger.Manifest) error) (m ledger.Manifest, err error) {
	err = f.call("UpdateManifest", run, func() (e error) { m, e = f.Store.UpdateManifest(ctx, run, epoch, fn); return })
	return
}

func (f *Faulty) PutPlanBatch(ctx context.Context, run string, b ledger.PlanBatch) error {
	return f.call("PutPlanBatch", run, func() error { return f.Store.PutPlanBatch(ctx, run, b) })
}

func (f *Faulty) ReadPlanBatch(ctx context.Context, run string, batch int) (b ledger.PlanBatch, err error) {
	err = f.call("ReadPlanBatch", run, func() (e error) { b, e = f.Store.ReadPlanBatch(ctx, run, batch); return })
	return
}

func (f *Faulty) PutResult(ctx context.Context, r ledger.Result) error {
	return f.call("PutResult", r.Run, func() error { return f.Store.PutResult(ctx, r) })
}

func (f *Faulty) ReadResult(ctx context.Context, run string, index int) (r ledger.Result, err error) {
	err = f.call("ReadResult", run, func() (e error) { r, e = f.Store.ReadResult(ctx, run, index); return })
	return
}

func (f *Faulty) PutBlock(ctx context.Context, b ledger.Block) error {
	return f.call("PutBlock", b.Run, func() error { return f.Store.PutBlock(ctx, b) })
}

func (f *Faulty) ReadBlock(ctx context.Context, run string, s ledger.Span) (b ledger.Block, err error) {
	err = f.call("ReadBlock", run, func() (e error) { b, e = f.Store.ReadBlock(ctx, run, s); return })
	return
}

func (f *Faulty) ListResults(ctx context.Context, run string, fn func(ledger.ResultRef) error) error {
	return f.call("ListResults", run, func() error { return f.Store.ListResults(ctx, run, fn) })
}

func (f *Faulty) AppendDone(ctx context.Context, run string, layout ledger.DoneLayout, epoch int64, indexes ...int) (n int64, err error) {
	err = f.call("AppendDone", run, func() (e error) { n, e = f.Store.AppendDone(ctx, run, layout, epoch, indexes...); return })
	return
}

func (f *Faulty) CreateDone(ctx context.Context, run string, shard int) error {
	return f.call("CreateDone", run, func() error { return f.Store.CreateDone(ctx, run, shard) })
}

func (f *Faulty) DoneCount(ctx context.Context, run string, shard int) (n int64, err error) {
	err = f.call("DoneCount", run, func() (e error) { n, e = f.Store.DoneCount(ctx, run, shard); return })
	return
}

func (f *Faulty) ReadDone(ctx context.Context, run string, shard int) (idx []int, err error) {
	err = f.call("ReadDone", run, func() (e error) { idx, e = f.Store.ReadDone(ctx, run, shard); return })
	return
}

func (f *Faulty) AppendFailed(ctx context.Context, run string, indexes ...int) (n int64, err error) {
	err = f.call("AppendFailed", run, func() (e error) { n, e = f.Store.AppendFailed(ctx, run, indexes...); return })
	return
}

func (f *Faulty) ReadFailed(ctx context.Context, run string) (idx []int, err error) {
	err = f.call("ReadFailed", run, func() (e error) { idx, e = f.Store.ReadFailed(ctx, run); return })
	return
}

func (f *Faulty) ClaimReport(ctx context.Context, r ledger.Report) (etag ledger.ETag, err error) {
	err = f.call("ClaimReport", r.Run, func() (e error) { etag, e = f.Store.ClaimReport(ctx, r); return })
	return
}

func (f *Faulty) WriteReport(ctx context.Context, r ledger.Report, etag ledger.ETag) (next ledger.ETag, err error) {
	err = f.call("WriteReport", r.Run, func() (e error) { next, e = f.Store.WriteReport(ctx, r, etag); return })
	return
}

func (f *Faulty) ReadReport(ctx context.Context, run string) (r ledger.Report, etag ledger.ETag, err error) {
	err = f.call("ReadReport", run, func() (e error) { r, etag, e = f.Store.ReadReport(ctx, run); return })
	return
}

func (f *Faulty) ReadReportBounded(ctx context.Context, run string, maxBytes int64) (r ledger.Report, info ledger.ReportRead, err error) {
	err = f.call("ReadReportBounded", run, func() (e error) { r, info, e = f.Store.ReadReportBounded(ctx, run, maxBytes); return })
	return
}

func (f *Faulty) ListRuns(ctx context.Context, fn func(string) bool) error {
	return f.call("ListRuns", "", func() error { return f.Store.ListRuns(ctx, fn) })
}

func (f *Faulty) ReadSchedule(ctx context.Context, name string) (st ledger.ScheduleState, err error) {
	err = f.call("ReadSchedule", name, func() (e error) { st, e = f.Store.ReadSchedule(ctx, name); return })
	return
}

func (f *Faulty) UpdateSchedule(ctx context.Context, name string, fn func(*ledger.ScheduleState) error) (st ledger.ScheduleState, err error) {
	err = f.call("UpdateSchedule", name, func() (e error) { st, e = f.Store.UpdateSchedule(ctx, name, fn); return })
	return
}

func (f *Faulty) ReadLegacySchedule(ctx context.Context) (l ledger.LegacySchedule, ok bool, err error) {
	err = f.call("ReadLegacySchedule", "", func() (e error) { l, ok, e = f.Store.ReadLegacySchedule(ctx); return })
	return
}

func (f *Faulty) ReadPartial(ctx context.Context, run string, shard int) (p ledger.Partial, etag ledger.ETag, err error) {
	err = f.call("ReadPartial", run, func() (e error) { p, etag, e = f.Store.ReadPartial(ctx, run, shard); return })
	return
}

func (f *Faulty) WritePartial(ctx context.Context, p ledger.Partial, etag ledger.ETag) error {
	return f.call("WritePartial", p.Run, func() error { return f.Store.WritePartial(ctx, p, etag) })
}

func (f *Faulty) ListRunPage(ctx context.Context, token string, max int) (runs []string, next string, err error) {
	err = f.call("ListRunPage", "", func() (e error) { runs, next, e = f.Store.ListRunPage(ctx, token, max); return })
	return
}

func (f *Faulty) DeleteRun(ctx context.Context, run string) error {
	return f.call("DeleteRun", run, func() error { return f.Store.DeleteRun(ctx, run) })
}
