package devhost

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/batonfn/baton/internal/engine/config"
)

// Process supervision constants, from the Functions host (see docs/design.md, Host protocol).
const (
	// ReadyTimeout is how long a new handler has to answer GET / (the host's
	// InitializationTimeout).
	ReadyTimeout = 30 * time.Second
	// ReadyPoll is the host's readiness probe interval.
	ReadyPoll = 25 * time.Millisecond
	// MaxExits handler exits within ExitWindow make the host give the instance up.
	MaxExits   = 3
	ExitWindow = 30 * time.Minute
	// restartDelay spaces a restart after an exit.
	restartDelay = 250 * time.Millisecond
	// termGrace is how long a SIGTERMed handler gets before SIGKILL when the devhost stops it.
	termGrace = 15 * time.Second
)

// State is an instance's lifecycle position.
type State string

const (
	StateStarting   State = "starting"   // process started, not yet answering GET /
	StateRunning    State = "running"    // ready; receives invocations
	StatePaused     State = "paused"     // SIGSTOPped: receives nothing new
	StateStopping   State = "stopping"   // SIGTERMed: finishes what it has, receives nothing new
	StateRestarting State = "restarting" // exited; a new process starts shortly
	StateFailed     State = "failed"     // exited MaxExits times within ExitWindow: given up
	StateStopped    State = "stopped"    // the host is closed
)

// InstanceInfo is a snapshot of an instance.
type InstanceInfo struct {
	Name      string    `json:"name"`
	State     State     `json:"state"`
	PID       int       `json:"pid"`
	Port      int       `json:"port"`
	Starts    int       `json:"starts"`
	Exits     int       `json:"exitsInWindow"`
	InFlight  int       `json:"inFlight"`
	Since     time.Time `json:"since"`
	WebsiteID string    `json:"websiteInstanceId"`
}

// Instance is one emulated host instance: a supervised handler process.
type Instance struct {
	h         *Host
	name      string
	websiteID string

	mu        sync.Mutex
	state     State
	since     time.Time
	cmd       *exec.Cmd
	pid, port int
	exited    chan struct{} // closed when the current process has exited
	exits     []time.Time
	starts    int
	quietExit bool          // the next exit was requested (restart): do not count it
	revive    chan struct{} // a restart request for a failed instance
	inflight  map[string]*Invocation
	changed   chan struct{} // closed and replaced on every state change
	workerID  string
	// crashes counts the crashes of the whole instance (a FaultCrash): a message in flight
	// across one is left unsettled, as a dead host leaves it.
	crashes int
}

func newInstance(h *Host, n int) *Instance {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return &Instance{h: h, name: fmt.Sprintf("instance-%d", n), websiteID: hex.EncodeToString(b[:]),
		state: StateStarting, since: time.Now(), inflight: map[string]*Invocation{},
		changed: make(chan struct{}), revive: make(chan struct{}, 1)}
}

// Name is "instance-<n>", the handler's BATON_INSTANCE_ID.
func (in *Instance) Name() string { return in.name }

// Info returns a snapshot.
func (in *Instance) Info() InstanceInfo {
	in.mu.Lock()
	defer in.mu.Unlock()
	return InstanceInfo{Name: in.name, State: in.state, PID: in.pid, Port: in.port, Starts: in.starts,
		Exits: len(in.recentExits(time.Now())), InFlight: len(in.inflight), Since: in.since, WebsiteID: in.websiteID}
}

// State returns the current state and, when a process runs, its PID.
func (in *Instance) State() (State, int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.state, in.pid
}

// setState must be called with mu held.
func (in *Instance) setState(s State) {
	if in.state == s {
		return
	}
	in.state, in.since = s, time.Now()
	close(in.changed)
	in.changed = make(chan struct{})
}

// WaitState blocks until the instance is in one of states.
func (in *Instance) WaitState(ctx context.Context, states ...State) error {
	for {
		in.mu.Lock()
		cur, ch := in.state, in.changed
		in.mu.Unlock()
		for _, s := range states {
			if cur == s {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: wait for state %v (now %s): %w", in.name, states, cur, ctx.Err())
		case <-ch:
		}
	}
}

// live reports whether new work may be sent to the instance.
func (in *Instance) live() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.state == StateRunning
}

func (in *Instance) recentExits(now time.Time) []time.Time {
	var out []time.Time
	for _, t := range in.exits {
		if now.Sub(t) < ExitWindow {
			out = append(out, t)
		}
	}
	return out
}

