package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/ledger"
)

// Schedule views: a schedule as the app declares it (coordinator.Schedule) joined with what the
// ledger keeps about it (ledger.ScheduleState) and the records of its latest occurrences.

// Occurrence limits.
const (
	// MaxOccurrences bounds ?occurrences=N of one schedule (N point reads of a manifest, fewer
	// once cached).
	MaxOccurrences = 100
	// DefaultOccurrences is the strip of GET /api/schedules/{name} without ?occurrences.
	DefaultOccurrences = 20
	// MaxListOccurrences bounds ?occurrences=N of GET /api/schedules: N per schedule.
	MaxListOccurrences = 30
	// NextOccurrences is how many coming occurrences a schedule's view lists.
	NextOccurrences = 3
	// DefaultHeartbeat is Config.Heartbeat unless set: the Tick timer's default cadence.
	DefaultHeartbeat = time.Minute
	// OccurrenceGrace is added to the heartbeat: an occurrence younger than both, without a
	// record, is "pending" (the heartbeat that decides it may not have come yet).
	OccurrenceGrace = time.Minute
)

// ScheduleView is one schedule: how it is declared, what the ledger keeps about it, and (with
// ?occurrences=N) the records of its N latest occurrences.
type ScheduleView struct {
	Name   string          `json:"name"`
	Job    string          `json:"job"`
	Params json.RawMessage `json:"params,omitempty"`
	// JobError is set when the settings misconfigure the schedule's job: every occurrence is
	// recorded failed with this reason, and run now answers 400.
	JobError string `json:"jobError,omitempty"`
	// Expression is the six-field NCRONTAB expression, evaluated on the wall clock of
	// TimeZone (an IANA name); Description is the same in words.
	Expression  string `json:"expression"`
	Description string `json:"description"`
	TimeZone    string `json:"timeZone"`
	// Next lists the next NextOccurrences occurrences after Now.
	Next []NextView `json:"next"`
	// Overlap is skip, buffer-one or allow; CatchUp how late an occurrence may still start
	// (older ones are recorded missed); Jitter the bound of each start's delay.
	Overlap        string  `json:"overlap"`
	CatchUp        string  `json:"catchUp"`
	CatchUpSeconds float64 `json:"catchUpSeconds"`
	Jitter         string  `json:"jitter"`
	JitterSeconds  float64 `json:"jitterSeconds"`
	// Paused is true while the schedule starts no runs: paused by an operator (Note,
	// PausedBy, PausedAt, from the ledger) or by a setting (PausedBySetting names it), or
	// both. Its occurrences are recorded paused meanwhile.
	Paused          bool      `json:"paused"`
	Note            string    `json:"note,omitempty"`
	PausedBy        string    `json:"pausedBy,omitempty"`
	PausedAt        time.Time `json:"pausedAt,omitzero"`
	PausedBySetting string    `json:"pausedBySetting,omitempty"`
	// AutoPause is the schedule's auto-pause threshold: it pauses itself once that many of
	// its runs in a row have ended failed or timed out (0: never). PausedAutomatically is
	// true while such a pause holds (PausedBy ledger.AutoPauseBy, Note naming the runs), and
	// Streak lists the current streak's runs, oldest first, until a resume clears it.
	AutoPause           int          `json:"autoPause,omitempty"`
	PausedAutomatically bool         `json:"pausedAutomatically,omitempty"`
	Streak              []StreakView `json:"streak,omitempty"`
	// Cursor: every occurrence at or before it is decided (zero before the schedule's first
	// heartbeat).
	Cursor time.Time `json:"cursor,omitzero"`
	// LastRun is the run the schedule started last (an occurrence or a run now), as in the
	// listing; null when it has started none. QueuedRun is the run waiting for it (buffer-one).
	LastRun   *RunView `json:"lastRun"`
	QueuedRun string   `json:"queuedRun,omitempty"`
	// Occurrences are the latest occurrences at or before Now, newest first (with
	// ?occurrences=N).
	Occurrences []OccurrenceView `json:"occurrences,omitempty"`
	// Now is the server's clock when it computed Next and the occurrences.
	Now time.Time `json:"now"`
}

// StreakView is one run of a schedule's streak of failed or timed-out runs, and how it ended.
type StreakView struct {
	Run   string `json:"run"`
	State string `json:"state"`
}

// NextView is a coming occurrence: the instant in UTC, and the same instant on the schedule's
// wall clock (RFC 3339 with the zone's offset then) with the zone's abbreviation ("CET").
type NextView struct {
	UTC   time.Time `json:"utc"`
	Local time.Time `json:"local"`
	Zone  string    `json:"zone"`
}

