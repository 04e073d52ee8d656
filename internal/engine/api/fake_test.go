package api

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/lib/ncrontab"
)

// tickRunID is the run ID of an occurrence of the schedule the settings declare.
func tickRunID(occ time.Time) string { return ledger.ScheduleRunID(coordinator.LegacySchedule, occ) }

// fakeLedger is an in-memory Ledger. Reads of a manifest are counted.
type fakeLedger struct {
	mu        sync.Mutex
	manifests map[string]ledger.Manifest
	results   map[string]int
	done      map[string]map[int]int64
	reports   map[string][]byte
	reads     map[string]int
	listErr   error
	// records are the results ReadResult returns (by run, then index).
	records     map[string]map[int]ledger.Result
	resultReads int
	// blocks are the results recorded in blocks (by run), listed after the counted ones.
	blocks     map[string][]ledger.Block
	blockReads int
	// doneReads counts DoneCount calls.
	doneReads int
	// schedules are the schedules' states; scheduleErr fails ReadSchedule.
	schedules   map[string]ledger.ScheduleState
	scheduleErr error
}

func newFakeLedger() *fakeLedger {
	return &fakeLedger{manifests: map[string]ledger.Manifest{}, results: map[string]int{},
		done: map[string]map[int]int64{}, reports: map[string][]byte{}, reads: map[string]int{},
		records: map[string]map[int]ledger.Result{}, schedules: map[string]ledger.ScheduleState{},
		blocks: map[string][]ledger.Block{}}
}

func (f *fakeLedger) ReadSchedule(ctx context.Context, name string) (ledger.ScheduleState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.scheduleErr != nil {
		return ledger.ScheduleState{}, f.scheduleErr
	}
	st, ok := f.schedules[name]
	if !ok {
		return st, fmt.Errorf("read schedule %s: %w", name, ledger.ErrNotFound)
	}
	return st, nil
}

// updateSchedule changes a schedule's state as ledger.Store.UpdateSchedule does.
func (f *fakeLedger) updateSchedule(name string, fn func(*ledger.ScheduleState)) ledger.ScheduleState {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.schedules[name]
	if !ok {
		st = ledger.ScheduleState{Schedule: name}
	}
	fn(&st)
	f.schedules[name] = st
	return st
}

func (f *fakeLedger) put(m ledger.Manifest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.manifests[m.RunID] = m
}

func (f *fakeLedger) ReadManifest(ctx context.Context, run string) (ledger.Manifest, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads[run]++ // counted before validation: tests check the API never asks for a bad ID
	if err := ledger.ValidateRunID(run); err != nil {
		return ledger.Manifest{}, err
	}
	m, ok := f.manifests[run]
	if !ok {
		return m, fmt.Errorf("read manifest %s: %w", run, ledger.ErrNotFound)
	}
	return m, nil
}

func (f *fakeLedger) ReadReportBounded(ctx context.Context, run string, maxBytes int64) (ledger.Report, ledger.ReportRead, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.reports[run]
	if !ok {
		return ledger.Report{}, ledger.ReportRead{}, ledger.ErrNotFound
	}
	info := ledger.ReportRead{Size: int64(len(b))}
	if info.Size > maxBytes {
		return ledger.Report{}, info, nil
	}
	var r ledger.Report
	if err := json.Unmarshal(b, &r); err != nil {
		return r, info, err
	}
	info.Decoded = true
	return r, info, nil
}

