package devhost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/election/bloblease"
	"github.com/batonfn/baton/internal/engine/ledger/blobstore"
)

// Options configure a Host. Only AppRoot is required.
type Options struct {
	// AppRoot is the function app folder (host.json and the function folders).
	AppRoot string
	// Executable overrides host.json's defaultExecutablePath (relative paths are taken from
	// the app's working directory).
	Executable string
	// Instances is the number of emulated host instances (default 1).
	Instances int
	// SettingsFile is the settings file (default: local.settings.json, else
	// local.settings.example.json, under AppRoot).
	SettingsFile string
	// Settings override the file's Values and the environment (flags, tests).
	Settings map[string]string
	// Environ is the devhost's environment: it overrides settings Values of the same name and
	// handlers inherit it. Default os.Environ().
	Environ []string
	// HTTPAddr is where /<routePrefix>/<route> is served ("" for no HTTP front; a :0 port
	// picks a free one).
	HTTPAddr string
	// ControlAddr is the control endpoint ("" for none; a :0 port picks a free one). Start
	// announces a served one in the app's EndpointsDir until Close (see RunningHosts).
	ControlAddr string
	// AllowRemote lets HTTPAddr and ControlAddr be other than loopback addresses; without it
	// New refuses them (CheckListenAddr): neither listener checks keys.
	AllowRemote bool
	// Out receives the devhost's lines, the handlers' lines and the progress lines (default
	// discarded; every handler line is kept in memory either way, see Lines).
	Out io.Writer
	// LogLevel and HandlerLogLevel filter what reaches Out (default info for both).
	LogLevel        slog.Level
	HandlerLogLevel slog.Level
	// HandlerFilter, when set, also decides which handler lines reach Out.
	HandlerFilter func(LogLine) bool
	// ProgressInterval is how often a progress line is printed for each run in progress, every
	// run the instances report creating (default 1s; negative: never).
	ProgressInterval time.Duration
	// TimerSkew is the largest random offset of a timer fire (default DefaultTimerSkew;
	// negative: none).
	TimerSkew time.Duration
	// MaxTimerFires stops each timer after this many occurrences (0: never).
	MaxTimerFires int
	// TimerMode fires each occurrence on every running instance (TimerAll, the default) or on
	// one random running instance (TimerOne, as Azure's singleton timer does).
	TimerMode TimerMode
	// TimerSeed seeds TimerOne's choice of instance: the same seed and the same instance
	// states give the same choices. 0 picks a random seed (logged at start).
	TimerSeed int64
	// OnInvoke is called after every invocation (from many goroutines).
	OnInvoke func(InvokeRecord)
	// MaxLogLines bounds the in-memory handler log (default 200,000).
	MaxLogLines int
	// Now is the clock for payload times (default time.Now).
	Now func() time.Time
	// ControlPollingInterval: the queue named by BATON_CONTROL_QUEUE is polled by one listener
	// for the whole host, which hands each message to a random running instance, at least this
	// often (default DefaultControlPollingInterval; negative: like every other queue, a
	// listener per instance backing off to host.json's maxPollingInterval). Checks there are
	// latency-critical — a dead leader's run resumes only when its lease probe is picked up —
	// while the queue is mostly idle, and every Azurite dequeue scans all the account's
	// messages (its in-memory store indexes by account first), so per-instance fast polling
	// would load Azurite in proportion to instances × backlog.
	ControlPollingInterval time.Duration
	// Delivery is how queue messages are delivered: DeliveryQueue (the default) runs every
	// queueTrigger function as the Storage Queues extension does; DeliveryServiceBus runs every
	// serviceBusTrigger function with Service Bus's delivery semantics on the Storage queue of
	// the same name (there is no local broker), in place of the queueTrigger function on that
	// queue. See servicebus.go and docs/design.md.
	Delivery Delivery
	// LockDuration is the emulated Service Bus queue's lock duration (DeliveryServiceBus;
	// default DefaultLockDuration; whole seconds, as the Storage queue's visibility timeout).
	LockDuration time.Duration
	// DuplicateWindow is the emulated queue's duplicate detection history window
	// (DeliveryServiceBus; default DefaultDuplicateWindow).
	DuplicateWindow time.Duration
	// MessageLease is how long a queue listener keeps a message it dequeued invisible, renewed
	// at half of it while the invocation runs (default MessageLease, the Storage Queues
	// extension's 10 minutes; whole seconds). A message whose host died (or whose dequeue's
	// answer was lost) comes back after it.
	MessageLease time.Duration
	// SkipConfigCheck skips validating the settings with Baton's config.Load: for a handler
	// that is not Baton (tests). It also turns the progress line off.
	SkipConfigCheck bool
}