// OccurrenceView is one past occurrence of a schedule and the ledger's record of it. Record is
// null when the ledger holds none, and a flag says why (docs/api.md): Deleted, at or before the
// schedule's retained horizon (ledger.ScheduleState.Retained), so its record may have been
// deleted by retention; BeforeLedger, before the schedule started (a new schedule's cursor
// starts when the instance of its first heartbeat started), so at or before the cursor and
// older than every record; Pending, after the cursor and younger than one heartbeat plus
// OccurrenceGrace; Undecided, after the cursor and older than that. None of them: a gap, an
// occurrence at or before the cursor whose record is gone.
type OccurrenceView struct {
	Occurrence time.Time `json:"occurrence"`
	// Local is the occurrence on the schedule's wall clock.
	Local        time.Time `json:"local"`
	Run          string    `json:"run"`
	Record       *RunView  `json:"record"`
	Pending      bool      `json:"pending,omitempty"`
	BeforeLedger bool      `json:"beforeLedger,omitempty"`
	Undecided    bool      `json:"undecided,omitempty"`
	Deleted      bool      `json:"deleted,omitempty"`
}

// parseOccurrences reads ?occurrences=: def when absent, else an integer from lo to hi.
func parseOccurrences(s string, def, lo, hi int) (int, error) {
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("occurrences must be an integer from %d to %d, got %q", lo, hi, s)
	}
	return n, nil
}

// readState reads the schedule's ledger state; known is false before its first heartbeat (or
// operator action).
func (a *API) readState(ctx context.Context, name string) (st ledger.ScheduleState, known bool, err error) {
	st, err = a.cfg.Ledger.ReadSchedule(ctx, name)
	if errors.Is(err, ledger.ErrNotFound) {
		return ledger.ScheduleState{Schedule: name}, false, nil
	}
	return st, err == nil, err
}

// scheduleView joins s with its state st and adds the records of its nOcc latest occurrences:
// one read for its last run (none once it is final and read before) and one per occurrence
// (none for a final record, or a known absence, read before).
func (a *API) scheduleView(ctx context.Context, s coordinator.Schedule, st ledger.ScheduleState, now time.Time, nOcc int) (ScheduleView, error) {
	loc := a.zones.get(s.TimeZone)
	v := ScheduleView{
		Name: s.Name, Job: s.Job, Params: s.Params, Expression: s.Cron.String(), Description: s.Description,
		TimeZone: loc.String(), Overlap: string(s.Overlap), CatchUp: s.CatchUp.String(), CatchUpSeconds: s.CatchUp.Seconds(),
		Jitter: s.Jitter.String(), JitterSeconds: s.Jitter.Seconds(), Cursor: st.Cursor, QueuedRun: st.Buffered,
		Now: now.UTC(), Next: make([]NextView, 0, NextOccurrences),
	}
	if v.Description == "" {
		v.Description = "cron " + v.Expression
	}
	if s.JobError != nil {
		v.JobError = ledger.Cause(s.JobError)
	}
	if s.Paused {
		v.Paused, v.PausedBySetting = true, s.PausedBy
	}
	if st.Paused {
		// Escaped as well as checked on the way in: a record written before the check.
		v.Paused, v.Note, v.PausedBy, v.PausedAt = true, escapeText(st.Note, 0), escapeText(st.PausedBy, 0), st.PausedAt
		v.PausedAutomatically = st.PausedBy == ledger.AutoPauseBy
	}
	v.AutoPause = s.AutoPause
	for _, r := range st.Streak {
		v.Streak = append(v.Streak, StreakView{Run: r.Run, State: string(r.State)})
	}
	for t := now; len(v.Next) < NextOccurrences; {
		n, ok := s.Cron.Next(t)
		if !ok {
			break
		}
		l := n.In(loc)
		zone, _ := l.Zone()
		v.Next = append(v.Next, NextView{UTC: n.UTC(), Local: l, Zone: zone})
		t = n
	}
	if st.Latest != "" {
		m, err := a.manifest(ctx, st.Latest)
		switch {
		case errors.Is(err, ledger.ErrNotFound): // deleted since; nothing to show
		case err != nil:
			return v, err
		default:
			rv, err := a.view(ctx, m)
			if err != nil {
				return v, err
			}
			v.LastRun = &rv
		}
	}
	if nOcc > 0 {
		occ, err := a.occurrences(ctx, s, st, loc, now, nOcc)
		if err != nil {
			return v, err
		}
		v.Occurrences = occ
	}
	return v, nil
}

