package ncrontab

import (
	"testing"
	"time"
	_ "time/tzdata" // the tests' time zones, whatever the machine has installed
)

// at parses an RFC 3339 time, with or without seconds, in tests' tables.
func at(t testing.TB, s string) time.Time {
	t.Helper()
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04Z07:00"} {
		if v, err := time.Parse(layout, s); err == nil {
			return v
		}
	}
	t.Fatalf("bad time %q in the test", s)
	return time.Time{}
}

func load(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestNextUTC checks Next in UTC, partly with the cases of NCrontab's own test suite
// (NCrontab.Tests/CrontabScheduleTests.cs, Evaluations), whose expected values carry over.
func TestNextUTC(t *testing.T) {
	tests := []struct {
		expr, from, want string
	}{
		{"0 * * * * *", "2003-01-01T00:00:00Z", "2003-01-01T00:01:00Z"},
		{"0 * * * * *", "2003-01-01T23:59:00Z", "2003-01-02T00:00:00Z"},
		{"0 * * * * *", "2003-12-31T23:59:00Z", "2004-01-01T00:00:00Z"},
		{"0 * * * * *", "2003-02-28T23:59:00Z", "2003-03-01T00:00:00Z"},
		{"0 * * * * *", "2004-02-28T23:59:00Z", "2004-02-29T00:00:00Z"},
		{"45 * * * * *", "2003-01-01T00:00:00Z", "2003-01-01T00:00:45Z"},
		{"45-47,48,49 * * * * *", "2003-01-01T00:00:49Z", "2003-01-01T00:01:45Z"},
		{"2/5 * * * * *", "2003-01-01T00:00:57Z", "2003-01-01T00:01:02Z"},
		{"* 0-1 10 * * *", "2021-02-24T09:50:35Z", "2021-02-24T10:00:00Z"},
		{"9 2/5 * * * *", "2003-01-01T00:57:30Z", "2003-01-01T01:02:09Z"},
		{"6 45-47,48,49 * * * *", "2003-01-01T00:49:30Z", "2003-01-01T01:45:06Z"},
		{"0 30 * 1 * *", "2003-01-07T00:00:00Z", "2003-02-01T00:30:00Z"},
		{"0 30 * 1 * *", "2003-02-01T00:30:00Z", "2003-02-01T01:30:00Z"},
		{"0 0 0 15,30,31 * *", "2000-01-31T00:00:00Z", "2000-02-15T00:00:00Z"},
		{"0 0 0 15,30,31 * *", "2000-02-15T00:00:00Z", "2000-03-15T00:00:00Z"},
		{"0 0 0 15,30,31 * *", "2000-04-30T00:00:00Z", "2000-05-15T00:00:00Z"},
		{"0 10 * * 6 *", "2003-12-01T05:00:00Z", "2004-06-01T00:10:00Z"},
		{"0 1 2 3 * *", "2003-01-04T00:00:00Z", "2003-02-03T02:01:00Z"},
		{"0 10 * * February,April-Jun *", "2002-07-01T05:00:00Z", "2003-02-01T00:10:00Z"},
		{"0 * 2,4-8,15 * 6 *", "1988-03-11T14:23:00Z", "1988-06-01T02:00:00Z"},
		{"0 30 6 * * sunday", "2003-06-26T10:00:00Z", "2003-06-29T06:30:00Z"},
		{"0 15 18 * * Mon", "2003-06-30T18:15:00Z", "2003-07-07T18:15:00Z"},
		{"0 * * * * Mon", "2003-01-01T00:00:00Z", "2003-01-06T00:00:00Z"},
		{"0 40 14/1 * * *", "2000-01-01T14:40:00Z", "2000-01-01T15:40:00Z"},
		// Day and day of week must both match (NCrontab's "45 16 1 * Mon" cases).
		{"0 45 16 1 * Mon", "2003-01-01T12:00:00Z", "2003-09-01T16:45:00Z"},
		{"0 45 16 1 * Mon", "2003-09-01T23:45:00Z", "2003-12-01T16:45:00Z"},
		{"0 0 0 13 * FRI", "2026-01-01T00:00:00Z", "2026-02-13T00:00:00Z"},
		{"0 0 0 13 * FRI", "2026-02-13T00:00:00Z", "2026-03-13T00:00:00Z"},
		{"0 0 0 13 * FRI", "2026-03-13T00:00:00Z", "2026-11-13T00:00:00Z"},
		{"0 0 0 1-7 * MON", "2026-01-01T00:00:00Z", "2026-01-05T00:00:00Z"}, // the first Monday of the month
		{"0 0 0 1-7 * MON", "2026-01-05T00:00:00Z", "2026-02-02T00:00:00Z"},
		// Days 29-31 and leap years.
		{"0 0 0 31 * *", "2026-01-31T00:00:00Z", "2026-03-31T00:00:00Z"},
		{"0 0 0 30 * *", "2026-01-30T00:00:00Z", "2026-03-30T00:00:00Z"},
		{"0 0 0 29 2 *", "2026-01-01T00:00:00Z", "2028-02-29T00:00:00Z"},
		{"0 0 0 29 2 *", "2096-02-29T00:00:00Z", "2104-02-29T00:00:00Z"}, // 2100 is not a leap year
		{"0 0 0 29 2 *", "2000-01-01T00:00:00Z", "2000-02-29T00:00:00Z"}, // 2000 is
		{"0 0 0 29 2 MON", "2026-01-01T00:00:00Z", "2044-02-29T00:00:00Z"},
		{"0 0 0 29 2 MON", "2072-02-29T00:00:00Z", "2112-02-29T00:00:00Z"}, // 40 years
		{"0 0 0 29,30 2,4 *", "2026-01-01T00:00:00Z", "2026-04-29T00:00:00Z"},
		// Rollovers of every field.
		{"59 59 23 31 12 *", "2026-01-01T00:00:00Z", "2026-12-31T23:59:59Z"},
		{"59 59 23 31 12 *", "2026-12-31T23:59:59Z", "2027-12-31T23:59:59Z"},
		{"0 0 0 1 1 *", "2026-12-31T23:59:59Z", "2027-01-01T00:00:00Z"},
		{"0 0 0 1 1 *", "2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"},
		{"* * * * * *", "2026-12-31T23:59:59Z", "2027-01-01T00:00:00Z"},
		{"*/10 * * * * *", "2026-05-01T10:00:55Z", "2026-05-01T10:01:00Z"},
		{"0 */15 * * * *", "2026-05-01T10:59:59Z", "2026-05-01T11:00:00Z"},
		{"0 0 9-17 * * *", "2026-05-01T17:00:00Z", "2026-05-02T09:00:00Z"},
		{"0 30 9 * * 1-5", "2026-05-01T09:30:00Z", "2026-05-04T09:30:00Z"}, // Friday to Monday
		{"0 30 9 * Jan Mon", "2026-01-26T09:30:00Z", "2027-01-04T09:30:00Z"},
		// Strictly after: a fraction of a second past an occurrence does not return it.
		{"* * * * * *", "2026-05-01T10:00:00.5Z", "2026-05-01T10:00:01Z"},
		{"0 0 0 * * *", "2026-05-01T00:00:00.000000001Z", "2026-05-02T00:00:00Z"},
		{"0 0 0 * * *", "2026-04-30T23:59:59.999999999Z", "2026-05-01T00:00:00Z"},
		// Before 1970 and far ahead.
		{"0 0 12 * * *", "1969-12-31T12:00:00Z", "1970-01-01T12:00:00Z"},
		{"0 0 0 29 2 *", "1896-03-01T00:00:00Z", "1904-02-29T00:00:00Z"},
		{"0 0 0 1 1 *", "9998-06-01T00:00:00Z", "9999-01-01T00:00:00Z"},
	}
	for _, tt := range tests {
		e := MustParse(tt.expr)
		from, want := at(t, tt.from), at(t, tt.want)
		got, ok := e.Next(from, time.UTC)
		if !ok || !got.Equal(want) {
			t.Errorf("%q.Next(%s) = %s, %v; want %s", tt.expr, tt.from, got.Format(time.RFC3339), ok, tt.want)
		}
		if ok && got.Location() != time.UTC {
			t.Errorf("%q.Next(%s) is in %v, want UTC", tt.expr, tt.from, got.Location())
		}
		// The same instant given in another time zone makes no difference; nor does a nil loc.
		if got2, _ := e.Next(from.In(time.FixedZone("X", -7*3600)), nil); !got2.Equal(got) {
			t.Errorf("%q.Next(%s, nil) = %s, want %s", tt.expr, tt.from, got2, got)
		}
	}
}

func TestPrevUTC(t *testing.T) {
	tests := []struct {
		expr, before, want string
	}{
		// At or before: an occurrence is its own Prev.
		{"* * * * * *", "2026-05-01T10:00:00Z", "2026-05-01T10:00:00Z"},
		{"* * * * * *", "2026-05-01T10:00:00.999Z", "2026-05-01T10:00:00Z"},
		{"0 0 0 * * *", "2026-05-01T00:00:00Z", "2026-05-01T00:00:00Z"},
		{"0 0 0 * * *", "2026-04-30T23:59:59.999Z", "2026-04-30T00:00:00Z"},
		{"0 * * * * *", "2003-01-01T00:00:59Z", "2003-01-01T00:00:00Z"},
		{"0 * * * * *", "2004-01-01T00:00:00Z", "2004-01-01T00:00:00Z"},
		{"0 * * * * *", "2003-12-31T23:59:59Z", "2003-12-31T23:59:00Z"},
		{"45-47,48,49 * * * * *", "2003-01-01T00:01:44Z", "2003-01-01T00:00:49Z"},
		{"2/5 * * * * *", "2003-01-01T00:01:01Z", "2003-01-01T00:00:57Z"},
		{"0 0 0 15,30,31 * *", "2000-03-14T00:00:00Z", "2000-02-15T00:00:00Z"},
		{"0 0 0 15,30,31 * *", "2000-05-14T00:00:00Z", "2000-04-30T00:00:00Z"},
		{"0 45 16 1 * Mon", "2003-11-30T00:00:00Z", "2003-09-01T16:45:00Z"},
		{"0 0 0 13 * FRI", "2026-11-12T00:00:00Z", "2026-03-13T00:00:00Z"},
		{"0 0 0 31 * *", "2026-03-30T00:00:00Z", "2026-01-31T00:00:00Z"},
		{"0 0 0 29 2 *", "2104-02-28T00:00:00Z", "2096-02-29T00:00:00Z"},
		{"0 0 0 29 2 MON", "2112-02-28T00:00:00Z", "2072-02-29T00:00:00Z"},
		{"0 0 0 1 1 *", "2026-12-31T23:59:59Z", "2026-01-01T00:00:00Z"},
		{"59 59 23 31 12 *", "2026-12-31T23:59:58Z", "2025-12-31T23:59:59Z"},
		{"0 0 9-17 * * *", "2026-05-02T08:59:59Z", "2026-05-01T17:00:00Z"},
		{"0 30 9 * * 1-5", "2026-05-04T09:29:59Z", "2026-05-01T09:30:00Z"},
		{"0 30 9 * Jan Mon", "2027-01-04T09:29:00Z", "2026-01-26T09:30:00Z"},
		{"0 0 12 * * *", "1970-01-01T11:59:59Z", "1969-12-31T12:00:00Z"},
		{"*/10 * * * * *", "1969-12-31T23:59:59.5Z", "1969-12-31T23:59:50Z"},
	}
	for _, tt := range tests {
		e := MustParse(tt.expr)
		got, ok := e.Prev(at(t, tt.before), nil)
		if want := at(t, tt.want); !ok || !got.Equal(want) {
			t.Errorf("%q.Prev(%s) = %s, %v; want %s", tt.expr, tt.before, got.Format(time.RFC3339), ok, tt.want)
		}
		if ok && got.Location() != time.UTC {
			t.Errorf("%q.Prev(%s) is in %v, want UTC", tt.expr, tt.before, got.Location())
		}
	}
}

func TestNextPrevBounds(t *testing.T) {
	var zero Expr
	now := at(t, "2026-05-01T00:00:00Z")
	if got, ok := zero.Next(now, nil); ok || !got.IsZero() {
		t.Errorf("Expr{}.Next = %v, %v; want false", got, ok)
	}
	if got, ok := zero.Prev(now, nil); ok || !got.IsZero() {
		t.Errorf("Expr{}.Prev = %v, %v; want false", got, ok)
	}
	e := MustParse("* * * * * *")
	far := time.Unix(1<<53, 0)
	if _, ok := e.Next(far, nil); ok {
		t.Error("Next far beyond the supported range reported an occurrence")
	}
	if _, ok := e.Prev(far, nil); ok {
		t.Error("Prev far beyond the supported range reported an occurrence")
	}
	if _, ok := e.Prev(time.Unix(-1<<53, 0), nil); ok {
		t.Error("Prev far before the supported range reported an occurrence")
	}
	if _, ok := e.Next(time.Time{}, nil); !ok { // year 1 is in range
		t.Error("Next(year 1) reported nothing")
	}
}

// TestNextFixedZone: a fixed offset is a time zone without transitions.
func TestNextFixedZone(t *testing.T) {
	e := MustParse("0 0 0 29 2 MON")
	from := at(t, "2026-01-01T00:00:00Z")
	got, ok := e.Next(from, time.FixedZone("UTC+14", 14*3600))
	if want := at(t, "2044-02-29T00:00:00+14:00"); !ok || !got.Equal(want) {
		t.Errorf("Next in UTC+14 = %v, %v; want %v", got, ok, want)
	}
}
