package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/lib/ncrontab"
	"github.com/batonfn/baton/work"
)

// Schedule is one schedule as the app declared it (baton.App.Schedule), before the settings
// change it.
type Schedule struct {
	Name, Job string
	// Cron is the six-field NCRONTAB expression, evaluated in TimeZone ("" is UTC).
	Cron, TimeZone string
	Params         json.RawMessage
	// Overlap is the overlap policy ("": config.DefaultOverlap).
	Overlap config.Overlap
	CatchUp time.Duration
	Jitter  time.Duration
	// Budget is the failure budget of the schedule's runs (nil: its job's).
	Budget *ledger.Budget
	// AutoPause is the auto-pause threshold (0: off).
	AutoPause int
}

// zoned is an expression evaluated in a time zone: the coordinator's Cron.
type zoned struct {
	expr ncrontab.Expr
	loc  *time.Location
}

func (z zoned) Next(t time.Time) (time.Time, bool) { return z.expr.Next(t, z.loc) }
func (z zoned) Prev(t time.Time) (time.Time, bool) { return z.expr.Prev(t, z.loc) }
func (z zoned) String() string                     { return z.expr.String() }

// heartbeatPeriod is the longest gap between two occurrences of the heartbeat expression over
// a day (BATON_HEARTBEAT): an occurrence may wait that long to be decided.
func heartbeatPeriod(expr string) (time.Duration, error) {
	e, err := ncrontab.Parse(expr)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %w", config.SettingHeartbeat, expr, err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var longest time.Duration
	prev, ok := e.Prev(start, time.UTC)
	for t := prev; ok && t.Before(start.Add(24*time.Hour)); {
		next, more := e.Next(t, time.UTC)
		if !more {
			break
		}
		longest = max(longest, next.Sub(t))
		t, ok = next, more
	}
	if longest == 0 || longest > time.Hour {
		return 0, fmt.Errorf("%s=%q beats every %s at most: the heartbeat decides every schedule's occurrences, so it must beat at least hourly (\"0 * * * * *\" is every minute)",
			config.SettingHeartbeat, expr, longest)
	}
	return longest, nil
}

// buildSchedules makes the coordinator's schedules: the app's own, then the settings' ("tick":
// BATON_SCHEDULE of BATON_JOB with BATON_JOB_PARAMS, when set), each with BATON_SCHEDULES
// applied. Every problem names the setting or the schedule; all are reported at once. A
// schedule whose job the settings misconfigure (jobErr, for "tick") is kept: its occurrences are
// recorded failed with the reason, and the app stays up.
func buildSchedules(cfg config.Config, o Options, jobErr error, tickParams json.RawMessage) ([]coordinator.Schedule, error) {
	decls := slices.Clone(o.Schedules)
	var errs []error
	if cfg.Schedule != "" {
		if slices.ContainsFunc(decls, func(s Schedule) bool { return s.Name == coordinator.LegacySchedule }) {
			errs = append(errs, fmt.Errorf("%s declares the schedule %q, which the app declares too: unset %s or rename the app's schedule",
				config.SettingSchedule, coordinator.LegacySchedule, config.SettingSchedule))
		} else {
			decls = append(decls, Schedule{Name: coordinator.LegacySchedule, Job: cfg.Job, Cron: cfg.Schedule, Params: tickParams,
				Overlap: cfg.Overlap, CatchUp: config.DefaultCatchUp})
		}
	}
	names := make(map[string]bool, len(decls))
	for _, d := range decls {
		names[d.Name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Overrides)) {
		if !names[name] {
			errs = append(errs, fmt.Errorf("%s names the schedule %q, which this app does not declare (it declares: %s)",
				config.SettingSchedules, name, declared(names)))
		}
	}
	errs = append(errs, applyBudgets(cfg, o.Jobs), applyLimits(cfg, o.Jobs))
	out := make([]coordinator.Schedule, 0, len(decls))
	for _, d := range decls {
		s, err := schedule(d, cfg.Overrides[d.Name], o.Jobs)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if d.Name == coordinator.LegacySchedule && cfg.Schedule != "" {
			s.JobError = jobErr
		}
		out = append(out, s)
	}
	return out, errors.Join(errs...)
}

// applyLimits gives the limits BATON_LIMITS names their settings there, in every job that
// declares them; a limit no job declares is an error naming the setting.
func applyLimits(cfg config.Config, jobs *work.Registry) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(cfg.Limits)) {
		found := false
		for _, job := range jobs.Names() {
			if spec, ok := jobs.Limit(job); ok && spec.Name == name {
				jobs.SetLimit(job, cfg.Limits[name])
				found = true
			}
		}
		if !found {
			errs = append(errs, fmt.Errorf("%s names the limit %q, which no job of this app declares (baton.WithLimit)", config.SettingLimits, name))
		}
	}
	return errors.Join(errs...)
}