func (f *fakeLedger) ListResults(ctx context.Context, run string, fn func(ledger.ResultRef) error) error {
	f.mu.Lock()
	n := f.results[run]
	var refs []ledger.ResultRef
	for i := range n {
		refs = append(refs, ledger.ResultRef{Index: i})
	}
	for _, b := range f.blocks[run] {
		for _, r := range b.Results {
			refs = append(refs, ledger.ResultRef{Index: r.Index, Block: b.Span})
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

func (f *fakeLedger) putResult(r ledger.Result) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.records[r.Run] == nil {
		f.records[r.Run] = map[int]ledger.Result{}
	}
	f.records[r.Run][r.Index] = r
}

func (f *fakeLedger) ReadBlock(ctx context.Context, run string, sp ledger.Span) (ledger.Block, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.blockReads++
	for _, b := range f.blocks[run] {
		if b.Span == sp {
			return b, nil
		}
	}
	return ledger.Block{}, fmt.Errorf("read results of %s/%s: %w", run, sp, ledger.ErrNotFound)
}

func (f *fakeLedger) ReadResult(ctx context.Context, run string, index int) (ledger.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resultReads++
	r, ok := f.records[run][index]
	if !ok {
		return r, fmt.Errorf("read result %s/%d: %w", run, index, ledger.ErrNotFound)
	}
	return r, nil
}

func (f *fakeLedger) DoneCount(ctx context.Context, run string, shard int) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.doneReads++
	return f.done[run][shard], nil
}

func (f *fakeLedger) ListRuns(ctx context.Context, fn func(string) bool) error {
	f.mu.Lock()
	ids := make([]string, 0, len(f.manifests))
	for id := range f.manifests {
		ids = append(ids, id)
	}
	err := f.listErr
	f.mu.Unlock()
	if err != nil {
		return err
	}
	sort.Strings(ids)
	for _, id := range ids {
		if !fn(id) {
			return nil
		}
	}
	return nil
}

// fakeStarter answers StartManual with a scripted function.
type fakeStarter struct {
	fn    func(req coordinator.ManualRequest) (coordinator.Outcome, error)
	calls []coordinator.ManualRequest
	mu    sync.Mutex
}

func (s *fakeStarter) StartManual(ctx context.Context, req coordinator.ManualRequest) (coordinator.Outcome, error) {
	s.mu.Lock()
	s.calls = append(s.calls, req)
	s.mu.Unlock()
	return s.fn(req)
}

// cron is a coordinator.Cron: an NCRONTAB expression in a time zone.
type cron struct {
	e   ncrontab.Expr
	loc *time.Location
}

func (c cron) Next(t time.Time) (time.Time, bool) { return c.e.Next(t, c.loc) }
func (c cron) Prev(t time.Time) (time.Time, bool) { return c.e.Prev(t, c.loc) }
func (c cron) String() string                     { return c.e.String() }

// testSchedule is a schedule of job synthetic firing at expr in zone ("" is UTC), with the
// coordinator's defaults.
func testSchedule(t testing.TB, name, expr, zone string) coordinator.Schedule {
	t.Helper()
	e, err := ncrontab.Parse(expr)
	if err != nil {
		t.Fatal(err)
	}
	loc := time.UTC
	if zone != "" {
		if loc, err = time.LoadLocation(zone); err != nil {
			t.Fatal(err)
		}
	}
	return coordinator.Schedule{Name: name, Job: "synthetic", Cron: cron{e, loc}, TimeZone: loc.String(), Description: e.Describe(),
		Overlap: config.OverlapSkip, CatchUp: config.DefaultCatchUp}
}

// fakeScheduler serves the schedules; RunNow answers with runNow, and Pause and Resume change
// the fake ledger's states as the coordinator does (failing with err when set).
type fakeScheduler struct {
	mu        sync.Mutex
	schedules []coordinator.Schedule
	l         *fakeLedger
	now       time.Time
	runNow    func(schedule, key string) (coordinator.Outcome, error)
	err       error
	calls     []string // "runs <schedule> <key>", "pause <schedule> <note> by <by>", "resume <schedule> by <by>"
}

func (s *fakeScheduler) Schedules() []coordinator.Schedule {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]coordinator.Schedule(nil), s.schedules...)
}

func (s *fakeScheduler) record(call string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, call)
}

func (s *fakeScheduler) called() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

func (s *fakeScheduler) RunNow(ctx context.Context, schedule, key string) (coordinator.Outcome, error) {
	s.record("runs " + schedule + " " + key)
	return s.runNow(schedule, key)
}

func (s *fakeScheduler) Pause(ctx context.Context, schedule, note, by string) (ledger.ScheduleState, error) {
	s.record("pause " + schedule + " " + note + " by " + by)
	if s.err != nil {
		return ledger.ScheduleState{}, s.err
	}
	return s.l.updateSchedule(schedule, func(st *ledger.ScheduleState) {
		st.Paused, st.Note, st.PausedBy, st.PausedAt = true, note, by, s.now
	}), nil
}

func (s *fakeScheduler) Resume(ctx context.Context, schedule, by string) (ledger.ScheduleState, error) {
	s.record("resume " + schedule + " by " + by)
	if s.err != nil {
		return ledger.ScheduleState{}, s.err
	}
	return s.l.updateSchedule(schedule, func(st *ledger.ScheduleState) {
		st.Paused, st.Note, st.PausedBy, st.PausedAt, st.Streak = false, "", "", time.Time{}, nil
	}), nil
}

type fakeLeader struct {
	st  election.LeaderState
	err error
}

func (l *fakeLeader) State(ctx context.Context) (election.LeaderState, error) { return l.st, l.err }

func newTestAPI(t *testing.T, l *fakeLedger, s Starter, ld *fakeLeader) *API {
	t.Helper()
	if ld == nil {
		ld = &fakeLeader{}
	}
	a, err := New(Config{Starter: s, Ledger: l, Leader: ld, KeyWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// decodeReply re-encodes a reply's JSON value into a generic map, as a client would see it.
func decodeReply(t *testing.T, r Reply) map[string]any {
	t.Helper()
	b, err := json.Marshal(r.JSON)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("reply %s is not a JSON object: %v", b, err)
	}
	return v
}

func errCode(v map[string]any) string {
	e, _ := v["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

func manifest(id string, state ledger.State, created time.Time, parts int) ledger.Manifest {
	return ledger.Manifest{RunID: id, Trigger: ledger.TriggerTimer, Epoch: 3, State: state, Job: "synthetic",
		Partitions: parts, PlanDone: state != ledger.StatePlanning && state != ledger.StateEnqueuing,
		Checkpoint: ledger.Checkpoint{Next: parts}, Created: created, Updated: created}
}
