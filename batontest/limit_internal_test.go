package batontest

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonfn/baton"
	"github.com/batonfn/baton/internal/engine/limit"
)

// forgetful is a limit store that loses every write: each grant sees the limit empty, so the
// limit holds nothing back.
type forgetful struct{}

func (forgetful) Read(context.Context, string) (limit.State, error) { return limit.State{}, nil }

func (forgetful) Update(_ context.Context, _ string, fn func(*limit.State) error) (limit.State, error) {
	var st limit.State
	err := fn(&st)
	return st, err
}

// failures is a testing.TB that keeps what Check reports.
type failures struct {
	testing.TB
	mu  sync.Mutex
	got []string
}

func (f *failures) Helper() {}

func (f *failures) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, fmt.Sprintf(format, args...))
}

// crowd is a job whose partitions wait, each, until want of them run at once (or their
// context ends).
type crowd struct {
	want     int64
	inFlight atomic.Int64
	reached  chan struct{}
	once     sync.Once
}

func (c *crowd) Plan(ctx context.Context, params json.RawMessage, cursor string, emit func(json.RawMessage, string) error) error {
	start := 0
	if cursor != "" {
		var err error
		if start, err = strconv.Atoi(cursor); err != nil {
			return baton.Permanent(err)
		}
	}
	for i := start; i < 6; i++ {
		if err := emit(json.RawMessage(fmt.Sprint(i)), fmt.Sprint(i+1)); err != nil {
			return err
		}
	}
	return nil
}

func (c *crowd) Process(ctx context.Context, p baton.Partition) (json.RawMessage, error) {
	if c.inFlight.Add(1) >= c.want {
		c.once.Do(func() { close(c.reached) })
	}
	defer c.inFlight.Add(-1)
	select {
	case <-c.reached:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return p.Payload, nil
}

func (c *crowd) Aggregate(ctx context.Context, run baton.RunInfo, results iter.Seq2[baton.Result, error]) (json.RawMessage, error) {
	return json.RawMessage("0"), nil
}

// A limit that does not hold (its store loses every write) lets more partitions than its
// MaxInFlight run at once: Check catches it, naming the bound and what it saw.
func TestUnderLimit_CatchesTooManyAtOnce(t *testing.T) {
	job := &crowd{want: 3, reached: make(chan struct{})}
	f := &failures{TB: t}
	Check(f, job, `{}`, UnderLimit(baton.Limit{Name: "crm", MaxInFlight: 2}), Timeout(time.Minute),
		func(s *settings) { s.limitStore = forgetful{} })
	got := strings.Join(f.got, "\n")
	if !strings.Contains(got, "batontest: under limit: ") || !strings.Contains(got, "partitions ran at once, more than the limit's MaxInFlight 2") {
		t.Fatalf("failures %q, want the breach of MaxInFlight 2", got)
	}
}
