package e2e_test

// The chaos soak. It runs by default (a short seeded run per timer mode, side by side) and long
// under `make soak`. A failure prints the seed; replay it with SOAK_SEED=<seed>
// SOAK_MODES=<mode> make soak (or go test ./internal/e2e -run TestSoak), with the same
// E2E_DELIVERY.
//
//	SOAK_OCCURRENCES  the fault phase's length in occurrences of a 5-second schedule (default
//	                  10: 50 s; make soak: 100)
//	SOAK_SEED         the seed (default: a fixed one per mode; random when SOAK_OCCURRENCES is set)
//	SOAK_MODES        timer modes to run, comma-separated (default "all,one")
//	E2E_DELIVERY      the delivery mode, queue (default) or servicebus (main_test.go)

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/internal/tools/devhost"
	"github.com/batonfn/baton/internal/tools/soak"
	"github.com/batonfn/baton/work"
)

// Soak settings: the e2e app's schedules (internal/e2eapp) on a heartbeat every second, small
// runs, a short run timeout so the documented bound is reached within the settling.
const (
	// soakPeriod is the unit of SOAK_OCCURRENCES: the fault phase lasts that many periods.
	soakPeriod     = 5 * time.Second
	soakInstances  = 5
	soakRunTimeout = time.Minute // the shortest config accepts
	// soakQuiet is how long the schedules fire without faults after the last fault ended (a
	// paused leader SIGCONTed, storage back): long enough for the leases the faults left to
	// lapse and every run they delayed to be resumed, before the final pause.
	soakQuiet = leaseDuration + 5*time.Second
	// soakPausable is the app's schedule the plan pauses and resumes.
	soakPausable = "pausable"
	// soakTickParams are BATON_JOB_PARAMS: a manual start without a job runs the settings'
	// schedule (tick, which itself fires once a year) now with them.
	soakTickParams = `{"partitions":3,"workMs":50}`
	// soakBatch and soakBacklog are BATON_ENQUEUE_BATCH and BATON_MAX_BACKLOG: plan batches of
	// 16 partitions (in bundles of 2) with at most 24 outstanding, so the driver's runs of 24
	// partitions are planned in two batches, the second sent once workers have drained 8,
	// through the faults.
	soakBatch   = 16
	soakBacklog = 24
	// soakShortOccurrences is the default occurrence count inside make test.
	soakShortOccurrences = 10
)

// soakSeeds are the fixed seeds of the short soak, one per timer mode.
var soakSeeds = map[devhost.TimerMode]int64{devhost.TimerAll: 20261125, devhost.TimerOne: 4242}

type soakConfig struct {
	occurrences int
	modes       []devhost.TimerMode
	seed        int64 // 0: per mode (soakSeeds) or random
	long        bool
}

func readSoakConfig(t *testing.T) soakConfig {
	t.Helper()
	cfg := soakConfig{occurrences: soakShortOccurrences, modes: []devhost.TimerMode{devhost.TimerAll, devhost.TimerOne}}
	if v := os.Getenv("SOAK_OCCURRENCES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SOAK_OCCURRENCES=%q: want a positive number", v)
		}
		cfg.occurrences, cfg.long = n, true
	}
	if v := os.Getenv("SOAK_SEED"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n == 0 {
			t.Fatalf("SOAK_SEED=%q: want a non-zero integer", v)
		}
		cfg.seed = n
	}
	if v := os.Getenv("SOAK_MODES"); v != "" {
		cfg.modes = nil
		for _, s := range strings.Split(v, ",") {
			m, err := devhost.ParseTimerMode(s)
			if err != nil {
				t.Fatalf("SOAK_MODES: %v", err)
			}
			cfg.modes = append(cfg.modes, m)
		}
	}
	return cfg
}

// TestSoak runs the chaos soak once per timer mode, the modes side by side, and checks each
// history (package internal/soak). The checker is never to be weakened to make it pass.
func TestSoak(t *testing.T) {
	t.Parallel()
	cfg := readSoakConfig(t)
	for _, mode := range cfg.modes {
		seed := cfg.seed
		if seed == 0 {
			seed = soakSeeds[mode]
			if cfg.long || seed == 0 {
				seed = rand.Int64N(1<<53) + 1
			}
		}
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			runSoak(t, cfg, mode, seed)
		})
	}
}

