package bench

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/election/bloblease"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/blobstore"
	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/internal/tools/devhost"
	"github.com/batonfn/baton/internal/tools/devhost/devhosttest"
)

// clusterLease is the lease duration of every cluster: the shortest Azure allows.
const clusterLease = 15 * time.Second

// cluster is the real handler binary running as N instances under the local host
// (internal/devhost) against an Azurite of its own, plus the benchmark's view of storage.
type cluster struct {
	srv     *azurite.Server
	h       *devhost.Host
	store   *blobstore.Store
	lock    *bloblease.BlobLock
	logPath string

	hc *devhosttest.Cluster
	// proxy, when the cluster was started with one, sees every storage call of the handlers
	// and of the local host.
	proxy *storageProxy

	mu       sync.Mutex
	invokes  map[string]int // WorkQueue invocations (partitions and checks) per instance
	failed   int
	failedBy map[string]int // failed invocations per function
}

// startClusterWith starts n instances whose timer job is synthetic with params, with extra
// settings over the defaults, against an Azurite of its own: in memory, or persisted on disk
// when onDisk is set (see BenchmarkEndToEnd). The schedule never fires during a benchmark (once
// a year); runs are started through POST /api/runs.
func startClusterWith(b *testing.B, n int, params string, onDisk bool, extra map[string]string) *cluster {
	b.Helper()
	return startClusterOpts(b, clusterOptions{instances: n, params: params, onDisk: onDisk, extra: extra})
}

// clusterOptions configure startClusterOpts.
type clusterOptions struct {
	instances int
	params    string
	onDisk    bool
	extra     map[string]string
	// proxied puts a storageProxy between the cluster and Azurite (c.proxy).
	proxied bool
	// schedule, when set, replaces the once-a-year schedule (tick), and the heartbeat beats
	// every second, so each occurrence is decided within a second (timerRun).
	schedule string
	// timer is the local host's timer mode (default devhost.TimerAll: every instance).
	timer devhost.TimerMode
	// bulk runs ./internal/bench/cmd/bulkhandler instead of the handler: the synthetic job's bundles
	// capped at baton.MaxBundle (1,024) instead of 256.
	bulk bool
	// limited runs ./internal/bench/cmd/limithandler instead: the synthetic job under the
	// limit "bench", set by BATON_LIMITS in extra.
	limited bool
}

// startClusterOpts starts a cluster as configured by o.
func startClusterOpts(b *testing.B, o clusterOptions) *cluster {
	b.Helper()
	n, params, onDisk, extra := o.instances, o.params, o.onDisk, o.extra
	exe, _ := handlerBinaries(b)
	switch {
	case o.bulk:
		exe = bulkBinary(b)
	case o.limited:
		exe = limitBinary(b)
	}
	opts := azurite.Options{}
	if onDisk {
		opts.Dir = b.TempDir()
	}
	srv := azurite.Private(b, opts)
	c := &cluster{srv: srv, invokes: map[string]int{}, failedBy: map[string]int{}}
	conn := srv.ConnectionString()
	if o.proxied {
		c.proxy = startStorageProxy(b, srv)
		conn = c.proxy.connectionString(srv)
	}
	settings := map[string]string{
		config.SettingHostStorage:   conn,
		config.SettingSchedule:      "0 0 0 1 1 *",
		config.SettingLeaseDuration: clusterLease.String(),
		config.SettingJobParams:     params,
		config.SettingLogLevel:      "info",
	}
	if o.schedule != "" {
		settings[config.SettingSchedule] = o.schedule
		settings[config.SettingHeartbeat] = "* * * * * *"
	}
	for k, v := range extra {
		settings[k] = v
	}
	c.logPath = filepath.Join(os.TempDir(), "baton-bench", strings.NewReplacer("/", "_", "=", "-").Replace(b.Name())+".log")
	hc := devhosttest.Start(b, devhosttest.Options{AppRoot: repoRoot(b), Executable: exe, Server: srv, Instances: n,
		Settings: settings, LogPath: c.logPath,
		Host: func(hopts *devhost.Options) {
			hopts.ProgressInterval, hopts.HandlerLogLevel = -1, handlerLogLevel(settings)
			if o.timer != "" {
				hopts.TimerMode = o.timer
			}
			hopts.OnInvoke = func(r devhost.InvokeRecord) {
				if r.Err != nil {
					c.mu.Lock()
					c.failedBy[r.Function]++
					c.mu.Unlock()
				}
				if r.Function != "WorkQueue" {
					return
				}
				c.mu.Lock()
				c.invokes[r.Instance]++
				if r.Err != nil {
					c.failed++
				}
				c.mu.Unlock()
			}
		}})
	c.hc, c.h, c.store, c.lock = hc, hc.Host, hc.Store, hc.Lock
	b.Cleanup(func() {
		c.close(b)
		if b.Failed() {
			b.Logf("host log: %s", c.logPath)
		}
	})
	return c
}