// pastOccurrences returns the n latest occurrences of s at or before now, newest first.
func pastOccurrences(s coordinator.Schedule, now time.Time, n int) []time.Time {
	out := make([]time.Time, 0, n)
	t := now
	for range n {
		p, ok := s.Cron.Prev(t)
		if !ok {
			break // the schedule has no earlier occurrence
		}
		out = append(out, p)
		t = p.Add(-time.Second) // occurrences fall on whole seconds
	}
	return out
}

// occurrences reads the record of each of s's n latest occurrences (see OccurrenceView).
func (a *API) occurrences(ctx context.Context, s coordinator.Schedule, st ledger.ScheduleState, loc *time.Location,
	now time.Time, n int) ([]OccurrenceView, error) {
	occ := pastOccurrences(s, now, n)
	decided := !st.Cursor.IsZero()
	out := make([]OccurrenceView, len(occ))
	err := forEach(ctx, len(occ), func(ctx context.Context, i int) error {
		id := ledger.ScheduleRunID(s.Name, occ[i])
		out[i] = OccurrenceView{Occurrence: occ[i].UTC(), Local: occ[i].In(loc), Run: id}
		if a.absent.has(id) {
			return nil
		}
		read := a.manifest
		if retained(st, occ[i]) {
			// Retention may have deleted it since this process cached it: read it afresh.
			read = a.manifestUncached
		}
		m, err := read(ctx, id)
		switch {
		case errors.Is(err, ledger.ErrNotFound):
			if decided && !occ[i].After(st.Cursor) {
				a.absent.put(id) // the cursor is past it: no record will ever come
			}
			return nil
		case err != nil:
			return err
		}
		v, err := a.view(ctx, m)
		if err != nil {
			return err
		}
		out[i].Record = &v
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Why an occurrence has no record, oldest first: one at or before the retained horizon was
	// deleted by retention; one older than every record in the strip came before the schedule
	// started, its first cursor (the cursor only moves past an occurrence once it has its
	// record); one after the cursor is pending or undecided. One at or before the cursor with
	// an older record is a gap (its record is gone): no flag.
	pending := a.cfg.Heartbeat + OccurrenceGrace
	seen := false
	for i := len(out) - 1; i >= 0; i-- {
		o := &out[i]
		switch {
		case o.Record != nil:
			seen = true
		case retained(st, o.Occurrence):
			o.Deleted = true
		case decided && !o.Occurrence.After(st.Cursor):
			o.BeforeLedger = !seen
		case now.Sub(o.Occurrence) < pending:
			o.Pending = true
		case decided:
			o.Undecided = true
		default:
			o.BeforeLedger = !seen // no heartbeat has started the schedule yet
		}
	}
	return out, nil
}

// retained reports whether occurrence o of the schedule is within its retained span (from the
// oldest occurrence retention deleted to its horizon), where retention may have deleted its
// record.
func retained(st ledger.ScheduleState, o time.Time) bool {
	return !st.Retained.IsZero() && !o.After(st.Retained) && (st.RetainedFrom.IsZero() || !o.Before(st.RetainedFrom))
}

// zoneCache holds the time zones the schedules name, loaded once each (time.LoadLocation reads
// the zone database every call).
type zoneCache struct {
	m sync.Map // name -> *time.Location
}

// get returns the zone named name; UTC for "" or a name the zone database does not know (the
// app validated every zone at start-up, so that is a schedule built by hand).
func (z *zoneCache) get(name string) *time.Location {
	if name == "" || name == "UTC" {
		return time.UTC
	}
	if l, ok := z.m.Load(name); ok {
		return l.(*time.Location)
	}
	l, err := time.LoadLocation(name)
	if err != nil {
		l = time.UTC
	}
	z.m.Store(name, l)
	return l
}

// absentCache remembers occurrences known to have no record and never to get one (before the
// schedule's first cursor), so a strip does not read them again. It is bounded: past
// maxFinal entries it starts over.
type absentCache struct {
	mu sync.Mutex
	m  map[string]struct{}
}

func newAbsentCache() *absentCache { return &absentCache{m: map[string]struct{}{}} }

func (c *absentCache) has(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.m[id]
	return ok
}

func (c *absentCache) put(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxFinal {
		c.m = map[string]struct{}{}
	}
	c.m[id] = struct{}{}
}
