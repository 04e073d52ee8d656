// Command e2eapp is the app the chaos soak and the end-to-end policy test run: a Baton app with
// several schedules of its own, declared in code through the public API (package baton) as any
// app declares them, next to the schedule "tick" the settings may add (BATON_SCHEDULE).
//
// It also registers the job "limited" (limited.go), under a limit and with no schedule: the
// e2e limits test runs it with POST /api/runs against a stub downstream.
//
// Its schedules cover every overlap policy, a slow planner, a short catch-up window and a
// schedule the soak pauses and resumes; `e2eapp schedules` prints them as JSON (the table the
// tests check the ledger against) and exits.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/batonfn/baton"
	"github.com/batonfn/baton/work/synthetic"
)

// Decl is one schedule as this app declares it.
type Decl struct {
	Name    string          `json:"name"`
	Job     string          `json:"job"`
	Cron    string          `json:"cron"`
	Overlap baton.Overlap   `json:"overlap"`
	CatchUp time.Duration   `json:"catchUp"`
	Jitter  time.Duration   `json:"jitter"`
	Params  json.RawMessage `json:"params"`
	// Limited says the job runs under a limit: its runs' deadlines move while they progress.
	Limited bool `json:"limited,omitempty"`
}

// Jobs this app registers.
const (
	jobSynthetic = "synthetic"
	jobSlowPlan  = "slowplan"
	jobGated     = "gated"
)

// gate is the gated job's limit: two partitions at once and 20 starts a second across the
// app, so its bundles wait for slots, take part of a bundle, and are sent back, under the
// soak's faults.
var gate = baton.Limit{Name: "gate", MaxInFlight: 2, Rate: 20, Per: time.Second, Burst: 4}

// slowDownEvery: a partition of the gated job whose index is a multiple of it asks its limit
// to slow down for slowDownFor on its first try in each process (a downstream's 429).
const (
	slowDownEvery = 3
	slowDownFor   = time.Second
)

// planDelay is how long the slow planner takes per partition: a run of slowplan with 10
// partitions plans for 8 s under its own lease, longer than a renewal interval and than the
// heartbeat, so a planning that held up the scheduler or another schedule would show.
const planDelay = 800 * time.Millisecond

// schedules are the app's schedules, in declaration order.
var schedules = []Decl{
	// Every 3 s, skip: runs whose partitions fail once wait out a retry and outlast the period.
	// A catch-up window of 8 s: an occurrence not decided within it (the scheduler lease's
	// holder killed or frozen, storage down) is recorded missed.
	{Name: "skip", Job: jobSynthetic, Cron: "*/3 * * * * *", Overlap: baton.OverlapSkip, CatchUp: 8 * time.Second,
		Params: json.RawMessage(`{"partitions":4,"workMs":100,"failOncePercent":20}`)},
	// Every 4 s, buffer-one: one occurrence waits for the run in progress, later ones are skipped.
	{Name: "buffer", Job: jobSynthetic, Cron: "*/4 * * * * *", Overlap: baton.OverlapBufferOne, CatchUp: baton.DefaultCatchUp,
		Params: json.RawMessage(`{"partitions":3,"workMs":300,"failOncePercent":30}`)},
	// Every 6 s, allow, with a planner slower than the period: runs of one schedule plan side by
	// side, each under its own lease; each start is delayed by up to a second of jitter.
	{Name: "allow", Job: jobSlowPlan, Cron: "*/6 * * * * *", Overlap: baton.OverlapAllow, CatchUp: baton.DefaultCatchUp,
		Jitter: time.Second, Params: json.RawMessage(`{"partitions":10,"workMs":50}`)},
	// Every 5 s, skip, a job under a limit whose downstream asks to slow down now and then.
	{Name: "gated", Job: jobGated, Cron: "*/5 * * * * *", Overlap: baton.OverlapSkip, CatchUp: baton.DefaultCatchUp,
		Params: json.RawMessage(`{"partitions":6,"workMs":100}`), Limited: true},
	// Every 5 s, skip, small runs: the schedule the soak pauses and resumes.
	{Name: "pausable", Job: jobSynthetic, Cron: "*/5 * * * * *", Overlap: baton.OverlapSkip, CatchUp: baton.DefaultCatchUp,
		Params: json.RawMessage(`{"partitions":2,"workMs":50}`)},
}

// retry is every job's retry policy: three tries 3 s apart, so a partition that always fails is
// recorded failed within seconds and one that fails once outlasts a short period.
var retry = baton.RetryPolicy{Attempts: 3, InitialDelay: 3 * time.Second, Multiplier: 1, Jitter: -1}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "schedules" {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(schedules); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	newApp().Main() // refuses to start, listing every problem, when a registration failed
}

// newApp registers the jobs and declares the schedules.
func newApp(opts ...baton.Option) *baton.App {
	app := baton.New(opts...)
	jobs := map[string]*baton.JobHandle{
		jobSynthetic: app.Register(jobSynthetic, synthetic.New(), baton.WithRetry(retry)),
		jobSlowPlan:  app.Register(jobSlowPlan, slowPlan{synthetic.New()}, baton.WithRetry(retry)),
		jobGated:     app.Register(jobGated, &slowDown{Job: synthetic.New(), asked: map[string]bool{}}, baton.WithRetry(retry), baton.WithLimit(gate)),
	}
	app.Register(jobLimited, limited{synthetic.New()}, baton.WithRetry(retry), baton.WithLimit(stubLimit),
		baton.WithMaxBundle(limitedBundle))
	for _, s := range schedules {
		opts := []baton.ScheduleOption{baton.WithOverlap(s.Overlap), baton.WithCatchUp(s.CatchUp), baton.WithParams(s.Params)}
		if s.Jitter > 0 {
			opts = append(opts, baton.WithJitter(s.Jitter))
		}
		jobs[s.Job].Schedule(s.Name, s.Cron, opts...)
	}
	return app
}

// slowPlan is the synthetic job with a planner that takes planDelay per partition.
type slowPlan struct{ *synthetic.Job }

func (j slowPlan) Plan(ctx context.Context, params json.RawMessage, cursor string, emit func(json.RawMessage, string) error) error {
	return j.Job.Plan(ctx, params, cursor, func(payload json.RawMessage, next string) error {
		t := time.NewTimer(planDelay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		return emit(payload, next)
	})
}

// slowDown is the synthetic job whose partitions at multiples of slowDownEvery ask to slow
// down on their first try in this process.
type slowDown struct {
	*synthetic.Job
	mu    sync.Mutex
	asked map[string]bool
}

func (j *slowDown) Process(ctx context.Context, p baton.Partition) (json.RawMessage, error) {
	if p.Index%slowDownEvery == 0 {
		key := fmt.Sprintf("%s/%d", p.Run, p.Index)
		j.mu.Lock()
		first := !j.asked[key]
		j.asked[key] = true
		j.mu.Unlock()
		if first {
			return nil, baton.SlowDown(slowDownFor, errors.New("429 Too Many Requests"))
		}
	}
	return j.Job.Process(ctx, p)
}