// Host is the running emulation: N instances of one app.
type Host struct {
	opts     Options
	app      *App
	settings *Settings
	log      *slog.Logger
	out      io.Writer
	outMu    sync.Mutex
	book     *logBook
	client   *http.Client
	baseEnv  []string
	exe      string
	args     []string
	workDir  string
	cfg      config.Config
	started  time.Time

	instances []*Instance
	timers    []*timerTrigger
	queues    []*queueTrigger
	routes    []*route
	progress  *progressWatcher

	superCtx, trigCtx, workCtx    context.Context
	superStop, trigStop, workStop context.CancelFunc
	superWG, trigWG, workWG       sync.WaitGroup
	httpSrv, ctlSrv               *http.Server
	httpURL, ctlURL               string
	announced                     string // the Endpoint file Start wrote
	closeOnce                     sync.Once

	mu       sync.Mutex
	fires    []TimerFire
	poisoned []string
	signals  []Signal
	strikes  []Strike
	changed  chan struct{}
}

// Signal is a signal the host sent a handler process as chaos (Kill, Term, Pause, ...).
type Signal struct {
	Instance string
	PID      int
	Signal   syscall.Signal
	At       time.Time // just before it was sent
}

// New reads the app and its settings, checks that the handler's configuration is valid (with
// the handler's own config.Load) and that the handler binary exists. No process starts yet.
func New(opts Options) (*Host, error) {
	if opts.AppRoot == "" {
		opts.AppRoot = "."
	}
	if opts.Instances <= 0 {
		opts.Instances = 1
	}
	if opts.Environ == nil {
		opts.Environ = os.Environ()
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.ProgressInterval == 0 {
		opts.ProgressInterval = time.Second
	}
	switch {
	case opts.TimerSkew == 0:
		opts.TimerSkew = DefaultTimerSkew
	case opts.TimerSkew < 0:
		opts.TimerSkew = 0
	}
	if opts.ControlPollingInterval == 0 {
		opts.ControlPollingInterval = DefaultControlPollingInterval
	}
	if opts.MaxLogLines <= 0 {
		opts.MaxLogLines = 200_000
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	mode, err := ParseTimerMode(string(opts.TimerMode))
	if err != nil {
		return nil, fmt.Errorf("Options.TimerMode: %w", err)
	}
	opts.TimerMode = mode
	delivery, err := ParseDelivery(string(opts.Delivery))
	if err != nil {
		return nil, fmt.Errorf("Options.Delivery: %w", err)
	}
	opts.Delivery = delivery
	for _, l := range []struct{ option, addr string }{{"HTTPAddr", opts.HTTPAddr}, {"ControlAddr", opts.ControlAddr}} {
		if l.addr == "" {
			continue
		}
		if err := CheckListenAddr(l.option, l.addr, opts.AllowRemote); err != nil {
			return nil, err
		}
	}
	if opts.LockDuration <= 0 {
		opts.LockDuration = DefaultLockDuration
	}
	opts.LockDuration = max(opts.LockDuration.Round(time.Second), time.Second)
	if opts.MessageLease <= 0 {
		opts.MessageLease = MessageLease
	}
	opts.MessageLease = max(opts.MessageLease.Round(time.Second), 2*time.Second)
	if opts.DuplicateWindow <= 0 {
		opts.DuplicateWindow = DefaultDuplicateWindow
	}
	if opts.TimerSeed == 0 {
		opts.TimerSeed = rand.Int64()
	}
	app, err := LoadApp(opts.AppRoot)
	if err != nil {
		return nil, err
	}
	settings, err := LoadSettings(app.Root, opts.SettingsFile, opts.Environ, opts.Settings)
	if err != nil {
		return nil, err
	}
	h := &Host{opts: opts, app: app, settings: settings, out: opts.Out, book: newLogBook(opts.MaxLogLines),
		baseEnv: opts.Environ, changed: make(chan struct{})}
	h.log = slog.New(newLineHandler(&lockedWriter{h: h}, opts.LogLevel))
	h.client = &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}}

	// The binary, as the host resolves it: %VAR% expanded, relative to the working directory.
	h.workDir = app.Root
	if wd := app.Host.WorkingDirectory; wd != "" {
		if !filepath.IsAbs(wd) {
			wd = filepath.Join(app.Root, wd)
		}
		h.workDir = wd
	}
	exe := opts.Executable
	if exe == "" {
		exe = expandVars(app.Host.Executable, settings)
	}
	if !filepath.IsAbs(exe) {
		exe = filepath.Join(h.workDir, exe)
	}
	if st, err := os.Stat(exe); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("handler binary %s (host.json customHandler.description.defaultExecutablePath) is missing or not executable: build it first (make build)", exe)
	}
	h.exe = exe
	for _, a := range app.Host.Arguments {
		h.args = append(h.args, expandVars(a, settings))
	}

	// The handler validates the same settings at start-up; fail here with its message.
	if !opts.SkipConfigCheck {
		probe := h.instanceEnv("instance-1", 7071)
		cfg, err := config.Load(func(k string) string { return probe[k] })
		if err != nil {
			return nil, fmt.Errorf("the handler would refuse these settings:\n%w", err)
		}
		h.cfg = cfg
	}

	for _, fn := range app.Functions {
		if err := h.prepare(fn); err != nil {
			return nil, err
		}
	}
	sortRoutes(h.routes)
	return h, nil
}

