package ledger

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// ScheduleState is runs/_schedules/<name>.json: how far one schedule has been decided and what
// its overlap policy looks at. Only the scheduler lease holder moves the cursor; the pause
// fields are written by the operator (the API), so every writer changes only its own fields,
// with the ETag it read.
type ScheduleState struct {
	Schedule string `json:"schedule"`
	// Cursor: every occurrence at or before it has exactly one record (a run, or a skipped,
	// missed or paused record). It only moves forward.
	Cursor time.Time `json:"cursor"`
	// Latest is the run the schedule started last: the one its overlap policy looks at.
	Latest string `json:"latest,omitempty"`
	// Buffered is the run that waits, queued, for Latest to end (overlap policy buffer-one).
	Buffered string `json:"buffered,omitempty"`
	// Retained is the retention sweep's horizon: records of occurrences at or before it may
	// have been deleted (retention), so a missing one there is no gap. Only the sweep moves it,
	// forward, before it deletes.
	Retained time.Time `json:"retained,omitzero"`
	// RetainedFrom is the oldest occurrence the sweep has deleted a record of: a missing one
	// before it was never recorded (before the schedule started), not deleted.
	RetainedFrom time.Time `json:"retainedFrom,omitzero"`
	// Paused stops the schedule from starting runs: its occurrences are recorded paused, with
	// Note as the reason, until it is resumed. PausedBy and PausedAt say who and when.
	Paused   bool      `json:"paused,omitempty"`
	Note     string    `json:"note,omitempty"`
	PausedBy string    `json:"pausedBy,omitempty"`
	PausedAt time.Time `json:"pausedAt,omitzero"`
	// Streak lists, oldest first, the schedule's latest started runs that ended failed or
	// timed out in a row (a schedule with auto-pause counts them; PausedBy AutoPauseBy when
	// they paused it). Counted is the last run whose end was counted, so each is counted once.
	// The heartbeat writes both; a resume clears Streak.
	Streak  []StreakRun `json:"streak,omitempty"`
	Counted string      `json:"counted,omitempty"`
	Updated time.Time   `json:"updated"`
}

// StreakRun is one run of a schedule's Streak and how it ended.
type StreakRun struct {
	Run   string `json:"run"`
	State State  `json:"state"`
}

// AutoPauseBy is ScheduleState.PausedBy when the schedule paused itself after its Streak
// reached its auto-pause threshold.
const AutoPauseBy = "auto-pause"

// LegacySchedule is what a ledger written before schedules had names kept about its one
// schedule: the cursor (runs/_schedule.json) and the latest started run (runs/active.json).
// The schedule the settings declare takes both over on its first heartbeat.
type LegacySchedule struct {
	Cursor time.Time // zero when there was none
	Latest string    // "" when there was none
}

// Run ID formats, each valid for ValidateRunID and read back by ParseRunID (BATON_SCHEDULE's
// schedule is "tick", so its runs keep their old IDs):
//
//	<schedule>-<yyyymmdd>t<hhmmss>z  an occurrence (UTC), e.g. nightly-20261121t020000z
//	<schedule>-now-<24 hex>          a run now with an Idempotency-Key; without: <schedule>-now-<time>-<8 hex>
//	manual-<24 hex>                  an ad-hoc run with one; without: manual-<time>-<8 hex>
const (
	occurrenceLayout = "20060102T150405Z"
	// MaxScheduleName bounds a schedule name so that its longest run ID fits 63 characters.
	MaxScheduleName = 32
	manualPrefix    = "manual"
	nowInfix        = "now"
)

var (
	scheduleNamePattern = regexp.MustCompile(`^[a-z](?:[a-z0-9-]*[a-z0-9])?$`)
	occurrencePattern   = regexp.MustCompile(`^[0-9]{8}t[0-9]{6}z$`)
	hex24               = regexp.MustCompile(`^[0-9a-f]{24}$`)
	timeHex8            = regexp.MustCompile(`^[0-9]{8}t[0-9]{6}z-[0-9a-f]{8}$`)
)

