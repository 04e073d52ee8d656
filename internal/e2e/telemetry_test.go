package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/tools/devhost"
	"github.com/batonfn/baton/internal/tools/devhost/devhosttest"
)

// otelSettings turn OTLP/HTTP export on towards rec, flushing often.
func otelSettings(rec *otlpReceiver) map[string]string {
	return map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": rec.srv.URL,
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_SERVICE_NAME":           "baton-e2e",
		"OTEL_BSP_SCHEDULE_DELAY":     "200",
		"OTEL_METRIC_EXPORT_INTERVAL": "500",
	}
}

// TestTelemetry_OneTracePerRun runs the real handler under the local host with OTLP export to
// a real OTLP/HTTP receiver: a run the heartbeat starts for an occurrence and a run started by
// a request each make one connected trace, from the decision through the planning slices and
// enqueue batches to every partition (on whichever instance processed it) and the finish; and
// the metrics' counts, summed over the instances, agree with the ledger. It runs over both
// deliveries (deliveries).
func TestTelemetry_OneTracePerRun(t *testing.T) {
	t.Parallel()
	for _, d := range deliveries() {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			oneTracePerRun(t, d)
		})
	}
}

func oneTracePerRun(t *testing.T, d devhost.Delivery) {
	const parts = 12
	rec := startOTLPReceiver(t)
	// The tick schedule fires once, a few seconds after the cluster is up (cursor: instance
	// start), so the heartbeat starts exactly one run.
	at := time.Now().UTC().Add(12 * time.Second).Truncate(time.Second)
	c := startCluster(t, clusterOpts{instances: 2, params: fmt.Sprintf(`{"partitions":%d}`, parts), batch: 4,
		schedule: fmt.Sprintf("%d %d %d * * *", at.Second(), at.Minute(), at.Hour()), extra: otelSettings(rec), delivery: d})
	ctx := testCtx(t, 3*time.Minute)
	if !time.Now().Before(at) {
		t.Fatalf("the cluster took until after the occurrence %s to start: its first heartbeat will not decide it", at)
	}

	timerRun := ledger.ScheduleRunID("tick", at)
	mt, err := c.waitFinal(ctx, timerRun)
	if err != nil {
		t.Fatal(err)
	}
	// The request carries its caller's trace context: the run's root links to it.
	const callerSpan = "b7ad6b7169203331"
	manualRun := postRun(ctx, t, c, "00-0af7651916cd43dd8448eb211c80319c-"+callerSpan+"-01")
	mm, err := c.waitFinal(ctx, manualRun)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []ledger.Manifest{mt, mm} {
		if m.State != ledger.StateSucceeded || m.Trace == "" {
			t.Fatalf("run %s: state %s, trace %q: want succeeded with the trace of its root", m.RunID, m.State, m.Trace)
		}
	}
	c.shutdown() // every handler flushes its telemetry before it exits

	root := checkRunTrace(t, rec, timerRun, parts, string(ledger.StateSucceeded))
	linked := false
	for _, id := range root.Links {
		if s := rec.span(id); s != nil && s.Name == "baton.heartbeat" {
			linked = true
		}
	}
	if !linked || root.Attrs["baton.run.trigger"] != string(ledger.TriggerTimer) || root.Attrs["baton.schedule.name"] != "tick" {
		t.Errorf("timer run's root: links %v, attributes %v: want a link to the heartbeat that decided it, trigger timer, schedule tick", root.Links, root.Attrs)
	}
	root = checkRunTrace(t, rec, manualRun, parts, string(ledger.StateSucceeded))
	t.Logf("runs %s and %s: one trace each; root of the manual run %s on %s", timerRun, manualRun, root.ID, root.Instance)
	if root.Attrs["baton.run.trigger"] != string(ledger.TriggerManual) || !slices.Contains(root.Links, callerSpan) {
		t.Errorf("manual run's root: attributes %v, links %v: want trigger manual, linked to the caller's span %s", root.Attrs, root.Links, callerSpan)
	}

	// The metrics agree with the ledger: every run recorded, by state and trigger, and every
	// partition outcome of their reports.
	runs, err := listRuns(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	var started, succeeded, partsOK, partsFailed int64
	for _, run := range runs {
		m, err := c.store.ReadManifest(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		if m.Epoch > 0 || m.State == ledger.StatePlanning {
			started++
		}
		if m.State == ledger.StateSucceeded {
			succeeded++
		}
		partsOK += int64(m.Succeeded)
		partsFailed += int64(m.Failed)
	}
	if started != 2 || succeeded != 2 {
		t.Fatalf("ledger: %d runs started, %d succeeded; want the two of the test", started, succeeded)
	}
	for _, want := range []struct {
		metric string
		attrs  map[string]string
		n      int64
	}{
		{"baton.runs.started", nil, started},
		{"baton.runs.started", map[string]string{"baton.run.trigger": "timer"}, 1},
		{"baton.runs.finished", map[string]string{"baton.run.state": "succeeded", "baton.job.name": "synthetic"}, succeeded},
		{"baton.runs.finished", nil, succeeded},
		{"baton.partitions.processed", map[string]string{"baton.partition.outcome": "succeeded"}, partsOK},
		{"baton.partitions.processed", map[string]string{"baton.partition.outcome": "failed"}, partsFailed},
		{"baton.partitions.failed", nil, partsFailed},
		{"baton.partitions.dead_lettered", nil, 0},
		{"baton.partition.duration.count", nil, partsOK + partsFailed},
		{"baton.run.duration.count", nil, succeeded},
		{"baton.occurrence.lag.count", nil, 1},
	} {
		if got := rec.counter(want.metric, want.attrs); got != want.n {
			t.Errorf("%s%v = %d, want %d (the ledger's)", want.metric, want.attrs, got, want.n)
		}
	}
	if !rec.gauged("baton.queue.backlog", map[string]string{"baton.queue.name": c.queueNm}) {
		t.Errorf("no baton.queue.backlog of the work queue %s", c.queueNm)
	}
	if got := rec.counter("baton.heartbeat.duration.count", nil); got < 1 {
		t.Errorf("baton.heartbeat.duration recorded %d heartbeats, want some", got)
	}
	if got := rec.counter("baton.lease.acquisitions", map[string]string{"baton.lease.kind": "run"}); got < 2 {
		t.Errorf("baton.lease.acquisitions{run} = %d, want at least one per run", got)
	}
	if got := rec.counter("baton.lease.acquisitions", map[string]string{"baton.lease.kind": "scheduler"}); got < 1 {
		t.Errorf("baton.lease.acquisitions{scheduler} = %d, want the heartbeats'", got)
	}
}

// TestTelemetry_ResumedPlanningJoinsTheTrace: kill -9 a run's planner mid-enqueue; the
// instance that takes the run over continues the run's trace from the traceparent in its
// manifest, so the resumed planning slice (a newer epoch) descends from the run's root in the
// same trace, and so does every partition another process ran. (The killed planner's spans not
// yet exported die with it, those of the partitions it ran among them: the trace keeps what
// it exported.)
func TestTelemetry_ResumedPlanningJoinsTheTrace(t *testing.T) {
	t.Parallel()
	rec := startOTLPReceiver(t)
	c := startCluster(t, clusterOpts{params: slowEnqueueParams, batch: slowEnqueueBatch, extra: otelSettings(rec)})
	ctx := testCtx(t, slowEnqueueBudget)
	run, rs, created := planner(ctx, t, c)
	waitMidEnqueue(ctx, t, c, run, 3)
	killedAt := time.Now()
	if err := c.h.Instance(created.Instance).Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.waitEpoch(ctx, created.Int("epoch")); err != nil {
		t.Fatal(err)
	}
	m, err := c.waitFinal(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	if m.State != ledger.StateSucceeded {
		t.Fatalf("run %s ended %s", run, m.State)
	}
	c.shutdown()

	spans, err := rec.runTrace(run)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*gotSpan{}
	var root *gotSpan
	for _, s := range spans {
		byID[s.ID] = s
		if s.Name == "baton.run.start" && s.Parent == "" {
			root = s
		}
	}
	if root == nil {
		t.Fatalf("run %s: no root span baton.run.start among %d spans", run, len(spans))
	}
	// reaches reports whether s descends from the root through spans all exported.
	reaches := func(s *gotSpan) bool {
		up, err := ancestors(s, byID)
		return err == nil && len(up) > 0 && up[len(up)-1] == "baton.run.start"
	}
	resumed := 0
	parts := map[string]bool{}
	for _, s := range spans {
		switch {
		case s.Name == "baton.plan.slice" && s.Attrs["baton.run.epoch"] != fmt.Sprint(created.Int("epoch")):
			if !reaches(s) {
				t.Errorf("resumed planning slice (epoch %s on %s) does not descend from the run's root", s.Attrs["baton.run.epoch"], s.Instance)
			}
			resumed++
		case s.Name == "baton.partition":
			parts[s.Attrs["baton.partition.index"]] = true
		}
	}
	if resumed == 0 {
		t.Errorf("run %s: no planning slice of the instance that took over (killed: %s, epoch %d)", run, created.Instance, created.Int("epoch"))
	}
	// The partitions the killed process ran (before its kill, on its instance) may have no span.
	byKilled := map[int]bool{}
	if err := ledger.ReadAll(ctx, c.store, run, func(r ledger.Result) {
		if r.Worker.Instance == created.Instance && r.Finished.Before(killedAt) {
			byKilled[r.Index] = true
		}
	}); err != nil {
		t.Fatal(err)
	}
	if len(byKilled) == slowEnqueueParts {
		t.Fatalf("run %s: the killed planner ran every partition; none shows the trace carried on", run)
	}
	for i := range slowEnqueueParts {
		if !parts[fmt.Sprint(i)] && !byKilled[i] {
			t.Errorf("run %s: no span of partition %d in the run's trace (not run by the killed process)", run, i)
			break
		}
	}
	t.Logf("run %s: %d spans in one trace, %d resumed planning slices after the kill of %s, %d partitions run by it before",
		run, len(spans), resumed, created.Instance, len(byKilled))
}

// postRun starts a run now of the schedule tick (POST /api/runs) with traceparent as the
// request's trace context, retrying while the scheduler lease is busy, and returns its ID.
func postRun(ctx context.Context, t *testing.T, c *cluster, traceparent string) string {
	t.Helper()
	var run string
	key := devhosttest.ShortName("otel")
	err := waitFor(ctx, 200*time.Millisecond, "POST /api/runs accepted", func() (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.h.HTTPURL()+"/api/runs", nil)
		if err != nil {
			return false, err
		}
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("traceparent", traceparent)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var reply struct {
			Run string `json:"run"`
		}
		if resp.StatusCode/100 != 2 || json.Unmarshal(body, &reply) != nil || reply.Run == "" {
			return false, fmt.Errorf("POST /api/runs: %d %s", resp.StatusCode, body)
		}
		run = reply.Run
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return run
}
