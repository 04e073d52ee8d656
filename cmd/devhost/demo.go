package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/blobstore"
	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/internal/tools/devhost"
)

// demoLines are the handler messages the demo shows (warnings and errors always show, but for
// the heartbeat's echo of the records the coordinator logs itself).
var demoLines = map[string]bool{
	"run created": true, "heartbeat: occurrence decided": true, "planning the run": true, "check: planning the run's next slice": true,
	"check: enqueue in progress under another leader": true, "check scheduled": true,
	"run enqueued": true, "run finished": true,
}

// demoLine decides which handler lines the demo shows: the run's story, the leases of runs
// (not the scheduler's, taken and released on every heartbeat of every instance), and
// warnings and errors.
func demoLine(l devhost.LogLine) bool {
	switch {
	case l.Msg == "heartbeat: occurrence recorded":
		return false // the coordinator's "occurrence recorded" says it with the reason
	case l.Level == "WARN" || l.Level == "ERROR" || l.Stderr:
		return true
	case l.Msg == "leadership acquired" || l.Msg == "leadership released":
		return l.Str("lease") != ""
	}
	return demoLines[l.Msg]
}

// Demo defaults: the heartbeat beats every two seconds (in Azure, every minute), and the
// schedule the demo fires gets an expression that fires at one second of every minute, about
// demoLead after the demo starts the instances.
const (
	demoHeartbeat = "*/2 * * * * *"
	demoLead      = 12 * time.Second
)

