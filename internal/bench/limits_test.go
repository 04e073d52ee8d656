package bench

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/tools/devhost"
)

// limitCase is one run of BenchmarkLimits.
type limitCase struct {
	name string
	// limits is BATON_LIMITS for the limit "bench" ("": the handler, no limit).
	limits string
	// partitions is the run's size; small its size under -short (0: not run under -short).
	partitions, small int
	// workMs is each partition's work time (the synthetic job's workMs).
	workMs int
	// ideal is the starts per second the limit allows: the rate, or maxInFlight ÷ the work time
	// (0: no limit).
	ideal float64
	// per is the rate's period, over which peak-starts are counted (0: no rate).
	per time.Duration
	// backlog is the case's BATON_MAX_BACKLOG (0: BenchmarkScale's).
	backlog int
}

var limitCases = []limitCase{
	{name: "none", partitions: 10000, small: 1000},
	{name: "rate=1000", limits: `{"bench":{"rate":1000,"per":"1s"}}`, partitions: 10000, small: 1000, ideal: 1000, per: time.Second},
	{name: "rate=200", limits: `{"bench":{"rate":200,"per":"1s"}}`, partitions: 10000, ideal: 200, per: time.Second},
	{name: "inflight=8", limits: `{"bench":{"maxInFlight":8}}`, partitions: 4000, workMs: 50, ideal: 8 / 0.050},
	{name: "inflight=500", limits: `{"bench":{"maxInFlight":500}}`, partitions: 40000, small: 1000, workMs: 500, ideal: 500 / 0.500},
	{name: "inflight=1", limits: `{"bench":{"maxInFlight":1}}`, partitions: 1000, workMs: 20, ideal: 1 / 0.020},
}

// BenchmarkLimits runs the same synthetic run end to end, as BenchmarkScale does (4 handler
// instances under the local host, the example settings, every storage call through the
// counting proxy), without a limit and under named limits (./internal/bench/cmd/limithandler:
// the synthetic job under the limit "bench", its numbers set by BATON_LIMITS), one run each:
//
//   - none: 10,000 no-op partitions on ./handler, no limit;
//   - rate=1000, rate=200: the same run under a rate of 1,000 and 200 starts/s (burst 1);
//   - inflight=8: 4,000 partitions of 50 ms under 8 in flight (ideal 160/s);
//   - inflight=500: 40,000 partitions of 500 ms under 500 in flight (ideal 1,000/s; its last
//     4,096, the 16 bundles that fill the limit, run as the tail);
//   - inflight=1: 1,000 partitions of 20 ms under 1 in flight (ideal 50/s).
//
// Under -short (the smoke run): none, rate=1000 and inflight=500 on 1,000 partitions.
// BENCH_SCALE_BACKLOG sets another backlog bound, as for BenchmarkScale.
//
// Metrics: BenchmarkScale's (calls/partition counts every call of every party; the hottest
// entity per 1,000-partition window); limit-calls/partition and limit-calls/s (the limit
// blob's reads and writes), limit-hottest-calls/partition (its worst window),
// limit-hottest-by-finish-calls/partition (its worst window of 1,000 partitions taken in the
// order they finished, not the order their bundles' results were written); from the
// results' start and finish times (Pace): steady-starts/s over the steady part (the 10th to the
// 90th percentile of start times: planning's start-up and the tail left out), pct-of-limit
// (steady-starts/s ÷ ideal), mean-in-flight over that part, peak-in-flight anywhere,
// peak-starts-per-period and behind-ms (rates: the most starts in any period; Behind, how
// late some start ran behind its reservation at least); limit-conflicts/partition
// (the limit blob's writes that lost the race to another update); waits (bundles the limit
// refused and sent back) and their mean delay, partition-sendbacks (partitions a grant could
// not start: used up, or late for their reserved start). The run must succeed, with no failed
// invocation and no lost lease.
func BenchmarkLimits(b *testing.B) {
	for _, lc := range limitCases {
		b.Run(lc.name, func(b *testing.B) {
			n := lc.partitions
			if testing.Short() {
				if n = lc.small; n == 0 {
					b.Skip("not under -short")
				}
			}
			for b.Loop() {
				var spans []Span
				backlog := scaleBacklogFor(b)
				if lc.backlog > 0 {
					backlog = lc.backlog
				}
				r := scaledRun(b, scaleSpec{partitions: n, instances: scaleInstances, backlog: backlog,
					timer: devhost.TimerOne, timeout: 30 * time.Minute, workMs: lc.workMs, limits: lc.limits,
					settled: func(b *testing.B, c *cluster, run string) { spans = readSpans(b, c, run) }})
				r.report(b, n)
				misbehaved(b, r)
				reportLimit(b, lc, r, spans, n)
			}
		})
	}
}

