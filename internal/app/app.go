package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/api"
	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/deadletter"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/election/bloblease"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/blobstore"
	"github.com/batonfn/baton/internal/engine/limit"
	"github.com/batonfn/baton/internal/engine/limit/limitblob"
	"github.com/batonfn/baton/internal/engine/protocol"
	"github.com/batonfn/baton/internal/engine/telemetry"
	"github.com/batonfn/baton/internal/engine/transport/servicebus"
	"github.com/batonfn/baton/internal/engine/transport/storagequeue"
	"github.com/batonfn/baton/work"
)

// Function names: the folder names holding each function.json.
const (
	fnTick      = "Tick"
	fnWork      = "Work"
	fnWorkQueue = "WorkQueue"
	// Control and ControlQueue deliver check messages from the control queue.
	fnControl      = "Control"
	fnControlQueue = "ControlQueue"
	fnRuns         = "Runs"
	fnLeader       = "Leader"
	fnDashboard    = "Dashboard"
	fnSchedules    = "Schedules"
	fnLimits       = "Limits"
)

// Binding names used in the function.json files.
const (
	bindingTimer   = "timer"
	bindingMessage = "message"
	bindingRequest = "req"
)

// wiring is the wired handler: the routes and the cleanups to run at shutdown.
type wiring struct {
	server *server

	mu       sync.Mutex
	cleanups []func(context.Context) error
}

// onClose registers a cleanup to run at shutdown, in registration order.
func (a *wiring) onClose(fn func(context.Context) error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cleanups = append(a.cleanups, fn)
}

// Close runs every cleanup within ctx and joins their errors.
func (a *wiring) Close(ctx context.Context) error {
	a.mu.Lock()
	fns := append([]func(context.Context) error(nil), a.cleanups...)
	a.mu.Unlock()
	var errs []error
	for _, fn := range fns {
		errs = append(errs, fn(ctx))
	}
	return errors.Join(errs...)
}

