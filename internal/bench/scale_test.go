package bench

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/tools/devhost"
)

// scaleSpec is one end-to-end synthetic no-op run through a proxied cluster.
type scaleSpec struct {
	partitions, instances int
	// backlog is BATON_MAX_BACKLOG (0: everything enqueued up front).
	backlog int
	// tick starts the run from the schedule tick (a heartbeat every second on every instance:
	// one decides the occurrence and sends the check that plans the run), instead of POST
	// /api/runs.
	tick bool
	// timer is the local host's timer mode (default devhost.TimerAll: each heartbeat fires on
	// every instance).
	timer devhost.TimerMode
	// progress, when set, prints a progress line every this often on standard error.
	progress time.Duration
	timeout  time.Duration
	// bulk runs the synthetic job with bundles of up to 1,024 (clusterOptions.bulk).
	bulk bool
	// workMs is the synthetic job's work time per partition (0: none).
	workMs int
	// limits, when set, is BATON_LIMITS, and the cluster runs the synthetic job under the
	// limit "bench" (clusterOptions.limited).
	limits string
	// settled, when set, is called once the run succeeded, before the cluster stops.
	settled func(b *testing.B, c *cluster, run string)
}

// scaleResult is what scaledRun measured.
type scaleResult struct {
	run     string
	elapsed time.Duration // the manifest's created → finished
	enqueue time.Duration // created → enqueued (planning done)
	// resultToReport is the last result's create → the final report write, both as the proxy
	// saw them answered.
	resultToReport time.Duration
	counts         map[string]int64
	limitAt        []time.Time // when each call on a limit's blob was answered
	calls          int64
	// hot is the entity that took the most calls per partition in any stretch of
	// hotWindowParts partitions.
	hot      [3]hotSpot // any entity, the hottest blob, and any entity without its empty polls
	top      []hotSpot  // the hottest entities, each at its worst window, without empty polls
	each     []hotSpot  // every entity likewise
	renewals []time.Duration
	// peak RSS (VmHWM) of each instance, of those that led (took the lease at least once) and
	// of the one that aggregated.
	rss        map[string]int64
	leaders    []string
	aggregator string
	failed     map[string]int // failed invocations per function
	lost       []string       // handler lines saying leadership or the lease was lost
	azuriteCPU float64        // % of one core over the run
	logPath    string         // the cluster's log
	selfCPU    float64        // this process (local host, proxy, polling) likewise
}

// lastResult is when the last result (or block of results) was written.
func lastResult(lastAt map[string]time.Time) time.Time {
	t := lastAt[kindResult]
	if b := lastAt[kindBlock]; b.After(t) {
		t = b
	}
	return t
}

// perPartition is the calls per partition.
func (r scaleResult) perPartition(n int) float64 { return float64(r.calls) / float64(n) }