// reportLimit logs and reports what the limit cost and how close the run came to it.
func reportLimit(b *testing.B, lc limitCase, r scaleResult, spans []Span, n int) {
	b.Helper()
	if len(spans) != n {
		b.Fatalf("read %d results, want %d", len(spans), n)
	}
	p := MeasurePace(spans, lc.per)
	// The densest tenth of a period: starts that ran late behind their reserved times catch
	// up in a burst.
	tenth := MeasurePace(spans, lc.per/10).PeakStarts
	var behind time.Duration
	if lc.per > 0 {
		behind = Behind(spans, time.Duration(float64(lc.per)/lc.ideal))
	}
	var limitCalls int64
	for kind, c := range r.counts {
		if strings.HasSuffix(kind, " limit") || kind == kindLimitConflict {
			limitCalls += c
		}
	}
	conflicts := r.counts[kindLimitConflict]
	var spot hotSpot
	for _, s := range r.each {
		if strings.Contains(s.Entity, "/_limits/") {
			spot = s
			break
		}
	}
	waits, sendbacks := limitWaits(b, r.logPath)
	var mean time.Duration
	if len(waits) > 0 {
		var sum time.Duration
		for _, d := range waits {
			sum += d
		}
		mean = sum / time.Duration(len(waits))
	}
	steady := p.SteadyTo.Sub(p.SteadyFrom)
	ends := make([]time.Time, len(spans))
	for k, s := range spans {
		ends[k] = s.End
	}
	byFinishCalls, byFinish, byFinishSpan := finishWindow(ends, r.limitAt)
	if lc.limits != "" {
		b.Logf("limit blob's worst window of %d partitions by finish time: %d calls in %s (%.4f per partition)",
			hotWindowParts, byFinishCalls, byFinishSpan.Round(time.Millisecond), byFinish)
	}
	b.Logf("%s, %d partitions of %d ms: steady part %s (%d starts) at %.1f starts/s%s; in flight mean %.1f, peak %d; "+
		"peak starts per %s %d (per tenth of it %d; a start at least %s behind its reservation); limit blob %d calls (%.4f per partition, %.1f/s over the run; %d writes lost the race), worst window %s; "+
		"%d bundles sent back to wait (mean %s, max %s), %d partitions sent back by their grant",
		lc.name, n, lc.workMs, steady.Round(time.Millisecond), p.SteadyStarts, p.SteadyRate(), pctOf(p.SteadyRate(), lc.ideal),
		p.MeanInFlight, p.PeakInFlight, lc.per, p.PeakStarts, tenth, behind.Round(time.Millisecond), limitCalls, float64(limitCalls)/float64(n),
		float64(limitCalls)/r.elapsed.Seconds(), conflicts, spot, len(waits), mean.Round(time.Millisecond), maxDur(waits).Round(time.Millisecond), sendbacks)
	b.ReportMetric(p.SteadyRate(), "steady-starts/s")
	if lc.ideal > 0 {
		b.ReportMetric(100*p.SteadyRate()/lc.ideal, "pct-of-limit")
	}
	b.ReportMetric(p.MeanInFlight, "mean-in-flight")
	b.ReportMetric(float64(p.PeakInFlight), "peak-in-flight")
	if lc.per > 0 {
		b.ReportMetric(float64(p.PeakStarts), "peak-starts-per-period")
		b.ReportMetric(float64(behind.Microseconds())/1000, "behind-ms")
	}
	b.ReportMetric(float64(limitCalls)/float64(n), "limit-calls/partition")
	b.ReportMetric(float64(limitCalls)/r.elapsed.Seconds(), "limit-calls/s")
	b.ReportMetric(float64(conflicts)/float64(n), "limit-conflicts/partition")
	b.ReportMetric(spot.PerPart, "limit-hottest-calls/partition")
	b.ReportMetric(byFinish, "limit-hottest-by-finish-calls/partition")
	b.ReportMetric(float64(len(waits)), "waits")
	b.ReportMetric(mean.Seconds(), "wait-mean-s")
	b.ReportMetric(float64(sendbacks), "partition-sendbacks")
}

// pctOf is ", N% of the limit's ideal" (empty without a limit).
func pctOf(rate, ideal float64) string {
	if ideal <= 0 {
		return ""
	}
	return fmt.Sprintf(" (%.1f%% of the limit's %.0f/s)", 100*rate/ideal, ideal)
}

func maxDur(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return slices.Max(d)
}

// readSpans reads every result of the run (directly from Azurite: not counted) and returns
// when each partition ran.
func readSpans(b *testing.B, c *cluster, run string) []Span {
	b.Helper()
	ctx := ctxFor(b, 5*time.Minute)
	var singles []int
	blocks := map[ledger.Span]bool{}
	err := c.store.ListResults(ctx, run, func(ref ledger.ResultRef) error {
		if ref.Block.Size > 0 {
			blocks[ref.Block] = true
		} else {
			singles = append(singles, ref.Index)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	seen := map[int]bool{}
	var spans []Span
	add := func(r ledger.Result) {
		if !seen[r.Index] {
			seen[r.Index] = true
			spans = append(spans, Span{r.Started, r.Finished})
		}
	}
	for sp := range blocks {
		blk, err := c.store.ReadBlock(ctx, run, sp)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range blk.Results {
			add(r)
		}
	}
	for _, i := range singles {
		r, err := c.store.ReadResult(ctx, run, i)
		if err != nil {
			b.Fatal(err)
		}
		add(r)
	}
	return spans
}

var (
	waitAttr  = regexp.MustCompile(` wait=(\S+)`)
	partsAttr = regexp.MustCompile(` partitions=(\d+)`)
)

// limitWaits reads a cluster's log for the bundles the limit refused (each with the wait it
// was sent back for) and counts the partitions a grant could not start (sent back alone or
// together).
func limitWaits(b *testing.B, path string) (waits []time.Duration, sendbacks int) {
	b.Helper()
	eachLogLine(b, path, func(line string) {
		switch {
		case strings.Contains(line, "limit full: the message waits"):
			if m := waitAttr.FindStringSubmatch(line); m != nil {
				if d, err := time.ParseDuration(strings.Trim(m[1], `"`)); err == nil {
					waits = append(waits, d)
				}
			}
		case strings.Contains(line, "partition sent back to wait for its limit"):
			sendbacks++
		case strings.Contains(line, "partitions sent back to wait for their limit"):
			if m := partsAttr.FindStringSubmatch(line); m != nil {
				n, _ := strconv.Atoi(m[1])
				sendbacks += n
			}
		}
	})
	return waits, sendbacks
}
