package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/tools/scaffold/scaffoldtest"
)

// TestDemo_AnyApp: in the folder of an app written by baton init, demo builds that app (not
// Baton's handler), runs it on two instances against Azurite, fires the schedule the app
// declares in code (nightly) within seconds through BATON_SCHEDULES, tells which instance won
// the scheduler lease and which took the run's own lease, and ends with the report of that one
// run of the app's own job.
func TestDemo_AnyApp(t *testing.T) {
	if testing.Short() {
		t.Skip("generates, builds and runs an app")
	}
	app := scaffoldtest.App(t, "example.com/team/nightly")
	t.Setenv("GOFLAGS", "-mod=mod") // demo's own go build of the new app
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	var out strings.Builder
	err := demoCmd(ctx, []string{"-app", app, "-n", "2", "-control", "", "-timeout", "4m"}, &out)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	t.Log(out.String())
	if _, err := os.Stat(filepath.Join(app, "nightly")); err != nil {
		t.Errorf("demo did not build the app into the binary host.json names: %v", err)
	}
	for _, want := range []string{
		"Starting 2 instances of nightly",
		`the demo fires the schedule nightly at "`,
		`BATON_SCHEDULES={"nightly":{"cron":"`,
		"won the scheduler lease",
		"the run's own lease (leases/runs/nightly-",
		"state succeeded: 100 of 100 partitions succeeded, 0 failed",
		fmt.Sprintf("aggregate: failedRanges=0 primes=%d", primesBelow(1000000)),
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output has no %q:\n%s", want, out.String())
		}
	}
}

// primesBelow counts the primes below n with a sieve, independently of the app's job.
func primesBelow(n int) int {
	composite := make([]bool, n)
	count := 0
	for i := 2; i < n; i++ {
		if composite[i] {
			continue
		}
		count++
		for j := i * i; j < n; j += i {
			composite[j] = true
		}
	}
	return count
}
