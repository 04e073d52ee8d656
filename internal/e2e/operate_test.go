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

// post sends a POST with a JSON body to the local host's API and returns the status and body.
func (c *cluster) post(ctx context.Context, path, body string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.h.HTTPURL()+"/api/"+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
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
