package work_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/ledgertest"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/internal/engine/transport/transporttest"
	"github.com/batonfn/baton/work"
)

func TestRetryPolicy_Validate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy work.RetryPolicy
		fields []string // the fields named, in order; none for a valid policy
	}{
		{"the zero value takes the defaults", work.RetryPolicy{}, nil},
		{"one attempt means no retry", work.RetryPolicy{Attempts: 1}, nil},
		{"jitter turned off", work.RetryPolicy{Jitter: -1}, nil},
		{"negative attempts", work.RetryPolicy{Attempts: -1}, []string{"Attempts"}},
		{"too many attempts", work.RetryPolicy{Attempts: work.MaxRetryAttempts + 1}, []string{"Attempts"}},
		{"negative initial delay", work.RetryPolicy{InitialDelay: -time.Second}, []string{"InitialDelay"}},
		{"multiplier below one", work.RetryPolicy{Multiplier: 0.5}, []string{"Multiplier"}},
		{"jitter above one", work.RetryPolicy{Jitter: 1.5}, []string{"Jitter"}},
		{"max delay below the initial delay", work.RetryPolicy{InitialDelay: time.Minute, MaxDelay: time.Second}, []string{"MaxDelay"}},
		{"default max delay below the initial delay", work.RetryPolicy{InitialDelay: time.Hour}, []string{"MaxDelay"}},
		{"max delay beyond a day", work.RetryPolicy{MaxDelay: 25 * time.Hour}, []string{"MaxDelay"}},
		{"every problem at once", work.RetryPolicy{Attempts: 99, Multiplier: -2, Jitter: 2},
			[]string{"Attempts", "Multiplier", "Jitter"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.policy.Validate()
			var got []string
			for _, e := range unjoin(err) {
				var pe *work.PolicyError
				if !errors.As(e, &pe) {
					t.Fatalf("error %v is no *PolicyError", e)
				}
				got = append(got, pe.Field)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.fields) {
				t.Errorf("Validate() = %v; fields %v, want %v", err, got, tc.fields)
			}
		})
	}
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

func TestRetryPolicy_Delay(t *testing.T) {
	exact := work.RetryPolicy{InitialDelay: 10 * time.Second, Multiplier: 3, MaxDelay: 2 * time.Minute, Jitter: -1}
	for attempt, want := range map[int]time.Duration{1: 10 * time.Second, 2: 30 * time.Second, 3: 90 * time.Second, 4: 2 * time.Minute, 9: 2 * time.Minute} {
		if got := exact.Delay(attempt, "k"); got != want {
			t.Errorf("Delay(%d) without jitter = %v, want %v", attempt, got, want)
		}
	}
	// The defaults: 10 s doubling, each shortened by at most a fifth.
	def := work.DefaultRetryPolicy()
	if def.Attempts != 5 || def.InitialDelay != 10*time.Second || def.Multiplier != 2 || def.MaxDelay != 5*time.Minute || def.Jitter != 0.2 {
		t.Fatalf("DefaultRetryPolicy() = %+v", def)
	}
	distinct := map[time.Duration]bool{}
	for i := range 50 {
		key := fmt.Sprintf("run-%d/3/e1/a2", i)
		got := def.Delay(2, key)
		if got > 20*time.Second || got < 16*time.Second {
			t.Errorf("Delay(2, %s) = %v, want within [16s, 20s]", key, got)
		}
		if again := def.Delay(2, key); again != got {
			t.Errorf("Delay(2, %s) = %v then %v, want the same (a pure function of the key)", key, got, again)
		}
		distinct[got] = true
	}
	if len(distinct) < 10 {
		t.Errorf("50 keys gave %d distinct delays, want jitter to spread them", len(distinct))
	}
}

// flakyJob fails (transiently) while its clock is before healthyAt, and permanently for the
// indexes in permanent; output {"i": index}.
type flakyJob struct {
	now       func() time.Time
	healthyAt time.Time
	permanent map[int]bool
}

func (j *flakyJob) Plan(context.Context, json.RawMessage, string, func(json.RawMessage, string) error) error {
	return errors.New("not planned in these tests")
}

func (j *flakyJob) Process(ctx context.Context, p work.Partition) (json.RawMessage, error) {
	switch {
	case j.permanent[p.Index]:
		return nil, work.Permanent(errors.New("bad input"))
	case j.now().Before(j.healthyAt):
		return nil, fmt.Errorf("dependency down: GET https://dep.example/x?sig=secret: 503 (attempt %d)", p.Attempt)
	}
	return json.Marshal(map[string]int{"i": p.Index})
}