// newApp builds the SDK clients (the only place that does), hands the app's storage to the jobs
// that use it, and registers every function. cfg.Job and cfg.JobParams are the timer job as
// resolveTimerJob settled them.
func newApp(cfg config.Config, logger *slog.Logger, o Options) (*wiring, error) {
	o = o.withDefaults()
	jobs := o.Jobs
	app := &wiring{server: newServer(logger.With("instance", cfg.InstanceID), cfg.InvocationTimeout(), newInvocationID)}
	tel, err := telemetry.New(o.TracerProvider, o.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	identity := ledger.Holder{App: cfg.AppName, Instance: cfg.InstanceID, PID: os.Getpid()}

	blobs, err := azclient.Blob(cfg.Storage, nil)
	if err != nil {
		return nil, err
	}
	// The lease gets a pipeline of its own: its own connections, so a renewal never waits
	// behind the leader's enqueue or the workers' calls in a shared pool, and no SDK retries,
	// because the lock retries each call itself with a per-try timeout that leaves several
	// tries inside the lease.
	leaseBlobs, err := azclient.Blob(cfg.Storage, &azblob.ClientOptions{ClientOptions: policy.ClientOptions{
		Transport: &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()},
		Retry:     policy.RetryOptions{MaxRetries: -1},
	}})
	if err != nil {
		return nil, err
	}
	lock, err := bloblease.NewBlobLock(leaseBlobs.ServiceClient().NewContainerClient(cfg.LeaseContainer), cfg.LeaseName,
		bloblease.BlobLockOptions{Duration: cfg.LeaseDuration, Setting: cfg.Storage.Name, Logger: logger})
	if err != nil {
		return nil, err
	}
	// The scheduler's lease is the lock; each run's planning takes a lease of its own beside it.
	leaseContainer := leaseBlobs.ServiceClient().NewContainerClient(cfg.LeaseContainer)
	runLock := func(name string) (election.Lock, error) {
		return bloblease.NewBlobLock(leaseContainer, name, bloblease.BlobLockOptions{Duration: cfg.LeaseDuration, Setting: cfg.Storage.Name, Logger: logger})
	}
	leader, err := election.NewLeader(election.LeaderConfig{Lock: lock, Locks: runLock, Identity: identity,
		LeaseDuration: cfg.LeaseDuration, StallTimeout: cfg.StallTimeout, Logger: logger, Telemetry: tel})
	if err != nil {
		return nil, err
	}
	// Graceful handover: release every lease this process holds before it exits, then send an
	// immediate check for each run it was enqueueing (before the senders close).
	var coord *coordinator.Coordinator
	app.onClose(func(ctx context.Context) error {
		if coord != nil {
			return coord.Handover(ctx)
		}
		return leader.ReleaseAll(ctx)
	})

	sender, control, closeSenders, err := newSenders(cfg)
	if err != nil {
		return nil, err
	}
	app.onClose(closeSenders)
	if err := watchBacklog(cfg, tel, o); err != nil {
		return nil, err
	}

	store := blobstore.New(blobs.ServiceClient().NewContainerClient(cfg.RunsContainer), blobstore.Options{})
	var invBlobs *azblob.Client
	if cfg.Inventory != nil {
		if invBlobs, err = azclient.Blob(*cfg.Inventory, nil); err != nil {
			return nil, fmt.Errorf("%s: %w", config.SettingInventory, err)
		}
	}
	configureBuiltins(jobs, cfg, invBlobs)
	holder := identity
	// A failed try is retried as a message scheduled on the work queue, under its job's
	// retry policy: the same way on both transports.
	// A report claim goes stale as a lease does: its aggregator renews it every third of it.
	// Jobs' limits live beside the runs, one blob each; their slots last a lease unless renewed.
	limiter, err := limit.New(limit.Config{Store: limitblob.New(blobs.ServiceClient().NewContainerClient(cfg.RunsContainer), nil),
		Holder: fmt.Sprintf("%s/%d", holder.Instance, holder.PID), Lease: cfg.LeaseDuration})
	if err != nil {
		return nil, err
	}
	worker, err := work.NewWorker(work.WorkerConfig{Store: store, Jobs: jobs, Holder: holder, MaxDeliveries: cfg.MaxDeliveries,
		Retries: sender, Logger: logger, StaleClaim: cfg.LeaseDuration, CopyTTL: cfg.LeaseDuration, Telemetry: tel,
		Limiter: limiter})
	if err != nil {
		return nil, err
	}

	heartbeat, err := heartbeatPeriod(cfg.Heartbeat)
	if err != nil {
		return nil, settingsError(err)
	}
	// A misconfigured job of the settings' schedule must not take the app down: the leader, the
	// ledger, the API and the dashboard keep working, every occurrence of it records a failed
	// run naming the setting, and a manual run of the default job is refused with the same
	// message.
	var jobErr error
	var params json.RawMessage
	if cfg.Schedule != "" {
		jobErr = jobError(jobs, cfg.Job, cfg.JobParams)
		if cfg.JobParams != "" && jobErr == nil {
			params = json.RawMessage(cfg.JobParams)
		}
	}
	if jobErr != nil {
		logger.Error("the settings' job is misconfigured: every occurrence of the schedule "+coordinator.LegacySchedule+" will record a failed run until it is fixed",
			"err", jobErr, "instance", cfg.InstanceID)
	}
	schedules, err := buildSchedules(cfg, o, jobErr, params)
	if err == nil {
		err = checkSchedules(schedules, heartbeat)
	}
	if err != nil {
		return nil, settingsError(err)
	}
	manual, manualAll, err := manualJobs(cfg, jobs, schedules)
	if err == nil {
		err = checkRunTimeouts(cfg, jobs)
	}
	if err != nil {
		return nil, settingsError(err)
	}
	deadLetters, err := deadletter.Open(cfg)
	if err != nil {
		return nil, err
	}
	app.onClose(deadLetters.Close)

	// A partition recorded timed out names its dead-lettered message, when it finds it there.
	workDeadLetters, err := deadLetters.Find(cfg.WorkQueue)
	if err != nil {
		return nil, err
	}
	coord, err = coordinator.New(coordinator.Config{
		Leader: leader, Store: store, Sender: sender, Control: control, Jobs: jobs, Finisher: worker, Identity: identity,
		Schedules: schedules, HeartbeatPeriod: heartbeat,
		BatchSize: cfg.EnqueueBatch, BatchSpread: cfg.BatchSpread, RunTimeout: cfg.RunTimeout, CheckRounds: cfg.CheckRounds, Logger: logger,
		SliceBudget: cfg.SliceBudget, MaxBacklog: cfg.MaxBacklog, DeadLetters: workDeadLetters,
		MaxManualRuns: cfg.MaxManualRuns, MaxManualRunsPerJob: cfg.MaxManualRunsPerJob, Retention: cfg.Retention,
		Telemetry: tel,
	})
	if err != nil {
		return nil, err
	}

	starter := manualGuard{Starter: coord, scheduler: coord, jobErr: jobErr, hasDefault: cfg.Schedule != "",
		allowed: manual, allowAll: manualAll, defaults: o.DefaultParams}
	f := &functions{coord: coord, starter: starter, worker: worker, leader: leader, store: store, now: time.Now}
	register(app.server, f, withSchedules(coord, heartbeat), withDeadLetters(deadLetters.List), withTraceURL(cfg.TraceURL),
		withLimits(limiter, declaredLimits(jobs, cfg.Limits)))
	return app, nil
}

