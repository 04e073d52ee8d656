package api

import (
	"net/http"
	"testing"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/ledger"
)

func TestDescribeSchedule(t *testing.T) {
	cases := map[string]string{
		"0 0 3 * * *":        "at 03:00 UTC, every day",
		"0 30 9 * * 1-5":     "at 09:30 UTC, Monday through Friday",
		"0 30 9 * * MON-FRI": "at 09:30 UTC, Monday through Friday",
		"15 0 2 * * *":       "at 02:00:15 UTC, every day",
		"0 0 9,17 * * *":     "at 09:00 and 17:00 UTC, every day",
		"0 */5 * * * *":      "every 5 minutes (UTC)",
		"*/30 * * * * *":     "every 30 seconds (UTC)",
		"* * * * * *":        "every second (UTC)",
		"0 0 * * * *":        "every hour at minute 0 (UTC)",
		"0 0 */2 * * *":      "every 2 hours (UTC)",
		"0 15 */6 * * *":     "every 6 hours, at minute 15 (UTC)",
		"0 0 2 1 * *":        "at 02:00 UTC, on day 1 of the month",
		"0 0 2 1,15 * *":     "at 02:00 UTC, on day 1 and 15 of the month",
		"0 0 2 * * 0,6":      "at 02:00 UTC, on Sunday and Saturday",
		"0 0 2 * * 7":        "at 02:00 UTC, on Sunday",
		"0 0 2 1 1 *":        "at 02:00 UTC, on day 1 of the month, in January",
		"0 0 2 * 6-8 *":      "at 02:00 UTC, every day, in June through August",
		"0 */5 * * * 1-5":    "every 5 minutes (UTC), Monday through Friday",
		"0 0 0 2 * *":        "at 00:00 UTC, on day 2 of the month",
		"0 0 0 * * *":        "at 00:00 UTC, every day",
		"0 0 2 * * *":        "at 02:00 UTC, every day",
		"0 2 * * *":          "at 02:00 UTC, every day", // five fields: second 0
		"0 0 2 L * *":        "cron 0 0 2 L * * (UTC)",
		"bad":                "cron bad (UTC)",
	}
	for expr, want := range cases {
		if got := DescribeSchedule(expr); got != want {
			t.Errorf("DescribeSchedule(%q) = %q, want %q", expr, got, want)
		}
	}
}

