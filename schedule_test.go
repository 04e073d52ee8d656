package baton

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// Every mistake in a schedule's declaration is a *RegistrationError naming the schedule, the
// job and the field, wrapping a sentinel; Err lists them all; a refused declaration reserves
// nothing.
func TestSchedule_MistakesAreTypedErrors(t *testing.T) {
	app := New()
	if err := registerErr(app, "export", rawJob{}); err != nil {
		t.Fatal(err)
	}
	if err := registerErr(app, "strict", strictJob{}); err != nil {
		t.Fatal(err)
	}
	if err := scheduleErr(app, "nightly", "export", "0 0 2 * * *", InZone("Europe/Berlin"), WithOverlap(OverlapBufferOne),
		WithCatchUp(time.Hour), WithJitter(time.Minute), WithParams(map[string]int{"n": 1})); err != nil {
		t.Fatalf("valid schedule: %v", err)
	}
	cases := []struct {
		name, job, cron string
		opts            []ScheduleOption
		field           string
		sentinel        error
	}{
		{"Nightly", "export", "0 0 2 * * *", nil, "name", ErrInvalidName},
		{"manual", "export", "0 0 2 * * *", nil, "name", ErrInvalidName},
		{strings.Repeat("a", 33), "export", "0 0 2 * * *", nil, "name", ErrInvalidName},
		{"nightly", "export", "0 0 3 * * *", nil, "name", ErrDuplicateSchedule},
		{"orphan", "import", "0 0 2 * * *", nil, "job", ErrUnknownJob},
		{"sixty", "export", "0 60 * * * *", nil, "cron", ErrInvalidSchedule},
		{"never", "export", "0 0 0 30 2 *", nil, "cron", ErrInvalidSchedule},
		{"zone", "export", "0 0 2 * * *", []ScheduleOption{InZone("Mars/Olympus")}, "timeZone", ErrInvalidSchedule},
		{"local", "export", "0 0 2 * * *", []ScheduleOption{InZone("Local")}, "timeZone", ErrInvalidSchedule},
		{"overlap", "export", "0 0 2 * * *", []ScheduleOption{WithOverlap("replace")}, "overlap", ErrInvalidSchedule},
		{"catchup", "export", "0 0 2 * * *", []ScheduleOption{WithCatchUp(0)}, "catchUp", ErrInvalidSchedule},
		{"jitter", "export", "0 0 2 * * *", []ScheduleOption{WithJitter(2 * time.Hour)}, "jitter", ErrInvalidSchedule},
		{"nopause", "export", "0 0 2 * * *", []ScheduleOption{WithAutoPause(0)}, "autoPause", ErrInvalidSchedule},
		{"toomany", "export", "0 0 2 * * *", []ScheduleOption{WithAutoPause(MaxAutoPause + 1)}, "autoPause", ErrInvalidSchedule},
		{"nilopt", "export", "0 0 2 * * *", []ScheduleOption{nil}, "option", ErrInvalidSchedule},
		{"array", "export", "0 0 2 * * *", []ScheduleOption{WithParams(`[1]`)}, "params", ErrInvalidParams},
		{"refused", "strict", "0 0 2 * * *", []ScheduleOption{WithParams(map[string]int{"limit": 0})}, "params", ErrInvalidParams},
	}
	for _, c := range cases {
		err := scheduleErr(app, c.name, c.job, c.cron, c.opts...)
		var re *RegistrationError
		if !errors.As(err, &re) {
			t.Errorf("Schedule(%q): %v, want a *RegistrationError", c.name, err)
			continue
		}
		if re.Schedule != c.name || re.Job != c.job || re.Field != c.field || !errors.Is(err, c.sentinel) {
			t.Errorf("Schedule(%q) = %+v, want schedule %q job %q field %q wrapping %v", c.name, re, c.name, c.job, c.field, c.sentinel)
		}
		if !strings.Contains(err.Error(), `schedule "`+c.name+`"`) {
			t.Errorf("Schedule(%q): message %q does not name the schedule", c.name, err)
		}
	}
	if n := len(app.schedules); n != 1 {
		t.Errorf("%d schedules kept, want only the valid one", n)
	}
	if err := scheduleErr(app, "zone", "export", "0 0 2 * * *", InZone("America/New_York")); err != nil {
		t.Errorf("a refused declaration must not reserve its name: %v", err)
	}
	if joined := app.Err(); joined == nil || !strings.Contains(joined.Error(), `schedule "jitter"`) {
		t.Errorf("Err() = %v, want every refused schedule", joined)
	}
}

// A schedule's params default to its job's; what the app declares reaches the handler as
// declared (policies with their defaults filled in).
func TestSchedule_DeclarationReachesTheHandler(t *testing.T) {
	app := New()
	_ = registerErr(app, "export", rawJob{}, WithDefaultParams(`{"container":"data"}`))
	if err := scheduleErr(app, "hourly", "export", "0 0 * * * *"); err != nil {
		t.Fatal(err)
	}
	if err := scheduleErr(app, "weekly", "export", "0 0 9 * * 1", InZone("Europe/Berlin"), WithParams(`{"container":"archive"}`),
		WithOverlap(OverlapAllow), WithCatchUp(6*time.Hour), WithJitter(30*time.Second), WithAutoPause(3)); err != nil {
		t.Fatal(err)
	}
	got := app.options(nil, nil).Schedules
	if len(got) != 2 {
		t.Fatalf("%d schedules reach the handler", len(got))
	}
	h, w := got[0], got[1]
	if h.Name != "hourly" || string(h.Params) != `{"container":"data"}` || h.Overlap != "skip" || h.CatchUp != DefaultCatchUp ||
		h.Jitter != 0 || h.TimeZone != "" || h.AutoPause != 0 {
		t.Errorf("hourly = %+v", h)
	}
	if w.TimeZone != "Europe/Berlin" || !json.Valid(w.Params) || string(w.Params) != `{"container":"archive"}` || w.Overlap != "allow" ||
		w.CatchUp != 6*time.Hour || w.Jitter != 30*time.Second || w.Cron != "0 0 9 * * 1" || w.AutoPause != 3 {
		t.Errorf("weekly = %+v", w)
	}
}