// newSenders builds the work-queue and control-queue senders on the transport named by
// BATON_TRANSPORT (one Service Bus client for both) and the cleanup that closes them.
func newSenders(cfg config.Config) (work, control coordinator.Sender, closeAll func(context.Context) error, err error) {
	switch cfg.Transport {
	case config.TransportQueue:
		// The adaptive sender keeps up to MaxParallelism calls in flight: keep as many
		// connections (azcore's default client keeps 10 idle per host).
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = storagequeue.MaxParallelism
		qs, err := azclient.Queue(cfg.Storage, &azqueue.ClientOptions{ClientOptions: policy.ClientOptions{Transport: &http.Client{Transport: tr}}})
		if err != nil {
			return nil, nil, nil, err
		}
		w := storagequeue.NewQueueSender(qs.NewQueueClient(cfg.WorkQueue), storagequeue.QueueSenderOptions{})
		c := storagequeue.NewQueueSender(qs.NewQueueClient(cfg.ControlQueue), storagequeue.QueueSenderOptions{})
		return w, c, func(ctx context.Context) error { return errors.Join(w.Close(ctx), c.Close(ctx)) }, nil
	default:
		client, err := azclient.ServiceBus(cfg.ServiceBus, nil)
		if err != nil {
			return nil, nil, nil, err
		}
		var senders []*servicebus.ServiceBusSender
		for _, queue := range []string{cfg.WorkQueue, cfg.ControlQueue} {
			sb, err := client.NewSender(queue, nil)
			if err != nil {
				return nil, nil, nil, errors.Join(fmt.Errorf("%s: service bus sender for %s: %w", config.SettingServiceBus, queue, err),
					client.Close(context.Background()))
			}
			senders = append(senders, servicebus.NewServiceBusSender(sb, servicebus.ServiceBusSenderOptions{Queue: queue}))
		}
		closeAll := func(ctx context.Context) error {
			return errors.Join(senders[0].Close(ctx), senders[1].Close(ctx), client.Close(ctx))
		}
		return senders[0], senders[1], closeAll, nil
	}
}

// register wires each function to its implementation.
func register(s *server, f *functions, apiOpts ...func(*api.Config)) {
	s.addTrigger(fnTick, f.tick)
	s.addTrigger(fnWork, f.message(true))
	s.addTrigger(fnWorkQueue, f.message(false))
	s.addTrigger(fnControl, f.message(true))
	s.addTrigger(fnControlQueue, f.message(false))
	a, err := newAPI(f, apiOpts...)
	if err != nil {
		// Without a ledger and a leader the HTTP functions cannot answer anything useful.
		unavailable := func(ctx context.Context, inv *invocation, req *protocol.HTTPRequest) api.Reply {
			return errorReply(http.StatusServiceUnavailable, "unavailable", inv.Function+" is not configured: "+err.Error())
		}
		for _, fn := range []string{fnRuns, fnLeader, fnDashboard, fnSchedules, fnLimits} {
			s.addHTTP(fn, bindingRequest, unavailable)
		}
		return
	}
	s.addHTTP(fnRuns, bindingRequest, apiFunc(a.Runs))
	s.addHTTP(fnLeader, bindingRequest, apiFunc(a.Leader))
	s.addHTTP(fnDashboard, bindingRequest, apiFunc(a.Dashboard))
	s.addHTTP(fnSchedules, bindingRequest, apiFunc(a.Schedules))
	s.addHTTP(fnLimits, bindingRequest, apiFunc(a.Limits))
}

// watchBacklog reports the depth of the work and control queues as the baton.queue.backlog
// gauge where the transport can tell (the Storage queue's approximate count; Service Bus's
// needs its management rights, which the handler does not have).
func watchBacklog(cfg config.Config, tel *telemetry.Telemetry, o Options) error {
	if cfg.Transport != config.TransportQueue || o.MeterProvider == nil || !tel.On() {
		return nil
	}
	qs, err := azclient.Queue(cfg.Storage, nil)
	if err != nil {
		return err
	}
	for _, name := range []string{cfg.WorkQueue, cfg.ControlQueue} {
		q := qs.NewQueueClient(name)
		if err := tel.WatchBacklog(o.MeterProvider, name, func(ctx context.Context) (int64, error) {
			props, err := q.GetProperties(ctx, nil)
			if err != nil || props.ApproximateMessagesCount == nil {
				return 0, errors.Join(err, errors.New("no approximate count"))
			}
			return int64(*props.ApproximateMessagesCount), nil
		}); err != nil {
			return fmt.Errorf("telemetry: %w", err)
		}
	}
	return nil
}