func demoCmd(ctx context.Context, args []string, out io.Writer) error {
	// The demo's lines and the local host's (from many goroutines) share out.
	out = &syncWriter{w: out}
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	app := fs.String("app", ".", "function app folder")
	exe := fs.String("exe", "", "handler binary to run as is (default: build -pkg into host.json's defaultExecutablePath)")
	pkg := fs.String("pkg", ".", "main package of the app, built when -exe is not given")
	n := fs.Int("n", 3, "number of host instances")
	blobs := fs.Int("blobs", 3000, "blobs to seed (-job inventory)")
	bad := fs.Int("bad", 7, "seeded blobs with a wrong Content-MD5 (-job inventory)")
	heartbeat := fs.String("heartbeat", demoHeartbeat, "BATON_HEARTBEAT, the Tick timer (six-field NCRONTAB, UTC)")
	schedule := fs.String("schedule", "", "the schedule to fire (default: the settings' schedule tick with -job or -params, else the app's first schedule, else tick)")
	cron := fs.String("cron", "", "the expression the demo gives that schedule (default: one second of every minute, about 12 s from the start)")
	job := fs.String("job", "", "run this job on the schedule tick (BATON_SCHEDULE, BATON_JOB); inventory seeds a container for it, and falls back to synthetic when the handler does not know it")
	params := fs.String("params", "", "the params of the schedule tick's job, JSON (BATON_JOB_PARAMS)")
	verbose := fs.Bool("v", false, "show every handler line")
	limit := fs.Duration("timeout", 3*time.Minute, "give up after this long (after the build)")
	seedFrom := seedDirs{}
	fs.Var(seedFrom, "seed", "upload the files under DIR into CONTAINER of the started Azurite first, CONTAINER=DIR (repeatable)")
	control := fs.String("control", controlDefault(), controlFlagHelp)
	allowRemote := fs.Bool("allow-remote", false, "let -control listen on an address other than loopback (it checks no keys)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := checkListen("", *control, *allowRemote); err != nil {
		return err
	}
	// The build comes first: -timeout bounds the demo, not a cold build of the app.
	handler, err := handlerBinary(ctx, *app, *exe, *pkg, out)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *limit)
	defer cancel()
	d := &demo{out: out, start: time.Now(), verbose: *verbose, control: *control, allowRemote: *allowRemote,
		app: *app, ticks: map[string]devhost.InvokeRecord{}}

	d.say("Starting the pinned Azurite (npm package in node_modules; in memory, free ports)…")
	srv, err := azurite.Start(ctx, azurite.Options{})
	if err != nil {
		return err
	}
	defer func() {
		srv.Stop()
		d.say("Azurite stopped.")
	}()
	d.say("Azurite ready: blob 127.0.0.1:%d, queue 127.0.0.1:%d.", srv.BlobPort, srv.QueuePort)

	settings := map[string]string{
		config.SettingHostStorage:       srv.ConnectionString(),
		config.SettingTransport:         string(config.TransportQueue),
		config.SettingHeartbeat:         *heartbeat,
		config.SettingLeaseDuration:     "15s",
		"AzureWebJobs.Work.Disabled":    "true",
		"AzureWebJobs.Control.Disabled": "true",
		"FUNCTIONS_WORKER_RUNTIME":      "custom",
	}
	if err := toStartedAzurite(*app, "", srv.ConnectionString(), settings); err != nil {
		return err
	}
	if len(seedFrom) > 0 {
		client, err := azblob.NewClientFromConnectionString(srv.ConnectionString(), nil)
		if err != nil {
			return err
		}
		n, err := uploadDirs(ctx, client, seedFrom)
		if err != nil {
			return err
		}
		d.say("Seeded %d files: %s.", n, seedFrom)
	}
	if *job != "" {
		settings[config.SettingJob] = *job
	}
	if *params != "" {
		settings[config.SettingJobParams] = *params
	}
	var seeded seedResult
	if *job == "inventory" {
		if seeded, err = d.seedInventory(ctx, srv, *blobs, *bad); err != nil {
			return err
		}
		if *params == "" {
			settings[config.SettingJobParams] = fmt.Sprintf(`{"container":%q,"partitionSize":200}`, demoContainer)
		}
	}

	d.fired = *schedule
	if d.fired == "" {
		if d.fired, err = d.pickSchedule(ctx, *app, handler, settings, *job != "" || *params != ""); err != nil {
			return err
		}
	}
	d.cron = *cron
	if d.cron == "" {
		d.cron = fmt.Sprintf("%d * * * * *", time.Now().Add(demoLead).Second())
	}
	if err := d.fire(*app, settings); err != nil {
		return err
	}

	h, err := d.startHost(ctx, *app, handler, *n, settings)
	if errors.Is(err, errUnknownJob) && *job == "inventory" {
		d.say("The handler does not register the %q job yet (%v): running the synthetic job instead (200 partitions of 15 ms).", *job, err)
		settings[config.SettingJob] = "synthetic"
		settings[config.SettingJobParams] = `{"partitions":200,"workMs":15}`
		h, err = d.startHost(ctx, *app, handler, *n, settings)
	}
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := h.Close(cctx); err != nil {
			d.say("stopping instances: %v", err)
		} else {
			d.say("All %d handler processes stopped.", *n)
		}
	}()
	return d.run(ctx, h, seeded)
}

// demoContainer is the container the inventory demo seeds and lists.
const demoContainer = "demo-data"

// seedInventory fills demoContainer with blobs for the inventory job, bad of them with a wrong
// Content-MD5.
func (d *demo) seedInventory(ctx context.Context, srv *azurite.Server, blobs, bad int) (seedResult, error) {
	const container = demoContainer
	client, err := azblob.NewClientFromConnectionString(srv.ConnectionString(), &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64}}}})
	if err != nil {
		return seedResult{}, err
	}
	t0 := time.Now()
	seeded, err := seed(ctx, client, container, blobs, bad)
	if err != nil {
		return seedResult{}, err
	}
	d.say("Seeded %s: %d blobs, %d bytes (%s), Content-MD5 set on all, wrong on %d: %s (%.1fs).",
		container, seeded.Blobs, seeded.Bytes, countsText(seeded.ByType), len(seeded.WrongMD5),
		strings.Join(seeded.WrongMD5, ", "), time.Since(t0).Seconds())
	return seeded, nil
}

