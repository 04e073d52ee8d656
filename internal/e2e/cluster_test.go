package e2e_test

import (
	"context"
	"encoding/json"
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

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue/queueerror"
	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/election/bloblease"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/blobstore"
	"github.com/batonfn/baton/internal/engine/protocol"
	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/internal/tools/devhost"
	"github.com/batonfn/baton/internal/tools/devhost/devhosttest"
	"github.com/batonfn/baton/work"
)

// Timing the tests rely on; they match the settings startCluster passes.
const (
	leaseDuration = 15 * time.Second
	renewInterval = leaseDuration / 3
	// visibility is host.json's visibilityTimeout.
	visibility = 5 * time.Second
	maxDequeue = 5
	// heartbeat is BATON_HEARTBEAT, the Tick timer: every second, so a due occurrence is
	// decided within a second.
	heartbeat     = "* * * * * *"
	heartbeatEach = time.Second
	// onceAYear is the settings' schedule (tick) of a test that starts its runs itself: it
	// fires on 1 January only, and POST /api/runs without a job runs it now.
	onceAYear = "0 0 0 1 1 *"
)

// clusterOpts configure startCluster; zero values take the defaults noted.
type clusterOpts struct {
	instances int    // default 3
	schedule  string // BATON_SCHEDULE, the schedule tick; default onceAYear (start runs with startRun)
	params    string // synthetic job params, default {"partitions":5}
	batch     int    // BATON_ENQUEUE_BATCH, default 250
	srv       *azurite.Server
	extra     map[string]string
	// exe is the handler binary (default handlerBin, the reference app; appBin is the app with
	// schedules of its own).
	exe string
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
	shared   bool // srv is the package's Azurite: the test's end deletes what the cluster stored there
	store    *blobstore.Store
	lock     *bloblease.BlobLock
	queue    *azqueue.QueueClient
	poison   *azqueue.QueueClient
	queueNm  string
	settings map[string]string
	// sampler samples the scheduler lease blob.
	sampler *leaseSampler
	logPath string

	hc       *devhosttest.Cluster
	stopOnce sync.Once
	// delivery is the local host's delivery mode.
	delivery devhost.Delivery

	mu       sync.Mutex
	records  []devhost.InvokeRecord
	samplers []*leaseSampler
}