// instanceEnv is the environment an instance's handler sees, as a map (for config.Load).
func (h *Host) instanceEnv(name string, port int) map[string]string {
	env := map[string]string{}
	for _, kv := range h.settings.Environ(h.baseEnv, map[string]string{
		config.SettingPort: strconv.Itoa(port), config.SettingAppRoot: h.app.Root, config.SettingInstanceID: name,
	}) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return env
}

// expandVars replaces %VAR% with the setting or environment variable (unset: empty), as the
// host does for defaultExecutablePath and arguments.
func expandVars(s string, settings *Settings) string {
	return settingRef.ReplaceAllStringFunc(s, func(m string) string {
		name := m[1 : len(m)-1]
		if v, ok := settings.Lookup(name); ok {
			return v
		}
		return os.Getenv(name)
	})
}

// prepare sets up the trigger of one function.
func (h *Host) prepare(fn *Function) error {
	b := fn.Trigger()
	if h.opts.Delivery == DeliveryServiceBus && strings.EqualFold(b.Type, "serviceBusTrigger") && !fn.Disabled {
		q, err := newServiceBusTrigger(h, fn)
		if err != nil {
			return err
		}
		h.queues = append(h.queues, q)
		return nil
	}
	if fn.Disabled || h.settings.Disabled(fn.Name) {
		h.log.Info("function disabled", "function", fn.Name, "trigger", b.Type,
			"by", "AzureWebJobs."+fn.Name+".Disabled")
		return nil
	}
	switch strings.ToLower(b.Type) {
	case "timertrigger":
		t, err := newTimerTrigger(h, fn)
		if err != nil {
			return err
		}
		h.timers = append(h.timers, t)
	case "queuetrigger":
		if sb := h.serviceBusTwin(fn); sb != nil {
			h.log.Info("function replaced by the Service Bus delivery mode", "function", fn.Name, "by", sb.Name)
			return nil
		}
		q, err := newQueueTrigger(h, fn)
		if err != nil {
			return err
		}
		h.queues = append(h.queues, q)
	case "httptrigger":
		r, err := newRoute(fn, h.settings)
		if err != nil {
			return err
		}
		h.routes = append(h.routes, r)
	case "servicebustrigger":
		h.log.Warn("Service Bus trigger is not emulated (no local broker): the function will not be invoked; disable it with AzureWebJobs."+fn.Name+".Disabled=true",
			"function", fn.Name, "connectionSet", h.settings.Get(orDefault(b.Prop("connection"), "AzureWebJobsServiceBus")) != "")
	default:
		h.log.Warn("trigger type not emulated: the function will not be invoked", "function", fn.Name, "trigger", b.Type)
	}
	return nil
}