// soakDriver executes a plan against a cluster and records what it did.
type soakDriver struct {
	t     *testing.T
	c     *cluster
	dir   string
	start time.Time

	srvMu sync.Mutex
	srv   *azurite.Server

	mu       sync.Mutex
	calls    []soak.ManualCall
	cancels  []soak.Cancel
	redrives []soak.RedriveCall
	faults   []soak.Fault
	pauses   []soak.Pause
	errs     []error        // the driver's own failures, from its timers
	pend     sync.WaitGroup // fault ends (SIGCONT, Azurite back), delivery faults and manual calls in flight
	// blackouts are the runs whose every control message is being lost (FaultBlackout),
	// recorded as faults when the soak ends.
	blackouts []blackout
}

// blackout is one run whose control messages are all lost from its start check on.
type blackout struct {
	at    time.Time // the start check lost
	run   string
	first devhost.Strike
	rest  *devhost.Armed
}

func runSoak(t *testing.T, cfg soakConfig, mode devhost.TimerMode, seed int64) {
	dlv := delivery
	if dlv == "" {
		dlv = devhost.DeliveryQueue
	}
	fmt.Fprintf(os.Stderr, "soak: seed=%d mode=%s delivery=%s occurrences=%d (replay: E2E_DELIVERY=%s SOAK_SEED=%d SOAK_MODES=%s SOAK_OCCURRENCES=%d make soak)\n",
		seed, mode, dlv, cfg.occurrences, dlv, seed, mode, cfg.occurrences)
	t.Logf("seed=%d mode=%s delivery=%s occurrences=%d", seed, mode, dlv, cfg.occurrences)
	decls := appSchedules(t)
	var names []string
	for _, d := range decls {
		names = append(names, d.Name)
	}

	d := &soakDriver{t: t, dir: t.TempDir()}
	ctx0, cancel0 := context.WithTimeout(context.Background(), 90*time.Second)
	srv, err := azurite.Start(ctx0, azurite.Options{Dir: d.dir})
	cancel0()
	if err != nil {
		t.Fatalf("azurite: %v", err)
	}
	d.srv = srv
	t.Cleanup(func() { d.server().Stop() }) // registered first: runs after the cluster stops

	span := time.Duration(cfg.occurrences) * soakPeriod
	started := time.Now()
	c := startCluster(t, clusterOpts{
		exe: appBin, instances: soakInstances, params: soakTickParams, srv: srv, batch: soakBatch,
		extra: map[string]string{config.SettingRunTimeout: soakRunTimeout.String(),
			config.SettingMaxBacklog: fmt.Sprint(soakBacklog)},
		tweak: func(o *devhost.Options) {
			o.TimerMode, o.TimerSeed = mode, seed
			o.MaxLogLines = 4_000_000
		},
	})
	d.c = c
	ctx := testCtx(t, span+15*time.Minute)
	first := c.firstCursors(ctx, names)

	// 1. The fault phase: the plan's steps.
	steps := soak.NewPlan(soak.PlanOptions{Seed: seed, Span: span, Lease: leaseDuration, Pausable: soakPausable})
	var planText []string
	for _, s := range steps {
		planText = append(planText, s.String())
	}
	t.Logf("plan (%d steps):\n  %s", len(steps), strings.Join(planText, "\n  "))
	d.start = time.Now()
	for _, s := range steps {
		if !waitUntil(ctx, d.start.Add(s.At)) {
			t.Fatalf("soak interrupted: %v", ctx.Err())
		}
		d.step(ctx, s)
		d.revive(ctx)
	}
	d.pend.Wait()
	d.mu.Lock()
	errs := d.errs
	d.mu.Unlock()
	for _, err := range errs {
		t.Fatalf("soak driver: %v", err)
	}
	d.revive(ctx)

	// 2. The quiet period: the schedules fire without faults until every schedule's record of
	// an occurrence soakQuiet after the faults ended exists; then every schedule is paused and
	// every run must become final within the documented bound.
	quietStart := time.Now()
	qctx, qcancel := context.WithTimeout(ctx, soakQuiet+2*time.Minute)
	if err := d.quiet(qctx, decls, quietStart.Add(soakQuiet)); err != nil {
		// A schedule that decides nothing any more: the checker says which occurrences.
		t.Logf("quiet period: %v; checking the history as it is", err)
	}
	qcancel()
	for _, name := range names {
		p, err := c.pause(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		d.mu.Lock()
		d.pauses = append(d.pauses, p)
		d.mu.Unlock()
	}
	settled, err := c.settle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	quiet := time.Since(quietStart)
	d.endBlackouts()

	// 3. Stop the host (every line written), read the ledger, check the history.
	stop := time.Now()
	c.shutdown()
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer rcancel()
	end := time.Now()
	runs, err := soak.ReadLedger(rctx, c.store)
	if err != nil {
		t.Fatalf("read the ledger: %v", err)
	}
	leases, err := c.runLeases(rctx, runs)
	if err != nil {
		t.Fatalf("read the runs' leases: %v", err)
	}
	var samples []soak.LeaseSample
	for _, s := range c.sampler.all() {
		samples = append(samples, soak.LeaseSample{At: s.At, Held: s.State.Held, Epoch: s.State.Epoch, Holder: s.State.Holder.String()})
	}
	d.mu.Lock()
	// Faults are recorded when they end (a pause at its SIGCONT): list them by start.
	sort.SliceStable(d.faults, func(i, j int) bool { return d.faults[i].At.Before(d.faults[j].At) })
	schedules := checkerSchedules(t, decls)
	for i := range schedules {
		for _, decl := range decls {
			if decl.Name == schedules[i].Name {
				schedules[i].Jitter = decl.Jitter
			}
		}
	}
	h := soak.History{Schedules: schedules, Heartbeat: heartbeatEach, LeaseDuration: leaseDuration,
		RunTimeout: soakRunTimeout, CheckRounds: config.DefaultCheckRounds, Started: started, First: first, WindowEnd: stop.Add(-heartbeatEach - soak.DefaultDelayMargin),
		Pauses: append([]soak.Pause(nil), d.pauses...), Fires: c.h.Fires(), Runs: runs, Lines: c.h.Lines(),
		Lease: samples, RunLeases: leases, Manual: append([]soak.ManualCall(nil), d.calls...),
		Cancels: append([]soak.Cancel(nil), d.cancels...), Redrives: append([]soak.RedriveCall(nil), d.redrives...), Faults: append([]soak.Fault(nil), d.faults...), End: end}
	d.mu.Unlock()
	res := soak.Check(h)
	// Invariant 6 too, with the e2e helper: every acquisition inside a contending invocation.
	if ts, err := tenures(h.Lines); err != nil {
		t.Errorf("leadership log: %v", err)
	} else {
		checkNoPolling(t, c, ts)
	}

	var out bytes.Buffer
	fmt.Fprintf(&out, "soak seed=%d mode=%s delivery=%s occurrences=%d (%s of faults), instances=%d, quiet and settling %s (settled: %v)\n",
		seed, mode, dlv, cfg.occurrences, span, soakInstances, quiet.Round(time.Second), settled)
	for _, f := range h.Faults {
		who := "-"
		if f.Instance != "" {
			who = fmt.Sprintf("%s/%d", f.Instance, f.PID)
		}
		if f.Run != "" {
			who += " " + f.Run
		}
		fmt.Fprintf(&out, "fault +%s %s %s %s\n", f.At.Sub(d.start).Round(time.Millisecond), f.Kind, who, f.Note)
	}
	for _, p := range h.Pauses {
		fmt.Fprintf(&out, "pause +%s %s until %s\n", p.From.Sub(d.start).Round(time.Millisecond), p.Schedule,
			map[bool]string{true: "the end", false: "+" + p.To.Sub(d.start).Round(time.Millisecond).String()}[p.To.IsZero()])
	}
	res.Print(&out)
	fmt.Fprint(os.Stderr, out.String()) // as it is, not indented: shown with -v or on failure
	f := res.Figures
	var perSchedule []string
	for _, name := range names {
		s := f.Schedules[name]
		perSchedule = append(perSchedule, fmt.Sprintf("%s[%s queued=%d]", name, soak.Counts(s.States), s.Queued))
	}
	figures(t, "seed=%d mode=%s delivery=%s heartbeats=%d schedules: %s manualCalls=%d manualRuns=%v cancels=%v stopped=%d redrives=%v redriven=%d faults=%v runs=%d planned=%d partitions=%d inBlocks=%d schedulerEpochs=%d runLeaderships=%d heartbeatDriven=%d startsInBound=%d takeoversInBound=%d roundsInBound=%d violations=%d",
		seed, mode, dlv, f.Heartbeats, strings.Join(perSchedule, " "), f.ManualCalls, f.ManualRuns, f.CancelByCode, f.Stopped, f.RedriveByCode, f.Redriven, f.Faults, f.Runs, f.Planned, f.Partitions, f.InBlocks,
		f.SchedulerEpochs, f.RunLeaderships, f.HeartbeatDriven, f.StartsChecked, f.TakeoversChecked, f.RoundsChecked, len(res.Violations))
	if n := len(res.Violations); n > 0 {
		t.Errorf("%d violation(s) (listed above); replay: E2E_DELIVERY=%s SOAK_SEED=%d SOAK_MODES=%s SOAK_OCCURRENCES=%d make soak",
			n, dlv, seed, mode, cfg.occurrences)
	}
}

// quiet waits until every schedule has the record of its first occurrence after until: the
// heartbeats have decided every schedule past that point.
func (d *soakDriver) quiet(ctx context.Context, decls []appSchedule, until time.Time) error {
	var ids []string
	for _, s := range checkerSchedules(d.t, decls) {
		occ, _ := s.Cron.Next(until)
		ids = append(ids, ledger.ScheduleRunID(s.Name, occ))
	}
	return waitFor(ctx, 500*time.Millisecond, "every schedule decided past the quiet period", func() (bool, error) {
		for _, id := range ids {
			if _, err := d.c.store.ReadManifest(ctx, id); err != nil {
				return false, nil
			}
		}
		return true, nil
	})
}

// waitUntil blocks until at (true) or until ctx ends (false).
func waitUntil(ctx context.Context, at time.Time) bool {
	d := time.Until(at)
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (d *soakDriver) server() *azurite.Server {
	d.srvMu.Lock()
	defer d.srvMu.Unlock()
	return d.srv
}

func (d *soakDriver) fault(f soak.Fault) {
	d.mu.Lock()
	d.faults = append(d.faults, f)
	d.mu.Unlock()
}

// step executes one plan step.
func (d *soakDriver) step(ctx context.Context, s soak.Step) {
	switch s.Kind {
	case soak.StepPause:
		p, err := d.c.pause(ctx, s.Schedule)
		if err != nil {
			d.t.Fatalf("soak driver: %v", err)
		}
		d.mu.Lock()
		d.pauses = append(d.pauses, p)
		d.mu.Unlock()
	case soak.StepResume:
		d.mu.Lock()
		var p *soak.Pause
		for i := range d.pauses {
			if d.pauses[i].Schedule == s.Schedule && d.pauses[i].To.IsZero() {
				p = &d.pauses[i]
			}
		}
		d.mu.Unlock()
		if p == nil {
			d.t.Fatalf("soak driver: resume of %s, which is not paused", s.Schedule)
		}
		pp := *p
		if err := d.c.resume(ctx, &pp); err != nil {
			d.t.Fatalf("soak driver: %v", err)
		}
		d.mu.Lock()
		*p = pp
		d.mu.Unlock()
	case soak.StepManual:
		d.pend.Add(1)
		go func() {
			defer d.pend.Done()
			d.post(ctx, s.Key, s.Body)
		}()
	case soak.StepCancel:
		d.pend.Add(1)
		go func() {
			defer d.pend.Done()
			d.cancel(ctx, s.Pick)
		}()
	case soak.StepRedrive:
		d.pend.Add(1)
		go func() {
			defer d.pend.Done()
			d.redrive(ctx, s.Pick, s.Key)
		}()
	case soak.FaultPoison:
		d.pend.Add(1)
		go func() {
			defer d.pend.Done()
			// Retry a refusal (a run in progress) a few times with the same key: the key
			// makes the retries one request.
			for range 8 {
				if st := d.post(ctx, s.Key, s.Body); st/100 == 2 || ctx.Err() != nil {
					d.fault(soak.Fault{At: time.Now(), Kind: s.Kind, Note: "key " + s.Key})
					return
				}
				if !waitUntil(ctx, time.Now().Add(2*time.Second)) {
					return
				}
			}
			d.fault(soak.Fault{At: time.Now(), Kind: s.Kind, Note: "key " + s.Key + ": never accepted"})
		}()
	case soak.FaultKillLeader, soak.FaultPause:
		d.strikeLeader(ctx, s)
	case soak.FaultControlLost, soak.FaultAnswerLost, soak.FaultCheckCrash, soak.FaultWorkLost:
		d.pend.Add(1)
		go func() {
			defer d.pend.Done()
			d.deliveryFault(ctx, s)
		}()
	case soak.FaultBlackout:
		d.pend.Add(1)
		go func() {
			defer d.pend.Done()
			d.blackout(ctx, s)
		}()
	case soak.FaultKillOther:
		holder, _ := d.holderInstance(ctx)
		in := d.pick(s.Pick, func(name string) bool { return name != holder })
		if in == nil {
			d.fault(soak.Fault{At: time.Now(), Kind: s.Kind, Note: "no running instance besides the holder; skipped"})
			return
		}
		_, pid := in.State()
		err := in.Kill()
		d.fault(soak.Fault{At: time.Now(), Kind: s.Kind, Instance: in.Name(), PID: pid, Note: errNote(err)})
	case soak.FaultTerm:
		in := d.pick(s.Pick, nil)
		if in == nil {
			d.fault(soak.Fault{At: time.Now(), Kind: s.Kind, Note: "no running instance; skipped"})
			return
		}
		_, pid := in.State()
		err := in.Term()
		d.fault(soak.Fault{At: time.Now(), Kind: s.Kind, Instance: in.Name(), PID: pid, Note: errNote(err)})
	case soak.FaultAzurite:
		srv := d.server()
		at := time.Now()
		// "Back with its data": Azurite saves its data on its way out, and a killed one loses
		// its last seconds of acknowledged writes, which Azure Storage never does.
		if !srv.Shutdown(azurite.RestartGrace) {
			d.mu.Lock()
			d.errs = append(d.errs, fmt.Errorf("restart azurite: it did not exit within %s of SIGTERM and was killed: its last writes may be lost, so the history cannot be checked against Azure's promises", azurite.RestartGrace))
			d.mu.Unlock()
		}
		d.pend.Add(1)
		time.AfterFunc(s.Hold, func() {
			defer d.pend.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			srv2, err := azurite.Start(sctx, azurite.Options{Dir: d.dir, BlobPort: srv.BlobPort, QueuePort: srv.QueuePort})
			if err != nil {
				d.mu.Lock()
				d.errs = append(d.errs, fmt.Errorf("restart azurite: %w", err))
				d.mu.Unlock()
				return
			}
			d.srvMu.Lock()
			d.srv = srv2
			d.srvMu.Unlock()
			d.fault(soak.Fault{At: at, Kind: s.Kind, Until: time.Now(), Note: "storage down " + time.Since(at).Round(time.Millisecond).String()})
		})
	default:
		d.t.Fatalf("unknown step kind %q", s.Kind)
	}
}

// startCheck picks the check that starts a run: the first of its chain (epoch 0, round 1).
func startCheck(body string) bool {
	env, err := work.DecodeEnvelope([]byte(body))
	return err == nil && env.Kind == work.KindCheck && env.Epoch == 0 && env.Round == 1
}

// deliveryFault arms a delivery fault of the local host for s's message (a run's start check, or
// any control message; a partition message for work-lost) and records what it hit. A fault that
// finds no message within s.Wait is disarmed (a crash already under way completes).
func (d *soakDriver) deliveryFault(ctx context.Context, s soak.Step) {
	mf := devhost.MessageFault{Queue: "control"}
	if s.Target == soak.TargetStart {
		mf.Match = startCheck
	}
	switch s.Kind {
	case soak.FaultControlLost:
		mf.Kind = devhost.FaultLost
	case soak.FaultAnswerLost:
		mf.Kind = devhost.FaultAnswerLost
	case soak.FaultCheckCrash:
		mf.Kind, mf.CrashAfter = devhost.FaultCrash, s.CrashAfter
	case soak.FaultWorkLost:
		mf.Kind, mf.Queue, mf.Match = devhost.FaultLost, "work", nil
	}
	a, err := d.c.h.InjectFault(mf)
	if err != nil {
		d.fail(fmt.Errorf("%s: %w", s.Kind, err))
		return
	}
	strikes := d.waitStrikes(ctx, a, s.Wait)
	if len(strikes) == 0 {
		d.fault(soak.Fault{At: time.Now(), Kind: s.Kind, Note: fmt.Sprintf("no %s message within %s; disarmed", s.Target, s.Wait)})
		return
	}
	d.fault(strikeFault(s.Kind, strikes[0]))
}

// waitStrikes waits up to wait for a to strike, then disarms it and waits for a hit under way.
func (d *soakDriver) waitStrikes(ctx context.Context, a *devhost.Armed, wait time.Duration) []devhost.Strike {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if strikes, err := a.Wait(wctx); err == nil {
		return strikes
	}
	a.Cancel()
	strikes, _ := a.Wait(ctx)
	return strikes
}

// strikeFault is the soak fault of a delivery fault's strike.
func strikeFault(kind string, s devhost.Strike) soak.Fault {
	f := soak.Fault{At: s.At, Kind: kind, Instance: s.Instance, PID: s.PID}
	what := "a message that is not an envelope"
	if env, err := work.DecodeEnvelope([]byte(s.Body)); err == nil {
		f.Run = env.Run
		what = fmt.Sprintf("%s of epoch %d round %d part %d", env.Kind, env.Epoch, env.Round, env.Part)
	}
	f.Note = fmt.Sprintf("%s on %s, delivery %d: %s", what, s.Queue, s.Count, s.Note)
	if !s.Again.IsZero() {
		f.Note += "; back about " + s.Again.Sub(s.At).Round(time.Second).String() + " later"
	}
	return f
}

// blackout loses the next run's start check and then every control message of that run until
// the soak ends.
func (d *soakDriver) blackout(ctx context.Context, s soak.Step) {
	a, err := d.c.h.InjectFault(devhost.MessageFault{Kind: devhost.FaultLost, Queue: "control", Match: startCheck})
	if err != nil {
		d.fail(fmt.Errorf("%s: %w", s.Kind, err))
		return
	}
	strikes := d.waitStrikes(ctx, a, s.Wait)
	if len(strikes) == 0 {
		d.fault(soak.Fault{At: time.Now(), Kind: s.Kind, Note: fmt.Sprintf("no start check within %s; disarmed", s.Wait)})
		return
	}
	first := strikes[0]
	env, err := work.DecodeEnvelope([]byte(first.Body))
	if err != nil {
		d.fail(fmt.Errorf("%s: the start check %q: %w", s.Kind, first.Body, err))
		return
	}
	rest, err := d.c.h.InjectFault(devhost.MessageFault{Kind: devhost.FaultLost, Queue: "control", Times: -1,
		Match: func(body string) bool {
			e, err := work.DecodeEnvelope([]byte(body))
			return err == nil && e.Run == env.Run
		}})
	if err != nil {
		d.fail(fmt.Errorf("%s: %w", s.Kind, err))
		return
	}
	d.mu.Lock()
	d.blackouts = append(d.blackouts, blackout{at: first.At, run: env.Run, first: first, rest: rest})
	d.mu.Unlock()
}

// endBlackouts disarms the blackouts and records each as a fault, with the messages it lost.
func (d *soakDriver) endBlackouts() {
	d.mu.Lock()
	bs := d.blackouts
	d.blackouts = nil
	d.mu.Unlock()
	for _, b := range bs {
		b.rest.Cancel()
		lost := map[string]int{"start": 1}
		for _, s := range b.rest.Strikes() {
			if env, err := work.DecodeEnvelope([]byte(s.Body)); err == nil {
				switch {
				case env.Round == 0 && env.Handover:
					lost["handover"]++
				case env.Round == 0:
					lost["probe"]++
				case env.Round >= 1_000_000:
					lost["slice"]++
				default:
					lost["check"]++
				}
			}
		}
		d.fault(soak.Fault{At: b.at, Kind: soak.FaultBlackout, Run: b.run,
			Note: fmt.Sprintf("every control message of the run lost until the end: %s", soak.Counts(lost))})
	}
}

func (d *soakDriver) fail(err error) {
	d.mu.Lock()
	d.errs = append(d.errs, err)
	d.mu.Unlock()
}

func errNote(err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return ""
}

// pick returns candidates[Pick % n] among the running instances that ok accepts (nil: all).
func (d *soakDriver) pick(p uint64, ok func(name string) bool) *devhost.Instance {
	var cands []*devhost.Instance
	for _, info := range d.c.h.Instances() {
		if info.State == devhost.StateRunning && (ok == nil || ok(info.Name)) {
			cands = append(cands, d.c.h.Instance(info.Name))
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[p%uint64(len(cands))]
}

// holderInstance is the instance named by the scheduler lease blob while the lease is held,
// and the process that holds it ("", 0 if none).
func (d *soakDriver) holderInstance(ctx context.Context) (string, int) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := d.c.lock.State(rctx)
	if err != nil || !st.Held {
		return "", 0
	}
	return st.Holder.Instance, st.Holder.PID
}

// strikeLeader kills or pauses the instance that logs s.On next (it has just taken a lease, just
// created a run, or just begun planning one under the run's own lease), synchronously on that
// line; when none does within s.Wait, it hits the holder the scheduler lease blob names, or else
// a running instance chosen by s.Pick.
func (d *soakDriver) strikeLeader(ctx context.Context, s soak.Step) {
	hit := func(in *devhost.Instance) error {
		if s.Kind == soak.FaultPause {
			return in.Pause()
		}
		return in.Kill()
	}
	type strike struct {
		in   *devhost.Instance
		pid  int
		err  error
		line string
	}
	got := make(chan strike, 1)
	var once sync.Once
	unsub := d.c.h.Subscribe(func(l devhost.LogLine) {
		if l.Msg != s.On {
			return
		}
		in := d.c.h.Instance(l.Instance)
		if in == nil {
			return
		}
		if st, pid := in.State(); st != devhost.StateRunning || pid != l.PID {
			return
		}
		once.Do(func() {
			err := hit(in)
			got <- strike{in: in, pid: l.PID, err: err, line: fmt.Sprintf("on %q epoch %d run %s", l.Msg, l.Int("epoch"), l.Str("run"))}
		})
	})
	var st strike
	select {
	case st = <-got:
		unsub()
	case <-time.After(s.Wait):
		unsub()
		select {
		case st = <-got: // struck just as the wait ended
		default:
			once.Do(func() {
				name, holderPID := d.holderInstance(ctx)
				in := d.c.h.Instance(name)
				note := "no " + strconv.Quote(s.On) + " line within " + s.Wait.String() + "; "
				// The holder only if its process is the one running there now (a dead
				// holder's lease outlives it).
				if in == nil || in.Info().State != devhost.StateRunning || in.Info().PID != holderPID {
					in = d.pick(s.Pick, nil)
					note += "no live holder; hit a running instance"
				} else {
					note += "hit the lease holder"
				}
				if in == nil {
					st = strike{line: note + ": none running; skipped"}
					return
				}
				_, pid := in.State()
				st = strike{in: in, pid: pid, err: hit(in), line: note}
			})
			// When the line's strike won the race, it sent before its Do returned.
			select {
			case st = <-got:
			default:
			}
		}
	case <-ctx.Done():
		unsub()
		return
	}
	f := soak.Fault{At: time.Now(), Kind: s.Kind, Note: st.line}
	if st.err != nil {
		f.Note += "; error: " + st.err.Error()
	}
	if st.in == nil {
		d.fault(f)
		return
	}
	f.Instance, f.PID = st.in.Name(), st.pid
	if s.Kind != soak.FaultPause || st.err != nil {
		d.fault(f)
		return
	}
	d.pend.Add(1)
	time.AfterFunc(s.Hold, func() {
		defer d.pend.Done()
		f.Until = time.Now()
		if err := st.in.Resume(); err != nil {
			f.Note += "; SIGCONT: " + err.Error()
		}
		d.fault(f)
	})
}

// revive restarts instances the host gave up (too many exits in its window): the soak kills
// more often than the host's restart budget allows, and a given-up instance is not a fault the
// plan chose.
func (d *soakDriver) revive(ctx context.Context) {
	for _, info := range d.c.h.Instances() {
		if info.State == devhost.StateFailed {
			if err := d.c.h.Do(ctx, info.Name, devhost.ActionRestart); err != nil {
				d.t.Logf("revive %s: %v", info.Name, err)
			}
		}
	}
}

// cancel picks a run planning or running (soak.CancelCandidates, from the index of active runs)
// and cancels it over HTTP, recording the call; with none in progress it does nothing.
func (d *soakDriver) cancel(ctx context.Context, pick uint64) {
	var ms []ledger.Manifest
	if err := d.c.store.ListActive(ctx, func(a ledger.ActiveRun) bool {
		if m, err := d.c.store.ReadManifest(ctx, a.Run); err == nil {
			ms = append(ms, m)
		}
		return true
	}); err != nil {
		return // storage is down (an injected outage): no cancel this time
	}
	runs := soak.CancelCandidates(ms)
	if len(runs) == 0 {
		return
	}
	k := soak.Cancel{At: time.Now(), Run: runs[pick%uint64(len(runs))]}
	rctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	status, body, err := d.c.post(rctx, "runs/"+k.Run+"/cancel", `{"note":"soak: cancelled by the driver"}`)
	k.Status = status
	switch {
	case err != nil:
		k.Err = err.Error()
	case status != http.StatusAccepted:
		k.Err = strings.TrimSpace(string(body))
	}
	d.mu.Lock()
	d.cancels = append(d.cancels, k)
	d.mu.Unlock()
}

// redrive picks a run that ended with partitions that did not succeed (soak.RedriveCandidates,
// from the ledger's runs) and redrives it over HTTP with key, recording the call; with none it
// does nothing.
func (d *soakDriver) redrive(ctx context.Context, pick uint64, key string) {
	var ms []ledger.Manifest
	if err := d.c.store.ListRuns(ctx, func(run string) bool {
		if m, err := d.c.store.ReadManifest(ctx, run); err == nil {
			ms = append(ms, m)
		}
		return true
	}); err != nil {
		return // storage is down (an injected outage): no redrive this time
	}
	runs := soak.RedriveCandidates(ms)
	if len(runs) == 0 {
		return
	}
	k := soak.RedriveCall{At: time.Now(), Run: runs[pick%uint64(len(runs))], Key: key}
	rctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	status, body, err := d.c.post(rctx, "runs/"+k.Run+"/redrive", "", key)
	k.Status = status
	var reply struct {
		Round int `json:"round"`
	}
	switch {
	case err != nil:
		k.Err = err.Error()
	case status/100 == 2:
		if err := json.Unmarshal(body, &reply); err != nil {
			k.Err = err.Error()
		}
		k.Round = reply.Round
	default:
		k.Err = strings.TrimSpace(string(body))
	}
	d.mu.Lock()
	d.redrives = append(d.redrives, k)
	d.mu.Unlock()
}

// post sends POST /api/runs and records the call; it returns the status (0: no answer).
func (d *soakDriver) post(ctx context.Context, key, body string) int {
	call := soak.ManualCall{At: time.Now(), Key: key, Body: body}
	defer func() {
		d.mu.Lock()
		d.calls = append(d.calls, call)
		d.mu.Unlock()
	}()
	rctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, d.c.h.HTTPURL()+"/api/runs", strings.NewReader(body))
	if err != nil {
		call.Err = err.Error()
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		call.Err = err.Error()
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	call.Status = resp.StatusCode
	var reply struct {
		Run string `json:"run"`
	}
	if resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(b, &reply); err != nil {
			call.Err = fmt.Sprintf("decode %s: %v", b, err)
		}
		call.Run = reply.Run
	} else {
		call.Err = strings.TrimSpace(string(b))
	}
	return call.Status
}