type demo struct {
	out         io.Writer
	start       time.Time
	verbose     bool
	control     string // the control endpoint's address
	allowRemote bool
	app         string
	// fired is the schedule the demo fires, at each occurrence of cron.
	fired, cron string

	mu    sync.Mutex
	ticks map[string]devhost.InvokeRecord // the Tick invocations, by invocation ID
}

// errUnknownJob: the handler refused to start because it does not know the job.
var errUnknownJob = errors.New("unknown job")

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, "%s %-10s %s\n", time.Now().Format("15:04:05.000"), "demo", fmt.Sprintf(format, args...))
}

func countsText(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
	}
	return strings.Join(parts, ", ")
}

// validatedScheduleRE matches one schedule in the list `<app> validate` prints.
var validatedScheduleRE = regexp.MustCompile(`(?:schedules: |, )([a-z][a-z0-9-]*) \("`)

// pickSchedule chooses the schedule the demo fires when -schedule names none: the settings'
// schedule tick when the demo was given its job or params, else the first schedule the app
// declares, as the handler's own `validate` lists them (the app's, then tick), else tick.
func (d *demo) pickSchedule(ctx context.Context, app, exe string, settings map[string]string, tick bool) (string, error) {
	if tick {
		return coordinator.LegacySchedule, nil
	}
	all, err := devhost.LoadSettings(app, "", os.Environ(), settings)
	if err != nil {
		return "", err
	}
	root, err := filepath.Abs(app)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, exe, "validate")
	cmd.Env = os.Environ()
	for k, v := range all.Map() {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, config.SettingAppRoot+"="+root)
	b, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s validate: %w\n%s", filepath.Base(exe), err, strings.TrimSpace(string(b)))
	}
	if m := validatedScheduleRE.FindStringSubmatch(string(b)); m != nil {
		return m[1], nil
	}
	return coordinator.LegacySchedule, nil
}

// fire makes d.fired fire at each occurrence of d.cron, one run at a time (overlap skip): the
// schedule tick through BATON_SCHEDULE (with BATON_JOB and BATON_JOB_PARAMS), a schedule the
// app declares through its BATON_SCHEDULES entry, merged into the settings' own.
func (d *demo) fire(app string, settings map[string]string) error {
	if d.fired == coordinator.LegacySchedule {
		settings[config.SettingSchedule] = d.cron
		settings[config.SettingOverlap] = string(config.OverlapSkip)
		return nil
	}
	all, err := devhost.LoadSettings(app, "", os.Environ(), settings)
	if err != nil {
		return err
	}
	overrides := map[string]map[string]any{}
	if v := strings.TrimSpace(all.Get(config.SettingSchedules)); v != "" {
		if err := json.Unmarshal([]byte(v), &overrides); err != nil {
			return fmt.Errorf("%s is not a JSON object of schedules: %w", config.SettingSchedules, err)
		}
	}
	o := overrides[d.fired]
	if o == nil {
		o = map[string]any{}
	}
	o["cron"], o["overlap"], o["paused"] = d.cron, string(config.OverlapSkip), false
	overrides[d.fired] = o
	b, err := json.Marshal(overrides)
	if err != nil {
		return err
	}
	settings[config.SettingSchedules] = string(b)
	return nil
}

