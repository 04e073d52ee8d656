package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/batonfn/baton/config"
	"github.com/batonfn/baton/coordinator"
)

// jobError names the setting to fix and what is wrong; the defaults are valid.
func TestJobError_NamesTheSetting(t *testing.T) {
	jobs := registerJobs(nil) // validation needs no storage client
	if err := jobError(jobs, config.DefaultJob, config.DefaultJobParams); err != nil {
		t.Fatalf("the default job and params: %v", err)
	}
	for _, c := range []struct {
		job, params string
		want        []string
	}{
		{"invntory", "", []string{config.SettingJob, `"invntory"`, "inventory", "synthetic"}},
		{jobInventory, "", []string{config.SettingJobParams + " is not set", config.SettingJob + "=inventory", "JSON object"}},
		{jobInventory, "{}", []string{config.SettingJobParams, config.SettingJob + "=inventory", "container"}},
		{jobSynthetic, `{"partitions":`, []string{config.SettingJobParams, `{\"partitions\":`}},
		{jobSynthetic, `{"partitions":0}`, []string{config.SettingJobParams, "partitions 0"}},
		{jobSynthetic, `[1]`, []string{config.SettingJobParams, "JSON object"}},
	} {
		err := jobError(jobs, c.job, c.params)
		if err == nil {
			t.Errorf("%s %s: no error", c.job, c.params)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s %s: %q lacks %q", c.job, c.params, err, w)
			}
		}
	}
}

type starterFunc func(context.Context, coordinator.ManualRequest) (coordinator.Outcome, error)

func (f starterFunc) StartManual(ctx context.Context, req coordinator.ManualRequest) (coordinator.Outcome, error) {
	return f(ctx, req)
}

// A manual run of the default job is refused as a bad request naming the setting while the job
// is misconfigured; a run that names its own job goes through.
func TestDefaultJobGuard(t *testing.T) {
	calls := 0
	next := starterFunc(func(context.Context, coordinator.ManualRequest) (coordinator.Outcome, error) {
		calls++
		return coordinator.Outcome{Status: coordinator.StatusStarted}, nil
	})
	jobErr := errors.New(config.SettingJobParams + ` is not valid`)
	g := defaultJobGuard{Starter: next, jobErr: jobErr}
	_, err := g.StartManual(context.Background(), coordinator.ManualRequest{})
	if !errors.Is(err, coordinator.ErrBadRequest) || !strings.Contains(err.Error(), config.SettingJobParams) || calls != 0 {
		t.Errorf("default job: %v (calls %d), want ErrBadRequest naming %s", err, calls, config.SettingJobParams)
	}
	if _, err := g.StartManual(context.Background(), coordinator.ManualRequest{Job: jobSynthetic}); err != nil || calls != 1 {
		t.Errorf("explicit job: %v (calls %d)", err, calls)
	}
	ok := defaultJobGuard{Starter: next}
	if _, err := ok.StartManual(context.Background(), coordinator.ManualRequest{}); err != nil || calls != 2 {
		t.Errorf("valid default job: %v (calls %d)", err, calls)
	}
}