// supervise runs the instance's handler until ctx ends: start, wait ready, wait for the exit,
// restart, and give up after MaxExits exits within ExitWindow.
func (in *Instance) supervise(ctx context.Context) {
	log := in.h.log.With("instance", in.name)
	for ctx.Err() == nil {
		exited, err := in.start(ctx)
		if err != nil {
			log.Error("handler did not start", "err", err)
			in.noteExit(ctx, log, "start failed")
			if !in.afterExit(ctx, log) {
				return
			}
			continue
		}
		if err := in.waitReady(ctx, exited); err != nil {
			log.Error("handler not ready", "err", err)
			in.signal(syscall.SIGKILL)
		}
		select {
		case <-exited:
		case <-ctx.Done():
			return // Close stops the process
		}
		if ctx.Err() != nil {
			return
		}
		in.noteExit(ctx, log, in.exitReason())
		if !in.afterExit(ctx, log) {
			return
		}
	}
}

// start launches a new handler process and its output readers.
func (in *Instance) start(ctx context.Context) (chan struct{}, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	h := in.h
	workerID := uuid.NewString()
	extra := map[string]string{
		config.SettingPort:                  strconv.Itoa(port),
		config.SettingLegacyPort:            strconv.Itoa(port),
		"FUNCTIONS_CUSTOMHANDLER_WORKER_ID": workerID,
		"FUNCTIONS_HTTPWORKER_ID":           workerID,
		config.SettingAppRoot:               h.app.Root,
		config.SettingInstanceID:            in.name,
		config.SettingWebsiteInstance:       in.websiteID,
		"AZURE_FUNCTIONS_ENVIRONMENT":       "Development",
	}
	cmd := exec.Command(h.exe, h.args...)
	cmd.Dir = h.workDir
	cmd.Env = h.settings.Environ(h.baseEnv, extra)
	// Own process group (a terminal's Ctrl-C reaches only the devhost, which stops the
	// handlers gracefully); killed with the devhost if it dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", h.exe, err)
	}
	pid := cmd.Process.Pid
	exited := make(chan struct{})
	in.mu.Lock()
	in.cmd, in.pid, in.port, in.exited, in.workerID = cmd, pid, port, exited, workerID
	in.starts++
	in.setState(StateStarting)
	in.mu.Unlock()

	var readers sync.WaitGroup
	for _, r := range []struct {
		rd     io.Reader
		stderr bool
	}{{stdout, false}, {stderr, true}} {
		readers.Add(1)
		go func() {
			defer readers.Done()
			in.readLines(r.rd, pid, r.stderr)
		}()
	}
	go func() {
		readers.Wait() // Wait must follow the last read of the pipes
		err := cmd.Wait()
		in.mu.Lock()
		if in.cmd == cmd {
			in.cmd = nil
		}
		in.mu.Unlock()
		in.h.log.Debug("handler exited", "instance", in.name, "pid", pid, "status", exitStatus(err))
		close(exited)
	}()
	return exited, nil
}

func (in *Instance) readLines(r io.Reader, pid int, stderr bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		in.h.handlerLine(parseLine(in.name, pid, sc.Text(), stderr, time.Now()))
	}
	_, _ = io.Copy(io.Discard, r)
}

func exitStatus(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "signal " + ws.Signal().String()
		}
		return fmt.Sprintf("exit %d", ee.ExitCode())
	}
	if err != nil {
		return err.Error()
	}
	return "exit 0"
}

// waitReady probes GET / every ReadyPoll until any HTTP answer, as the host does.
func (in *Instance) waitReady(ctx context.Context, exited chan struct{}) error {
	in.mu.Lock()
	port, pid := in.port, in.pid
	in.mu.Unlock()
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	start := time.Now()
	deadline := time.NewTimer(ReadyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(ReadyPoll)
	defer tick.Stop()
	probe := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := probe.Do(req); err == nil {
			_ = resp.Body.Close()
			in.mu.Lock()
			if in.pid == pid && in.state == StateStarting {
				in.setState(StateRunning)
			}
			in.mu.Unlock()
			in.h.log.Info("instance ready", "instance", in.name, "pid", pid, "port", port,
				"in", time.Since(start).Round(time.Millisecond).String())
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			return errors.New("handler exited before it answered GET /")
		case <-deadline.C:
			return fmt.Errorf("no answer to GET %s within %s", url, ReadyTimeout)
		case <-tick.C:
		}
	}
}

