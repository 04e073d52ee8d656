// Package e2e_test runs real handler binaries as several host instances (internal/devhost)
// against Azurite and proves the invariants (docs/design.md, Invariants) from the ledger and
// from a leadership log, under chaos: killed, stopped and paused planners, killed workers, an
// Azurite restart, poison partitions; and a seeded chaos soak that mixes them all with several
// schedules (TestSoak, runs by default in short). The handlers are Baton's reference app
// (./handler: the schedule tick of BATON_SCHEDULE) and the e2e app (./internal/tools/e2eapp: schedules
// of its own, one per overlap policy), both on a heartbeat (BATON_HEARTBEAT) every second.
//
// The tests run side by side (t.Parallel; -parallel defaults to 4 here, see TestMain): most of
// their time is spent waiting for a lease to lapse, a retry's backoff or a schedule's next
// occurrence.
//
// Environment:
//
//	E2E_OCCURRENCES   occurrences of the fastest schedule in TestRuns_OnePerOccurrence (default 10)
//	E2E_HANDLER_RACE  build the handlers with -race too (slower start-up, catches handler races)
//	E2E_LOG_DIR       where each test's host log goes (default: a fresh $TMPDIR/baton-e2e-logs-*
//	                  directory, removed when every test passed)
//	E2E_DELIVERY      how the devhost delivers the work and control queues: queue (default; the
//	                  WorkQueue and ControlQueue functions, Storage queue trigger) or servicebus
//	                  (the Work and Control functions, with Service Bus's delivery semantics on
//	                  the same Storage queues; docs/design.md). Unset, the tests that run over
//	                  deliveries (the kill-worker and poison-partition chaos tests) run both
//	E2E_LIMIT_PARTITIONS
//	                  the partitions of TestLimits_HoldUnderFaults's run (default 10,000;
//	                  limits_test.go)
//	SOAK_OCCURRENCES, SOAK_SEED, SOAK_MODES
//	                  the chaos soak (TestSoak, soak_test.go; docs/reliability.md)
package e2e_test

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"testing"

	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/internal/tools/devhost"
)

var (
	// logDir receives one host log per test.
	logDir string
	// repoRoot is the app root (host.json and the function folders).
	repoRoot string
	// handlerBin is the handler (Baton's reference app, ./handler) built once for the whole
	// package; appBin the app with schedules of its own (./internal/tools/e2eapp).
	handlerBin string
	appBin     string
	// delivery is the clusters' delivery mode (E2E_DELIVERY; "" when unset: the Storage
	// queue's, and the tests run over deliveries run both).
	delivery devhost.Delivery
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

// parallel is how many tests run side by side unless -parallel says otherwise (its default,
// GOMAXPROCS, is 2 on a 2-core machine). Most of an e2e test's time is spent waiting (a lease
// to lapse, a backoff, an occurrence), not computing.
const parallel = 4

func run(m *testing.M) int {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		if err := flag.Set("test.parallel", strconv.Itoa(parallel)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if v := os.Getenv("E2E_DELIVERY"); v != "" {
		if delivery, err = devhost.ParseDelivery(v); err != nil {
			fmt.Fprintln(os.Stderr, "E2E_DELIVERY:", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "e2e: delivery %s\n", delivery)
	}
	if repoRoot, err = azurite.RepoRoot(wd); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "baton-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	handlerBin, appBin = filepath.Join(dir, "baton"), filepath.Join(dir, "e2eapp")
	for _, b := range []struct{ out, pkg string }{{handlerBin, "./handler"}, {appBin, "./internal/tools/e2eapp"}} {
		args := []string{"build", "-o", b.out}
		if os.Getenv("E2E_HANDLER_RACE") != "" {
			args = append(args, "-race")
		}
		args = append(args, b.pkg)
		start := time.Now()
		cmd := exec.Command(goTool(), args...)
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: build %s: %v\n%s", b.pkg, err, out)
			return 1
		}
		fmt.Fprintf(os.Stderr, "e2e: %s built in %s\n", b.pkg, time.Since(start).Round(time.Millisecond))
	}

	// A directory of its own: several runs of this package (make test in parallel shells) must
	// not write to the same log files.
	logDir = os.Getenv("E2E_LOG_DIR")
	keep := logDir != ""
	if !keep {
		if logDir, err = os.MkdirTemp("", "baton-e2e-logs-"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	} else if err := os.MkdirAll(logDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := azurite.Main(m)
	if code == 0 && !keep {
		_ = os.RemoveAll(logDir)
	} else {
		fmt.Fprintf(os.Stderr, "e2e: host logs kept in %s\n", logDir)
	}
	return code
}

// goTool is the go command of the toolchain running the tests: `go test` puts that
// toolchain's bin directory first on PATH.
func goTool() string { return "go" }
