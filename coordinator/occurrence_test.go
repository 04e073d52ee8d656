package coordinator

import (
	"strings"
	"testing"
	"time"
)

func mustSchedule(t *testing.T, expr string) Schedule {
	t.Helper()
	s, err := ParseSchedule(expr, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestSchedule_Occurrence(t *testing.T) {
	cases := []struct {
		name string
		expr string
		in   TickInput
		want string
	}{
		{"on time", "0 0 2 * * *", TickInput{Now: at("2026-11-21T02:00:00.004Z")}, "2026-11-21T02:00:00Z"},
		{"early by 900ms", "0 0 2 * * *", TickInput{Now: at("2026-11-21T01:59:59.1Z")}, "2026-11-21T02:00:00Z"},
		{"early by 900ms with status", "0 0 2 * * *", TickInput{Now: at("2026-11-21T01:59:59.1Z"), Next: at("2026-11-21T02:00:00Z")}, "2026-11-21T02:00:00Z"},
		{"early by 3s is the previous day", "0 0 2 * * *", TickInput{Now: at("2026-11-21T01:59:57Z")}, "2026-11-20T02:00:00Z"},
		{"late by 40s", "0 0 2 * * *", TickInput{Now: at("2026-11-21T02:00:40Z")}, "2026-11-21T02:00:00Z"},
		{"past due by 3 occurrences runs the latest", "0 */5 * * * *", TickInput{Now: at("2026-11-21T10:16:12Z"), Next: at("2026-11-21T10:00:00Z"), PastDue: true}, "2026-11-21T10:15:00Z"},
		{"seconds schedule on time", "*/10 * * * * *", TickInput{Now: at("2026-11-21T10:00:20.2Z")}, "2026-11-21T10:00:20Z"},
		{"seconds schedule early by 900ms", "*/10 * * * * *", TickInput{Now: at("2026-11-21T10:00:19.1Z")}, "2026-11-21T10:00:20Z"},
		{"every second: early window is half a period", "* * * * * *", TickInput{Now: at("2026-11-21T10:00:19.6Z")}, "2026-11-21T10:00:20Z"},
		{"every second: 0.4s past belongs to that second", "* * * * * *", TickInput{Now: at("2026-11-21T10:00:19.4Z")}, "2026-11-21T10:00:19Z"},
		{"five fields (minute resolution)", "30 9 * * 1-5", TickInput{Now: at("2026-11-23T09:30:01Z")}, "2026-11-23T09:30:00Z"},
		{"weekday schedule on a weekend", "0 30 9 * * 1-5", TickInput{Now: at("2026-11-22T12:00:00Z")}, "2026-11-20T09:30:00Z"},
		{"non-UTC input is converted", "0 0 2 * * *", TickInput{Now: at("2026-11-21T03:00:10+01:00")}, "2026-11-21T02:00:00Z"},
		{"year boundary, early", "0 0 0 1 1 *", TickInput{Now: at("2026-12-31T23:59:59.5Z")}, "2027-01-01T00:00:00Z"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := mustSchedule(t, c.expr).Occurrence(c.in)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(at(c.want)) {
				t.Errorf("Occurrence = %s, want %s", got.Format(time.RFC3339Nano), c.want)
			}
		})
	}
}

// Every fire in the window of one occurrence — early, on time, late, replayed — maps to the
// same run ID.
func TestSchedule_SameRunIDAcrossFires(t *testing.T) {
	s := mustSchedule(t, "0 */5 * * * *")
	want := TimerRunID(at("2026-11-21T10:05:00Z"))
	for _, now := range []string{"2026-11-21T10:04:58.5Z", "2026-11-21T10:05:00Z", "2026-11-21T10:05:00.999Z", "2026-11-21T10:07:30Z", "2026-11-21T10:09:57.9Z"} {
		occ, err := s.Occurrence(TickInput{Now: at(now)})
		if err != nil {
			t.Fatal(err)
		}
		if got := TimerRunID(occ); got != want {
			t.Errorf("fire at %s → %s, want %s", now, got, want)
		}
	}
}

func TestTimerRunID(t *testing.T) {
	id := TimerRunID(at("2026-11-21T02:00:00Z"))
	if id != "tick-20261121t020000z" {
		t.Errorf("TimerRunID = %q", id)
	}
}

func TestParseSchedule(t *testing.T) {
	env := map[string]string{"BATON_SCHEDULE": "0 */5 * * * *", "EMPTY": ""}
	getenv := func(k string) string { return env[k] }
	if s, err := ParseSchedule("%BATON_SCHEDULE%", getenv); err != nil || s.String() != "0 */5 * * * *" {
		t.Errorf("%%BATON_SCHEDULE%% → %q, %v", s.String(), err)
	}
	bad := map[string]string{
		"%MISSING%":       "not set",
		"%EMPTY%":         "not set",
		"":                "0 fields",
		"* * *":           "3 fields",
		"0 0 2 * * * * *": "8 fields",
		"61 * * * * *":    "not a valid",
		"0 0 25 * * *":    "not a valid",
		"x y z a b c":     "not a valid",
		"0 0 0 30 2 *":    "never fires",
	}
	for expr, want := range bad {
		_, err := ParseSchedule(expr, getenv)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSchedule(%q) = %v, want an error containing %q", expr, err, want)
		}
	}
	if _, err := (Schedule{}).Occurrence(TickInput{}); err == nil {
		t.Error("Occurrence without a time succeeded")
	}
}
