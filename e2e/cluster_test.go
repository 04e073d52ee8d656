package e2e_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/batonfn/baton/config"
	"github.com/batonfn/baton/election/bloblease"
	"github.com/batonfn/baton/internal/azclient"
	"github.com/batonfn/baton/internal/azurite"
	"github.com/batonfn/baton/internal/devhost"
	"github.com/batonfn/baton/internal/devhost/devhosttest"
	"github.com/batonfn/baton/ledger"
	"github.com/batonfn/baton/ledger/blobstore"
	"github.com/batonfn/baton/protocol"
	"github.com/batonfn/baton/work"
)

// Timing the tests rely on; they match the settings startCluster passes.
const (
	leaseDuration = 15 * time.Second
	renewInterval = leaseDuration / 3
	// checkMargin is the coordinator's delay beyond the lease for the first check message.
	checkMargin = 5 * time.Second
	// hostPoll is host.json's maxPollingInterval; visibility its visibilityTimeout.
	hostPoll   = 2 * time.Second
	visibility = 5 * time.Second
	maxDequeue = 5
)

// clusterOpts configure startCluster; zero values take the defaults noted.
type clusterOpts struct {
	instances int    // default 3
	schedule  string // default every 5 s
	maxFires  int    // default 1 (0 after defaulting is never used; use -1 for unlimited)
	params    string // synthetic job params, default {"partitions":5}
	batch     int    // BATON_ENQUEUE_BATCH, default 250
	srv       *azurite.Server
	extra     map[string]string
	// onInvoke additionally receives every invocation record.
	onInvoke func(devhost.InvokeRecord)
	// tweak, when set, adjusts the host options last (e.g. the timer mode).
	tweak func(*devhost.Options)
	// delivery is the local host's delivery mode (default E2E_DELIVERY's, else the Storage
	// queue's).
	delivery devhost.Delivery
}

// cluster is a running devhost over the real handler, plus the test's own view of storage.
type cluster struct {
	t        *testing.T
	h        *devhost.Host
	srv      *azurite.Server
	store    *blobstore.Store
	lock     *bloblease.BlobLock
	queue    *azqueue.QueueClient
	poison   *azqueue.QueueClient
	queueNm  string
	settings map[string]string
	sampler  *leaseSampler
	logPath  string

	hc       *devhosttest.Cluster
	stopOnce sync.Once
	// delivery is the local host's delivery mode.
	delivery devhost.Delivery

	mu      sync.Mutex
	records []devhost.InvokeRecord
}