func (in *Instance) exitReason() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.quietExit {
		return "restart requested"
	}
	return "exited"
}

// noteExit records an exit and fails the invocations still in flight on that process.
func (in *Instance) noteExit(ctx context.Context, log *slog.Logger, reason string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.quietExit {
		in.quietExit = false
		in.setState(StateRestarting)
		return
	}
	now := time.Now()
	in.exits = append(in.recentExits(now), now)
	log.Warn("handler process "+reason, "pid", in.pid, "exitsInWindow", len(in.exits), "limit", MaxExits)
	in.setState(StateRestarting)
}

// afterExit waits before the next start, or gives the instance up; false means stop.
func (in *Instance) afterExit(ctx context.Context, log *slog.Logger) bool {
	in.mu.Lock()
	exits := len(in.recentExits(time.Now()))
	if exits >= MaxExits {
		in.setState(StateFailed)
		in.mu.Unlock()
		log.Error("handler exited too often; instance given up (as the host shuts down). `restart` revives it",
			"exits", exits, "window", ExitWindow.String())
		select {
		case <-ctx.Done():
			return false
		case <-in.revive:
			in.mu.Lock()
			in.exits = nil
			in.mu.Unlock()
			return true
		}
	}
	in.mu.Unlock()
	select {
	case <-ctx.Done():
		return false
	case <-time.After(restartDelay):
		return true
	}
}

// signal sends sig to the current process; it reports whether a process was there.
func (in *Instance) signal(sig syscall.Signal) (int, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd == nil || in.cmd.Process == nil {
		return 0, false
	}
	_ = syscall.Kill(in.pid, sig)
	return in.pid, true
}

// Kill sends SIGKILL: the handler dies at once; the host counts the exit and restarts it.
func (in *Instance) Kill() error { return in.chaos(syscall.SIGKILL) }

// Term sends SIGTERM: the handler shuts down gracefully (releasing its lease); the host counts
// the exit and restarts it.
func (in *Instance) Term() error { return in.chaos(syscall.SIGTERM) }

// Pause sends SIGSTOP. The instance gets no new invocations until Resume.
func (in *Instance) Pause() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.state != StateRunning || in.cmd == nil {
		return fmt.Errorf("%s is %s: only a running instance can be paused", in.name, in.state)
	}
	if err := syscall.Kill(in.pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("%s: SIGSTOP: %w", in.name, err)
	}
	in.setState(StatePaused)
	in.h.log.Warn("chaos: SIGSTOP", "instance", in.name, "pid", in.pid)
	return nil
}

// Resume sends SIGCONT to a paused instance; its missed timer occurrences fire past due.
func (in *Instance) Resume() error {
	in.mu.Lock()
	if in.state != StatePaused || in.cmd == nil {
		in.mu.Unlock()
		return fmt.Errorf("%s is %s: only a paused instance can be resumed", in.name, in.state)
	}
	if err := syscall.Kill(in.pid, syscall.SIGCONT); err != nil {
		in.mu.Unlock()
		return fmt.Errorf("%s: SIGCONT: %w", in.name, err)
	}
	in.setState(StateRunning)
	pid := in.pid
	in.mu.Unlock()
	in.h.log.Warn("chaos: SIGCONT", "instance", in.name, "pid", pid)
	in.h.resumed(in)
	return nil
}

func (in *Instance) chaos(sig syscall.Signal) error {
	in.mu.Lock()
	if in.cmd == nil {
		in.mu.Unlock()
		return fmt.Errorf("%s is %s: no handler process to signal", in.name, in.state)
	}
	pid := in.pid
	in.h.recordSignal(Signal{Instance: in.name, PID: pid, Signal: sig, At: in.h.now()})
	_ = syscall.Kill(pid, sig)
	if in.state == StatePaused && sig != syscall.SIGKILL {
		_ = syscall.Kill(pid, syscall.SIGCONT) // let a paused process see the signal
	}
	if sig == syscall.SIGTERM && (in.state == StateRunning || in.state == StatePaused) {
		// As the Functions host drains an instance that is shutting down: its listeners
		// stop, so no new message or timer reaches it while it finishes what it has.
		in.setState(StateStopping)
	}
	in.mu.Unlock()
	in.h.log.Warn("chaos: "+sigName(sig), "instance", in.name, "pid", pid)
	return nil
}

