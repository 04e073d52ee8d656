package app

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/ledgertest"
	"github.com/batonfn/baton/internal/engine/transport/transporttest"
	"github.com/batonfn/baton/work"
)

// queueInvocation is the host's request for a queue-triggered function: the message body
// JSON-encoded twice, as the host sends a string, and the trigger's metadata.
func queueInvocation(t *testing.T, body []byte, metadata string) []byte {
	t.Helper()
	inner, err := json.Marshal(string(body))
	if err != nil {
		t.Fatal(err)
	}
	outer, err := json.Marshal(string(inner))
	if err != nil {
		t.Fatal(err)
	}
	return []byte(`{"Data":{"message":` + string(outer) + `},"Metadata":` + metadata + `}`)
}

// Service Bus's Work and the Storage queue's WorkQueue answer a failed try the same way: 2xx,
// after scheduling the next try on the work queue with the job's backoff. So Service Bus,
// which would redeliver a failed invocation's message at once, never spends a partition's
// deliveries on its job's errors.
func TestFunctions_FailedTryIsScheduledNotRedelivered(t *testing.T) {
	for fn, metadata := range map[string]string{
		fnWork:      `{"MessageId":"\"run-1/1/e1\"","DeliveryCount":"1"}`,
		fnWorkQueue: `{"Id":"\"q-1\"","DequeueCount":"1"}`,
	} {
		t.Run(fn, func(t *testing.T) {
			ctx := t.Context()
			now := time.Date(2026, 11, 25, 13, 0, 0, 0, time.UTC)
			store := ledgertest.NewFake(ledgertest.Options{Now: func() time.Time { return now }})
			jobs := work.NewRegistry()
			jobs.Register(syntheticName, builtin(syntheticName))
			sender := &transporttest.Recorder{}
			w := mustWorker(t, work.WorkerConfig{Store: store, Jobs: jobs, MaxDeliveries: 5, Retries: sender,
				Now: func() time.Time { return now }})
			m := &ledger.Manifest{RunID: "run-1", Trigger: ledger.TriggerManual, Epoch: 1, Segments: []ledger.Segment{{Epoch: 1, From: 0}},
				Job: syntheticName, Params: json.RawMessage(`{"partitions":2,"failAlways":[1]}`), State: ledger.StateRunning,
				Partitions: 2, PlanDone: true, BatchSize: 100, Checkpoint: ledger.Checkpoint{Batches: 1, Next: 2}}
			if err := store.CreateManifest(ctx, m); err != nil {
				t.Fatal(err)
			}
			body, err := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: "run-1", Epoch: 1, Part: 1,
				Payload: json.RawMessage(`{"i":1}`)}.Encode()
			if err != nil {
				t.Fatal(err)
			}
			s, hs, _ := newTestServer(t)
			register(s, &functions{worker: w, now: time.Now})

			resp, v := post(t, hs.URL+"/"+fn, "", queueInvocation(t, body, metadata))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("failed try: status %d %v, want 200 (the retry is scheduled, the message completes)", resp.StatusCode, v)
			}
			if len(sender.Sent()) != 1 {
				t.Fatalf("%d messages sent, want the one retry", len(sender.Sent()))
			}
			got := sender.Sent()[0]
			retry, err := work.DecodeEnvelope(got.Body)
			if err != nil {
				t.Fatal(err)
			}
			delay := got.NotBefore.Sub(now)
			if got.ID != "run-1/1/e1/a2" || retry.Attempt != 2 || len(retry.Errors) != 1 || !strings.Contains(retry.Errors[0], "always fails") ||
				delay < 8*time.Second || delay > 10*time.Second {
				t.Errorf("retry %s: attempt %d, errors %q, %v ahead; want run-1/1/e1/a2, attempt 2, the job's error, 8-10 s ahead",
					got.ID, retry.Attempt, retry.Errors, delay)
			}
			if _, err := store.ReadResult(ctx, "run-1", 1); err == nil {
				t.Error("a result was recorded on the first try")
			}
		})
	}
}