func (j *flakyJob) Aggregate(ctx context.Context, run work.RunInfo, results iter.Seq2[ledger.Result, error]) (json.RawMessage, error) {
	n := 0
	for r, err := range results {
		if err != nil {
			return nil, err
		}
		if r.OK {
			n++
		}
	}
	return json.Marshal(n)
}

// retryFixture is a worker with a scheduled-retry sender over the in-memory ledger, with an
// injected clock.
type retryFixture struct {
	t      *testing.T
	ctx    context.Context
	store  *ledgertest.Fake
	sender *transporttest.Recorder
	w      *work.Worker
	job    *flakyJob
	now    time.Time
}

const retryRun = "retry-run"

func newRetryFixture(t *testing.T, parts int, policy work.RetryPolicy) *retryFixture {
	t.Helper()
	f := &retryFixture{t: t, ctx: t.Context(), sender: &transporttest.Recorder{},
		now: time.Date(2026, 11, 25, 13, 0, 0, 0, time.UTC)}
	clock := func() time.Time { return f.now }
	f.store = ledgertest.NewFake(ledgertest.Options{Now: clock})
	f.job = &flakyJob{now: clock, permanent: map[int]bool{}}
	jobs := work.NewRegistry()
	jobs.Register("flaky", f.job)
	jobs.SetRetry("flaky", policy)
	w, err := work.NewWorker(work.WorkerConfig{Store: f.store, Jobs: jobs, MaxDeliveries: 3, Retries: f.sender, Now: clock,
		Holder: ledger.Holder{App: "test", Instance: "w1", PID: 1}})
	if err != nil {
		t.Fatal(err)
	}
	f.w = w
	m := &ledger.Manifest{RunID: retryRun, Trigger: ledger.TriggerManual, Epoch: 1, Segments: []ledger.Segment{{Epoch: 1, From: 0}},
		Job: "flaky", State: ledger.StateRunning, Partitions: parts, PlanDone: true, BatchSize: 100,
		Checkpoint: ledger.Checkpoint{Batches: 1, Next: parts}, FoldShards: work.FoldShardsFor(f.job)}
	if err := f.store.CreateManifest(f.ctx, m); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *retryFixture) first(part int) work.Envelope {
	return work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: retryRun, Epoch: 1, Part: part,
		Payload: json.RawMessage(`{}`)}
}

func (f *retryFixture) deliver(env work.Envelope, count int) error {
	return f.w.HandlePartition(f.ctx, env, work.Delivery{MessageID: env.MessageID(), Count: count})
}

// sentAt decodes message i of the recorded sends.
func (f *retryFixture) sentAt(i int) (transport.Message, work.Envelope) {
	f.t.Helper()
	msgs := f.sender.Sent()
	if i >= len(msgs) {
		f.t.Fatalf("%d messages sent, want more than %d", len(msgs), i)
	}
	env, err := work.DecodeEnvelope(msgs[i].Body)
	if err != nil {
		f.t.Fatalf("message %d: %v", i, err)
	}
	return msgs[i], env
}

