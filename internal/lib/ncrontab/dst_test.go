package ncrontab

import (
	"slices"
	"testing"
	"time"
)

// TestDST follows expressions across the daylight-saving transitions of 2026, with every
// occurrence written in local time. Each case lists the occurrences that follow `from`, in
// order: Next must produce them one after the other, and Prev must walk them back.
//
//	Europe/Berlin       2026-03-29 02:00 CET  -> 03:00 CEST (02:00-02:59 does not exist)
//	                    2026-10-25 03:00 CEST -> 02:00 CET  (02:00-02:59 occurs twice)
//	America/New_York    2026-03-08 02:00 EST  -> 03:00 EDT  (02:00-02:59 does not exist)
//	                    2026-11-01 02:00 EDT  -> 01:00 EST  (01:00-01:59 occurs twice)
//	Australia/Lord_Howe 2026-04-05 02:00 +11  -> 01:30 +1030 (01:30-01:59 occurs twice)
//	                    2026-10-04 02:00 +1030 -> 02:30 +11 (02:00-02:29 does not exist)
func TestDST(t *testing.T) {
	tests := []struct {
		zone, expr, from string
		want             []string
	}{
		// Berlin, spring forward.
		{"Europe/Berlin", "0 30 2 * * *", "2026-03-27T12:00:00+01:00", []string{
			"2026-03-28T02:30:00+01:00",
			"2026-03-30T02:30:00+02:00", // no 02:30 on the 29th
			"2026-03-31T02:30:00+02:00",
		}},
		{"Europe/Berlin", "0 0 2 * * *", "2026-03-28T00:00:00+01:00", []string{
			"2026-03-28T02:00:00+01:00",
			"2026-03-30T02:00:00+02:00",
		}},
		{"Europe/Berlin", "0 0 3 * * *", "2026-03-28T00:00:00+01:00", []string{
			"2026-03-28T03:00:00+01:00",
			"2026-03-29T03:00:00+02:00", // 03:00 exists: the first instant after the jump
			"2026-03-30T03:00:00+02:00",
		}},
		{"Europe/Berlin", "0 */15 * * * *", "2026-03-29T01:15:00+01:00", []string{
			"2026-03-29T01:30:00+01:00",
			"2026-03-29T01:45:00+01:00",
			"2026-03-29T03:00:00+02:00", // 15 minutes of real time later
			"2026-03-29T03:15:00+02:00",
		}},
		{"Europe/Berlin", "*/10 * * * * *", "2026-03-29T01:59:30+01:00", []string{
			"2026-03-29T01:59:40+01:00",
			"2026-03-29T01:59:50+01:00",
			"2026-03-29T03:00:00+02:00", // 10 seconds of real time later
			"2026-03-29T03:00:10+02:00",
		}},
		{"Europe/Berlin", "0 0 * * * *", "2026-03-29T00:30:00+01:00", []string{
			"2026-03-29T01:00:00+01:00",
			"2026-03-29T03:00:00+02:00",
			"2026-03-29T04:00:00+02:00",
		}},
		// Berlin, fall back: a repeated wall-clock time fires once, at its first instant (CEST).
		{"Europe/Berlin", "0 30 2 * * *", "2026-10-24T12:00:00+02:00", []string{
			"2026-10-25T02:30:00+02:00",
			"2026-10-26T02:30:00+01:00",
		}},
		{"Europe/Berlin", "0 30 2 * * *", "2026-10-25T02:30:00+02:00", []string{ // from the occurrence
			"2026-10-26T02:30:00+01:00",
		}},
		{"Europe/Berlin", "0 30 2 * * *", "2026-10-25T02:10:00+01:00", []string{ // from inside the second pass
			"2026-10-26T02:30:00+01:00",
		}},
		{"Europe/Berlin", "0 */15 * * * *", "2026-10-25T01:30:00+02:00", []string{
			"2026-10-25T01:45:00+02:00",
			"2026-10-25T02:00:00+02:00",
			"2026-10-25T02:15:00+02:00",
			"2026-10-25T02:30:00+02:00",
			"2026-10-25T02:45:00+02:00",
			"2026-10-25T03:00:00+01:00", // an hour and 15 minutes later: 02:00-02:45 CET already were
			"2026-10-25T03:15:00+01:00",
		}},
		{"Europe/Berlin", "0 */15 * * * *", "2026-10-25T02:00:00+01:00", []string{ // from the second pass
			"2026-10-25T03:00:00+01:00",
		}},
		{"Europe/Berlin", "*/10 * * * * *", "2026-10-25T02:59:30+02:00", []string{
			"2026-10-25T02:59:40+02:00",
			"2026-10-25T02:59:50+02:00",
			"2026-10-25T03:00:00+01:00",
			"2026-10-25T03:00:10+01:00",
		}},
		{"Europe/Berlin", "*/10 * * * * *", "2026-10-25T02:59:55+01:00", []string{ // the second pass's last seconds
			"2026-10-25T03:00:00+01:00",
			"2026-10-25T03:00:10+01:00",
		}},
		{"Europe/Berlin", "0 0 * * * *", "2026-10-25T00:30:00+02:00", []string{
			"2026-10-25T01:00:00+02:00",
			"2026-10-25T02:00:00+02:00",
			"2026-10-25T03:00:00+01:00",
		}},
		// New York, spring forward.
		{"America/New_York", "0 30 2 * * *", "2026-03-06T12:00:00-05:00", []string{
			"2026-03-07T02:30:00-05:00",
			"2026-03-09T02:30:00-04:00",
		}},
		{"America/New_York", "0 */15 * * * *", "2026-03-08T01:30:00-05:00", []string{
			"2026-03-08T01:45:00-05:00",
			"2026-03-08T03:00:00-04:00",
			"2026-03-08T03:15:00-04:00",
		}},
		{"America/New_York", "*/10 * * * * *", "2026-03-08T01:59:30-05:00", []string{
			"2026-03-08T01:59:40-05:00",
			"2026-03-08T01:59:50-05:00",
			"2026-03-08T03:00:00-04:00",
		}},
		// New York, fall back: 01:00-01:59 repeats.
		{"America/New_York", "0 30 1 * * *", "2026-10-31T00:00:00-04:00", []string{
			"2026-10-31T01:30:00-04:00",
			"2026-11-01T01:30:00-04:00",
			"2026-11-02T01:30:00-05:00",
		}},
		{"America/New_York", "0 30 1 * * *", "2026-11-01T01:10:00-05:00", []string{
			"2026-11-02T01:30:00-05:00",
		}},
		{"America/New_York", "0 30 2 * * *", "2026-10-31T12:00:00-04:00", []string{
			"2026-11-01T02:30:00-05:00", // not repeated: once, on standard time
			"2026-11-02T02:30:00-05:00",
		}},
		{"America/New_York", "0 */15 * * * *", "2026-11-01T00:30:00-04:00", []string{
			"2026-11-01T00:45:00-04:00",
			"2026-11-01T01:00:00-04:00",
			"2026-11-01T01:15:00-04:00",
			"2026-11-01T01:30:00-04:00",
			"2026-11-01T01:45:00-04:00",
			"2026-11-01T02:00:00-05:00",
			"2026-11-01T02:15:00-05:00",
		}},
		{"America/New_York", "*/10 * * * * *", "2026-11-01T01:59:30-04:00", []string{
			"2026-11-01T01:59:40-04:00",
			"2026-11-01T01:59:50-04:00",
			"2026-11-01T02:00:00-05:00",
		}},
		// Lord Howe Island: a 30-minute shift.
		{"Australia/Lord_Howe", "0 */15 * * * *", "2026-04-05T01:00:00+11:00", []string{
			"2026-04-05T01:15:00+11:00",
			"2026-04-05T01:30:00+11:00",
			"2026-04-05T01:45:00+11:00",
			"2026-04-05T02:00:00+10:30", // 01:30 and 01:45 +10:30 repeat
			"2026-04-05T02:15:00+10:30",
		}},
		{"Australia/Lord_Howe", "0 45 1 * * *", "2026-04-04T12:00:00+11:00", []string{
			"2026-04-05T01:45:00+11:00",
			"2026-04-06T01:45:00+10:30",
		}},
		{"Australia/Lord_Howe", "0 */15 * * * *", "2026-10-04T01:30:00+10:30", []string{
			"2026-10-04T01:45:00+10:30",
			"2026-10-04T02:30:00+11:00", // 02:00 and 02:15 do not exist
			"2026-10-04T02:45:00+11:00",
		}},
		{"Australia/Lord_Howe", "0 15 2 * * *", "2026-10-02T12:00:00+10:30", []string{
			"2026-10-03T02:15:00+10:30",
			"2026-10-05T02:15:00+11:00",
		}},
		{"Australia/Lord_Howe", "*/10 * * * * *", "2026-10-04T01:59:40+10:30", []string{
			"2026-10-04T01:59:50+10:30",
			"2026-10-04T02:30:00+11:00",
		}},
		// The last day of leap years that Go computes from a zone's TZ rule string, for which
		// time.Time.ZoneBounds reports a period ending a day early.
		{"America/New_York", "0 0 */6 * * *", "2088-12-30T20:00:00-05:00", []string{
			"2088-12-31T00:00:00-05:00",
			"2088-12-31T06:00:00-05:00",
			"2088-12-31T12:00:00-05:00",
			"2088-12-31T18:00:00-05:00",
			"2089-01-01T00:00:00-05:00",
		}},
		{"Europe/Berlin", "*/20 59 23 31 12 *", "2028-12-31T23:00:00+01:00", []string{
			"2028-12-31T23:59:00+01:00",
			"2028-12-31T23:59:20+01:00",
			"2028-12-31T23:59:40+01:00",
			"2029-12-31T23:59:00+01:00",
		}},
		// Samoa skipped 2011-12-30 entirely, moving from UTC-10 to UTC+14.
		{"Pacific/Apia", "0 0 12 * * *", "2011-12-28T13:00:00-10:00", []string{
			"2011-12-29T12:00:00-10:00",
			"2011-12-31T12:00:00+14:00",
		}},
	}
	for _, tt := range tests {
		loc := load(t, tt.zone)
		e := MustParse(tt.expr)
		var want []time.Time
		for _, w := range tt.want {
			want = append(want, at(t, w))
		}
		var got []time.Time
		for cur := at(t, tt.from); len(got) < len(want); {
			n, ok := e.Next(cur, loc)
			if !ok {
				break
			}
			got = append(got, n)
			cur = n
		}
		if !slices.EqualFunc(got, want, time.Time.Equal) {
			t.Errorf("%s %q from %s: Next gives\n%s\nwant\n%s", tt.zone, tt.expr, tt.from, show(got, loc), show(want, loc))
		}
		// Backwards: Prev of each occurrence is itself, Prev of the second before it is the
		// previous occurrence.
		for i, w := range want {
			if p, ok := e.Prev(w, loc); !ok || !p.Equal(w) {
				t.Errorf("%s %q: Prev(%s) = %s, want itself", tt.zone, tt.expr, w.In(loc), p.In(loc))
			}
			if i == 0 {
				continue
			}
			for _, before := range []time.Time{w.Add(-time.Second), w.Add(-time.Nanosecond)} {
				if p, ok := e.Prev(before, loc); !ok || !p.Equal(want[i-1]) {
					t.Errorf("%s %q: Prev(%s) = %s, want %s", tt.zone, tt.expr, before.In(loc), p.In(loc), want[i-1].In(loc))
				}
			}
		}
	}
}