func scheduleAPI(t *testing.T, l *fakeLedger, expr string, now time.Time) *API {
	t.Helper()
	s, err := coordinator.ParseSchedule(expr, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{Ledger: l, Leader: &fakeLeader{}, Now: func() time.Time { return now },
		Schedule: &ScheduleConfig{Schedule: s, Overlap: "skip", Misfire: "run-latest", StartingDeadline: 90 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func timerRecord(occ time.Time, state ledger.State, reason string) ledger.Manifest {
	m := manifest(coordinator.TimerRunID(occ), state, occ.Add(time.Second), 2)
	m.Occurrence, m.Reason = occ, reason
	if state.Final() {
		m.Finished = occ.Add(5 * time.Second)
	}
	return m
}

// ?occurrences=N lists the N latest occurrences newest first, each with its record or null
// (a gap), marks a just-due one without a record as pending, and adds the schedule object
// with the next three occurrences and the policies.
func TestListRuns_Occurrences(t *testing.T) {
	now := time.Date(2026, 11, 25, 3, 0, 30, 0, time.UTC) // 30 s after today's occurrence
	l := newFakeLedger()
	day := func(d int) time.Time { return time.Date(2026, 11, 25-d, 3, 0, 0, 0, time.UTC) }
	l.put(timerRecord(day(1), ledger.StateSucceeded, ""))
	l.put(timerRecord(day(2), ledger.StateMissed, "the app was stopped"))
	// day 3: no record at all
	l.put(timerRecord(day(4), ledger.StateSkipped, "run tick-x still in progress"))
	l.put(timerRecord(day(5), ledger.StateRunning, ""))
	a := scheduleAPI(t, l, "0 0 3 * * *", now)

	r, v := get(a, "", map[string]string{"occurrences": "8"})
	if r.Status != http.StatusOK {
		t.Fatalf("got %d %v", r.Status, v)
	}
	occ := v["occurrences"].([]any)
	if len(occ) != 8 {
		t.Fatalf("got %d occurrences, want 8: %v", len(occ), occ)
	}
	// Days 6 and 7 come before the ledger's first run: no record, but not a gap either.
	for i, x := range occ {
		if before := x.(map[string]any)["beforeLedger"] == true; before != (i >= 6) {
			t.Errorf("occurrence %d beforeLedger = %v, want %v", i, before, i >= 6)
		}
	}
	occ = occ[:6]
	wantState := []string{"", "succeeded", "missed", "", "skipped", "running"}
	for i, x := range occ {
		o := x.(map[string]any)
		if o["occurrence"] != day(i).Format(time.RFC3339) || o["run"] != coordinator.TimerRunID(day(i)) {
			t.Errorf("occurrence %d = %v %v, want %v", i, o["occurrence"], o["run"], day(i))
		}
		rec, _ := o["record"].(map[string]any)
		if _, present := o["record"]; !present {
			t.Errorf("occurrence %d has no record key; want null for none", i)
		}
		got := ""
		if rec != nil {
			got = rec["state"].(string)
		}
		if got != wantState[i] {
			t.Errorf("occurrence %d state %q, want %q", i, got, wantState[i])
		}
	}
	if occ[0].(map[string]any)["pending"] != true || occ[3].(map[string]any)["pending"] != nil {
		t.Errorf("pending: today's (30 s old) %v, day 3's %v; want true and absent", occ[0], occ[3])
	}
	if rec := occ[2].(map[string]any)["record"].(map[string]any); rec["reason"] != "the app was stopped" {
		t.Errorf("missed record = %v, want its reason", rec)
	}
	s := v["schedule"].(map[string]any)
	next := s["next"].([]any)
	if s["expression"] != "0 0 3 * * *" || s["description"] != "at 03:00 UTC, every day" || len(next) != 3 ||
		next[0] != day(-1).Format(time.RFC3339) || next[2] != day(-3).Format(time.RFC3339) {
		t.Errorf("schedule = %v", s)
	}
	if s["overlap"] != "skip" || s["misfire"] != "run-latest" || s["startingDeadline"] != "1h30m0s" || s["startingDeadlineSeconds"] != float64(5400) {
		t.Errorf("policies = %v", s)
	}

	// Final records are read once per process; the running one every time.
	before := l.reads[coordinator.TimerRunID(day(1))]
	beforeRunning := l.reads[coordinator.TimerRunID(day(5))]
	get(a, "", map[string]string{"occurrences": "8"})
	if l.reads[coordinator.TimerRunID(day(1))] != before || l.reads[coordinator.TimerRunID(day(5))] <= beforeRunning {
		t.Errorf("second call: final record read %d→%d times, running %d→%d; want cached and re-read",
			before, l.reads[coordinator.TimerRunID(day(1))], beforeRunning, l.reads[coordinator.TimerRunID(day(5))])
	}

	// Without ?occurrences the reply has its old shape.
	_, v = get(a, "", nil)
	if _, ok := v["schedule"]; ok {
		t.Errorf("plain listing has a schedule: %v", v)
	}
	if _, ok := v["occurrences"]; ok {
		t.Errorf("plain listing has occurrences: %v", v)
	}
}

// With an empty ledger the just-due occurrence is pending and the rest come before the first
// run; once a run exists, a recent occurrence older than it is before the ledger, not pending.
func TestListRuns_OccurrencesPendingOrBefore(t *testing.T) {
	now := time.Date(2026, 11, 25, 10, 0, 25, 0, time.UTC)
	l := newFakeLedger()
	a := scheduleAPI(t, l, "*/10 * * * * *", now)
	flags := func() string {
		_, v := get(a, "", map[string]string{"occurrences": "4"})
		out := ""
		for _, x := range v["occurrences"].([]any) {
			o := x.(map[string]any)
			switch {
			case o["record"] != nil:
				out += "R"
			case o["pending"] == true:
				out += "P"
			case o["beforeLedger"] == true:
				out += "B"
			default:
				out += "-"
			}
		}
		return out
	}
	if got := flags(); got != "PPPP" {
		t.Errorf("empty ledger, all within a minute: %s, want PPPP", got)
	}
	l.put(timerRecord(time.Date(2026, 11, 25, 10, 0, 10, 0, time.UTC), ledger.StateSucceeded, ""))
	if got := flags(); got != "PRBB" {
		t.Errorf("one run at :10: %s, want PRBB (newest first)", got)
	}
}

func TestListRuns_OccurrencesWithoutSchedule503(t *testing.T) {
	a := newTestAPI(t, newFakeLedger(), nil, nil)
	if r, v := get(a, "", map[string]string{"occurrences": "5"}); r.Status != http.StatusServiceUnavailable || errCode(v) != CodeUnavailable {
		t.Errorf("got %d %v, want 503 %s", r.Status, v, CodeUnavailable)
	}
}

// A fixed minute and second inside an hour step are both named.
func TestDescribeSchedule_SecondsInsideHours(t *testing.T) {
	if got := DescribeSchedule("30 15 */6 * * *"); got != "every 6 hours, at minute 15 second 30 (UTC)" {
		t.Errorf("got %q", got)
	}
}
