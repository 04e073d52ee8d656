package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonfn/baton/ledger"
	"github.com/batonfn/baton/transport"
	"github.com/batonfn/baton/work"
)

// testBlobLockDuration is the shortest lease storage allows, to keep expiry tests short.
const testBlobLockDuration = 15 * time.Second

// waitFor polls cond every 50ms until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// every is a Cron firing every period from the Unix epoch (UTC): enough for the coordinator's
// tests, which never depend on calendar rules (internal/ncrontab has those).
type every time.Duration

func (p every) Next(t time.Time) (time.Time, bool) {
	d := time.Duration(p)
	return t.Truncate(d).Add(d).UTC(), true
}

func (p every) Prev(t time.Time) (time.Time, bool) { return t.Truncate(time.Duration(p)).UTC(), true }

func (p every) String() string { return "every " + time.Duration(p).String() }

// at parses an RFC 3339 time.
func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

// countJob plans n partitions {"i":k}; it does no I/O.
type countJob struct{ planCalls atomic.Int32 }

func (j *countJob) Plan(ctx context.Context, params json.RawMessage, cursor string, emit func(json.RawMessage, string) error) error {
	j.planCalls.Add(1)
	var p struct{ N int }
	if err := json.Unmarshal(params, &p); err != nil {
		return err
	}
	start := 0
	if cursor != "" {
		var err error
		if start, err = strconv.Atoi(cursor); err != nil {
			return err
		}
	}
	for i := start; i < p.N; i++ {
		if err := emit(json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), strconv.Itoa(i+1)); err != nil {
			return err
		}
	}
	return nil
}

func (j *countJob) Process(ctx context.Context, p work.Partition) (json.RawMessage, error) {
	return p.Payload, nil
}

func (j *countJob) Aggregate(ctx context.Context, run work.RunInfo, results iter.Seq2[ledger.Result, error]) (json.RawMessage, error) {
	return json.RawMessage(`{}`), nil
}

// countingFinisher records TryFinish calls and never finishes.
type countingFinisher struct{ calls atomic.Int32 }

func (f *countingFinisher) TryFinish(ctx context.Context, run string) (bool, error) {
	f.calls.Add(1)
	return false, nil
}

func (f *countingFinisher) TryFinishByListing(ctx context.Context, run string) (bool, error) {
	f.calls.Add(1)
	return false, nil
}

// testClock is a settable clock shared by a test's instances.
type testClock struct{ ns atomic.Int64 }

func newClock(s string) *testClock { c := &testClock{}; c.set(at(s)); return c }

func (c *testClock) Now() time.Time { return time.Unix(0, c.ns.Load()).UTC() }

func (c *testClock) set(t time.Time) { c.ns.Store(t.UnixNano()) }

// blockingJob plans one partition, but only once release is closed; entered is closed when a
// plan starts. It holds the lease as a long planning would.
type blockingJob struct {
	entered, release chan struct{}
	once             sync.Once
}

func newBlockingJob() *blockingJob {
	return &blockingJob{entered: make(chan struct{}), release: make(chan struct{})}
}

func (j *blockingJob) Plan(ctx context.Context, params json.RawMessage, cursor string, emit func(json.RawMessage, string) error) error {
	j.once.Do(func() { close(j.entered) })
	select {
	case <-j.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return emit(json.RawMessage(`{}`), "1")
}

func (j *blockingJob) Process(ctx context.Context, p work.Partition) (json.RawMessage, error) {
	return p.Payload, nil
}

func (j *blockingJob) Aggregate(ctx context.Context, run work.RunInfo, results iter.Seq2[ledger.Result, error]) (json.RawMessage, error) {
	return json.RawMessage(`{}`), nil
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// memSender records every message sent.
type memSender struct {
	mu   sync.Mutex
	msgs []transport.Message
}

func (s *memSender) Send(ctx context.Context, msgs []transport.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = append(s.msgs, msgs...)
	return nil
}

// partitions returns the partition indexes sent, sorted, and how often each was sent.
func (s *memSender) partitions(t *testing.T) ([]int, map[int]int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[int]int{}
	for _, m := range s.msgs {
		env, err := work.DecodeEnvelope(m.Body)
		if err != nil {
			t.Fatal(err)
		}
		if env.Kind == work.KindPartition {
			seen[env.Part]++
		}
	}
	idx := make([]int, 0, len(seen))
	for i := range seen {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	return idx, seen
}