// applyBudgets gives the jobs the failure budgets BATON_FAILURE_BUDGETS names (pinned: they win
// over the code's budgets of jobs and schedules); a job it names that is not registered is an
// error naming the setting.
func applyBudgets(cfg config.Config, jobs *work.Registry) error {
	var errs []error
	for _, job := range slices.Sorted(maps.Keys(cfg.Budgets)) {
		if _, err := jobs.Lookup(job); err != nil {
			errs = append(errs, fmt.Errorf("%s names the job %q, which this app does not register (it registers: %s)",
				config.SettingFailureBudgets, job, strings.Join(jobs.Names(), ", ")))
			continue
		}
		b := cfg.Budgets[job]
		jobs.SetFailureBudget(job, ledger.Budget{MaxFailed: b.MaxFailed, MaxPercent: b.MaxPercent}, true)
	}
	return errors.Join(errs...)
}

// checkSchedules checks every schedule against the heartbeat's longest gap (a catch-up
// window must outlast it), all problems joined.
func checkSchedules(schedules []coordinator.Schedule, heartbeat time.Duration) error {
	var errs []error
	for _, s := range schedules {
		errs = append(errs, s.Validate(heartbeat))
	}
	return errors.Join(errs...)
}

// schedule makes one coordinator schedule of d with its override applied.
func schedule(d Schedule, ov config.ScheduleOverride, jobs *work.Registry) (coordinator.Schedule, error) {
	where := func(field string) string {
		if d.Name == coordinator.LegacySchedule && field == "cron" && ov.Cron == "" {
			return config.SettingSchedule
		}
		return fmt.Sprintf("schedule %q: %s", d.Name, field)
	}
	if ov.Cron != "" {
		d.Cron = ov.Cron
		where = func(field string) string {
			return fmt.Sprintf("%s: schedule %q: %s", config.SettingSchedules, d.Name, field)
		}
	}
	expr, err := ncrontab.Parse(d.Cron)
	if err != nil {
		return coordinator.Schedule{}, fmt.Errorf("%s: %w", where("cron"), err)
	}
	tz := d.TimeZone
	if ov.TimeZone != "" {
		tz = ov.TimeZone
	}
	loc := time.UTC
	if tz != "" {
		if loc, err = time.LoadLocation(tz); err != nil || tz == "Local" {
			return coordinator.Schedule{}, fmt.Errorf("%s: schedule %q: timeZone %q is not an IANA time zone such as \"Europe/Berlin\"",
				config.SettingSchedules, d.Name, tz)
		}
	}
	s := coordinator.Schedule{Name: d.Name, Job: d.Job, Params: d.Params, Cron: zoned{expr, loc}, TimeZone: loc.String(),
		Description: expr.Describe(), Overlap: d.Overlap, CatchUp: d.CatchUp, Jitter: d.Jitter, AutoPause: d.AutoPause,
		Budget: d.Budget}
	if ov.Overlap != "" {
		s.Overlap = ov.Overlap
	}
	if ov.CatchUp != nil {
		s.CatchUp = *ov.CatchUp
	}
	if ov.Jitter != nil {
		s.Jitter = *ov.Jitter
	}
	if ov.AutoPause != nil {
		s.AutoPause = *ov.AutoPause
	}
	if ov.Paused != nil && *ov.Paused {
		s.Paused, s.PausedBy = true, "the app setting "+config.SettingSchedules
	}
	if _, err := jobs.Lookup(d.Job); err != nil && d.Name != coordinator.LegacySchedule {
		return coordinator.Schedule{}, fmt.Errorf("schedule %q: job %q is not registered", d.Name, d.Job)
	}
	return s, nil
}

func declared(names map[string]bool) string {
	if len(names) == 0 {
		return "no schedule"
	}
	return strings.Join(slices.Sorted(maps.Keys(names)), ", ")
}

// errNoSchedule is the answer to a manual run that names neither a job nor a schedule when the
// app declares no settings' schedule to fall back on.
var errNoSchedule = errors.New(`name a job ({"job":"..."}) or run a schedule now (POST /api/schedules/{name}/runs): this app has no default schedule (` +
	config.SettingSchedule + ` is not set)`)

// checkRunTimeouts checks each job's own run timeout (baton.WithRunTimeout) against the
// settings' check rounds: like BATON_RUN_TIMEOUT, it must not keep a run open past
// config.MaxRunHorizon.
func checkRunTimeouts(cfg config.Config, jobs *work.Registry) error {
	var errs []error
	for _, name := range jobs.Names() {
		rt := jobs.RunTimeout(name)
		if h := cfg.RunHorizonOf(rt); rt > 0 && h > config.MaxRunHorizon {
			errs = append(errs, fmt.Errorf("job %q: its run timeout %s with %s=%d keeps a run open up to %s: at most %s; lower one of them",
				name, rt, config.SettingCheckRounds, cfg.CheckRounds, h, config.MaxRunHorizon))
		}
	}
	return errors.Join(errs...)
}