// TestDSTPrevInSecondPass: Prev from inside the repeated hour returns the latest first-pass
// occurrence, never a second-pass instant.
func TestDSTPrevInSecondPass(t *testing.T) {
	tests := []struct {
		zone, expr, before, want string
	}{
		{"Europe/Berlin", "0 */15 * * * *", "2026-10-25T02:10:00+01:00", "2026-10-25T02:45:00+02:00"},
		{"Europe/Berlin", "0 */15 * * * *", "2026-10-25T02:59:59+01:00", "2026-10-25T02:45:00+02:00"},
		{"Europe/Berlin", "0 */15 * * * *", "2026-10-25T03:00:00+01:00", "2026-10-25T03:00:00+01:00"},
		{"Europe/Berlin", "* * * * * *", "2026-10-25T02:10:00+01:00", "2026-10-25T02:59:59+02:00"},
		{"Europe/Berlin", "0 30 2 * * *", "2026-10-25T02:45:00+01:00", "2026-10-25T02:30:00+02:00"},
		{"Europe/Berlin", "0 30 2 * * *", "2026-10-25T02:15:00+01:00", "2026-10-25T02:30:00+02:00"},
		{"Europe/Berlin", "0 0 3 * * *", "2026-10-25T02:59:59+01:00", "2026-10-24T03:00:00+02:00"},
		{"America/New_York", "0 30 1 * * *", "2026-11-01T01:45:00-05:00", "2026-11-01T01:30:00-04:00"},
		{"America/New_York", "0 0 0 * * *", "2026-11-01T01:45:00-05:00", "2026-11-01T00:00:00-04:00"},
		{"Australia/Lord_Howe", "0 */15 * * * *", "2026-04-05T01:59:00+10:30", "2026-04-05T01:45:00+11:00"},
		// Gaps: Prev goes back over them.
		{"Europe/Berlin", "0 30 2 * * *", "2026-03-29T12:00:00+02:00", "2026-03-28T02:30:00+01:00"},
		{"Europe/Berlin", "0 */15 * * * *", "2026-03-29T03:14:59+02:00", "2026-03-29T03:00:00+02:00"},
		{"Europe/Berlin", "0 */15 * * * *", "2026-03-29T03:00:00+02:00", "2026-03-29T03:00:00+02:00"},
		{"Europe/Berlin", "0 */15 * * * *", "2026-03-29T01:59:59+01:00", "2026-03-29T01:45:00+01:00"},
		{"Australia/Lord_Howe", "0 15 2 * * *", "2026-10-04T23:00:00+11:00", "2026-10-03T02:15:00+10:30"},
	}
	for _, tt := range tests {
		loc := load(t, tt.zone)
		got, ok := MustParse(tt.expr).Prev(at(t, tt.before), loc)
		if want := at(t, tt.want); !ok || !got.Equal(want) {
			t.Errorf("%s %q: Prev(%s) = %s, %v; want %s", tt.zone, tt.expr, tt.before, got.In(loc), ok, want.In(loc))
		}
	}
}

func show(ts []time.Time, loc *time.Location) string {
	var s string
	for _, t := range ts {
		s += "\t" + t.In(loc).Format(time.RFC3339) + "\n"
	}
	return s
}
