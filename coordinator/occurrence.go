package coordinator

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/adhocore/gronx"
)

// Schedule is a parsed NCRONTAB expression, as the Functions timer trigger reads it: six
// fields {second} {minute} {hour} {day} {month} {day-of-week} (five fields are accepted too,
// with second 0), evaluated in UTC.
type Schedule struct {
	expr string
}

var settingRef = regexp.MustCompile(`^%([A-Za-z_][A-Za-z0-9_.]*)%$`)

// ParseSchedule parses expr. An expression of the form %NAME% is first read from the setting
// NAME through getenv, as the host does for "schedule": "%BATON_SCHEDULE%".
func ParseSchedule(expr string, getenv func(string) string) (Schedule, error) {
	expr = strings.TrimSpace(expr)
	if m := settingRef.FindStringSubmatch(expr); m != nil {
		if getenv == nil {
			return Schedule{}, fmt.Errorf("schedule %s refers to a setting, but no settings are available", expr)
		}
		v := strings.TrimSpace(getenv(m[1]))
		if v == "" {
			return Schedule{}, fmt.Errorf("schedule %s: setting %s is not set", expr, m[1])
		}
		expr = v
	}
	fields := strings.Fields(expr)
	switch len(fields) {
	case 5:
		fields = append([]string{"0"}, fields...)
	case 6:
	default:
		return Schedule{}, fmt.Errorf("schedule %q has %d fields: want six (second minute hour day month day-of-week), e.g. \"0 0 2 * * *\"", expr, len(fields))
	}
	norm := strings.Join(fields, " ")
	if !gronx.New().IsValid(norm) {
		return Schedule{}, fmt.Errorf("schedule %q is not a valid NCRONTAB expression", expr)
	}
	s := Schedule{expr: norm}
	// An expression may be valid yet never fire (e.g. 30 February).
	if _, err := s.next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)); err != nil {
		return Schedule{}, fmt.Errorf("schedule %q never fires: %w", expr, err)
	}
	return s, nil
}

// String returns the normalised six-field expression.
func (s Schedule) String() string { return s.expr }

// Prev returns the latest occurrence at or before t.
func (s Schedule) Prev(t time.Time) (time.Time, error) {
	p, err := gronx.PrevTickBefore(s.expr, t.UTC().Truncate(time.Second), true)
	if err != nil {
		return time.Time{}, fmt.Errorf("schedule %q: previous occurrence before %s: %w", s.expr, t.UTC().Format(time.RFC3339), err)
	}
	return p.UTC(), nil
}

// Next returns the first occurrence strictly after t.
func (s Schedule) Next(t time.Time) (time.Time, error) { return s.next(t) }

func (s Schedule) next(t time.Time) (time.Time, error) {
	n, err := gronx.NextTickAfter(s.expr, t.UTC().Truncate(time.Second), false)
	if err != nil {
		return time.Time{}, fmt.Errorf("schedule %q: next occurrence after %s: %w", s.expr, t.UTC().Format(time.RFC3339), err)
	}
	return n.UTC(), nil
}

// MaxEarly is how early a timer may fire and still count for the coming occurrence. The host's
// timer can fire a little before the scheduled second; never more than half the period counts.
const MaxEarly = 2 * time.Second

// TickInput is what a timer invocation tells about itself.
type TickInput struct {
	// Now is the invocation time (the host's sys.UtcNow, else the local clock).
	Now time.Time
	// Next is ScheduleStatus.Next when the host sent a status (zero otherwise): the occurrence
	// the host meant to fire.
	Next time.Time
	// PastDue is TimerInfo.IsPastDue: the host is catching up on missed occurrences.
	PastDue bool
}

// Occurrence returns the schedule occurrence a tick belongs to. Every instance, app, replay and
// restart that fires for the same occurrence computes the same value, because it depends only
// on the schedule and a time that lies within the occurrence's window:
//   - a fire up to MaxEarly (at most half a period) before an occurrence belongs to it;
//   - a late fire belongs to the latest occurrence that has passed;
//   - a past-due catch-up runs once, for the latest missed occurrence (older missed ones are
//     not run separately: a scheduled job catches up by running now).
//
// ScheduleStatus and IsPastDue do not change the result: the status is kept per app (per host
// ID), so two apps sharing one schedule would disagree if it did; they are logged with the run.
// A status whose Next is the coming occurrence always lies inside the early window anyway.
func (s Schedule) Occurrence(in TickInput) (time.Time, error) {
	if in.Now.IsZero() {
		return time.Time{}, errors.New("occurrence: the invocation time is missing")
	}
	now := in.Now.UTC()
	base, err := s.Prev(now)
	if err != nil {
		return time.Time{}, err
	}
	upcoming, err := s.Next(base)
	if err != nil {
		return time.Time{}, err
	}
	early := min(MaxEarly, upcoming.Sub(base)/2)
	if !upcoming.After(now.Add(early)) {
		return upcoming, nil // fired early for the coming occurrence
	}
	return base, nil
}

// TimerRunID is the run ID of a schedule occurrence: "tick-" and the UTC time to the second,
// e.g. tick-20261121t020000z.
func TimerRunID(occurrence time.Time) string {
	return "tick-" + strings.ToLower(occurrence.UTC().Format("20060102T150405Z"))
}