// handlerLogLevel writes the handlers' debug lines to the log file when they log them.
func handlerLogLevel(settings map[string]string) slog.Level {
	if settings[config.SettingLogLevel] == "debug" {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// close stops the host and its Azurite; safe to call more than once. In-flight invocations
// get a few seconds (a failover trial leaves a run mid-flight); then the handlers are killed.
func (c *cluster) close(b *testing.B) {
	_ = c.hc.Close()
	c.srv.Stop()
}

// timerRun waits for the first run the schedule tick starts (a heartbeat decided its first
// occurrence) and returns its ID; the channel says nothing more (a heartbeat has no caller to
// answer) and is closed.
func (c *cluster) timerRun(b *testing.B, timeout time.Duration) (string, <-chan error) {
	b.Helper()
	l := c.waitLine(b, timeout, "the schedule's first run", func(l devhost.LogLine) bool {
		return l.Msg == "run created" && l.Str("schedule") == coordinator.LegacySchedule && l.Str("trigger") == string(ledger.TriggerTimer)
	})
	done := make(chan error)
	close(done)
	return l.Str("run"), done
}

// startRun POSTs /api/runs with an Idempotency-Key (a run now of the schedule tick) and returns
// the run ID without waiting for the reply (the reply comes once the run is created and its
// first check sent; a killed instance never answers). The reply, when it comes, is sent on the
// returned channel.
func (c *cluster) startRun(b *testing.B) (string, <-chan error) {
	b.Helper()
	key := shortName("bench")
	run := ledger.ScheduleNowRunID(coordinator.LegacySchedule, key, time.Now())
	done := make(chan error, 1)
	go func() {
		req, err := http.NewRequest(http.MethodPost, c.h.HTTPURL()+"/api/runs", nil)
		if err != nil {
			done <- err
			return
		}
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- err
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			done <- fmt.Errorf("POST /api/runs: %d %s", resp.StatusCode, body)
			return
		}
		done <- nil
	}()
	return run, done
}

// waitLine waits for the first handler line since the start that matches.
func (c *cluster) waitLine(b *testing.B, d time.Duration, what string, match func(devhost.LogLine) bool) devhost.LogLine {
	b.Helper()
	l, err := c.h.WaitLine(ctxFor(b, d), match)
	if err != nil {
		b.Fatalf("waiting for %s: %v (log: %s)", what, err, c.logPath)
	}
	return l
}

// waitFinal polls the run's manifest until it is final.
func (c *cluster) waitFinal(b *testing.B, run string, d time.Duration) ledger.Manifest {
	b.Helper()
	ctx := ctxFor(b, d)
	for {
		m, err := c.store.ReadManifest(ctx, run)
		if err == nil && m.State.Final() {
			return m
		}
		select {
		case <-ctx.Done():
			b.Fatalf("run %s not final after %s (state %s, %d/%d done; log: %s)", run, d, m.State, m.Succeeded, m.Partitions, c.logPath)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// invocations returns the WorkQueue invocations per instance and how many failed.
func (c *cluster) invocations() (map[string]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.invokes))
	for k, v := range c.invokes {
		out[k] = v
	}
	return out, c.failed
}

// failures returns the failed invocations per function so far.
func (c *cluster) failures() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.failedBy))
	for k, v := range c.failedBy {
		out[k] = v
	}
	return out
}

// shortName is a container or queue name unique to this run, short enough for "-poison".
func shortName(prefix string) string { return devhosttest.ShortName(prefix) }

// secs formats d in seconds with two decimals, for logs.
func secs(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }
