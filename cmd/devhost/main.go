// Command devhost runs a Functions app locally as several host instances against Azurite: the
// stand-in for the Functions host that `make demo` and the end-to-end tests use (see package
// internal/devhost for what it emulates). It serves any Baton app: in the app's folder (host.json
// and the function folders), `run` and `demo` first build the main package there (-pkg, default
// the folder itself) into the binary host.json's defaultExecutablePath names, unless -exe gives a
// binary. In an app that pins it (`tool github.com/batonfn/baton/cmd/devhost` in go.mod) it runs
// as `go tool devhost`; Azurite comes from the app's own node_modules (npm ci).
//
//	devhost [run] [flags]            run the app until Ctrl-C
//	devhost demo [flags]             the self-contained demo (make demo)
//	devhost ctl [-control URL] list | inflight | <instance> kill|term|stop|cont|restart
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/internal/tools/devhost"
)

// DefaultControlAddr is where `run` and `demo` serve the control endpoint and `ctl` looks.
const DefaultControlAddr = "127.0.0.1:7070"

func main() {
	args := os.Args[1:]
	cmd := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd {
	case "run":
		err = runCmd(ctx, args, os.Stdout)
	case "demo":
		err = demoCmd(ctx, args, os.Stdout)
	case "ctl":
		err = ctlCmd(ctx, args, os.Stdout)
	case "help", "-h", "--help":
		usage(os.Stdout)
	default:
		usage(os.Stderr)
		err = fmt.Errorf("unknown command %q", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "devhost:", err)
		os.Exit(1)
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `devhost — a local multi-instance stand-in for the Azure Functions host

  devhost [run] [flags]   build the app in the folder, run it (host.json + */function.json)
                          as N instances until Ctrl-C
  devhost demo [flags]    build the app, start Azurite, run 3 instances, fire one schedule
                          within seconds (the app's first, or -schedule NAME; -job runs a job
                          on the settings' schedule tick, and -job inventory seeds a container
                          first), print who won the scheduler lease and the run's own lease,
                          the progress and the report, stop
  devhost ctl [flags] list | inflight | <instance> kill|term|stop|cont|restart

Run "devhost <command> -h" for the flags of a command.
`)
}

// settingsFlag collects repeated -set KEY=VALUE.
type settingsFlag map[string]string

func (s settingsFlag) String() string { return fmt.Sprint(map[string]string(s)) }
func (s settingsFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return errors.New("want KEY=VALUE")
	}
	s[k] = val
	return nil
}

func runCmd(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	app := fs.String("app", ".", "function app folder (host.json and the function folders)")
	n := fs.Int("n", 3, "number of host instances")
	exe := fs.String("exe", "", "handler binary to run as is (default: build -pkg into host.json's defaultExecutablePath)")
	pkg := fs.String("pkg", ".", "main package of the app, built when -exe is not given")
	settingsFile := fs.String("settings", "", "settings file (default local.settings.json, else local.settings.example.json)")
	httpAddr := fs.String("http", "127.0.0.1:7071", "address of the HTTP front (/api/...)")
	control := fs.String("control", DefaultControlAddr, "address of the loopback control endpoint")
	startAzurite := fs.Bool("azurite", false, "start the pinned Azurite (in memory, free ports) and point AzureWebJobsStorage, and every setting that is UseDevelopmentStorage=true, at it")
	verbose := fs.Bool("v", false, "show debug lines (handler and devhost)")
	progress := fs.Duration("progress", time.Second, "progress line interval (0: off)")
	timer := fs.String("timer", string(devhost.TimerAll), "where a timer occurrence fires: all (every instance, the worst case) | one (one random running instance, as in Azure)")
	timerSeed := fs.Int64("timer-seed", 0, "seed for -timer one's choice of instance (0: random, logged at start)")
	delivery := fs.String("delivery", string(devhost.DeliveryQueue), "how queue messages are delivered: queue (the Storage queue trigger) | servicebus (the serviceBusTrigger functions, with Service Bus's peek-lock, redelivery, dead-lettering, scheduling and duplicate detection, on Storage queues)")
	set := settingsFlag{}
	fs.Var(set, "set", "override a setting, KEY=VALUE (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	mode, err := devhost.ParseTimerMode(*timer)
	if err != nil {
		return fmt.Errorf("-timer: %w", err)
	}
	dmode, err := devhost.ParseDelivery(*delivery)
	if err != nil {
		return fmt.Errorf("-delivery: %w", err)
	}
	handler, err := handlerBinary(ctx, *app, *exe, *pkg, out)
	if err != nil {
		return err
	}
	if *startAzurite {
		srv, err := azurite.Start(ctx, azurite.Options{})
		if err != nil {
			return err
		}
		defer srv.Stop()
		if err := toStartedAzurite(*app, *settingsFile, srv.ConnectionString(), set); err != nil {
			return err
		}
		fmt.Fprintf(out, "azurite: blob 127.0.0.1:%d, queue 127.0.0.1:%d (in memory)\n", srv.BlobPort, srv.QueuePort)
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	prog := *progress
	if prog <= 0 {
		prog = -1
	}
	h, err := devhost.New(devhost.Options{AppRoot: *app, Executable: handler, Instances: *n, SettingsFile: *settingsFile,
		Settings: set, HTTPAddr: *httpAddr, ControlAddr: *control, Out: out, LogLevel: level, HandlerLogLevel: level,
		ProgressInterval: prog, TimerMode: mode, TimerSeed: *timerSeed, Delivery: dmode})
	if err != nil {
		return err
	}
	if err := h.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintln(out, "running; Ctrl-C stops every instance")
	<-ctx.Done()
	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return h.Close(cctx)
}

// handlerBinary is the custom handler to run: exe when given, else the app in appRoot built
// from its main package pkg into the binary host.json names.
func handlerBinary(ctx context.Context, appRoot, exe, pkg string, out io.Writer) (string, error) {
	if exe != "" {
		return exe, nil
	}
	fmt.Fprintf(out, "building the app in %s (go build %s)\n", appRoot, pkg)
	return devhost.Build(ctx, appRoot, pkg, out)
}

func ctlCmd(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("ctl", flag.ContinueOnError)
	base := fs.String("control", "http://"+DefaultControlAddr, "control endpoint URL")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rest := fs.Args()
	var method, path string
	switch {
	case len(rest) == 1 && rest[0] == "list":
		method, path = http.MethodGet, "/instances"
	case len(rest) == 1 && rest[0] == "inflight":
		method, path = http.MethodGet, "/inflight"
	case len(rest) == 2:
		method, path = http.MethodPost, "/instances/"+rest[0]+"/"+rest[1]
	default:
		acts := append([]string(nil), devhost.Actions...)
		sort.Strings(acts)
		return fmt.Errorf("usage: devhost ctl list | inflight | <instance> %s", strings.Join(acts, "|"))
	}
	u := *base
	if !strings.Contains(u, "://") {
		u = "http://" + u
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(u, "/")+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("control endpoint %s: %w (is devhost running?)", u, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(out, resp.Body)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	return nil
}
