package coordinator

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
)

// Auto-pause: a schedule with Schedule.AutoPause set pauses itself once that many of its
// started runs in a row have ended failed or timed out. Each heartbeat looks at the schedule's
// latest run (the one its overlap policy looks at) before deciding its occurrences; once that
// run is final, its end is counted once (ScheduleState.Counted) into the schedule's streak
// (a run now counts the end of the run it replaces as the latest too):
// failed or timed-out extends it, any other end (succeeded, partial, cancelled) clears it. A
// run that a newer one replaced as the latest before it ended (overlap policy allow) is not
// counted. The pause is an operator's pause in all but its author (ledger.AutoPauseBy), so it
// is resumed the same way, which clears the streak.

// autoPauseListed bounds the runs an auto-pause note names (the latest ones).
const autoPauseListed = 5

// streaks reports whether a run that ended in state extends a schedule's streak.
func streaks(state ledger.State) bool {
	return state == ledger.StateFailed || state == ledger.StateTimedOut
}

// countEnd counts m, the schedule's latest run, now final, into st's streak, and pauses the
// schedule when the streak reaches n (n > 0) and it is not paused already. It reports whether
// st changed: false when m was counted before.
func countEnd(st *ledger.ScheduleState, m ledger.Manifest, n int, now time.Time) bool {
	if !m.State.Final() || m.RunID == "" || st.Counted == m.RunID {
		return false
	}
	st.Counted = m.RunID
	if !streaks(m.State) {
		st.Streak = nil
		return true
	}
	st.Streak = append(st.Streak, ledger.StreakRun{Run: m.RunID, State: m.State})
	if over := len(st.Streak) - config.MaxAutoPause; over > 0 {
		st.Streak = st.Streak[over:]
	}
	if n > 0 && len(st.Streak) >= n && !st.Paused {
		st.Paused, st.PausedBy, st.PausedAt = true, ledger.AutoPauseBy, now.UTC()
		st.Note = autoPauseNote(st.Streak[len(st.Streak)-n:])
	}
	return true
}

// autoPauseNote says why a schedule paused itself, naming the latest runs of its streak.
func autoPauseNote(runs []ledger.StreakRun) string {
	listed := runs[max(0, len(runs)-autoPauseListed):]
	names := make([]string, len(listed))
	for i, r := range listed {
		names[i] = fmt.Sprintf("%s (%s)", r.Run, r.State)
	}
	note := fmt.Sprintf("paused automatically after %d consecutive runs failed or timed out: %s", len(runs), strings.Join(names, ", "))
	if earlier := len(runs) - len(listed); earlier > 0 {
		note += fmt.Sprintf(" and %d earlier", earlier)
	}
	return note
}

// countLatest counts the end of the schedule's latest run into its streak (see countEnd), once
// that run is final, and takes the state it wrote, so a pause it set applies to this pass's
// occurrences. A schedule without auto-pause counts nothing.
func (b *beat) countLatest(ctx context.Context) error {
	if b.s.AutoPause <= 0 {
		return nil
	}
	m, ok, err := b.latestRun(ctx)
	if err != nil || !ok || !m.State.Final() || m.RunID == b.st.Counted {
		return err
	}
	now := b.now
	var counted, paused bool
	st, err := b.c.cfg.Store.UpdateSchedule(ctx, b.s.Name, func(cur *ledger.ScheduleState) error {
		counted, paused = false, false
		if cur.Latest != "" && cur.Latest != m.RunID {
			return ledger.ErrNoChange // a run now replaced it meanwhile: the next pass counts that one
		}
		was := cur.Paused
		if !countEnd(cur, m, b.s.AutoPause, now) {
			return ledger.ErrNoChange
		}
		counted, paused = true, !was && cur.Paused
		return nil
	})
	if err != nil {
		return fmt.Errorf("count the end of run %s: %w", m.RunID, err)
	}
	b.st.Streak, b.st.Counted = st.Streak, st.Counted
	b.st.Paused, b.st.Note, b.st.PausedBy, b.st.PausedAt = st.Paused, st.Note, st.PausedBy, st.PausedAt
	log := b.c.log(m.RunID, m.Epoch).With("schedule", b.s.Name, "state", m.State, "streak", len(st.Streak), "autoPause", b.s.AutoPause)
	switch {
	case paused:
		log.Error("schedule paused automatically: resume it once the cause is fixed", "note", st.Note)
	case counted:
		log.Info("run end counted for the schedule's auto-pause")
	}
	return nil
}
