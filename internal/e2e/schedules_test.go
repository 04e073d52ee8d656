package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/tools/soak"
)

// appSchedule is one schedule as the e2e app (internal/tools/e2eapp) declares it through the public
// API; `e2eapp schedules` prints them.
type appSchedule struct {
	Name    string          `json:"name"`
	Job     string          `json:"job"`
	Cron    string          `json:"cron"`
	Overlap config.Overlap  `json:"overlap"`
	CatchUp time.Duration   `json:"catchUp"`
	Jitter  time.Duration   `json:"jitter"`
	Params  json.RawMessage `json:"params"`
	Limited bool            `json:"limited"`
}

var (
	appSchedulesOnce sync.Once
	appSchedulesList []appSchedule
	appSchedulesErr  error
)

// appSchedules are the e2e app's schedules, in declaration order.
func appSchedules(t *testing.T) []appSchedule {
	t.Helper()
	appSchedulesOnce.Do(func() {
		out, err := exec.Command(appBin, "schedules").Output()
		if err != nil {
			appSchedulesErr = fmt.Errorf("%s schedules: %w", appBin, err)
			return
		}
		appSchedulesErr = json.Unmarshal(out, &appSchedulesList)
	})
	if appSchedulesErr != nil || len(appSchedulesList) < 3 {
		t.Fatalf("the e2e app's schedules: %v (%d of them)", appSchedulesErr, len(appSchedulesList))
	}
	return appSchedulesList
}

// checkerSchedules are the app's schedules as the history checker reads them.
func checkerSchedules(t *testing.T, decls []appSchedule) []soak.Schedule {
	t.Helper()
	var out []soak.Schedule
	for _, d := range decls {
		cron, err := soak.UTC(d.Cron)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, soak.Schedule{Name: d.Name, Job: d.Job, Cron: cron, Overlap: d.Overlap, CatchUp: d.CatchUp, Limited: d.Limited})
	}
	return out
}

// partitionsOf reads a synthetic job's partition count from its params.
func partitionsOf(t *testing.T, params json.RawMessage) int {
	t.Helper()
	var p struct {
		Partitions int `json:"partitions"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		t.Fatalf("params %s: %v", params, err)
	}
	return p.Partitions
}

// firstCursors waits until every named schedule has a state in the ledger (its first heartbeat
// wrote it) and returns each cursor as first read: every occurrence after it is due.
func (c *cluster) firstCursors(ctx context.Context, names []string) map[string]time.Time {
	c.t.Helper()
	out := map[string]time.Time{}
	err := waitFor(ctx, 100*time.Millisecond, "every schedule's first heartbeat", func() (bool, error) {
		for _, name := range names {
			if _, ok := out[name]; ok {
				continue
			}
			st, err := c.store.ReadSchedule(ctx, name)
			if err != nil || st.Cursor.IsZero() {
				continue
			}
			out[name] = st.Cursor
		}
		return len(out) == len(names), nil
	})
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// pauseNote is the note of the pauses the tests write.
const pauseNote = "paused by the e2e test"

// pause pauses schedule as the API's pause does (coordinator.Coordinator.Pause: the schedule's
// ledger state gets Paused, Note, PausedBy and PausedAt), retrying through a storage outage, and
// returns the pause as the checker reads it.
func (c *cluster) pause(ctx context.Context, schedule string) (soak.Pause, error) {
	p := soak.Pause{Schedule: schedule, Note: pauseNote, From: time.Now()}
	err := waitFor(ctx, 500*time.Millisecond, "pause "+schedule, func() (bool, error) {
		_, err := c.store.UpdateSchedule(ctx, schedule, func(st *ledger.ScheduleState) error {
			st.Paused, st.Note, st.PausedBy, st.PausedAt = true, pauseNote, "e2e", time.Now().UTC()
			return nil
		})
		return err == nil, err
	})
	p.FromDone = time.Now()
	return p, err
}

// resume resumes the schedule p paused, as the API's resume does, and records it in p.
func (c *cluster) resume(ctx context.Context, p *soak.Pause) error {
	p.To = time.Now()
	err := waitFor(ctx, 500*time.Millisecond, "resume "+p.Schedule, func() (bool, error) {
		_, err := c.store.UpdateSchedule(ctx, p.Schedule, func(st *ledger.ScheduleState) error {
			if !st.Paused {
				return ledger.ErrNoChange
			}
			st.Paused, st.Note, st.PausedBy, st.PausedAt = false, "", "", time.Time{}
			return nil
		})
		return err == nil, err
	})
	p.ToDone = time.Now()
	return err
}

// settle waits until every run in the ledger is final, or until its bound (plus the checker's
// slack) has passed for every one that is not, and reports whether all were final. A queued
// run waits for the run before it, which has a bound of its own: it is waited for while any
// run is not past its bound. It reads manifests only; the checker reads everything afterwards.
func (c *cluster) settle(ctx context.Context) (bool, error) {
	settled := false
	err := waitFor(ctx, time.Second, "every run final or past its bound", func() (bool, error) {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		var ids []string
		if err := c.store.ListRuns(rctx, func(id string) bool { ids = append(ids, id); return true }); err != nil {
			return false, nil // storage may still be coming back
		}
		latest := time.Time{}
		allFinal := true
		for _, id := range ids {
			m, err := c.store.ReadManifest(rctx, id)
			if err != nil {
				return false, nil
			}
			if m.State.Final() {
				continue
			}
			allFinal = false
			if b := soak.DocumentedBound(m, leaseDuration).Add(soak.DefaultSlack); b.After(latest) {
				latest = b
			}
		}
		if allFinal {
			settled = true
			return true, nil
		}
		return !time.Now().Before(latest), nil
	})
	return settled, err
}

// runLeases reads every run's own lease blob at the end, for the checker.
func (c *cluster) runLeases(ctx context.Context, runs map[string]soak.Run) (map[string]soak.LeaseSample, error) {
	out := map[string]soak.LeaseSample{}
	for id, r := range runs {
		if r.Manifest.Lease == "" {
			continue
		}
		st, err := c.runLock(id).State(ctx)
		if err != nil {
			return nil, fmt.Errorf("lease of %s: %w", id, err)
		}
		out[r.Manifest.Lease] = soak.LeaseSample{At: time.Now(), Held: st.Held, Epoch: st.Epoch, Holder: st.Holder.String()}
	}
	return out, nil
}
