package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/work"
)

// retryTimeout is the run timeout of the retry tests: longer than the default retry policy's
// tries (about 2.5 minutes at most), so no re-enqueue round or timeout interferes.
const retryTimeout = "5m"

// partitionTries returns the work-queue invocations of run's partition part, in start order,
// with each one's try (the envelope's attempt) and delivery count.
func partitionTries(c *cluster, run string, part int) (tries []work.Envelope, counts []int64, at []time.Time, failed int) {
	for _, r := range c.Records() {
		env, count, ok := envelopeOf(r)
		if !ok || r.Function != c.workFunction() || env.Kind != work.KindPartition || env.Run != run || env.Part != part {
			continue
		}
		tries, counts, at = append(tries, env), append(counts, count), append(at, r.Started)
		if r.Err != nil {
			failed++
		}
	}
	return tries, counts, at, failed
}

// A job whose dependency is down for 60 s ends succeeded: each failed try completes its
// message and schedules the next one further ahead (10 s, 20 s, 40 s, ... less jitter), so
// no delivery is spent on the outage and no invocation fails.
func TestRetry_DependencyDownFor60sThenTheRunSucceeds(t *testing.T) {
	t.Parallel() // mostly waiting out the backoff
	until := time.Now().Add(60 * time.Second).UTC()
	c := startCluster(t, clusterOpts{params: fmt.Sprintf(`{"partitions":3,"failUntil":%q}`, until.Format(time.RFC3339Nano)),
		extra: map[string]string{config.SettingRunTimeout: retryTimeout}})
	ctx := testCtx(t, 5*time.Minute)
	run, m := c.runFinal(ctx)
	ts := checkLeadership(t, c)
	checkRun(t, c, run, runWant{partitions: 3, state: ledger.StateSucceeded}, ts)

	results := ledger.NewReader(c.store, run) // results on their own and in blocks
	for i := range 3 {
		r, err := results.Read(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK || r.Started.Before(until) || len(r.Errors) < 3 {
			t.Errorf("partition %d: ok %v, started %s, %d errors; want a success after the outage, after at least 3 failed tries",
				i, r.OK, r.Started.Format(time.StampMilli), len(r.Errors))
		}
		tries, counts, at, failed := partitionTries(c, run, i)
		if failed > 0 {
			t.Errorf("partition %d: %d invocations failed; want none (a retry is a new message, the failed one completes)", i, failed)
		}
		for k, env := range tries {
			if counts[k] != 1 || max(env.Attempt, 1) != k+1 {
				t.Errorf("partition %d invocation %d: try %d, delivery %d; want try %d, delivery 1", i, k, env.Attempt, counts[k], k+1)
			}
			if k == 0 {
				continue
			}
			// Delay before try k+1 is 10 s × 2^(k−1) less up to a fifth; the Storage queue
			// rounds it up to whole seconds.
			want := time.Duration(float64(10*time.Second) * float64(int(1)<<(k-1)) * 0.8)
			if gap := at[k].Sub(at[k-1]); gap < want-time.Second {
				t.Errorf("partition %d: try %d came %s after try %d, want at least %s", i, k+1, gap.Round(time.Millisecond), k, want)
			}
		}
	}
	figures(t, "run=%s partitions=3 outage=60s state=%s took %s", run, m.State, m.Finished.Sub(m.Created).Round(time.Second))
}

// A partition that always fails is recorded failed after the policy's 5 tries, each try's
// error in the run's detail (GET /api/runs/{id}); the run ends partial and, since the failure
// is recorded, nothing goes to the poison queue.
func TestRetry_AlwaysFailingPartitionIsRecordedAfterThePolicysTries(t *testing.T) {
	t.Parallel() // mostly waiting out the backoff
	c := startCluster(t, clusterOpts{params: `{"partitions":3,"failAlways":[1]}`,
		extra: map[string]string{config.SettingRunTimeout: retryTimeout}})
	ctx := testCtx(t, 5*time.Minute)
	run, m := c.runFinal(ctx)
	ts := checkLeadership(t, c)
	checkRun(t, c, run, runWant{partitions: 3, state: ledger.StatePartial, failed: []int{1}}, ts)

	tries, _, _, failed := partitionTries(c, run, 1)
	if len(tries) != work.DefaultRetryAttempts || failed != 0 {
		t.Errorf("partition 1: %d invocations, %d failed; want %d tries, none failed", len(tries), failed, work.DefaultRetryAttempts)
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.h.HTTPURL()+"/api/runs/"+run, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var detail struct {
		Failures []struct {
			Index    int      `json:"index"`
			Attempts int      `json:"attempts"`
			Errors   []string `json:"errors"`
		} `json:"failures"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&detail); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/runs/%s: %d, %v", run, resp.StatusCode, err)
	}
	if len(detail.Failures) != 1 || detail.Failures[0].Index != 1 || detail.Failures[0].Attempts != work.DefaultRetryAttempts ||
		len(detail.Failures[0].Errors) != work.DefaultRetryAttempts {
		t.Fatalf("run detail failures %+v, want partition 1 with %d attempts and as many errors", detail.Failures, work.DefaultRetryAttempts)
	}
	for k, e := range detail.Failures[0].Errors {
		if !strings.Contains(e, "always fails") || !strings.Contains(e, fmt.Sprintf("delivery %d", k+1)) {
			t.Errorf("error of try %d: %q, want the job's error for that try", k+1, e)
		}
	}

	resp2, err := c.poison.PeekMessages(ctx, &azqueue.PeekMessagesOptions{NumberOfMessages: to.Ptr(int32(32))})
	if err == nil && len(resp2.Messages) > 0 {
		t.Errorf("poison queue holds %d messages, want none (the failure is recorded)", len(resp2.Messages))
	}
	figures(t, "run=%s partitions=3 failed=[1] tries=%d state=%s took %s", run, len(tries), m.State, m.Finished.Sub(m.Created).Round(time.Second))
}
