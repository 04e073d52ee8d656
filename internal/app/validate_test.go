package app

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/limit"
)

// validate accepts an empty azd environment (the template's defaults) and refuses each bad
// value with the handler's own message naming the setting. The settings' schedule and its job
// are judged when the environment sets BATON_SCHEDULE.
func TestValidate(t *testing.T) {
	run := func(kv ...string) (int, string) {
		env := map[string]string{config.SettingAppRoot: filepath.Join("..", "..")} // the repo's host.json
		for i := 0; i+1 < len(kv); i += 2 {
			env[kv[i]] = kv[i+1]
		}
		var out, errb bytes.Buffer
		code := validate(Options{Jobs: builtinJobs(), Getenv: func(k string) string { return env[k] }, Stdout: &out, Stderr: &errb})
		return code, out.String() + errb.String()
	}
	if code, out := run(); code != 0 || !strings.Contains(out, "schedules: none") {
		t.Errorf("empty environment: exit %d: %s", code, out)
	}
	hourly := []string{config.SettingSchedule, "0 0 * * * *"}
	if code, out := run(hourly...); code != 0 || !strings.Contains(out, "tick (\"0 0 * * * *\" UTC, job synthetic, params "+config.DefaultJobParams+")") {
		t.Errorf("the settings' schedule: exit %d: %s", code, out)
	}
	if code, out := run(append(hourly, config.SettingJob, "inventory", config.SettingJobParams, `{"container":"data"}`)...); code != 0 {
		t.Errorf("inventory with a container: exit %d: %s", code, out)
	}
	for _, c := range []struct {
		kv   []string
		want string
	}{
		{append(hourly, config.SettingJob, "inventory"), config.SettingJobParams + " is not set"},
		{append(hourly, config.SettingJob, "inventory", config.SettingJobParams, "{}"), "container"},
		{append(hourly, config.SettingJobParams, `{"partitions":`), config.SettingJobParams},
		{append(hourly, config.SettingJob, "nightly"), config.SettingJob + `="nightly"`},
		{[]string{config.SettingLeaseDuration, "20.5s"}, "whole number of seconds"},
		{[]string{config.SettingSchedule, "every hour"}, config.SettingSchedule},
		{[]string{config.SettingHeartbeat, "0 0 */2 * * *"}, config.SettingHeartbeat + `="0 0 */2 * * *" beats every 2h0m0s at most`},
		{[]string{config.SettingSchedules, `{"tick":{"paused":true}}`}, `names the schedule "tick", which this app does not declare`},
		{[]string{config.SettingFailureBudgets, `{"crm":{"maxFailed":3}}`}, config.SettingFailureBudgets + ` names the job "crm", which this app does not register`},
		{[]string{config.SettingLimits, `{"crm":{"maxInFlight":3}}`}, config.SettingLimits + ` names the limit "crm", which no job of this app declares`},
		{[]string{config.SettingLimits, `{"crm":{"rate":3,"burst":4}}`}, config.SettingLimits + `: limit "crm": burst: 4`},
		{append(hourly, config.SettingSchedules, `{"tick":{"catchUp":"30s"}}`), `schedule "tick": CatchUp 30s must be longer than the heartbeat's period 1m0s`},
		{[]string{config.SettingMisfire, "skip"}, config.SettingMisfire + `="skip" is no longer read`},
		{[]string{config.SettingOverlap, "queue"}, config.SettingOverlap},
		{[]string{config.SettingRunTimeout, "48h"}, config.SettingRunTimeout},
		// Not settable through azd env: a stray value in the environment is ignored.
		{append(hourly, config.SettingStallTimeout, "48h", config.SettingJob, "x"), config.SettingJob},
	} {
		code, out := run(c.kv...)
		if code != 2 || !strings.Contains(out, c.want) {
			t.Errorf("%v: exit %d, output %q; want exit 2 mentioning %q", c.kv, code, out, c.want)
		}
		if strings.Contains(out, config.SettingStallTimeout) {
			t.Errorf("%v: validate judged %s, which azd env does not set: %s", c.kv, config.SettingStallTimeout, out)
		}
	}
}

