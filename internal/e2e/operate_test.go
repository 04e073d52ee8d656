package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/tools/devhost"
)

// post sends a POST with a JSON body to the local host's API and returns the status and body;
// key, when given, is the Idempotency-Key.
func (c *cluster) post(ctx context.Context, path, body string, key ...string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.h.HTTPURL()+"/api/"+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if len(key) > 0 {
		req.Header.Set("Idempotency-Key", key[0])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// TestOperate_CancelRunningRun: a run of slow partitions on 3 instances is cancelled over HTTP
// while its partitions run. The partitions in flight see their contexts cancelled (the
// handlers say so), none starts later than a lease duration (the workers' manifest copies)
// after the cancel, and the run ends cancelled with who and the note, its report aggregated
// once from the results it has (the rest counted cancelled); a second cancel answers as the
// first. Over both deliveries.
func TestOperate_CancelRunningRun(t *testing.T) {
	t.Parallel()
	for _, d := range deliveries() {
		t.Run(string(d), func(t *testing.T) { cancelRunningRun(t, d) })
	}
}

func cancelRunningRun(t *testing.T, d devhost.Delivery) {
	t.Parallel()
	const n = 60
	c := startCluster(t, clusterOpts{params: fmt.Sprintf(`{"partitions":%d,"workMs":4000}`, n), batch: 20, delivery: d})
	ctx := testCtx(t, 4*time.Minute)
	run := c.startRun(ctx)
	if _, err := c.h.WaitLine(ctx, func(l devhost.LogLine) bool { return l.Msg == "processing partitions" && l.Attrs["run"] == run }); err != nil {
		t.Fatal(err)
	}
	cancelled := time.Now()
	status, body, err := c.post(ctx, "runs/"+run+"/cancel", `{"note":"the database is down"}`)
	if err != nil || status != http.StatusAccepted {
		t.Fatalf("cancel: %d %s %v", status, body, err)
	}
	var first struct {
		Stop ledger.Stop `json:"stop"`
	}
	if err := json.Unmarshal(body, &first); err != nil || first.Stop.Note != "the database is down" || first.Stop.State != ledger.StateCancelled {
		t.Fatalf("cancel reply %s: %v", body, err)
	}
	status, body, err = c.post(ctx, "runs/"+run+"/cancel", `{"note":"again"}`)
	if err != nil || status != http.StatusAccepted || !bytes.Contains(body, []byte(`"note":"the database is down"`)) {
		t.Fatalf("second cancel: %d %s %v, want 202 with the first one's stop", status, body, err)
	}

	m, err := c.waitFinal(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	if m.State != ledger.StateCancelled || !strings.Contains(m.Reason, "the database is down") {
		t.Fatalf("run %s ended %s (%q), want cancelled with the note", run, m.State, m.Reason)
	}
	rep, _, err := c.store.ReadReport(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	if rep.State != ledger.StateCancelled || rep.Cancelled == 0 || rep.Succeeded+rep.Failed+rep.Cancelled != rep.Partitions {
		t.Fatalf("report %+v: want cancelled, with the partitions never run counted", rep)
	}
	// No partition started after the bound; the ones in flight were told.
	bound := first.Stop.At.Add(leaseDuration)
	results := 0
	if err := c.store.ListResults(ctx, run, func(ref ledger.ResultRef) error { results++; return nil }); err != nil {
		t.Fatal(err)
	}
	if results != rep.Succeeded+rep.Failed {
		t.Errorf("%d results recorded, the report counts %d: a result came after the report", results, rep.Succeeded+rep.Failed)
	}
	r, err := soakReader(ctx, c, run)
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range r {
		if res.Started.After(bound) {
			t.Errorf("partition %d started at %s, after the cancel's bound %s", res.Index, res.Started, bound)
		}
	}
	told := 0
	for _, l := range c.h.Lines() {
		if l.Msg == "run stopped: cancelling its partitions in flight here" && l.Attrs["run"] == run {
			told++
		}
	}
	if told == 0 {
		t.Error("no handler cancelled a partition in flight")
	}
	figures(t, "cancel %s: cancelled %s after the request; %d succeeded, %d failed, %d cancelled; %d handlers cancelled partitions in flight",
		d, m.Finished.Sub(cancelled).Round(time.Second), rep.Succeeded, rep.Failed, rep.Cancelled, told)
}

// soakReader reads every result of run, from its blocks and its own.
func soakReader(ctx context.Context, c *cluster, run string) ([]ledger.Result, error) {
	l, err := ledger.List(ctx, c.store, run)
	if err != nil {
		return nil, err
	}
	var out []ledger.Result
	for _, u := range l.Units() {
		rs, err := ledger.ReadUnit(ctx, c.store, run, u)
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
	}
	return out, nil
}

// TestOperate_RedriveFailedPartitions: a run whose every partition failed for good against a
// dependency that was down (the e2e app's 3 tries, 3 s apart) is redriven over HTTP once the
// dependency is back: its partitions run again in round 1 of the same run, which ends
// succeeded, the round's report aggregated once and the first kept; the run's detail shows the
// round and each partition's attempts over both rounds; the same Idempotency-Key answers the
// same round. Over both deliveries.
func TestOperate_RedriveFailedPartitions(t *testing.T) {
	t.Parallel()
	for _, d := range deliveries() {
		t.Run(string(d), func(t *testing.T) { redriveFailedPartitions(t, d) })
	}
}

func redriveFailedPartitions(t *testing.T, d devhost.Delivery) {
	t.Parallel()
	c := startCluster(t, clusterOpts{exe: appBin, delivery: d, batch: 8})
	ctx := testCtx(t, 4*time.Minute)
	back := time.Now().Add(15 * time.Second).UTC()
	body := fmt.Sprintf(`{"job":"synthetic","params":{"partitions":12,"failUntil":%q}}`, back.Format(time.RFC3339Nano))
	var run string
	if err := waitFor(ctx, 200*time.Millisecond, "the run accepted", func() (bool, error) {
		status, b, err := c.post(ctx, "runs", body, "redrive-e2e-start")
		if err != nil || status/100 != 2 {
			return false, nil
		}
		var reply struct{ Run string }
		err = json.Unmarshal(b, &reply)
		run = reply.Run
		return err == nil && run != "", err
	}); err != nil {
		t.Fatal(err)
	}
	m, err := c.waitFinal(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	if m.State != ledger.StateFailed || m.Failed != 12 {
		t.Fatalf("the run against a dependency down ended %s with %d failed, want failed, 12", m.State, m.Failed)
	}
	if !waitUntil(ctx, back) { // the dependency is back
		t.Fatal(ctx.Err())
	}
	status, b, err := c.post(ctx, "runs/"+run+"/redrive", "", "redrive-e2e-1")
	if err != nil || status != http.StatusAccepted || !bytes.Contains(b, []byte(`"round":1`)) || !bytes.Contains(b, []byte(`"partitions":12`)) {
		t.Fatalf("redrive: %d %s %v", status, b, err)
	}
	status, b, err = c.post(ctx, "runs/"+run+"/redrive", "", "redrive-e2e-1")
	if err != nil || status/100 != 2 || !bytes.Contains(b, []byte(`"round":1`)) {
		t.Fatalf("redrive again with the same key: %d %s %v", status, b, err)
	}
	if err := waitFor(ctx, 100*time.Millisecond, "the redriven run final", func() (bool, error) {
		m, err = c.store.ReadManifest(ctx, run)
		return err == nil && m.Round == 1 && m.State.Final(), err
	}); err != nil {
		t.Fatal(err)
	}
	if m.State != ledger.StateSucceeded || m.Succeeded != 12 {
		t.Fatalf("after the redrive: %s, %d succeeded; want succeeded, 12", m.State, m.Succeeded)
	}
	rep, _, err := c.store.ReadReport(ctx, ledger.RoundRun(run, 1))
	if err != nil || rep.State != ledger.StateSucceeded || rep.Succeeded != 12 {
		t.Fatalf("round 1's report %+v %v", rep, err)
	}
	if first, _, err := c.store.ReadReport(ctx, run); err != nil || first.State != ledger.StateFailed {
		t.Errorf("the first report was not kept: %+v %v", first, err)
	}
	// The run's detail: round 1, each partition's outcome in it with its attempts over both.
	resp, err := http.Get(c.h.HTTPURL() + "/api/runs/" + run)
	if err != nil {
		t.Fatal(err)
	}
	var detail struct {
		State    ledger.State
		Round    int
		Redrives []struct {
			Round      int
			Partitions int
			From       ledger.State
			Outcomes   []struct {
				Index           int
				OK              bool
				Attempts, Total int
			}
		}
		Report struct{ State ledger.State }
	}
	err = json.NewDecoder(resp.Body).Decode(&detail)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if detail.State != ledger.StateSucceeded || detail.Round != 1 || len(detail.Redrives) != 1 || detail.Redrives[0].From != ledger.StateFailed ||
		len(detail.Redrives[0].Outcomes) != 12 || detail.Report.State != ledger.StateSucceeded {
		t.Fatalf("run detail %+v", detail)
	}
	for _, o := range detail.Redrives[0].Outcomes {
		if !o.OK || o.Attempts != 1 || o.Total != 4 {
			t.Errorf("partition %d in round 1: ok %v, %d attempts of %d in all; want a success on its first, after the first round's 3", o.Index, o.OK, o.Attempts, o.Total)
		}
	}
	finished := 0
	for _, l := range c.h.Lines() {
		if l.Msg == "run finished" && strings.HasPrefix(l.Str("run"), run) {
			finished++
		}
	}
	if finished != 2 {
		t.Errorf("%d aggregations logged, want 2 (one per round)", finished)
	}
	figures(t, "redrive %s: 12 failed partitions redriven, the run succeeded in round 1", d)
}
