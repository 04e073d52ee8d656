package bench

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// e2ePartitions is the size of the end-to-end run.
const e2ePartitions = 10000

// BenchmarkEndToEnd runs a synthetic no-op run of e2ePartitions partitions on 1, 2 and 4
// instances of the real handler under the local host, against an Azurite of its own: the run
// is started with POST /api/runs; the leader enqueues while every instance's queue listener
// delivers partitions; the last worker aggregates. One run per iteration.
//
// Azurite persists to disk here (a temporary directory), as the azurite command does by
// default. In memory, its queue cannot sustain this run: a GC pass every minute removes the
// extents of deleted messages one at a time with a scan of all extents, and once ~10,000
// messages were deleted it blocks Azurite's only thread for minutes (seen here: every call
// times out, the leader's lease lapses). On disk, messages share extent files, so there is
// little to collect.
//
// Metrics: partitions/s from the run's creation to its final state (both from the manifest);
// enqueue-s (the same start to the end of planning, from the manifest); per handler
// process its CPU time and peak RSS (/proc: utime+stime, VmHWM), as the max and the sum over
// instances; the CPU of Azurite and of the local host (this process: queue polling, delivery,
// deletes) as a percentage of one core; failed invocations (0 expected).
func BenchmarkEndToEnd(b *testing.B) {
	for _, n := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			for b.Loop() {
				endToEnd(b, n)
			}
		})
	}
}

func endToEnd(b *testing.B, instances int) { endToEndWith(b, instances, nil, nil) }

// endToEndWith is endToEnd with extra settings for the handlers; settled, when set, is called
// once the run is final and before the handlers' CPU is read (with the run's partitions).
func endToEndWith(b *testing.B, instances int, extra map[string]string, settled func(b *testing.B, partitions int)) {
	b.Helper()
	n := sized(e2ePartitions, 1000)
	c := startClusterWith(b, instances, fmt.Sprintf(`{"partitions":%d}`, n), true, extra)
	defer c.close(b)
	azuriteStats := azuriteProc(b, c.srv)
	az0, self0 := azuriteStats(), selfCPU()
	t0 := time.Now()
	run, reply := c.startRun(b)
	m := c.waitFinal(b, run, 10*time.Minute)
	wall := time.Since(t0)
	az1, self1 := azuriteStats(), selfCPU()
	if m.State != ledger.StateSucceeded || m.Succeeded != n {
		b.Fatalf("run %s ended %s with %d succeeded, want succeeded with %d (log: %s)", run, m.State, m.Succeeded, n, c.logPath)
	}
	select {
	case err := <-reply:
		if err != nil {
			b.Fatalf("start the run: %v", err)
		}
	default:
		b.Fatal("the run finished before POST /api/runs answered")
	}
	enqueue := m.Enqueued.Sub(m.Created)
	if settled != nil {
		settled(b, n)
	}

	var cpu []time.Duration
	var rss []int64
	var per []string
	invokes, failed := c.invocations()
	for _, in := range c.h.Instances() {
		st, err := ReadProc(in.PID)
		if err != nil {
			b.Fatalf("%s: %v", in.Name, err)
		}
		if in.Starts != 1 {
			b.Logf("%s was restarted (%d starts): its figures cover the last process only", in.Name, in.Starts)
		}
		cpu, rss = append(cpu, st.CPU), append(rss, st.PeakRSS)
		per = append(per, fmt.Sprintf("%s: %d deliveries, cpu %.2fs, peak rss %.1f MiB", in.Name, invokes[in.Name], st.CPU.Seconds(), float64(st.PeakRSS)/(1<<20)))
	}
	elapsed := m.Finished.Sub(m.Created)
	b.Logf("run %s: %d partitions in %s (enqueued in %s); %s", run, n, elapsed.Round(time.Millisecond),
		enqueue.Round(time.Millisecond), strings.Join(per, "; "))
	var cpuSum time.Duration
	for _, d := range cpu {
		cpuSum += d
	}
	var rssSum int64
	for _, r := range rss {
		rssSum += r
	}
	b.ReportMetric(float64(n)/elapsed.Seconds(), "partitions/s")
	b.ReportMetric(enqueue.Seconds(), "enqueue-s")
	b.ReportMetric(slices.Max(cpu).Seconds(), "handler-cpu-s-max")
	b.ReportMetric(cpuSum.Seconds(), "handler-cpu-s-sum")
	b.ReportMetric(float64(cpuSum.Microseconds())/float64(n), "handler-cpu-us/partition")
	b.ReportMetric(float64(slices.Max(rss))/(1<<20), "handler-peak-rss-MiB-max")
	b.ReportMetric(float64(rssSum)/(1<<20), "handler-peak-rss-MiB-sum")
	b.ReportMetric(cpuShare(az1.CPU-az0.CPU, wall), "azurite-cpu-%")
	b.ReportMetric(cpuShare(self1-self0, wall), "devhost-cpu-%")
	b.ReportMetric(float64(failed), "failed-invocations")
}