func startCluster(t *testing.T, o clusterOpts) *cluster {
	t.Helper()
	if o.instances == 0 {
		o.instances = 3
	}
	if o.schedule == "" {
		o.schedule = onceAYear
	}
	if o.params == "" {
		o.params = `{"partitions":5}`
	}
	if o.batch == 0 {
		o.batch = 250
	}
	if o.exe == "" {
		o.exe = handlerBin
	}
	shared := o.srv == nil
	if shared {
		o.srv = azurite.Shared(t)
	}
	queue := devhosttest.ShortName("q")
	settings := map[string]string{
		config.SettingHeartbeat:     heartbeat,
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
	c := &cluster{t: t, srv: o.srv, shared: shared, queueNm: queue, logPath: logPath, delivery: o.delivery}
	if c.delivery == "" {
		c.delivery = delivery
	}
	hc := devhosttest.Start(t, devhosttest.Options{AppRoot: repoRoot, Executable: o.exe, Server: o.srv,
		Instances: o.instances, Settings: settings, LogPath: logPath,
		Host: func(hopts *devhost.Options) {
			hopts.LogLevel, hopts.HandlerLogLevel = slog.LevelDebug, slog.LevelDebug
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
	c.sampler = startSampler(c.lock, "")
	if shared {
		t.Cleanup(c.purge) // after the test's end and shutdown (cleanups run last first)
	}
	t.Cleanup(c.shutdown)
	return c
}

// runLock is a run's own lease (leases/runs/<run>), for the test's reads.
func (c *cluster) runLock(run string) *bloblease.BlobLock {
	c.t.Helper()
	lock, err := bloblease.NewBlobLock(c.hc.Leases, ledger.RunLeaseName(run),
		bloblease.BlobLockOptions{Duration: leaseDuration, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		c.t.Fatal(err)
	}
	return lock
}

// sampleRun starts sampling run's lease blob (stopped with the cluster).
func (c *cluster) sampleRun(run string) *leaseSampler {
	s := startSampler(c.runLock(run), ledger.RunLeaseName(run))
	c.mu.Lock()
	c.samplers = append(c.samplers, s)
	c.mu.Unlock()
	return s
}

// startRun starts a run of the settings' schedule now (POST /api/runs without a job: its job
// with BATON_JOB_PARAMS) and returns its ID; the reply comes once the run is created and its
// first check sent, before any planning. An Idempotency-Key makes its retries one request.
func (c *cluster) startRun(ctx context.Context) string {
	c.t.Helper()
	var run string
	key := devhosttest.ShortName("start")
	err := waitFor(ctx, 200*time.Millisecond, "POST /api/runs accepted", func() (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.h.HTTPURL()+"/api/runs", nil)
		if err != nil {
			return false, err
		}
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK {
			// 409: the scheduler lease stayed busy through the request's wait; try again.
			return false, fmt.Errorf("POST /api/runs: %d %s", resp.StatusCode, body)
		}
		var reply struct {
			Run string `json:"run"`
		}
		if err := json.Unmarshal(body, &reply); err != nil || reply.Run == "" {
			return false, fmt.Errorf("POST /api/runs: %s: %v", body, err)
		}
		run = reply.Run
		return true, nil
	})
	if err != nil {
		c.t.Fatal(err)
	}
	return run
}

// shutdown stops the host and the sampler (once); tests that stop their Azurite first call it
// themselves.
func (c *cluster) shutdown() {
	c.stopOnce.Do(func() {
		if err := c.hc.Close(); err != nil {
			c.t.Errorf("stop the host: %v", err)
		}
		c.sampler.stop()
		c.mu.Lock()
		samplers := c.samplers
		c.mu.Unlock()
		for _, s := range samplers {
			s.stop()
		}
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

// purge deletes the cluster's containers and queues from the package's Azurite when the test
// ends, after its host stopped. Azurite's blob garbage collection, every 10 minutes, goes
// through every blob it holds; left to pile up over the package's runs, they made it answer
// nothing for 11 minutes and more, failing whichever tests ran then. A purge that fails is
// logged, not failed: the test's own checks are done by then.
func (c *cluster) purge() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := c.h.Config()
	blobs, err := azclient.Blob(c.srv.Storage(), nil)
	if err != nil {
		c.t.Logf("purge the cluster's storage: %v", err)
		return
	}
	for _, name := range []string{cfg.RunsContainer, cfg.LeaseContainer} {
		if _, err := blobs.DeleteContainer(ctx, name, nil); err != nil && !bloberror.HasCode(err, bloberror.ContainerNotFound) {
			c.t.Logf("purge container %s: %v", name, err)
		}
	}
	queues, err := azclient.Queue(c.srv.Storage(), nil)
	if err != nil {
		c.t.Logf("purge the cluster's storage: %v", err)
		return
	}
	for _, name := range []string{c.queueNm, cfg.ControlQueue} {
		for _, q := range []string{name, name + devhost.PoisonSuffix} {
			if _, err := queues.DeleteQueue(ctx, q, nil); err != nil && !queueerror.HasCode(err, queueerror.QueueNotFound) {
				c.t.Logf("purge queue %s: %v", q, err)
			}
		}
	}
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

// runFinal starts a run now (startRun) and waits for it to be final; it returns the run's ID
// and final manifest, and fails the test when that does not happen within ctx.
func (c *cluster) runFinal(ctx context.Context) (string, ledger.Manifest) {
	c.t.Helper()
	run := c.startRun(ctx)
	m, err := c.waitFinal(ctx, run)
	if err != nil {
		c.t.Fatal(err)
	}
	return run, m
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

// figures prints a line the report collects: go test -v ./e2e | grep FIGURES.
func figures(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("FIGURES %s: %s", t.Name(), fmt.Sprintf(format, args...))
}