func startCluster(t *testing.T, o clusterOpts) *cluster {
	t.Helper()
	if o.instances == 0 {
		o.instances = 3
	}
	if o.schedule == "" {
		o.schedule = "*/5 * * * * *"
	}
	switch {
	case o.maxFires == 0:
		o.maxFires = 1
	case o.maxFires < 0:
		o.maxFires = 0
	}
	if o.params == "" {
		o.params = `{"partitions":5}`
	}
	if o.batch == 0 {
		o.batch = 250
	}
	if o.srv == nil {
		o.srv = azurite.Shared(t)
	}
	queue := devhosttest.ShortName("q")
	settings := map[string]string{
		config.SettingSchedule:      o.schedule,
		config.SettingWorkQueue:     queue,
		config.SettingLeaseDuration: leaseDuration.String(),
		config.SettingRunTimeout:    "1m",
		config.SettingJobParams:     o.params,
		config.SettingEnqueueBatch:  fmt.Sprint(o.batch),
		config.SettingLogLevel:      "debug",
		config.SettingOverlap:       string(config.OverlapSkip),
		config.SettingMaxDeliveries: fmt.Sprint(maxDequeue),
	}
	for k, v := range o.extra {
		settings[k] = v
	}
	logPath := filepath.Join(logDir, strings.ReplaceAll(t.Name(), "/", "_")+".log")
	c := &cluster{t: t, srv: o.srv, queueNm: queue, logPath: logPath, delivery: o.delivery}
	if c.delivery == "" {
		c.delivery = delivery
	}
	hc := devhosttest.Start(t, devhosttest.Options{AppRoot: repoRoot, Executable: handlerBin, Server: o.srv,
		Instances: o.instances, Settings: settings, LogPath: logPath,
		Host: func(hopts *devhost.Options) {
			hopts.LogLevel, hopts.HandlerLogLevel, hopts.MaxTimerFires = slog.LevelDebug, slog.LevelDebug, o.maxFires
			hopts.Delivery = c.delivery
			hopts.OnInvoke = func(r devhost.InvokeRecord) {
				c.mu.Lock()
				c.records = append(c.records, r)
				c.mu.Unlock()
				if o.onInvoke != nil {
					o.onInvoke(r)
				}
			}
			if o.tweak != nil {
				o.tweak(hopts)
			}
		}})
	c.hc, c.h, c.settings, c.store, c.lock = hc, hc.Host, hc.Settings, hc.Store, hc.Lock
	qsvc, err := azclient.Queue(c.h.Config().Storage, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.queue, c.poison = qsvc.NewQueueClient(queue), qsvc.NewQueueClient(queue+devhost.PoisonSuffix)
	c.sampler = startSampler(c.lock)
	t.Cleanup(c.shutdown)
	return c
}

// shutdown stops the host and the sampler (once); tests that stop their Azurite first call it
// themselves.
func (c *cluster) shutdown() {
	c.stopOnce.Do(func() {
		if err := c.hc.Close(); err != nil {
			c.t.Errorf("stop the host: %v", err)
		}
		c.sampler.stop()
		for _, l := range c.h.Lines() {
			if strings.Contains(l.Raw, "WARNING: DATA RACE") || strings.HasPrefix(l.Raw, "panic:") {
				c.t.Errorf("%s (pid %d) reported: %s (see %s)", l.Instance, l.PID, l.Raw, c.logPath)
				break
			}
		}
		if c.t.Failed() {
			c.t.Logf("host log: %s; last lines:\n%s", c.logPath, tail(c.logPath, 60))
		}
	})
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// workFunction and controlFunction name the functions that deliver the work and control
// queues in the cluster's delivery mode.
func (c *cluster) workFunction() string {
	if c.delivery == devhost.DeliveryServiceBus {
		return "Work"
	}
	return "WorkQueue"
}

func (c *cluster) controlFunction() string {
	if c.delivery == devhost.DeliveryServiceBus {
		return "Control"
	}
	return "ControlQueue"
}

// deliveries are the delivery modes a test that runs over deliveries runs: E2E_DELIVERY's,
// or both.
func deliveries() []devhost.Delivery {
	if delivery != "" {
		return []devhost.Delivery{delivery}
	}
	return devhost.Deliveries
}

// Records returns the invocation records so far.
func (c *cluster) Records() []devhost.InvokeRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]devhost.InvokeRecord(nil), c.records...)
}

// envelopeOf decodes the Baton envelope of a work or control invocation request, with its
// delivery count (DequeueCount, or DeliveryCount in the Service Bus delivery mode).
func envelopeOf(r devhost.InvokeRecord) (work.Envelope, int64, bool) {
	req, err := protocol.DecodeRequest(r.Request)
	if err != nil {
		return work.Envelope{}, 0, false
	}
	body, err := protocol.DecodeMessage(req.Data["message"])
	if err != nil {
		return work.Envelope{}, 0, false
	}
	env, err := work.DecodeEnvelope(body)
	if err != nil {
		return work.Envelope{}, 0, false
	}
	if _, ok := req.Metadata["DeliveryCount"]; ok {
		md, _ := protocol.DecodeServiceBusMetadata(req.Metadata)
		return env, md.DeliveryCount, true
	}
	md, _ := protocol.DecodeQueueMetadata(req.Metadata)
	return env, md.DequeueCount, true
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond every tick until it returns true or ctx ends.
func waitFor(ctx context.Context, tick time.Duration, what string, cond func() (bool, error)) error {
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), last)
			}
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(tick):
		}
	}
}

// leaderOf waits for the "run created" line and returns the run and the creating instance.
func (c *cluster) runCreated(ctx context.Context) (devhost.LogLine, error) {
	return c.h.WaitLine(ctx, func(l devhost.LogLine) bool { return l.Msg == "run created" })
}

// waitFinal waits until run's manifest is final and returns it.
func (c *cluster) waitFinal(ctx context.Context, run string) (ledger.Manifest, error) {
	var m ledger.Manifest
	err := waitFor(ctx, 100*time.Millisecond, "run "+run+" final", func() (bool, error) {
		var err error
		m, err = c.store.ReadManifest(ctx, run)
		return err == nil && m.State.Final(), err
	})
	return m, err
}

// firstRunFinal waits for the first run to be created and then final; it returns the run's
// ID and final manifest, and fails the test when either does not happen within ctx.
func (c *cluster) firstRunFinal(ctx context.Context) (string, ledger.Manifest) {
	c.t.Helper()
	created, err := c.runCreated(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	run := created.Str("run")
	m, err := c.waitFinal(ctx, run)
	if err != nil {
		c.t.Fatal(err)
	}
	return run, m
}

// figures prints a line the report collects: go test -v ./e2e | grep FIGURES.
func figures(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("FIGURES %s: %s", t.Name(), fmt.Sprintf(format, args...))
}
