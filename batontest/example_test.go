package batontest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"strconv"
	"testing"

	"github.com/batonfn/baton"
	"github.com/batonfn/baton/batontest"
)

// printer is a testing.TB that prints failures, standing in for a test's *testing.T.
type printer struct{ testing.TB }

func (printer) Helper()                           {}
func (printer) Errorf(format string, args ...any) { fmt.Printf(format+"\n", args...) }

// Check in a job's test: this job's plan ignores its cursor, so a leader resuming a run would
// plan every partition again. In a real test, pass the test's t.
func ExampleCheck() {
	restarts := baton.TypedJob(
		func(ctx context.Context, p struct{ N int }, cursor string, emit func(int, string) error) error {
			for i := range p.N { // the cursor is ignored
				if err := emit(i, strconv.Itoa(i+1)); err != nil {
					return err
				}
			}
			return nil
		},
		func(ctx context.Context, part baton.Part[struct{ N int }, int]) (int, error) {
			return part.Payload, nil
		},
		func(ctx context.Context, run baton.RunOf[struct{ N int }], results iter.Seq2[baton.Outcome[int], error]) (int, error) {
			sum := 0
			for r, err := range results {
				if err != nil {
					return 0, err
				}
				sum += r.Output
			}
			return sum, nil
		})
	rep := batontest.Check(printer{}, restarts, json.RawMessage(`{"N":2}`))
	fmt.Println("aggregate:", string(rep.Aggregate))
	// Output:
	// batontest: plan resume: planning from the cursor after partition 0 ("1"): partition 1: payload 0, want 1
	// batontest: plan resume: planning from the cursor after partition 1 ("2"): partition 2: planned, but planning from the start ends with partition 1
	// aggregate: 1
}