func orDefault(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

// Start launches every instance, waits until all answer GET /, then starts the triggers, the
// HTTP front, the control endpoint and the progress line.
func (h *Host) Start(ctx context.Context) error {
	h.started = h.now()
	h.superCtx, h.superStop = context.WithCancel(context.Background())
	h.trigCtx, h.trigStop = context.WithCancel(context.Background())
	h.workCtx, h.workStop = context.WithCancel(context.Background())

	if h.settings.Source != "" {
		h.log.Info("settings", "file", h.settings.Source, "overriddenByEnvironment", strings.Join(h.settings.Skipped, ","))
	}
	if rt := h.settings.Get("FUNCTIONS_WORKER_RUNTIME"); rt != "" && !strings.EqualFold(rt, "custom") {
		h.log.Warn("FUNCTIONS_WORKER_RUNTIME is not custom: the real host would not start a custom handler", "value", rt)
	}
	if h.app.Host.ForwardHTTP {
		h.log.Warn("customHandler.enableForwardingHttpRequest is not emulated: HTTP functions get the JSON payload")
	}
	h.log.Info("starting instances", "n", h.opts.Instances, "handler", h.exe, "functionTimeout", h.app.Host.FunctionTimeout.String())
	for i := 1; i <= h.opts.Instances; i++ {
		in := newInstance(h, i)
		h.instances = append(h.instances, in)
		h.superWG.Add(1)
		go func() {
			defer h.superWG.Done()
			in.supervise(h.superCtx)
		}()
	}
	for _, in := range h.instances {
		wctx, cancel := context.WithTimeout(ctx, ReadyTimeout+10*time.Second)
		err := in.WaitState(wctx, StateRunning, StateFailed)
		cancel()
		if st, _ := in.State(); err != nil || st != StateRunning {
			_ = h.Close(context.Background())
			return fmt.Errorf("%s did not become ready (see its output above): %v", in.name, errOr(err, "state "+string(st)))
		}
	}

	for _, t := range h.timers {
		h.log.Info("timer mode", "function", t.fn.Name, "mode", string(h.opts.TimerMode), "seed", h.opts.TimerSeed)
		tctx, stop := context.WithCancel(h.trigCtx)
		t.stop, t.done = stop, make(chan struct{})
		h.goTrigger(func(context.Context) {
			defer close(t.done)
			defer stop()
			t.run(tctx)
		})
	}
	for _, q := range h.queues {
		if q.sb != nil {
			h.log.Info("Service Bus delivery on a Storage queue", "function", q.fn.Name, "queue", q.name,
				"lockDuration", h.opts.LockDuration.String(), "maxAutoLockRenewalDuration", q.sb.renewFor.String(),
				"maxDeliveryCount", q.opts.MaxDequeueCount, "duplicateWindow", h.opts.DuplicateWindow.String(),
				"maxConcurrentCalls", q.opts.BatchSize+q.opts.NewBatchThreshold, "deadLetterQueue", q.name+PoisonSuffix,
				"oneListenerForAllInstances", q.shared)
		} else {
			h.log.Info("queue listener", "function", q.fn.Name, "queue", q.name, "batchSize", q.opts.BatchSize,
				"newBatchThreshold", q.opts.NewBatchThreshold, "maxDequeueCount", q.opts.MaxDequeueCount,
				"visibilityTimeout", q.opts.VisibilityTimeout.String(), "maxPollingInterval", q.opts.MaxPollingInterval.String(),
				"oneListenerForAllInstances", q.shared)
		}
		if q.shared {
			h.goTrigger(q.listenShared)
			continue
		}
		for _, in := range h.instances {
			h.goTrigger(func(ctx context.Context) { q.listen(ctx, in) })
		}
	}
	if h.opts.HTTPAddr != "" && len(h.routes) > 0 {
		url, srv, err := serve("HTTPAddr", h.opts.HTTPAddr, h)
		if err != nil {
			_ = h.Close(context.Background())
			return fmt.Errorf("http front: %w", err)
		}
		if !loopbackListen(h.opts.HTTPAddr) {
			h.log.Warn("the HTTP front listens beyond loopback (AllowRemote): it checks no keys", "addr", h.opts.HTTPAddr)
		}
		h.httpURL, h.httpSrv = url, srv
		for _, r := range h.routes {
			methods := make([]string, 0, len(r.methods))
			for m := range r.methods {
				methods = append(methods, m)
			}
			sort.Strings(methods)
			h.log.Info("http function", "function", r.fn.Name, "url", url+"/"+joinPath(h.app.Host.RoutePrefix, r.template),
				"methods", strings.Join(methods, ","), "authLevel", r.auth+" (no key needed locally, as with Core Tools)")
		}
	}
	if h.opts.ControlAddr != "" {
		url, srv, err := serve("ControlAddr", h.opts.ControlAddr, h.controlHandler())
		if err != nil {
			_ = h.Close(context.Background())
			return fmt.Errorf("control endpoint: %w", err)
		}
		h.ctlURL, h.ctlSrv = url, srv
		if !loopbackListen(h.opts.ControlAddr) {
			h.log.Warn("the control endpoint listens beyond loopback (AllowRemote): it checks no keys and can kill instances", "addr", h.opts.ControlAddr)
		}
		file, err := h.announce()
		if err != nil {
			_ = h.Close(context.Background())
			return fmt.Errorf("control endpoint: announce it in %s: %w", EndpointsDir, err)
		}
		h.announced = file
		h.log.Info("control endpoint", "url", url, "announced", file, "try", "GET /instances, POST /instances/instance-2/kill (kill|term|stop|cont|restart)")
	}
	if h.opts.ProgressInterval > 0 && !h.opts.SkipConfigCheck {
		if err := h.startProgress(); err != nil {
			h.log.Warn("progress line disabled", "err", err)
		}
	}
	return nil
}

func errOr(err error, s string) string {
	if err != nil {
		return err.Error()
	}
	return s
}

func joinPath(prefix, p string) string {
	if prefix == "" {
		return p
	}
	return prefix + "/" + p
}

func (h *Host) startProgress() error {
	blobs, err := azclient.Blob(h.cfg.Storage, nil)
	if err != nil {
		return err
	}
	svc := blobs.ServiceClient()
	h.progress = &progressWatcher{store: blobstore.New(svc.NewContainerClient(h.cfg.RunsContainer), blobstore.Options{}),
		leases: svc.NewContainerClient(h.cfg.LeaseContainer),
		opts:   bloblease.BlobLockOptions{Duration: h.cfg.LeaseDuration, Logger: slog.New(slog.DiscardHandler)}}
	h.Subscribe(h.progress.track)
	for _, l := range h.Lines() { // a run created before the subscription
		h.progress.track(l)
	}
	h.goTrigger(func(ctx context.Context) { h.watchProgress(ctx, h.progress, h.opts.ProgressInterval) })
	return nil
}

func (h *Host) goTrigger(fn func(context.Context)) {
	h.trigWG.Add(1)
	go func() {
		defer h.trigWG.Done()
		fn(h.trigCtx)
	}()
}

// goWork runs fn (an invocation and its bookkeeping) on the work context, which outlives the
// triggers so that in-flight messages are settled at shutdown.
func (h *Host) goWork(fn func(context.Context)) {
	h.workWG.Add(1)
	go func() {
		defer h.workWG.Done()
		fn(h.workCtx)
	}()
}

// DrainTimeout bounds how long Close waits for in-flight invocations.
const DrainTimeout = 10 * time.Second

// Close stops the triggers, lets in-flight invocations finish (up to DrainTimeout), then stops
// every handler with SIGTERM (SIGKILL after a grace period). It is safe to call more than once.
func (h *Host) Close(ctx context.Context) error {
	var errs []error
	h.closeOnce.Do(func() {
		if h.trigStop == nil {
			return
		}
		h.log.Info("stopping")
		if h.announced != "" {
			_ = os.Remove(h.announced)
		}
		h.trigStop()
		for _, srv := range []*http.Server{h.httpSrv, h.ctlSrv} {
			if srv != nil {
				sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_ = srv.Shutdown(sctx)
				cancel()
			}
		}
		h.trigWG.Wait()
		drained := make(chan struct{})
		go func() { h.workWG.Wait(); close(drained) }()
		select {
		case <-drained:
		case <-time.After(DrainTimeout):
			h.log.Warn("in-flight invocations still running; failing them", "inFlight", len(h.InFlight()))
		case <-ctx.Done():
		}
		h.superStop()
		h.superWG.Wait()
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, in := range h.instances {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := in.stop(ctx, termGrace); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s: %w", in.name, err))
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		h.workStop()
		h.workWG.Wait()
		h.log.Info("stopped", "instances", len(h.instances))
	})
	return errors.Join(errs...)
}

func (h *Host) now() time.Time { return h.opts.Now() }

// handlerLine records a handler output line and shows it when the filters allow.
func (h *Host) handlerLine(l LogLine) {
	h.book.add(l)
	if levelOf(l.Level) < h.opts.HandlerLogLevel {
		return
	}
	if h.opts.HandlerFilter != nil && !h.opts.HandlerFilter(l) {
		return
	}
	h.write(formatLine(l) + "\n")
}

func (h *Host) progressLine(p Progress) {
	h.write(time.Now().Format("15:04:05.000") + " " + fmt.Sprintf("%-10s ", "devhost") + p.Line() + "\n")
}

func (h *Host) write(s string) {
	h.outMu.Lock()
	defer h.outMu.Unlock()
	_, _ = io.WriteString(h.out, s)
}

// lockedWriter serialises the devhost's own lines with the handler lines.
type lockedWriter struct{ h *Host }

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.h.outMu.Lock()
	defer w.h.outMu.Unlock()
	return w.h.out.Write(p)
}

func (h *Host) recordFire(f TimerFire) {
	h.mu.Lock()
	h.fires = append(h.fires, f)
	close(h.changed)
	h.changed = make(chan struct{})
	h.mu.Unlock()
}

func (h *Host) notePoison(queue, id string) {
	h.mu.Lock()
	h.poisoned = append(h.poisoned, queue+"/"+id)
	close(h.changed)
	h.changed = make(chan struct{})
	h.mu.Unlock()
}

func (h *Host) resumed(in *Instance) {
	for _, t := range h.timers {
		t.resumed(in)
	}
}

// Instances lists the instances.
func (h *Host) Instances() []InstanceInfo {
	out := make([]InstanceInfo, 0, len(h.instances))
	for _, in := range h.instances {
		out = append(out, in.Info())
	}
	return out
}

// Instance returns the named instance ("instance-2"), or nil.
func (h *Host) Instance(name string) *Instance {
	for _, in := range h.instances {
		if in.name == name {
			return in
		}
	}
	return nil
}

// InFlight lists the invocations in flight on every instance, oldest first.
func (h *Host) InFlight() []Invocation {
	var out []Invocation
	for _, in := range h.instances {
		in.mu.Lock()
		for _, inv := range in.inflight {
			out = append(out, *inv)
		}
		in.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	return out
}

// Fires lists the timer occurrences fired so far.
func (h *Host) Fires() []TimerFire {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]TimerFire(nil), h.fires...)
}