func (d *demo) startHost(ctx context.Context, app, exe string, n int, settings map[string]string) (*devhost.Host, error) {
	level := slog.LevelInfo
	if d.verbose {
		level = slog.LevelDebug
	}
	h, err := devhost.New(devhost.Options{
		AppRoot: app, Executable: exe, Instances: n, Settings: settings,
		HTTPAddr: "127.0.0.1:0", ControlAddr: d.control, AllowRemote: d.allowRemote, Out: d.out, LogLevel: level, HandlerLogLevel: level,
		// Every instance's timer fires at the same instant: the race for the scheduler lease shows.
		TimerSkew: -1,
		HandlerFilter: func(l devhost.LogLine) bool {
			if l.Instance == "preflight" {
				return d.verbose
			}
			return d.verbose || demoLine(l)
		},
		OnInvoke: func(r devhost.InvokeRecord) {
			if r.Function == tickFunction {
				d.mu.Lock()
				d.ticks[r.ID] = r
				d.mu.Unlock()
			}
		},
	})
	if err != nil {
		return nil, flagError(err)
	}
	how := fmt.Sprintf("%s=%s", config.SettingSchedules, settings[config.SettingSchedules])
	if d.fired == coordinator.LegacySchedule {
		job := "the app's only job"
		if all, err := devhost.LoadSettings(app, "", os.Environ(), settings); err == nil && all.Get(config.SettingJob) != "" {
			job = all.Get(config.SettingJob) + " " + all.Get(config.SettingJobParams)
		}
		how = fmt.Sprintf("%s=%q of %s", config.SettingSchedule, d.cron, job)
	}
	d.say("Starting %d instances of %s (heartbeat %q, lease %s); the demo fires the schedule %s at %q (%s).",
		n, filepath.Base(exe), settings[config.SettingHeartbeat], settings[config.SettingLeaseDuration], d.fired, d.cron, how)
	// One handler first: a bad setting shows once instead of three times per instance.
	if err := h.Preflight(ctx); err != nil {
		if strings.Contains(err.Error(), "unknown job") {
			return nil, fmt.Errorf("%w: %v", errUnknownJob, err)
		}
		return nil, err
	}
	if err := h.Start(ctx); err != nil {
		return nil, flagError(err)
	}
	if u := h.ControlURL(); u != "" {
		d.say("Control endpoint %s, which devhost ctl -app %s finds (list | inflight | <instance> kill|term|stop|cont|restart).", u, d.app)
	}
	return h, nil
}

// tickFunction is the timer function whose every invocation is a heartbeat.
const tickFunction = "Tick"

// heartbeatOutcome is what one instance's Tick did on the heartbeat that started the run.
func heartbeatOutcome(l devhost.LogLine) string {
	switch l.Msg {
	case "heartbeat: the scheduler lease is held; its holder decides every schedule":
		return fmt.Sprintf("found the scheduler lease held by %s (epoch %s): its holder decides every schedule", l.Str("leader"), l.Str("leaderEpoch"))
	case "heartbeat: schedules decided":
		return fmt.Sprintf("took the scheduler lease (epoch %s) once it was free, and found nothing left to decide (%s decisions)", l.Str("epoch"), l.Str("decisions"))
	}
	return ""
}