// The handler refuses at start-up, as ErrSettings with exit code 2, every setting that
// validate refuses because the app's schedules cannot run with it — not only the values
// config.Load refuses — and names it.
func TestMain_SettingsTheSchedulesCannotRunWithExitTwo(t *testing.T) {
	local := []string{config.SettingHostStorage, "UseDevelopmentStorage=true", config.SettingTransport, "queue",
		config.SettingAppRoot, "/nonexistent-app-root"}
	minutely := []string{config.SettingHeartbeat, "0 * * * * *"}
	hourly := []string{config.SettingSchedule, "0 0 * * * *"}
	for _, c := range []struct {
		kv   []string
		want string
	}{
		{[]string{config.SettingHeartbeat, "0 0 */2 * * *"}, config.SettingHeartbeat + `="0 0 */2 * * *" beats every 2h0m0s at most`},
		{append(minutely, config.SettingSchedule, "every hour"), config.SettingSchedule + ": "},
		{append(minutely, config.SettingSchedules, `{"tick":{"paused":true}}`), `names the schedule "tick", which this app does not declare`},
		{append(append(minutely, hourly...), config.SettingSchedules, `{"tick":{"catchUp":"30s"}}`),
			`schedule "tick": CatchUp 30s must be longer than the heartbeat's period 1m0s`},
	} {
		env := map[string]string{}
		for _, kv := range [][]string{local, c.kv} {
			for i := 0; i+1 < len(kv); i += 2 {
				env[kv[i]] = kv[i+1]
			}
		}
		var logs, out, errb bytes.Buffer
		o := Options{Jobs: builtinJobs(), Getenv: func(k string) string { return env[k] },
			Logger: slog.New(slog.NewJSONHandler(&logs, nil)), Stdout: &out, Stderr: &errb}
		err := Serve(context.Background(), o)
		if !errors.Is(err, ErrSettings) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: Serve: %v; want ErrSettings naming %q", c.kv, err, c.want)
		}
		if code := Main(context.Background(), []string{"baton"}, o); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming %q", c.kv, code, errb.String(), c.want)
		}
	}
}

// A job's own run timeout is held to the settings' bound on how long a run stays open, as
// BATON_RUN_TIMEOUT is: with BATON_CHECK_ROUNDS=20, a day's timeout keeps a run open too long.
func TestCheckRunTimeouts_AJobsOwnIsBoundByTheRunHorizon(t *testing.T) {
	jobs := builtinJobs()
	jobs.SetRunTimeout("synthetic", 24*time.Hour)
	cfg := config.Config{RunTimeout: time.Hour, CheckRounds: 3, LeaseDuration: 30 * time.Second}
	if err := checkRunTimeouts(cfg, jobs); err != nil {
		t.Errorf("3 rounds: %v", err)
	}
	cfg.CheckRounds = 20
	err := checkRunTimeouts(cfg, jobs)
	if err == nil || !strings.Contains(err.Error(), `job "synthetic"`) || !strings.Contains(err.Error(), config.SettingCheckRounds+"=20") {
		t.Errorf("20 rounds: %v, want an error naming the job and %s", err, config.SettingCheckRounds)
	}
}

// BATON_LIMITS replaces the settings of a limit every job that declares it runs under.
func TestApplyLimits(t *testing.T) {
	jobs := builtinJobs()
	declared, err := limit.Spec{Name: "crm", MaxInFlight: 4}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	jobs.SetLimit("synthetic", declared)
	jobs.SetLimit("inventory", declared)
	over := limit.Spec{Name: "crm", MaxInFlight: 1, Rate: 5, Per: time.Second, Burst: 1}
	if err := applyLimits(config.Config{Limits: map[string]limit.Spec{"crm": over}}, jobs); err != nil {
		t.Fatal(err)
	}
	for _, job := range []string{"synthetic", "inventory"} {
		if got, ok := jobs.Limit(job); !ok || got != over {
			t.Errorf("job %s: limit %+v, want %+v", job, got, over)
		}
	}
}
