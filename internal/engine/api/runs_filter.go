package api

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// The filters of GET /api/runs (?state=, ?trigger=, ?schedule=): parsing them, and matching a
// run by its ID before any read and by its manifest after.

// filter is the ?state=, ?trigger= and ?schedule= of a listing; an empty set lets everything
// through.
type filter struct {
	states    map[ledger.State]bool
	triggers  map[ledger.Trigger]bool
	schedules map[string]bool
}

// States and triggers a listing can filter on.
var (
	allStates = []ledger.State{ledger.StateQueued, ledger.StatePlanning, ledger.StateEnqueuing, ledger.StateRunning,
		ledger.StateSucceeded, ledger.StatePartial, ledger.StateFailed, ledger.StateTimedOut, ledger.StateCancelled, ledger.StateSkipped,
		ledger.StateMissed, ledger.StatePaused}
	allTriggers = []ledger.Trigger{ledger.TriggerTimer, ledger.TriggerManual}
)

// parseFilter reads state, trigger and schedule: comma-separated lists of known values (any
// valid schedule name: a schedule the app no longer declares still has its runs).
func parseFilter(r Request) (filter, *Reply) {
	var f filter
	if s := r.query("state"); s != "" {
		f.states = map[ledger.State]bool{}
		for _, v := range strings.Split(s, ",") {
			st := ledger.State(strings.TrimSpace(v))
			if !slices.Contains(allStates, st) {
				rep := errorReply(http.StatusBadRequest, CodeInvalidState,
					fmt.Sprintf("state must be a comma-separated list of %s; got %q", joinValues(allStates), v))
				return f, &rep
			}
			f.states[st] = true
		}
	}
	if s := r.query("trigger"); s != "" {
		f.triggers = map[ledger.Trigger]bool{}
		for _, v := range strings.Split(s, ",") {
			tr := ledger.Trigger(strings.TrimSpace(v))
			if !slices.Contains(allTriggers, tr) {
				rep := errorReply(http.StatusBadRequest, CodeInvalidTrigger,
					fmt.Sprintf("trigger must be a comma-separated list of %s; got %q", joinValues(allTriggers), v))
				return f, &rep
			}
			f.triggers[tr] = true
		}
	}
	if s := r.query("schedule"); s != "" {
		f.schedules = map[string]bool{}
		for _, v := range strings.Split(s, ",") {
			name := strings.TrimSpace(v)
			if err := ledger.ValidateScheduleName(name); err != nil {
				rep := errorReply(http.StatusBadRequest, CodeInvalidSchedule, "schedule must be a comma-separated list of schedule names: "+err.Error())
				return f, &rep
			}
			f.schedules[name] = true
		}
	}
	return f, nil
}

func joinValues[T ~string](vs []T) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}

func (f filter) any() bool { return len(f.states) > 0 || len(f.triggers) > 0 || len(f.schedules) > 0 }

func (f filter) match(m ledger.Manifest) bool {
	return (len(f.states) == 0 || f.states[m.State]) && (len(f.triggers) == 0 || f.triggers[m.Trigger])
}

// idMayMatch rules a run out by its ID alone (ledger.ParseRunID): its schedule, and its
// trigger (a schedule's occurrence is a timer run; a run now and an ad-hoc run are manual).
// An ID of no known format is read and matched by its manifest.
func (f filter) idMayMatch(id string) bool {
	if len(f.triggers) == 0 && len(f.schedules) == 0 {
		return true
	}
	n, ok := ledger.ParseRunID(id)
	if !ok {
		return len(f.schedules) == 0
	}
	if len(f.schedules) > 0 && !f.schedules[n.Schedule] {
		return false
	}
	if len(f.triggers) > 0 {
		tr := ledger.TriggerManual
		if !n.Occurrence.IsZero() {
			tr = ledger.TriggerTimer
		}
		return f.triggers[tr]
	}
	return true
}
