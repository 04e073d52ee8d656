// Command devhost runs a Functions app locally as several host instances against Azurite: the
// stand-in for the Functions host that `make demo` and the end-to-end tests use (see package
// internal/devhost for what it emulates). It serves any Baton app: in the app's folder (host.json
// and the function folders), `run` and `demo` first build the main package there (-pkg, default
// the folder itself) into the binary host.json's defaultExecutablePath names, unless -exe gives a
// binary. In an app that pins it (`tool github.com/batonfn/baton/cmd/devhost` in go.mod) it runs
// as `go tool devhost`; Azurite comes from the app's own node_modules (npm ci).
//
// The control endpoint of `run` and `demo` takes a free loopback port unless -control (or
// DEVHOST_CONTROL) gives an address; the host prints it and announces it in the app's
// .baton/devhost/ while it runs, where `ctl` finds it. Listeners refuse non-loopback addresses
// unless -allow-remote.
//
//	devhost [run] [flags]            run the app until Ctrl-C
//	devhost demo [flags]             the self-contained demo (make demo)
//	devhost ctl [-app DIR | -control URL] list | inflight | <instance> kill|term|stop|cont|restart
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/internal/tools/devhost"
)

// ControlEnv names the environment variable that, when set, is -control's default: the address
// `run` and `demo` serve the control endpoint on, and `ctl`'s endpoint when it names a port.
const ControlEnv = "DEVHOST_CONTROL"

// DefaultControlAddr is where `run` and `demo` serve the control endpoint when neither
// -control nor ControlEnv says: a free loopback port.
const DefaultControlAddr = "127.0.0.1:0"

// controlDefault is -control's default for `run` and `demo`.
func controlDefault() string {
	if v := os.Getenv(ControlEnv); v != "" {
		return v
	}
	return DefaultControlAddr
}

// controlFlagHelp describes -control for `run` and `demo`.
const controlFlagHelp = "address of the control endpoint, announced in the app's " + devhost.EndpointsDir + " for ctl (default $" + ControlEnv + ", else a free loopback port; \"\": none)"

// allowRemoteHelp describes -allow-remote.
const allowRemoteHelp = "let -http and -control listen on addresses other than loopback (neither checks keys, and the Host-header check still answers only clients that name localhost)"

// checkListen refuses a non-loopback -http or -control before anything is built or started.
func checkListen(httpAddr, control string, allowRemote bool) error {
	for _, l := range []struct{ option, addr string }{{"HTTPAddr", httpAddr}, {"ControlAddr", control}} {
		if l.addr == "" {
			continue
		}
		if err := devhost.CheckListenAddr(l.option, l.addr, allowRemote); err != nil {
			return flagError(err)
		}
	}
	return nil
}

// flagError rewrites the host's listener errors (devhost.ListenError) with the flags that
// choose the listeners.
func flagError(err error) error {
	var le *devhost.ListenError
	if !errors.As(err, &le) {
		return err
	}
	switch le.Option {
	case "HTTPAddr":
		return errors.New(le.Describe("-http", "-allow-remote"))
	case "ControlAddr":
		msg := le.Describe("-control", "-allow-remote")
		if !le.Remote {
			msg += " (" + ControlEnv + " sets -control's default, also for make demo)"
		}
		return errors.New(msg)
	}
	return err
}

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
                          talk to the host running in the folder (-app), or at -control

The control endpoint takes a free loopback port unless -control (or $DEVHOST_CONTROL) gives
one; the host prints it and announces it in the app's .baton/devhost/ for ctl.

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
	httpAddr := fs.String("http", "127.0.0.1:7071", "address of the HTTP front (/api/...; 127.0.0.1:0: a free port)")
	control := fs.String("control", controlDefault(), controlFlagHelp)
	allowRemote := fs.Bool("allow-remote", false, allowRemoteHelp)
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
	if err := checkListen(*httpAddr, *control, *allowRemote); err != nil {
		return err
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
		Settings: set, HTTPAddr: *httpAddr, ControlAddr: *control, AllowRemote: *allowRemote, Out: out, LogLevel: level,
		HandlerLogLevel: level, ProgressInterval: prog, TimerMode: mode, TimerSeed: *timerSeed, Delivery: dmode})
	if err != nil {
		return flagError(err)
	}
	if err := h.Start(ctx); err != nil {
		return flagError(err)
	}
	if u := h.HTTPURL(); u != "" {
		fmt.Fprintf(out, "http front %s\n", u)
	}
	if u := h.ControlURL(); u != "" {
		fmt.Fprintf(out, "control endpoint %s (devhost ctl -app %s finds it)\n", u, *app)
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
	bin, err := devhost.Build(ctx, appRoot, pkg, out)
	if errors.Is(err, devhost.ErrNotMain) {
		return "", fmt.Errorf("%w; pass -pkg with the app's main package (e.g. -pkg ./handler), or -exe with a built handler", err)
	}
	return bin, err
}

func ctlCmd(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("ctl", flag.ContinueOnError)
	base := fs.String("control", "", "control endpoint URL (default $"+ControlEnv+" when it names a port, else the host announced in -app)")
	app := fs.String("app", ".", "function app folder whose running host to control")
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
	u, err := controlURL(*app, *base)
	if err != nil {
		return err
	}
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

// controlURL is the control endpoint `ctl` talks to: flagValue when given, else ControlEnv
// when it names a port, else the one local host announced in app's devhost.EndpointsDir.
func controlURL(app, flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if v := os.Getenv(ControlEnv); v != "" {
		if _, port, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(v, "http://"), "https://")); err == nil && port != "0" {
			return v, nil
		}
	}
	hosts, err := devhost.RunningHosts(app)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(app, devhost.EndpointsDir)
	switch len(hosts) {
	case 0:
		return "", fmt.Errorf("no running local host is announced in %s: start one in %s (devhost run, make demo), or pass -app with its folder or -control with the URL it printed", dir, app)
	case 1:
		return hosts[0].Control, nil
	}
	list := make([]string, 0, len(hosts))
	for _, h := range hosts {
		list = append(list, fmt.Sprintf("%s (pid %d, started %s)", h.Control, h.PID, h.Started.Format("15:04:05")))
	}
	return "", fmt.Errorf("%d local hosts run in %s: pass -control with one of %s", len(hosts), app, strings.Join(list, ", "))
}