func (d *demo) run(ctx context.Context, h *devhost.Host, seeded seedResult) error {
	d.say("Every instance's Tick timer beats on the heartbeat; on each beat the instances race for the scheduler lease and the winner decides every schedule's due occurrences. A run's planning then takes the run's own lease, wherever its start check is delivered.")
	created, err := h.WaitLine(ctx, func(l devhost.LogLine) bool {
		return l.Msg == "run created" && l.Str("schedule") == d.fired && l.Str("trigger") == "timer"
	})
	if err != nil {
		return fmt.Errorf("the schedule %s started no run: %w", d.fired, err)
	}
	run := created.Str("run")
	decided, err := h.WaitLine(ctx, func(l devhost.LogLine) bool { return l.Msg == "heartbeat: occurrence decided" && l.Str("run") == run })
	if err != nil {
		return fmt.Errorf("no heartbeat reported starting %s: %w", run, err)
	}
	d.say("Heartbeat: %s won the scheduler lease (epoch %s) and started %s, the occurrence %s of %s.",
		decided.Instance, decided.Str("epoch"), run, decided.Str("occurrence"), d.fired)
	// The run needs no heartbeat: its start check, work messages and checks carry it. Later
	// heartbeats would only contend with the run for Azurite, which serves one request at a time.
	h.StopTimers()
	d.say("The demo stops the heartbeats now (in Azure they beat every minute); the run goes on by its own messages.")

	// Progress is printed by the devhost every second; wait for the run to end.
	var p devhost.Progress
	for {
		var ok bool
		p, ok, err = h.RunProgress(ctx, run)
		if err == nil && ok && p.State.Final() {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("run %s did not finish in time (last: %s): %w", run, p.Line(), ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	time.Sleep(1200 * time.Millisecond) // let the devhost print its final progress line

	cfg := h.Config()
	beat, others := d.others(h, decided)
	d.say("Leases of %s:", run)
	d.say("  the scheduler lease (%s/%s), on the heartbeat of %s:", cfg.LeaseContainer, cfg.LeaseName, beat)
	d.say("    won:  %s, epoch %s: found the occurrence %s due, created the run and sent its start check", decided.Instance,
		decided.Str("epoch"), decided.Str("occurrence"))
	for _, s := range others {
		d.say("    %s", s)
	}
	lease := cfg.LeaseContainer + "/" + ledger.RunLeaseName(run)
	var planners []string
	for _, l := range h.Lines() {
		if l.Str("run") != run {
			continue
		}
		switch l.Msg {
		case "planning the run":
			planners = append(planners, fmt.Sprintf("won:  %s, epoch %s: its start check was delivered there; it took the lease and planned the run", l.Instance, l.Str("epoch")))
		case "run enqueued":
			planners = append(planners, fmt.Sprintf("      %s enqueued %s partitions in %s batches", l.Instance, l.Str("partitions"), l.Str("batches")))
		case "check: enqueue in progress under another leader":
			planners = append(planners, fmt.Sprintf("lost: %s found it held by %s (epoch %s)", l.Instance, l.Str("holder"), l.Str("holderEpoch")))
		}
	}
	d.say("  the run's own lease (%s):", lease)
	for _, s := range planners {
		d.say("    %s", s)
	}

	rep, src, err := d.report(ctx, h, run)
	if err != nil {
		return err
	}
	d.say("Final report, from %s:", src)
	d.summarise(rep, seeded)
	if d.verbose {
		b, _ := json.MarshalIndent(rep, "", "  ")
		fmt.Fprintln(d.out, string(b))
	}
	d.say("Run %s ended %s in the ledger; demo took %.1fs. Stopping everything it started.", run, p.State, time.Since(d.start).Seconds())
	return nil
}

// others tells what the other instances' Ticks did on the heartbeat that started the run (the
// Tick invocations fired for the same timer occurrence as the winner's, each with the line in
// which its heartbeat reported its outcome), and that heartbeat's time.
func (d *demo) others(h *devhost.Host, decided devhost.LogLine) (heartbeat string, out []string) {
	d.mu.Lock()
	winner, ok := d.ticks[decided.Str("invocation")]
	heartbeat = winner.Detail
	var same []devhost.InvokeRecord
	for _, r := range d.ticks {
		if ok && r.Detail == winner.Detail && r.ID != winner.ID {
			same = append(same, r)
		}
	}
	d.mu.Unlock()
	sort.Slice(same, func(i, j int) bool { return same[i].Instance < same[j].Instance })
	lines := h.Lines()
	for _, r := range same {
		what := "reported no outcome"
		if r.Err != nil {
			what = "failed: " + firstN(r.Err.Error(), 120)
		}
		for _, l := range lines {
			if l.Str("invocation") == r.ID {
				if o := heartbeatOutcome(l); o != "" {
					what = o
				}
			}
		}
		verb := "lost:"
		if strings.HasPrefix(what, "took") {
			verb = "later:"
		}
		out = append(out, fmt.Sprintf("%s %s %s", verb, r.Instance, what))
	}
	return heartbeat, out
}

// report fetches the run's report through the Runs API when it answers, else reads
// report.json from the ledger. It returns the report object and where it came from.
func (d *demo) report(ctx context.Context, h *devhost.Host, run string) (map[string]any, string, error) {
	if base := h.HTTPURL(); base != "" {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/runs/"+run, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var v struct {
				Report   map[string]any `json:"report"`
				TraceURL string         `json:"traceUrl"`
			}
			if resp.StatusCode == http.StatusOK && json.Unmarshal(body, &v) == nil && v.TraceURL != "" {
				d.say("The run's trace (BATON_TRACE_URL): %s", v.TraceURL)
			}
			if resp.StatusCode == http.StatusOK && json.Unmarshal(body, &v) == nil && v.Report != nil {
				return v.Report, "GET /api/runs/" + run + " (the Runs function, through the devhost) → 200", nil
			}
			d.say("GET /api/runs/%s → %d (%s); reading report.json from the ledger instead", run, resp.StatusCode, strings.TrimSpace(firstN(string(body), 120)))
		}
	}
	cfg := h.Config()
	blobs, err := azclient.Blob(cfg.Storage, nil)
	if err != nil {
		return nil, "", err
	}
	store := blobstore.New(blobs.ServiceClient().NewContainerClient(cfg.RunsContainer), blobstore.Options{})
	rep, _, err := store.ReadReport(ctx, run)
	if err != nil {
		return nil, "", fmt.Errorf("read report of %s: %w", run, err)
	}
	b, _ := json.Marshal(rep)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, "", err
	}
	return m, cfg.RunsContainer + "/" + run + "/report.json", nil
}