// crash kills the handler process pid (-9) as part of a crash of the whole instance (host and
// handler, FaultCrash): the messages in flight on it are left to their leases and locks. It
// reports false when pid is no longer the instance's process.
func (in *Instance) crash(pid int) bool {
	in.mu.Lock()
	if in.cmd == nil || in.pid != pid {
		in.mu.Unlock()
		return false
	}
	in.crashes++
	in.h.recordSignal(Signal{Instance: in.name, PID: pid, Signal: syscall.SIGKILL, At: in.h.now()})
	_ = syscall.Kill(pid, syscall.SIGKILL)
	in.mu.Unlock()
	in.h.log.Warn("chaos: crash: the instance dies with its host (kill -9; nothing it holds is settled)", "instance", in.name, "pid", pid)
	return true
}

// crashCount is how many times the instance crashed (crash).
func (in *Instance) crashCount() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.crashes
}

// Restart stops the handler (SIGTERM, then SIGKILL after a grace period) and starts a new one
// without counting an exit; a given-up instance is revived.
func (in *Instance) Restart(ctx context.Context) error {
	in.mu.Lock()
	if in.state == StateFailed {
		in.mu.Unlock()
		select {
		case in.revive <- struct{}{}:
		default:
		}
		in.h.log.Warn("restart: reviving a given-up instance", "instance", in.name)
		return nil
	}
	if in.cmd == nil {
		in.mu.Unlock()
		return nil // already on its way back
	}
	in.quietExit = true
	pid, exited := in.pid, in.exited
	_ = syscall.Kill(pid, syscall.SIGTERM)
	if in.state == StatePaused {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	if in.state == StateRunning || in.state == StatePaused {
		in.setState(StateStopping)
	}
	in.mu.Unlock()
	in.h.log.Warn("restart requested", "instance", in.name, "pid", pid)
	return stopProcess(ctx, pid, exited, termGrace)
}

// killForTimeout restarts the handler that ran an invocation past functionTimeout.
func (in *Instance) killForTimeout(pid int, invocationID string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.pid != pid || in.cmd == nil {
		return
	}
	in.quietExit = true
	in.h.log.Error(fmt.Sprintf("A function timeout has occurred. Restarting worker process executing invocationId '%s'.", invocationID),
		"instance", in.name, "pid", pid)
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// stop ends the process for good (host shutdown): SIGTERM, SIGKILL after grace.
func (in *Instance) stop(ctx context.Context, grace time.Duration) error {
	in.mu.Lock()
	pid, exited, running := in.pid, in.exited, in.cmd != nil
	if running {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		if in.state == StatePaused {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	in.setState(StateStopped)
	in.mu.Unlock()
	if !running {
		return nil
	}
	return stopProcess(ctx, pid, exited, grace)
}

func stopProcess(ctx context.Context, pid int, exited chan struct{}, grace time.Duration) error {
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-exited:
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	select {
	case <-exited:
		return fmt.Errorf("pid %d did not stop within %s after SIGTERM: killed", pid, grace)
	case <-time.After(5 * time.Second):
		return fmt.Errorf("pid %d did not exit after SIGKILL", pid)
	}
}

func sigName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "kill -9 (SIGKILL)"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Preflight starts one handler process with instance-1's environment, waits until it answers
// GET / (or exits), then stops it. It fails with the handler's error output when the handler
// cannot start, so a caller can react (or report) before N instances each fail three times.
func (h *Host) Preflight(ctx context.Context) error {
	in := newInstance(h, 1)
	in.name = "preflight"
	mark := len(h.book.snapshot())
	exited, err := in.start(ctx)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	readyErr := in.waitReady(rctx, exited)
	in.mu.Lock()
	in.setState(StateStopped)
	pid := in.pid
	in.mu.Unlock()
	_ = syscall.Kill(pid, syscall.SIGTERM)
	_ = stopProcess(ctx, pid, exited, termGrace)
	if readyErr == nil {
		return nil
	}
	var msgs []string
	for _, l := range h.book.snapshot()[mark:] {
		if l.Instance == in.name && (l.Stderr || levelOf(l.Level) >= slog.LevelError) {
			msgs = append(msgs, l.Msg+" "+l.Str("err"))
		}
	}
	if len(msgs) == 0 {
		return fmt.Errorf("handler preflight: %w", readyErr)
	}
	return fmt.Errorf("handler preflight: %w: %s", readyErr, msgs[len(msgs)-1])
}
