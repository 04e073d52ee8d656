package ledger

import (
	"strings"
	"testing"
	"time"
)

func TestRunIDs_RoundTrip(t *testing.T) {
	occ := time.Date(2026, 11, 21, 2, 0, 0, 0, time.UTC)
	now := time.Date(2026, 11, 21, 9, 30, 15, 0, time.FixedZone("x", 3600))
	long := strings.Repeat("a", MaxScheduleName)
	for _, tc := range []struct {
		id   string
		want RunName
	}{
		{ScheduleRunID("tick", occ), RunName{Schedule: "tick", Occurrence: occ}},
		{ScheduleRunID("nightly-export", occ), RunName{Schedule: "nightly-export", Occurrence: occ}},
		{ScheduleRunID(long, occ), RunName{Schedule: long, Occurrence: occ}},
		{ScheduleNowRunID("nightly-export", "key-1", now), RunName{Schedule: "nightly-export", Now: true}},
		{ScheduleNowRunID(long, "", now), RunName{Schedule: long, Now: true}},
		{ScheduleNowRunID("a-now-b", "", now), RunName{Schedule: "a-now-b", Now: true}},
		{ManualRunID("key-1", now), RunName{Manual: true}},
		{ManualRunID("", now), RunName{Manual: true}},
	} {
		if err := ValidateRunID(tc.id); err != nil {
			t.Errorf("%s: %v", tc.id, err)
		}
		got, ok := ParseRunID(tc.id)
		if !ok || got.Schedule != tc.want.Schedule || !got.Occurrence.Equal(tc.want.Occurrence) || got.Now != tc.want.Now || got.Manual != tc.want.Manual {
			t.Errorf("ParseRunID(%s) = %+v, %v; want %+v", tc.id, got, ok, tc.want)
		}
	}
	if ScheduleRunID("tick", occ) != "tick-20261121t020000z" {
		t.Errorf("the settings' schedule no longer keeps its legacy run IDs: %s", ScheduleRunID("tick", occ))
	}
	if a, b := ScheduleNowRunID("s", "k", now), ScheduleNowRunID("s", "k", now.Add(time.Hour)); a != b {
		t.Errorf("a repeated Idempotency-Key maps to %s and %s", a, b)
	}
	if ManualRunID("k", now) == ScheduleNowRunID("manual", "k", now) {
		t.Error("collision")
	}
}

func TestParseRunID_Refuses(t *testing.T) {
	for _, id := range []string{"", "run-a", "tick-20261121t020000", "tick-20261321t020000z", "-20261121t020000z",
		"manual-abc", "manual-20261121t020000z", "x-now-xyz", "Tick-20261121t020000z", "a--20261121t020000z"} {
		if got, ok := ParseRunID(id); ok {
			t.Errorf("ParseRunID(%q) = %+v, want not a Baton run ID", id, got)
		}
	}
}

func TestValidateScheduleName(t *testing.T) {
	for _, ok := range []string{"a", "tick", "nightly-export", "x1", strings.Repeat("b", MaxScheduleName)} {
		if err := ValidateScheduleName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "1a", "a-", "A", "a_b", "a.b", "manual", "_x", strings.Repeat("b", MaxScheduleName+1)} {
		if err := ValidateScheduleName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