// ValidateScheduleName accepts 1–32 characters of a-z, 0-9 and '-', starting with a letter and
// not ending with '-'. "manual" is reserved for ad-hoc runs.
func ValidateScheduleName(name string) error {
	switch {
	case len(name) > MaxScheduleName || !scheduleNamePattern.MatchString(name):
		return fmt.Errorf("schedule name %q: use 1-%d characters of a-z, 0-9 and '-', starting with a letter and not ending with '-'", name, MaxScheduleName)
	case name == manualPrefix:
		return fmt.Errorf("schedule name %q is reserved for ad-hoc runs", name)
	}
	return nil
}

func occurrenceID(t time.Time) string { return strings.ToLower(t.UTC().Format(occurrenceLayout)) }

// ScheduleRunID is the run ID of a schedule's occurrence: every instance, app, replay and
// restart computes the same one.
func ScheduleRunID(schedule string, occurrence time.Time) string {
	return schedule + "-" + occurrenceID(occurrence)
}

// ManualRunID is the run ID of an ad-hoc run: derived from the idempotency key when given (so
// every repeat maps to the same run), random otherwise.
func ManualRunID(key string, now time.Time) string { return requestedRunID(manualPrefix, key, now) }

// ScheduleNowRunID is the run ID of a schedule run now (outside its occurrences), like
// ManualRunID but naming the schedule.
func ScheduleNowRunID(schedule, key string, now time.Time) string {
	return requestedRunID(schedule+"-"+nowInfix, key, now)
}

func requestedRunID(prefix, key string, now time.Time) string {
	if key != "" {
		sum := sha256.Sum256([]byte(key))
		return prefix + "-" + hex.EncodeToString(sum[:12])
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + occurrenceID(now) + "-" + hex.EncodeToString(b[:])
}

// RunName is what a run ID says about its run.
type RunName struct {
	// Schedule names the schedule of an occurrence or a run now; "" for an ad-hoc run.
	Schedule string
	// Occurrence is the occurrence of a scheduled run (zero otherwise).
	Occurrence time.Time
	// Now marks a schedule run now; Manual an ad-hoc run.
	Now, Manual bool
}

// ParseRunID reads a run ID back (see ScheduleRunID): ok is false for an ID none of the
// formats produce.
func ParseRunID(id string) (RunName, bool) {
	if ValidateRunID(id) != nil {
		return RunName{}, false
	}
	if rest, ok := strings.CutPrefix(id, manualPrefix+"-"); ok && (hex24.MatchString(rest) || timeHex8.MatchString(rest)) {
		return RunName{Manual: true}, true
	}
	// <schedule>-now-<...>: the schedule name may contain "-now-" itself, so try the last.
	if i := strings.LastIndex(id, "-"+nowInfix+"-"); i > 0 {
		rest := id[i+len(nowInfix)+2:]
		if (hex24.MatchString(rest) || timeHex8.MatchString(rest)) && ValidateScheduleName(id[:i]) == nil {
			return RunName{Schedule: id[:i], Now: true}, true
		}
	}
	const n = len("20060102t150405z")
	if len(id) > n+1 && id[len(id)-n-1] == '-' && occurrencePattern.MatchString(id[len(id)-n:]) {
		schedule := id[:len(id)-n-1]
		t, err := time.Parse(occurrenceLayout, strings.ToUpper(id[len(id)-n:]))
		if err == nil && ValidateScheduleName(schedule) == nil {
			return RunName{Schedule: schedule, Occurrence: t.UTC()}, true
		}
	}
	return RunName{}, false
}

// RunLeaseName is the name, in the lease container, of the lease that fences run's planning:
// each run has its own, so planning one run never waits for another's.
func RunLeaseName(run string) string { return "runs/" + run }