// Signals lists the chaos signals sent to handler processes, in order. A process killed with
// SIGKILL may have done things (taken or released a lease) it did not live to log.
func (h *Host) Signals() []Signal {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Signal(nil), h.signals...)
}

func (h *Host) recordSignal(s Signal) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.signals = append(h.signals, s)
}

// Poisoned lists the messages moved to a poison queue ("<queue>/<message id>").
func (h *Host) Poisoned() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.poisoned...)
}

// WaitFires blocks until at least n timer occurrences were fired.
func (h *Host) WaitFires(ctx context.Context, n int) ([]TimerFire, error) {
	for {
		h.mu.Lock()
		got, ch := len(h.fires), h.changed
		h.mu.Unlock()
		if got >= n {
			return h.Fires(), nil
		}
		select {
		case <-ctx.Done():
			return h.Fires(), fmt.Errorf("wait for %d timer fires (have %d): %w", n, got, ctx.Err())
		case <-ch:
		}
	}
}

// Lines returns every handler line kept so far.
func (h *Host) Lines() []LogLine { return h.book.snapshot() }

// WaitLine returns the first handler line (from the start) for which match is true.
func (h *Host) WaitLine(ctx context.Context, match func(LogLine) bool) (LogLine, error) {
	return h.book.wait(ctx, match)
}