func TestWorker_Retry_ScheduledWithBackoffThenRecordedFailed(t *testing.T) {
	policy := work.RetryPolicy{Attempts: 3, InitialDelay: 10 * time.Second, Multiplier: 2, MaxDelay: time.Minute}
	f := newRetryFixture(t, 2, policy)
	if err := f.deliver(f.first(1), 1); err != nil { // partition 1 succeeds
		t.Fatal(err)
	}
	f.job.healthyAt = f.now.Add(24 * time.Hour) // then the dependency goes down for good

	// Try 1 fails: the retry is scheduled and the original completes (nil, 2xx).
	orig := f.first(0)
	if err := f.deliver(orig, 1); err != nil {
		t.Fatalf("try 1: got %v, want nil (the retry is scheduled, the message completes)", err)
	}
	msg, retry := f.sentAt(0)
	wantDelay := policy.Delay(1, msg.ID)
	if msg.ID != retryRun+"/0/e1/a2" || retry.Attempt != 2 || len(retry.Errors) != 1 {
		t.Fatalf("retry message %s: attempt %d, errors %q; want %s/0/e1/a2, attempt 2, one error", msg.ID, retry.Attempt, retry.Errors, retryRun)
	}
	if got := msg.NotBefore.Sub(f.now); got != wantDelay || got < 8*time.Second || got > 10*time.Second {
		t.Errorf("retry scheduled %v ahead, want the policy's %v (10 s less up to a fifth)", got, wantDelay)
	}
	if e := retry.Errors[0]; strings.Contains(e, "https://") || strings.Contains(e, "secret") || !strings.Contains(e, "dependency down") {
		t.Errorf("attempt error %q: want the job's error without its URL", e)
	}
	if _, err := f.store.ReadResult(f.ctx, retryRun, 0); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a result was recorded before the last try: %v", err)
	}

	// The original is delivered again (its completion was lost): the same retry, same ID.
	f.now = f.now.Add(time.Second)
	if err := f.deliver(orig, 2); err != nil {
		t.Fatalf("redelivered try 1: %v", err)
	}
	if again, _ := f.sentAt(1); again.ID != msg.ID {
		t.Errorf("redelivery sent %s, want the same retry %s (duplicate detection drops it)", again.ID, msg.ID)
	}

	// Try 2 fails at its time: try 3 is scheduled twice as far ahead.
	f.now = msg.NotBefore
	if err := f.deliver(retry, 1); err != nil {
		t.Fatalf("try 2: %v", err)
	}
	msg3, retry3 := f.sentAt(2)
	if msg3.ID != retryRun+"/0/e1/a3" || retry3.Attempt != 3 || len(retry3.Errors) != 2 {
		t.Fatalf("third try %s: attempt %d, errors %q", msg3.ID, retry3.Attempt, retry3.Errors)
	}
	if got := msg3.NotBefore.Sub(f.now); got != policy.Delay(2, msg3.ID) || got < 16*time.Second || got > 20*time.Second {
		t.Errorf("try 3 scheduled %v ahead, want %v (20 s less up to a fifth)", got, policy.Delay(2, msg3.ID))
	}

	// Try 3 is the last: the failure is recorded with each try's error, the message completes
	// and the run finishes.
	f.now = msg3.NotBefore
	if err := f.deliver(retry3, 1); err != nil {
		t.Fatalf("last try: got %v, want nil (the failure is recorded; nothing to dead-letter)", err)
	}
	if n := len(f.sender.Sent()); n != 3 {
		t.Errorf("%d messages sent, want 3 (no retry after the last try)", n)
	}
	r, err := f.store.ReadResult(f.ctx, retryRun, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.OK || r.Attempts != 3 || len(r.Errors) != 3 || !strings.Contains(r.Error, "dependency down") {
		t.Errorf("result: ok %v, attempts %d, errors %q, error %q; want a failure after 3 tries with 3 errors", r.OK, r.Attempts, r.Errors, r.Error)
	}
	for i, e := range r.Errors {
		if !strings.Contains(e, fmt.Sprintf("attempt %d", i+1)) || len(e) > work.MaxAttemptError {
			t.Errorf("error of try %d: %q", i+1, e)
		}
	}
	m, err := f.store.ReadManifest(f.ctx, retryRun)
	if err != nil {
		t.Fatal(err)
	}
	if m.State != ledger.StatePartial || m.Failed != 1 || m.Succeeded != 1 {
		t.Errorf("run %s, %d succeeded, %d failed; want partial, 1, 1", m.State, m.Succeeded, m.Failed)
	}

	// A retry copy that arrives after the run is final is dropped, and schedules nothing.
	if err := f.deliver(retry3, 1); err != nil {
		t.Errorf("late retry: %v", err)
	}
	if n := len(f.sender.Sent()); n != 3 {
		t.Errorf("late retry sent a message: %d sent, want 3", n)
	}
}

func TestWorker_Retry_RecoversWithinThePolicy(t *testing.T) {
	f := newRetryFixture(t, 1, work.RetryPolicy{}) // the defaults
	f.job.healthyAt = f.now.Add(60 * time.Second)
	env := f.first(0)
	for try := 1; ; try++ {
		if try > work.DefaultRetryAttempts {
			t.Fatalf("still failing after %d tries", try-1)
		}
		if err := f.deliver(env, 1); err != nil {
			t.Fatalf("try %d: %v", try, err)
		}
		if _, err := f.store.ReadResult(f.ctx, retryRun, 0); err == nil {
			break
		}
		var msg transport.Message
		msg, env = f.sentAt(try - 1)
		f.now = msg.NotBefore
	}
	r, err := f.store.ReadResult(f.ctx, retryRun, 0)
	if err != nil || !r.OK || r.Attempts < 4 || len(r.Errors) != r.Attempts-1 {
		t.Fatalf("result %+v, %v; want success on try 4 or 5 with the earlier errors", r, err)
	}
	m, err := f.store.ReadManifest(f.ctx, retryRun)
	if err != nil || m.State != ledger.StateSucceeded {
		t.Errorf("run %s, %v; want succeeded", m.State, err)
	}
}

func TestWorker_Retry_PermanentErrorIsNotRetried(t *testing.T) {
	f := newRetryFixture(t, 1, work.RetryPolicy{})
	f.job.permanent[0] = true
	if err := f.deliver(f.first(0), 1); err != nil {
		t.Fatal(err)
	}
	if n := len(f.sender.Sent()); n != 0 {
		t.Errorf("%d retries sent for a permanent error, want 0", n)
	}
	if r, err := f.store.ReadResult(f.ctx, retryRun, 0); err != nil || r.OK || r.Attempts != 1 {
		t.Errorf("result %+v, %v; want a failure on the first try", r, err)
	}
}

