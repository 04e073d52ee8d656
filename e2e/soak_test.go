package e2e_test

// The chaos soak. It runs by default (a short seeded run per timer mode, about a minute and a
// half each) and long under `make soak`. A failure prints the seed; replay it with
// SOAK_SEED=<seed> SOAK_MODES=<mode> make soak (or go test ./e2e -run TestSoak).
//
//	SOAK_OCCURRENCES  occurrences fired while faults run (default 10; make soak: 100)
//	SOAK_SEED         the seed (default: a fixed one per mode; random when SOAK_OCCURRENCES is set)
//	SOAK_MODES        timer modes to run, comma-separated (default "all,one")

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

	"github.com/batonfn/baton/config"
	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/azurite"
	"github.com/batonfn/baton/internal/devhost"
	"github.com/batonfn/baton/internal/soak"
)

// Soak settings: a fast schedule, small runs, a short run timeout so the documented bound is
// reached within the quiet period.
const (
	soakSchedule   = "*/5 * * * * *"
	soakPeriod     = 5 * time.Second
	soakInstances  = 5
	soakRunTimeout = time.Minute // the shortest config accepts
	// soakQuiet is how many occurrences fire after the faults stop: fault-free ticks that
	// record what the faults left missed. An occurrence is recorded missed only once it is older
	// than the coordinator's grace (the Tick's wait for the lease plus margins, 32 s with a 15 s
	// lease), and the last fault (a leader paused for up to 20 s) may freeze the very Tick that
	// fired it; 12 occurrences (60 s) leave a lead after both.
	soakQuiet = 12
	// soakTimerParams: partitions that fail their first delivery now and then.
	soakTimerParams = `{"partitions":4,"workMs":100,"failOncePercent":20}`
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

// TestSoak runs the chaos soak once per timer mode and checks the history (package
// internal/soak). It is expected to report violations until the coordinator accounts for
// every occurrence; the checker is never to be weakened to make it pass.
func TestSoak(t *testing.T) {
	cfg := readSoakConfig(t)
	for _, mode := range cfg.modes {
		seed := cfg.seed
		if seed == 0 {
			seed = soakSeeds[mode]
			if cfg.long || seed == 0 {
				seed = rand.Int64N(1<<53) + 1
			}
		}
		t.Run(string(mode), func(t *testing.T) { runSoak(t, cfg, mode, seed) })
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

	mu     sync.Mutex
	calls  []soak.ManualCall
	faults []soak.Fault
	errs   []error        // the driver's own failures, from its timers
	pend   sync.WaitGroup // fault ends (SIGCONT, Azurite back) and manual calls in flight
}

func runSoak(t *testing.T, cfg soakConfig, mode devhost.TimerMode, seed int64) {
	fmt.Fprintf(os.Stderr, "soak: seed=%d mode=%s occurrences=%d (replay: SOAK_SEED=%d SOAK_MODES=%s SOAK_OCCURRENCES=%d make soak)\n",
		seed, mode, cfg.occurrences, seed, mode, cfg.occurrences)
	t.Logf("seed=%d mode=%s occurrences=%d", seed, mode, cfg.occurrences)

	d := &soakDriver{t: t, dir: t.TempDir()}
	ctx0, cancel0 := context.WithTimeout(context.Background(), 90*time.Second)
	srv, err := azurite.Start(ctx0, azurite.Options{Dir: d.dir})
	cancel0()
	if err != nil {
		t.Fatalf("azurite: %v", err)
	}
	d.srv = srv
	t.Cleanup(func() { d.server().Stop() }) // registered first: runs after the cluster stops

	fires := cfg.occurrences + soakQuiet
	c := startCluster(t, clusterOpts{
		instances: soakInstances, schedule: soakSchedule, maxFires: fires, params: soakTimerParams, srv: srv,
		extra: map[string]string{config.SettingRunTimeout: soakRunTimeout.String()},
		tweak: func(o *devhost.Options) {
			o.TimerMode, o.TimerSeed = mode, seed
			o.MaxLogLines = 4_000_000
		},
	})
	d.c = c
	ctx := testCtx(t, time.Duration(fires)*soakPeriod+10*time.Minute)

	// 1. The fault phase: the plan's steps until the last occurrence with faults fired.
	span := time.Duration(cfg.occurrences) * soakPeriod
	steps := soak.NewPlan(soak.PlanOptions{Seed: seed, Span: span, Lease: leaseDuration})
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

	// 2. The quiet period: the remaining occurrences fire without faults, then every run
	// must become final within the documented bound.
	if _, err := c.h.WaitFires(ctx, fires); err != nil {
		t.Fatal(err)
	}
	quietStart := time.Now()
	settled, err := d.settle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	quiet := time.Since(quietStart)

	// 3. Stop the host (every line written), read the ledger, check the history.
	c.shutdown()
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer rcancel()
	runs, err := soak.ReadLedger(rctx, c.store)
	if err != nil {
		t.Fatalf("read the ledger: %v", err)
	}
	sched, err := coordinator.ParseSchedule(soakSchedule, nil)
	if err != nil {
		t.Fatal(err)
	}
	var samples []soak.LeaseSample
	for _, s := range c.sampler.all() {
		samples = append(samples, soak.LeaseSample{At: s.At, Held: s.State.Held, Epoch: s.State.Epoch, Holder: s.State.Holder.String()})
	}
	d.mu.Lock()
	// Faults are recorded when they end (a pause at its SIGCONT): list them by start.
	sort.SliceStable(d.faults, func(i, j int) bool { return d.faults[i].At.Before(d.faults[j].At) })
	h := soak.History{Schedule: sched, LeaseDuration: leaseDuration, Fires: c.h.Fires(), Runs: runs, Lines: c.h.Lines(),
		Lease: samples, Manual: append([]soak.ManualCall(nil), d.calls...), Faults: append([]soak.Fault(nil), d.faults...), End: time.Now()}
	d.mu.Unlock()
	res := soak.Check(h)
	// Invariant 6 too, with the e2e helper: every acquisition inside a contending invocation.
	if ts, err := tenures(h.Lines); err != nil {
		t.Errorf("leadership log: %v", err)
	} else {
		checkNoPolling(t, c, ts)
	}

	var out bytes.Buffer
	fmt.Fprintf(&out, "soak seed=%d mode=%s occurrences=%d+%d quiet, instances=%d, quiet period %s (settled: %v)\n",
		seed, mode, cfg.occurrences, soakQuiet, soakInstances, quiet.Round(time.Second), settled)
	for _, f := range h.Faults {
		who := "-"
		if f.Instance != "" {
			who = fmt.Sprintf("%s/%d", f.Instance, f.PID)
		}
		fmt.Fprintf(&out, "fault +%s %s %s %s\n", f.At.Sub(d.start).Round(time.Millisecond), f.Kind, who, f.Note)
	}
	res.Print(&out)
	fmt.Fprint(os.Stderr, out.String()) // as it is, not indented: shown with -v or on failure
	f := res.Figures
	figures(t, "seed=%d mode=%s fired=%d firedNowhere=%d timerRecords=%v manualCalls=%d manualRuns=%v faults=%v runs=%d planned=%d partitions=%d epochs=%d violations=%d",
		seed, mode, f.Fired, f.FiredNowhere, f.TimerStates, f.ManualCalls, f.ManualRuns, f.Faults, f.Runs, f.Planned, f.Partitions, f.Epochs, len(res.Violations))
	if n := len(res.Violations); n > 0 {
		t.Errorf("%d violation(s) (listed above); replay: SOAK_SEED=%d SOAK_MODES=%s SOAK_OCCURRENCES=%d make soak",
			n, seed, mode, cfg.occurrences)
	}
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
	case soak.StepManual:
		d.pend.Add(1)
		go func() {
			defer d.pend.Done()
			d.post(ctx, s.Key, s.Body)
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
		srv.Stop()
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

// holderInstance is the instance named by the lease blob while the lease is held, and the
// process that holds it ("", 0 if none).
func (d *soakDriver) holderInstance(ctx context.Context) (string, int) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := d.c.lock.State(rctx)
	if err != nil || !st.Held {
		return "", 0
	}
	return st.Holder.Instance, st.Holder.PID
}

// strikeLeader kills or pauses the instance that logs s.On next (it has just taken the lease,
// or just created a run under it), synchronously on that line; when none does within s.Wait,
// it hits the holder the lease blob names, or else a running instance chosen by s.Pick.
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

// settle waits until every occurrence fired on an instance has a final record and every run
// is final, or until the documented bound (plus the checker's slack) has passed for every
// one that is not. It reads manifests only; the checker reads everything afterwards.
func (d *soakDriver) settle(ctx context.Context) (bool, error) {
	c := d.c
	var lastFired time.Time
	for _, f := range c.h.Fires() {
		if len(f.Instances) > 0 && f.Occurrence.After(lastFired) {
			lastFired = f.Occurrence
		}
	}
	// A fired occurrence still without a record is waited for until FinalBound counted from
	// the last fired occurrence (as if it were a deadline): by then a tick, a check and the
	// lease have all had their turn; the checker reports whatever is still missing.
	recordBy := soak.FinalBound(lastFired, leaseDuration).Add(soak.DefaultSlack)
	settled := false
	err := waitFor(ctx, 2*time.Second, "every run final or past its bound", func() (bool, error) {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		var ids []string
		if err := c.store.ListRuns(rctx, func(id string) bool { ids = append(ids, id); return true }); err != nil {
			return false, nil // storage may still be coming back
		}
		have := map[string]bool{}
		latest := time.Time{}
		allFinal := true
		for _, id := range ids {
			m, err := c.store.ReadManifest(rctx, id)
			if err != nil {
				allFinal = false
				continue
			}
			have[id] = true
			if !m.State.Final() {
				allFinal = false
				if b := soak.FinalBound(m.Deadline, leaseDuration).Add(soak.DefaultSlack); b.After(latest) {
					latest = b
				}
			}
		}
		missing := false
		for _, f := range c.h.Fires() {
			if len(f.Instances) > 0 && !have[coordinator.TimerRunID(f.Occurrence)] {
				missing = true
			}
		}
		if allFinal && !missing {
			settled = true
			return true, nil
		}
		now := time.Now()
		if missing && now.Before(recordBy) {
			return false, nil
		}
		return !now.Before(latest), nil
	})
	return settled, err
}
