package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/ledger"
)

// ScheduleConfig is the timer's schedule and policies, as the handler was configured with
// them, for the dashboard's schedule panel and the occurrence strip.
type ScheduleConfig struct {
	// Schedule is BATON_SCHEDULE, parsed.
	Schedule coordinator.Schedule
	// Overlap is BATON_OVERLAP (skip | allow).
	Overlap string
	// Misfire is BATON_MISFIRE (skip | run-latest) and StartingDeadline
	// BATON_STARTING_DEADLINE.
	Misfire          string
	StartingDeadline time.Duration
}

// Occurrence limits.
const (
	// MaxOccurrences bounds ?occurrences=N (N point reads of a manifest, fewer once cached).
	MaxOccurrences = 100
	// NextOccurrences is how many coming occurrences the schedule object lists.
	NextOccurrences = 3
	// OccurrenceGrace: an occurrence this recent without a record is "pending" (its tick may
	// still be deciding), not a gap.
	OccurrenceGrace = time.Minute
)

// ScheduleView is the "schedule" object of GET /api/runs?occurrences=N.
type ScheduleView struct {
	// Expression is the normalised six-field NCRONTAB expression (UTC).
	Expression  string `json:"expression"`
	Description string `json:"description"`
	TimeZone    string `json:"timeZone"`
	// Next lists the next NextOccurrences occurrences after the server's now.
	Next             []time.Time `json:"next"`
	Overlap          string      `json:"overlap"`
	Misfire          string      `json:"misfire"`
	StartingDeadline string      `json:"startingDeadline"`
	// StartingDeadlineSeconds is StartingDeadline in seconds, for clients.
	StartingDeadlineSeconds int64 `json:"startingDeadlineSeconds"`
	// Now is the server's clock when it computed Next and the occurrences.
	Now time.Time `json:"now"`
}

// OccurrenceView is one past schedule occurrence and the ledger's record of it: Record is
// null when the ledger holds no run for it. Such an occurrence is BeforeLedger when it is
// older than every run in the ledger (before the first run, e.g. before Baton was deployed:
// not a gap the way a missing occurrence between two runs is; every occurrence of an empty
// ledger but a pending one), else Pending when it is younger than OccurrenceGrace (its tick
// may still be deciding).
type OccurrenceView struct {
	Occurrence   time.Time `json:"occurrence"`
	Run          string    `json:"run"`
	Record       *RunView  `json:"record"`
	Pending      bool      `json:"pending,omitempty"`
	BeforeLedger bool      `json:"beforeLedger,omitempty"`
}

func parseOccurrences(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxOccurrences {
		return 0, fmt.Errorf("occurrences must be an integer from 1 to %d, got %q", MaxOccurrences, s)
	}
	return n, nil
}

func (a *API) scheduleView(now time.Time) (ScheduleView, error) {
	sc := a.cfg.Schedule
	v := ScheduleView{
		Expression: sc.Schedule.Cron.String(), Description: DescribeSchedule(sc.Schedule.Cron.String()), TimeZone: "UTC",
		Overlap: sc.Overlap, Misfire: sc.Misfire, StartingDeadline: sc.StartingDeadline.String(),
		StartingDeadlineSeconds: int64(sc.StartingDeadline / time.Second), Now: now.UTC(),
		Next: make([]time.Time, 0, NextOccurrences),
	}
	t := now
	for range NextOccurrences {
		n, ok := sc.Schedule.Cron.Next(t)
		if !ok {
			break
		}
		v.Next = append(v.Next, n)
		t = n
	}
	return v, nil
}

// pastOccurrences returns the n latest occurrences at or before now, newest first.
func pastOccurrences(s coordinator.Schedule, now time.Time, n int) ([]time.Time, error) {
	out := make([]time.Time, 0, n)
	t := now
	for range n {
		p, ok := s.Cron.Prev(t)
		if !ok {
			return out, nil // the schedule has no earlier occurrence
		}
		out = append(out, p)
		t = p.Add(-time.Second)
	}
	return out, nil
}

// occurrences reads the record of each of the n latest occurrences: one manifest read each
// (none for a final record this instance has seen), plus the progress reads of an
// unfinished run. first is the start time of the oldest run in the ledger (zero when it is
// empty).
func (a *API) occurrences(ctx context.Context, now time.Time, n int, first time.Time) ([]OccurrenceView, error) {
	occ, err := pastOccurrences(a.cfg.Schedule.Schedule, now, n)
	if err != nil {
		return nil, err
	}
	out := make([]OccurrenceView, len(occ))
	err = forEach(ctx, len(occ), func(ctx context.Context, i int) error {
		id := ledger.ScheduleRunID(a.cfg.Schedule.Schedule.Name, occ[i])
		out[i] = OccurrenceView{Occurrence: occ[i], Run: id}
		m, err := a.manifest(ctx, id)
		if errors.Is(err, ledger.ErrNotFound) {
			// Before the first run wins over pending: a later occurrence already has a run.
			out[i].BeforeLedger = !first.IsZero() && occ[i].Before(first)
			out[i].Pending = !out[i].BeforeLedger && now.Sub(occ[i]) < OccurrenceGrace
			if first.IsZero() && !out[i].Pending {
				out[i].BeforeLedger = true // an empty ledger: nothing has run yet
			}
			return nil
		}
		if err != nil {
			return err
		}
		v, err := a.view(ctx, m)
		if err != nil {
			return err
		}
		out[i].Record = &v
		return nil
	})
	return out, err
}

// scheduleUnavailable answers a request for schedule data on an instance without one.
func scheduleUnavailable() Reply {
	return errorReply(http.StatusServiceUnavailable, CodeUnavailable, "the schedule is not configured on this instance")
}