// summarise prints the report in a few lines: state and counts, the aggregate's scalar
// fields, its per-content-type tally and the corrupt blobs (checked against the seeded ones).
func (d *demo) summarise(rep map[string]any, seeded seedResult) {
	d.say("  state %v: %v of %v partitions succeeded, %v failed; aggregated by %v", rep["state"], rep["succeeded"], rep["partitions"],
		rep["failed"], holderText(rep["aggregator"]))
	agg, _ := rep["aggregate"].(map[string]any)
	if agg == nil {
		return
	}
	var scalars []string
	keys := make([]string, 0, len(agg))
	for k := range agg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch v := agg[k].(type) {
		case float64:
			scalars = append(scalars, fmt.Sprintf("%s=%v", k, int64(v)))
		case bool, string:
			scalars = append(scalars, fmt.Sprintf("%s=%v", k, v))
		}
	}
	d.say("  aggregate: %s", strings.Join(scalars, " "))
	for _, k := range keys {
		if line, ok := numbersText(agg[k]); ok {
			d.say("  %s: %s", k, line)
		}
	}
	if byCT, ok := agg["byContentType"].(map[string]any); ok {
		cts := make([]string, 0, len(byCT))
		for k := range byCT {
			cts = append(cts, k)
		}
		sort.Strings(cts)
		for _, ct := range cts {
			t, _ := byCT[ct].(map[string]any)
			d.say("    %-28s %6d objects %9d bytes", ct, asInt(t["objects"]), asInt(t["bytes"]))
		}
	}
	list, ok := agg["corrupt"].([]any)
	if !ok {
		return
	}
	var names []string
	for _, c := range list {
		if m, ok := c.(map[string]any); ok {
			names = append(names, fmt.Sprint(m["name"]))
		}
	}
	sort.Strings(names)
	d.say("  corrupt (Content-MD5 does not match the content): %s", strings.Join(names, ", "))
	if strings.Join(names, ",") == strings.Join(seeded.WrongMD5, ",") {
		d.say("  ✓ exactly the %d blobs seeded with a wrong Content-MD5", len(names))
	} else {
		d.say("  ✗ the seeded wrong ones were: %s", strings.Join(seeded.WrongMD5, ", "))
	}
}

// numbersText renders an object whose values are all numbers (totals per key) as
// "key=value …", sorted by key.
func numbersText(v any) (string, bool) {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		return "", false
	}
	parts := make([]string, 0, len(m))
	for k, x := range m {
		f, ok := x.(float64)
		if !ok {
			return "", false
		}
		parts = append(parts, fmt.Sprintf("%s=%v", k, f))
	}
	sort.Strings(parts)
	return strings.Join(parts, " "), true
}

func holderText(v any) string {
	m, ok := v.(map[string]any)
	if !ok {
		return "?"
	}
	return fmt.Sprintf("%v/%v/%v", m["app"], m["instance"], m["pid"])
}

func firstN(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func asInt(v any) int64 {
	f, _ := v.(float64)
	return int64(f)
}

// syncWriter serialises writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