// scaledRun runs spec to its end and fails the benchmark when the run does not succeed.
func scaledRun(b *testing.B, spec scaleSpec) scaleResult {
	b.Helper()
	extra := map[string]string{config.SettingMaxBacklog: strconv.Itoa(spec.backlog)}
	if azureSettings() {
		extra[config.SettingEnqueueBatch] = strconv.Itoa(config.DefaultEnqueueBatch)
		extra[config.SettingBatchSpread] = strconv.Itoa(config.DefaultBatchSpread)
	}
	params := fmt.Sprintf(`{"partitions":%d}`, spec.partitions)
	if spec.workMs > 0 {
		params = fmt.Sprintf(`{"partitions":%d,"workMs":%d}`, spec.partitions, spec.workMs)
	}
	if spec.limits != "" {
		extra[config.SettingLimits] = spec.limits
	}
	opts := clusterOptions{instances: spec.instances, params: params,
		onDisk: true, extra: extra, proxied: true, timer: spec.timer, bulk: spec.bulk, limited: spec.limits != ""}
	if spec.tick {
		opts.schedule = "*/20 * * * * *"
	}
	c := startClusterOpts(b, opts)
	defer c.close(b)
	azuriteStats := azuriteProc(b, c.srv)
	c.proxy.snapshot() // start-up calls are not the run's
	c.proxy.limitCalls()
	az0, self0 := azuriteStats(), selfCPU()
	t0 := time.Now()
	start := c.startRun
	if spec.tick {
		start = func(b *testing.B) (string, <-chan error) { return c.timerRun(b, time.Minute) }
	}
	run, reply := start(b)

	stop := make(chan struct{})
	if spec.progress > 0 {
		go func() {
			tk := time.NewTicker(spec.progress)
			defer tk.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tk.C:
				}
				c.proxy.mu.Lock()
				enq, res := c.proxy.counts["queue enqueue"], c.proxy.parts
				c.proxy.mu.Unlock()
				el := time.Since(t0)
				fmt.Fprintf(os.Stderr, "  %s: %6.0fs enqueued %d, results %d of %d (%.0f/s)\n",
					b.Name(), el.Seconds(), enq, res, spec.partitions, float64(res)/el.Seconds())
			}
		}()
	}
	m := c.waitFinal(b, run, spec.timeout)
	close(stop)
	wall := time.Since(t0)
	az1, self1 := azuriteStats(), selfCPU()
	limitAt := c.proxy.limitCalls()
	counts, lastAt, renewals, hot, top := c.proxy.snapshotHot()
	if m.State != ledger.StateSucceeded || m.Succeeded != spec.partitions {
		b.Fatalf("run %s ended %s with %d succeeded, want succeeded with %d (log: %s)", run, m.State, m.Succeeded, spec.partitions, c.logPath)
	}
	select {
	case err := <-reply:
		if err != nil {
			b.Fatalf("start the run: %v", err)
		}
	case <-time.After(30 * time.Second):
		b.Fatal("POST /api/runs did not answer")
	}
	rep, _, err := c.store.ReadReport(ctxFor(b, time.Minute), run)
	if err != nil {
		b.Fatal(err)
	}
	if spec.settled != nil {
		spec.settled(b, c, run)
	}
	r := scaleResult{run: run, elapsed: m.Finished.Sub(m.Created), enqueue: m.Enqueued.Sub(m.Created),
		resultToReport: lastAt["blob PUT report"].Sub(lastResult(lastAt)), counts: counts, renewals: renewals, hot: hot,
		top: top[:min(hotTop, len(top))], each: top,
		rss: map[string]int64{}, failed: c.failures(), logPath: c.logPath, limitAt: limitAt,
		azuriteCPU: cpuShare(az1.CPU-az0.CPU, wall), selfCPU: cpuShare(self1-self0, wall)}
	r.calls, _ = callsTable(counts, spec.partitions)
	for _, in := range c.h.Instances() {
		st, err := ReadProc(in.PID)
		if err != nil {
			b.Fatalf("%s: %v", in.Name, err)
		}
		if in.Starts != 1 {
			b.Errorf("%s was restarted (%d starts)", in.Name, in.Starts)
		}
		r.rss[in.Name] = st.PeakRSS
		if in.PID == rep.Aggregator.PID {
			r.aggregator = in.Name
		}
	}
	r.leaders, r.lost = scanLog(b, c.logPath)
	return r
}

// scanLog reads a cluster's log for the instances that acquired the lease and for any line
// saying leadership or the lease was lost.
func scanLog(b *testing.B, path string) (leaders, lost []string) {
	b.Helper()
	eachLogLine(b, path, func(line string) {
		lower := strings.ToLower(line)
		if strings.Contains(lower, "leadership lost") || strings.Contains(lower, "lease lost") {
			lost = append(lost, line)
		}
		if strings.Contains(line, "leadership acquired") {
			if f := strings.Fields(line); len(f) > 1 && !slices.Contains(leaders, f[1]) {
				leaders = append(leaders, f[1])
			}
		}
	})
	slices.Sort(leaders)
	return leaders, lost
}

// eachLogLine calls fn with each line of the log at path.
func eachLogLine(b *testing.B, path string, fn func(line string)) {
	b.Helper()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fn(sc.Text())
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
}