func TestWorker_Retry_SendFailureFailsTheDeliveryUntilTheLast(t *testing.T) {
	f := newRetryFixture(t, 1, work.RetryPolicy{})
	f.job.healthyAt = f.now.Add(time.Hour)
	f.sender.Fail = transport.MarkTransient(errors.New("connection lost"))
	for count := 1; count < 3; count++ {
		err := f.deliver(f.first(0), count)
		if err == nil || errors.Is(err, work.ErrGaveUp) || !transport.IsTransient(err) {
			t.Fatalf("delivery %d: got %v, want the transient send error (the host redelivers)", count, err)
		}
	}
	// On the queue's last delivery the partition cannot wait for another: its failure is
	// recorded, and the message dead-letters.
	if err := f.deliver(f.first(0), 3); !errors.Is(err, work.ErrGaveUp) {
		t.Fatalf("last delivery: got %v, want ErrGaveUp", err)
	}
	r, err := f.store.ReadResult(f.ctx, retryRun, 0)
	if err != nil || r.OK || !strings.Contains(r.Error, "retry not scheduled") {
		t.Errorf("result %+v, %v; want a failure naming the unscheduled retry", r, err)
	}
}

func TestEnvelope_RetryFieldsFitBesideTheLargestPayload(t *testing.T) {
	long := strings.Repeat("é", work.MaxAttemptError)
	errs := make([]string, work.MaxRetryAttempts-1)
	for i := range errs {
		errs[i] = long[:work.MaxAttemptError]
	}
	payload := json.RawMessage(`"` + strings.Repeat("x", work.MaxPayloadBytes-2) + `"`)
	env := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Part: 999999, Parts: 1000000,
		Run: strings.Repeat("a", 63), Epoch: 1 << 40, Round: 99, Attempt: work.MaxRetryAttempts, Errors: errs, Payload: payload}
	if _, err := env.Encode(); err != nil {
		t.Errorf("a last retry with the largest payload and every error: %v", err)
	}
	env.Errors = append(env.Errors, "one too many")
	if _, err := env.Encode(); !errors.Is(err, work.ErrMalformed) {
		t.Errorf("attempt %d with %d errors: got %v, want ErrMalformed", env.Attempt, len(env.Errors), err)
	}
}

// A partition waiting for its scheduled retry when the run's deadline passes is sent again by
// the check's re-enqueue round. Harmless: the round's copy records the result, and the retry,
// arriving later, finds it, schedules nothing and changes nothing.
func TestWorker_Retry_ReenqueueRoundWhileARetryWaitsIsHarmless(t *testing.T) {
	f := newRetryFixture(t, 2, work.RetryPolicy{}) // partition 1 keeps the run open
	f.job.healthyAt = f.now.Add(time.Minute)
	if err := f.deliver(f.first(0), 1); err != nil {
		t.Fatal(err)
	}
	msg, retry := f.sentAt(0)

	f.now = f.now.Add(time.Minute) // the dependency is back; the round comes before the retry
	round := f.first(0)
	round.Round = 1
	if err := f.deliver(round, 1); err != nil {
		t.Fatalf("re-enqueued copy: %v", err)
	}
	first, err := f.store.ReadResult(f.ctx, retryRun, 0)
	if err != nil || !first.OK {
		t.Fatalf("result after the round: %+v, %v; want a success", first, err)
	}

	f.now = msg.NotBefore.Add(time.Minute)
	if err := f.deliver(retry, 1); err != nil {
		t.Fatalf("late retry: %v", err)
	}
	if n := len(f.sender.Sent()); n != 1 {
		t.Errorf("%d messages sent, want only the first retry", n)
	}
	after, err := f.store.ReadResult(f.ctx, retryRun, 0)
	if err != nil || !after.Finished.Equal(first.Finished) || after.Attempts != first.Attempts {
		t.Errorf("result changed by the late retry: %+v, was %+v (%v)", after, first, err)
	}
	if err := f.deliver(f.first(1), 1); err != nil {
		t.Fatal(err)
	}
	m, err := f.store.ReadManifest(f.ctx, retryRun)
	if err != nil || m.State != ledger.StateSucceeded || m.Succeeded != 2 || m.Failed != 0 {
		t.Errorf("run %s with %d succeeded, %d failed, %v; want succeeded with 2 (each partition counted once)", m.State, m.Succeeded, m.Failed, err)
	}
}
