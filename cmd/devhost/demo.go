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
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/batonfn/baton/config"
	"github.com/batonfn/baton/internal/azclient"
	"github.com/batonfn/baton/internal/azurite"
	"github.com/batonfn/baton/internal/devhost"
	"github.com/batonfn/baton/ledger/blobstore"
)

// demoLines are the handler messages the demo shows (warnings and errors always show).
var demoLines = map[string]bool{
	"tick won the election": true, "tick lost the election": true, "run created": true,
	"check scheduled": true, "run enqueued": true, "run finished": true,
	"leadership acquired": true, "leadership released": true,
}

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
	schedule := fs.String("schedule", "*/15 * * * * *", "Tick schedule (six-field NCRONTAB)")
	job := fs.String("job", "", "job to run (default: the settings file's BATON_JOB); inventory seeds a container for it, and falls back to synthetic when the handler does not know it")
	params := fs.String("params", "", "the job's params, JSON (default: the settings file's BATON_JOB_PARAMS)")
	verbose := fs.Bool("v", false, "show every handler line")
	limit := fs.Duration("timeout", 110*time.Second, "give up after this long (after the build)")
	seedFrom := seedDirs{}
	fs.Var(seedFrom, "seed", "upload the files under DIR into CONTAINER of the started Azurite first, CONTAINER=DIR (repeatable)")
	control := fs.String("control", DefaultControlAddr, "address of the loopback control endpoint (\"\": none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// The build comes first: -timeout bounds the demo, not a cold build of the app.
	handler, err := handlerBinary(ctx, *app, *exe, *pkg, out)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *limit)
	defer cancel()
	d := &demo{out: out, start: time.Now(), verbose: *verbose, control: *control}

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
		config.SettingSchedule:          *schedule,
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
	out     io.Writer
	start   time.Time
	verbose bool
	control string // the control endpoint's address
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

func (d *demo) startHost(ctx context.Context, app, exe string, n int, settings map[string]string) (*devhost.Host, error) {
	level := slog.LevelInfo
	if d.verbose {
		level = slog.LevelDebug
	}
	h, err := devhost.New(devhost.Options{
		AppRoot: app, Executable: exe, Instances: n, Settings: settings,
		HTTPAddr: "127.0.0.1:0", ControlAddr: d.control, Out: d.out, LogLevel: level, HandlerLogLevel: level,
		HandlerFilter: func(l devhost.LogLine) bool {
			if l.Instance == "preflight" {
				return d.verbose
			}
			return d.verbose || demoLines[l.Msg] || l.Level == "WARN" || l.Level == "ERROR" || l.Stderr
		},
		MaxTimerFires: 1,
	})
	if err != nil {
		return nil, err
	}
	job := "the app's only job (BATON_JOB unset)"
	if all, err := devhost.LoadSettings(app, "", os.Environ(), settings); err == nil && all.Get(config.SettingJob) != "" {
		job = all.Get(config.SettingJob) + " " + all.Get(config.SettingJobParams)
	}
	d.say("Starting %d instances of %s (schedule %q, lease %s, job %s).", n, filepath.Base(exe), settings[config.SettingSchedule],
		settings[config.SettingLeaseDuration], job)
	// One handler first: a bad setting shows once instead of three times per instance.
	if err := h.Preflight(ctx); err != nil {
		if strings.Contains(err.Error(), "unknown job") {
			return nil, fmt.Errorf("%w: %v", errUnknownJob, err)
		}
		return nil, err
	}
	if err := h.Start(ctx); err != nil {
		return nil, err
	}
	return h, nil
}

func (d *demo) run(ctx context.Context, h *devhost.Host, seeded seedResult) error {
	d.say("Every instance's timer fires at the next occurrence (a few hundred ms apart); they race for the lease.")
	if _, err := h.WaitFires(ctx, 1); err != nil {
		return err
	}
	// The election: the instance whose Tick took the lease first creates the run; a Tick that
	// found the lease held logs "lost", or waits for it and then finds the run already there.
	// (Each Tick logs its outcome when it returns, and the winner's returns last, once it has
	// planned the run: its line is not the first "won" line.)
	won, err := h.WaitLine(ctx, func(l devhost.LogLine) bool { return l.Msg == "run created" && l.Str("trigger") == "timer" })
	if err != nil {
		return fmt.Errorf("no instance won the election: %w", err)
	}
	run := won.Str("run")
	d.say("Election for %s: %s won (epoch %s).", run, won.Instance, won.Str("epoch"))

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

	var lost []string
	for _, l := range h.Lines() {
		if l.Msg == "tick lost the election" && l.Str("run") == run {
			lost = append(lost, fmt.Sprintf("%s (saw leader %s, epoch %s)", l.Instance, l.Str("leader"), l.Str("leaderEpoch")))
		}
	}
	var alsoWon []string
	for _, l := range h.Lines() {
		if l.Msg == "tick won the election" && l.Str("run") == run && l.Instance != won.Instance {
			alsoWon = append(alsoWon, fmt.Sprintf("%s (epoch %s, status %s: the run already existed)", l.Instance, l.Str("epoch"), l.Str("status")))
		}
	}
	d.say("Election summary for %s:", run)
	d.say("  won:  %s, epoch %s: created the run and planned it", won.Instance, won.Str("epoch"))
	for _, s := range lost {
		d.say("  lost: %s", s)
	}
	for _, s := range alsoWon {
		d.say("  later: %s", s)
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
				Report map[string]any `json:"report"`
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