// report logs r and reports its common metrics.
func (r scaleResult) report(b *testing.B, n int) {
	b.Helper()
	total, table := callsTable(r.counts, n)
	var per []string
	names := make([]string, 0, len(r.rss))
	for name := range r.rss {
		names = append(names, name)
	}
	slices.Sort(names)
	var maxRSS, leaderRSS int64
	for _, name := range names {
		per = append(per, fmt.Sprintf("%s %.1f MiB", name, mib(r.rss[name])))
		maxRSS = max(maxRSS, r.rss[name])
		if slices.Contains(r.leaders, name) {
			leaderRSS = max(leaderRSS, r.rss[name])
		}
	}
	tops := make([]string, len(r.top))
	for i, spot := range r.top {
		tops[i] = spot.String()
	}
	b.Logf("run %s: %d partitions in %s (planned in %s), %.0f partitions/s; last result → report %s; "+
		"peak RSS %s; led: %v; aggregated: %s; failed invocations %v; hottest entity %s; hottest blob %s; "+
		"hottest without empty polls %s; each at its worst, without empty polls: %s; %d storage calls:%s",
		r.run, n, r.elapsed.Round(time.Millisecond), r.enqueue.Round(time.Millisecond), float64(n)/r.elapsed.Seconds(),
		r.resultToReport.Round(time.Millisecond), strings.Join(per, ", "), r.leaders, r.aggregator, r.failed,
		r.hot[0], r.hot[1], r.hot[2], strings.Join(tops, "; "), total, table)
	b.ReportMetric(r.hot[0].PerPart, "hottest-entity-calls/partition")
	b.ReportMetric(r.hot[1].PerPart, "hottest-blob-calls/partition")
	b.ReportMetric(r.hot[2].PerPart, "hottest-busy-calls/partition")
	b.ReportMetric(float64(n)/r.elapsed.Seconds(), "partitions/s")
	b.ReportMetric(r.elapsed.Seconds(), "run-s")
	b.ReportMetric(r.enqueue.Seconds(), "enqueue-s")
	b.ReportMetric(float64(r.resultToReport.Milliseconds()), "result-to-report-ms")
	b.ReportMetric(r.perPartition(n), "calls/partition")
	b.ReportMetric(mib(maxRSS), "peak-rss-MiB-max")
	b.ReportMetric(mib(leaderRSS), "leader-peak-rss-MiB")
	b.ReportMetric(mib(r.rss[r.aggregator]), "aggregator-peak-rss-MiB")
	b.ReportMetric(r.azuriteCPU, "azurite-cpu-%")
	b.ReportMetric(r.selfCPU, "host-proxy-cpu-%")
	if len(r.renewals) > 0 {
		b.ReportMetric(float64(Percentile(slices.Clone(r.renewals), 50).Microseconds())/1000, "renew-p50-ms")
		b.ReportMetric(float64(slices.Max(r.renewals).Microseconds())/1000, "renew-max-ms")
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// azureSettings reports whether BENCH_SCALE_AZURE=1 asks for Azure's defaults instead of the
// example settings: plan batches of 2,048 at a spread of 8, a backlog of 50,000.
func azureSettings() bool { return os.Getenv("BENCH_SCALE_AZURE") == "1" }

// scaleBacklogFor is BenchmarkScale's BATON_MAX_BACKLOG: BENCH_SCALE_BACKLOG when set (0
// enqueues everything up front), else Azure's default under BENCH_SCALE_AZURE=1, else
// scaleBacklog, the example settings'.
func scaleBacklogFor(b *testing.B) int {
	v := os.Getenv("BENCH_SCALE_BACKLOG")
	switch {
	case v == "" && azureSettings():
		return config.DefaultMaxBacklog
	case v == "":
		return scaleBacklog
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		b.Fatalf("BENCH_SCALE_BACKLOG=%q: want a count of partitions, 0 or more", v)
	}
	return n
}

// scaleSizes are BenchmarkScale's run sizes: BENCH_SCALE_SIZES (comma-separated), else 10,000
// and 100,000 (under -short, `make test`'s smoke run, 2,048 partitions: at the example
// settings two plan batches of 4 bundles of 256 at the default cap, one bundle of 1,024 each
// at cap=1024, so the smoke run takes bundles over 256 end to end through the handler, the
// local host and Azurite).
func scaleSizes(b *testing.B) []int {
	b.Helper()
	env := os.Getenv("BENCH_SCALE_SIZES")
	switch {
	case env == "" && testing.Short():
		return []int{config.DefaultEnqueueBatch}
	case env == "":
		return []int{10000, 100000}
	}
	var out []int
	for _, s := range strings.Split(env, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			b.Fatalf("BENCH_SCALE_SIZES=%q: %q is not a partition count", env, s)
		}
		out = append(out, n)
	}
	return out
}

// scaleInstances and scaleBacklog are BenchmarkScale's cluster: 4 handler instances, and the
// example settings' backlog bound (with their plan batches of 1,024 in 4 messages: one batch
// in flight), low enough that Azurite's queue stays short (its calls scan the whole queue).
const (
	scaleInstances = 4
	scaleBacklog   = 1024
)

// BenchmarkScale is `make bench-scale`, not part of `make bench`: one synthetic no-op run of
// each size in scaleSizes (10,000 and 100,000 partitions) end to end on 4 handler instances
// under the local host with the example settings (BATON_MAX_BACKLOG=1024), with every storage call of the handlers and of
// the local host going through a counting proxy, twice: "cap=256" runs the handler (the job's
// default cap on partitions per message), "cap=1024" the same job registered with
// baton.WithMaxBundle(baton.MaxBundle) (./internal/bench/cmd/bulkhandler), as a job of many short
// partitions would be. The heartbeat (once a minute) fires on one instance at a time, as
// Azure's timer does. A progress line goes to standard error every 10 s. The run must succeed,
// with no failed invocation and no lost lease.
//
// Metrics: partitions/s and run-s (the manifest's created → finished), enqueue-s (→ planning
// done), result-to-report-ms (the last result's create → the final report write, as the
// proxy saw them), calls/partition (every call the cluster made), the peak RSS of the largest
// instance, of the instances that led and of the aggregator, Azurite's CPU and this process's
// (local host and proxy), and the leader's lease renewal latencies seen at the proxy.
func BenchmarkScale(b *testing.B) {
	for _, c := range []struct {
		name string
		bulk bool
	}{{"cap=256", false}, {"cap=1024", true}} {
		for _, n := range scaleSizes(b) {
			b.Run(fmt.Sprintf("%s/partitions=%d", c.name, n), func(b *testing.B) {
				for b.Loop() {
					r := scaledRun(b, scaleSpec{partitions: n, instances: scaleInstances, backlog: scaleBacklogFor(b),
						timer: devhost.TimerOne, progress: 10 * time.Second, timeout: 90 * time.Minute, bulk: c.bulk})
					r.report(b, n)
					misbehaved(b, r)
				}
			})
		}
	}
}

// misbehaved fails b when the cluster lost a lease or an invocation failed.
func misbehaved(b *testing.B, r scaleResult) {
	b.Helper()
	for _, l := range r.lost {
		b.Errorf("lease lost: %s", l)
	}
	for fn, n := range r.failed {
		b.Errorf("%d failed %s invocations", n, fn)
	}
}

// leaseLoadPartitions is the size of BenchmarkLeaseUnderLoad's run.
const leaseLoadPartitions = 10000

// BenchmarkLeaseUnderLoad checks that the leader keeps its lease under its own run's load:
// one 10,000-partition synthetic run on 3 handler instances, so the leader's enqueue, three
// instances' deliveries (24 in flight each, as the host's batchSize 16 + newBatchThreshold 8)
// and the queue's depth all load Azurite together. It fails on a "leadership lost"/"lease lost" line,
// a failed invocation of any function (Tick, Control, ControlQueue, WorkQueue, ...) or a run
// that does not succeed — never on a number.
//
// Metrics: as BenchmarkScale, with the lease renewals' latencies at the proxy (renew-p50-ms,
// renew-max-ms; the leader renews every third of the 15 s lease).
//
// Two starts: "post" (POST /api/runs, the whole run enqueued up front) and "tick" (the schedule
// tick's occurrence, decided by a heartbeat on every instance every second, planned by its start
// check in waves of BATON_MAX_BACKLOG=1024, the example settings, the checks sending the next
// waves: the planner's renewals of the run's lease then compete with its own enqueue, the
// workers' folds and appends, the heartbeats and the queue polling of three instances at once).
func BenchmarkLeaseUnderLoad(b *testing.B) {
	for _, start := range []struct {
		name    string
		tick    bool
		backlog int
	}{{"post", false, 0}, {"tick", true, scaleBacklog}} {
		b.Run(start.name, func(b *testing.B) {
			for b.Loop() {
				n := sized(leaseLoadPartitions, 1000)
				r := scaledRun(b, scaleSpec{partitions: n, instances: 3, backlog: start.backlog, tick: start.tick, timeout: 20 * time.Minute})
				r.report(b, n)
				b.Logf("lease renewals: %d, latencies %v", len(r.renewals), r.renewals)
				misbehaved(b, r)
			}
		})
	}
}