// Subscribe calls fn with every new handler line, synchronously on the reading goroutine (keep
// it short); the returned func unsubscribes.
func (h *Host) Subscribe(fn func(LogLine)) func() { return h.book.subscribe(fn) }

// HTTPURL is the base URL of the HTTP front ("" when not serving).
func (h *Host) HTTPURL() string { return h.httpURL }

// ControlURL is the base URL of the control endpoint ("" when not serving).
func (h *Host) ControlURL() string { return h.ctlURL }

// Settings returns the effective app settings.
func (h *Host) Settings() map[string]string { return h.settings.Map() }

// Config is the handler configuration the settings produce (config.Load on instance-1's
// environment).
func (h *Host) Config() config.Config { return h.cfg }

// App returns the app as read.
func (h *Host) App() *App { return h.app }

// StopTimers stops every timer trigger: no occurrence fires after it returns (fires already
// under way complete). The instances and every other trigger keep running.
func (h *Host) StopTimers() {
	for _, t := range h.timers {
		if t.done == nil {
			continue // not started
		}
		t.stop()
		<-t.done
		h.log.Info("timer stopped", "function", t.fn.Name)
	}
}

// Runs lists the runs the instances reported creating, oldest first.
func (h *Host) Runs() []string {
	if h.progress == nil {
		return nil
	}
	return h.progress.tracked()
}

// RunProgress reads one run's progress now.
func (h *Host) RunProgress(ctx context.Context, run string) (Progress, bool, error) {
	if h.progress == nil {
		return Progress{}, false, errors.New("progress is disabled")
	}
	return h.progress.readRun(ctx, run)
}
