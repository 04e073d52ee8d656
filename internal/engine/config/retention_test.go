package config

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

const day = 24 * time.Hour

// Unset, BATON_RETENTION keeps succeeded runs 30 days, runs that ended badly 90 and records
// of occurrences that never ran 7; every final state has one.
func TestLoad_RetentionDefaults(t *testing.T) {
	c, err := Load(env(base()))
	if err != nil {
		t.Fatal(err)
	}
	want := Retention{
		ledger.StateSucceeded: 30 * day,
		ledger.StatePartial:   90 * day, ledger.StateFailed: 90 * day, ledger.StateTimedOut: 90 * day, ledger.StateCancelled: 90 * day,
		ledger.StateSkipped: 7 * day, ledger.StateMissed: 7 * day, ledger.StatePaused: 7 * day,
	}
	if !maps.Equal(c.Retention, want) {
		t.Errorf("default retention %v, want %v", c.Retention, want)
	}
	for _, s := range FinalStates {
		if !s.Final() || c.Retention[s] == 0 {
			t.Errorf("final state %s has no default retention", s)
		}
	}
	if c.Retention.Off() {
		t.Error("the default retention is off")
	}
}

// Each state given replaces its default (days, Go durations, the host's form, off), the rest
// keep theirs; "off" alone keeps every run.
func TestLoad_Retention(t *testing.T) {
	c, err := Load(env(with(base(), SettingRetention, `{"succeeded":"14d","failed":"2160h","paused":"off","missed":"1.00:00:00","skipped":"0"}`)))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Retention
	if r[ledger.StateSucceeded] != 14*day || r[ledger.StateFailed] != 90*day || r[ledger.StatePaused] != 0 ||
		r[ledger.StateMissed] != day || r[ledger.StateSkipped] != 0 || r[ledger.StatePartial] != 90*day || r[ledger.StateCancelled] != 90*day {
		t.Errorf("retention %v", r)
	}
	c, err = Load(env(with(base(), SettingRetention, "Off")))
	if err != nil || !c.Retention.Off() {
		t.Errorf("BATON_RETENTION=Off: %v, %v; want every run kept", c.Retention, err)
	}
}

// Every error names BATON_RETENTION, the state and the value, and says what is allowed.
func TestLoad_RetentionErrors(t *testing.T) {
	for _, c := range []struct {
		value string
		want  []string
	}{
		{"30d", []string{SettingRetention, `"off"`, "JSON object"}},
		{`{"running":"1d"}`, []string{SettingRetention, `"running" is not a final state`, "succeeded, partial, failed, timed-out, cancelled, skipped, missed, paused"}},
		{`{"succeeded":"soon"}`, []string{SettingRetention, "succeeded", `"soon"`, "not a duration"}},
		{`{"succeeded":30}`, []string{SettingRetention, "succeeded", "30 is not a string"}},
		{`{"failed":"10m"}`, []string{SettingRetention, "failed", `"10m"`, "too short", "1h"}},
		{`{"failed":"-1d"}`, []string{SettingRetention, "failed", "not a duration"}},
		{`{"failed":"1d","failed":"2d"}`, []string{SettingRetention, `"failed" is given twice`}},
	} {
		t.Run(c.value, func(t *testing.T) {
			_, err := Load(env(with(base(), SettingRetention, c.value)))
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
