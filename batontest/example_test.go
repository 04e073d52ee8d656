package batontest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

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

// UnderLimit in a job's test: the job's downstream answers its first three requests with 429
// and Retry-After, the job asks Baton to slow down, and the report says it did. The waits take
// no real time.
func ExampleUnderLimit() {
	var calls atomic.Int64
	crm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 3 {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	defer crm.Close()

	type params struct{ Contacts int }
	sync := baton.TypedJob(
		func(ctx context.Context, p params, cursor string, emit func(int, string) error) error {
			start, _ := strconv.Atoi(cursor) // "" is the start
			for i := start; i < p.Contacts; i++ {
				if err := emit(i, strconv.Itoa(i+1)); err != nil {
					return err
				}
			}
			return nil
		},
		func(ctx context.Context, part baton.Part[params, int]) (bool, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, crm.URL+"/contacts/"+strconv.Itoa(part.Payload), nil)
			if err != nil {
				return false, baton.Permanent(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false, err
			}
			defer resp.Body.Close()
			if resp.StatusCode == http.StatusTooManyRequests {
				secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
				return false, baton.SlowDown(time.Duration(secs)*time.Second, fmt.Errorf("GET contact %d: %s", part.Payload, resp.Status))
			}
			return resp.StatusCode == http.StatusOK, nil
		},
		func(ctx context.Context, run baton.RunOf[params], results iter.Seq2[baton.Outcome[bool], error]) (int, error) {
			synced := 0
			for r, err := range results {
				if err != nil {
					return 0, err
				}
				if r.OK && r.Output {
					synced++
				}
			}
			return synced, nil
		})
	rep := batontest.Check(printer{}, sync, params{Contacts: 6},
		batontest.UnderLimit(baton.Limit{Name: "crm", MaxInFlight: 2}))
	fmt.Println("synced:", string(rep.Aggregate), "slow-downs:", rep.SlowDowns)
	// Output:
	// synced: 6 slow-downs: 3
}
