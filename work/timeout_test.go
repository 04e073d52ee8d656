package work_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/enginejob"
	"github.com/batonfn/baton/work"
	"github.com/batonfn/baton/work/synthetic"
)

// withTimeout registers job as the synthetic job with a partition timeout of d.
func withTimeout(job work.Job, d time.Duration) func(*work.WorkerConfig) {
	return func(cfg *work.WorkerConfig) {
		withJob(job)(cfg)
		cfg.Jobs.SetPartitionTimeout(synthetic.Name, d)
	}
}

// A try past its job's partition timeout sees its context cancelled, fails as timed out, and
// is retried under the retry policy; its next try, in time, succeeds with the first's error.
func TestWorker_PartitionTimeoutCutsTheTryAndRetries(t *testing.T) {
	job := gatedJob{Job: enginejob.Of(synthetic.New()), gate: func(ctx context.Context, p work.Partition) error {
		if p.Index == 2 && p.Attempt == 1 {
			<-ctx.Done() // a dependency that never answers
			return ctx.Err()
		}
		return nil
	}}
	e := newBundleEnv(t, true, withTimeout(job, 20*time.Millisecond))
	e.run("to", synthetic.Params{Partitions: 4})
	if err := e.deliver(blockBundle("to", 0, 4, 4), 1); err != nil {
		t.Fatal(err)
	}
	sent := e.sender.Sent()
	if len(sent) != 1 {
		t.Fatalf("sent %d messages, want partition 2's retry", len(sent))
	}
	retry, err := work.DecodeEnvelope(sent[0].Body)
	if err != nil || retry.Part != 2 || len(retry.Errors) != 1 || !strings.Contains(retry.Errors[0], "partition timed out after 20ms") {
		t.Fatalf("retry %+v, %v; want partition 2's try 2 carrying the timeout", retry, err)
	}
	e.drain(0)
	got := e.outcomes("to", 4)
	if r := got[2]; !r.OK || r.Attempts != 2 || len(r.Errors) != 1 {
		t.Errorf("partition 2: %+v, want its second try's success after the timed-out first", r)
	}
	if rep, _, err := e.fake.ReadReport(e.ctx, "to"); err != nil || rep.State != ledger.StateSucceeded {
		t.Errorf("report %s, want succeeded", rep.State)
	}
}

// A Process that ignores its cancelled context is abandoned AbandonGrace after its timeout:
// the delivery does not wait for it, and the try counts as timed out.
func TestWorker_PartitionIgnoringItsTimeoutIsAbandoned(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	job := gatedJob{Job: enginejob.Of(synthetic.New()), gate: func(ctx context.Context, p work.Partition) error {
		if p.Attempt == 1 {
			<-release // ignores ctx
		}
		return nil
	}}
	e := newBundleEnv(t, true, withTimeout(job, 10*time.Millisecond))
	e.run("ab", synthetic.Params{Partitions: 1})
	one := bundle("ab", 0, 1)
	one.Count, one.Payload, one.Payloads = 0, one.Payloads[0], nil
	if err := e.deliver(one, 1); err != nil {
		t.Fatal(err)
	}
	sent := e.sender.Sent()
	if len(sent) != 1 {
		t.Fatalf("sent %d messages, want the abandoned try's retry", len(sent))
	}
	retry, _ := work.DecodeEnvelope(sent[0].Body)
	if len(retry.Errors) != 1 || !strings.Contains(retry.Errors[0], "partition timed out after 10ms") {
		t.Errorf("retry errors %q, want the timeout", retry.Errors)
	}
}
