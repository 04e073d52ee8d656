// Package azurite starts the repo's pinned Azurite (package.json / package-lock.json) for tests,
// the local host and benchmarks: free loopback ports, in-memory persistence by default, the
// flags the SDK versions need, and a readiness wait. It never silently skips: when Node or the
// npm install is missing, Start fails with a message saying how to fix it.
package azurite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
)

// Options tune Start. The zero value runs in memory on free ports.
type Options struct {
	// Dir, when set, persists data on disk there (--location) instead of in memory. Reuse the
	// same Dir and ports to restart Azurite with its data.
	Dir string
	// BlobPort and QueuePort fix the ports (0 picks free ones).
	BlobPort, QueuePort int
	// Log receives Azurite's stdout/stderr (default: discarded).
	Log *os.File
}

// Server is a running Azurite.
type Server struct {
	BlobPort, QueuePort, TablePort int
	opts                           Options
	cmd                            *exec.Cmd
	done                           chan struct{}
	stopOnce                       sync.Once
}

// ConnectionString is the explicit devstoreaccount1 string for this server's ports.
func (s *Server) ConnectionString() string {
	return fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=%s;"+
		"BlobEndpoint=http://127.0.0.1:%d/devstoreaccount1;QueueEndpoint=http://127.0.0.1:%d/devstoreaccount1;"+
		"TableEndpoint=http://127.0.0.1:%d/devstoreaccount1;",
		config.AzuriteAccountKey, s.BlobPort, s.QueuePort, s.TablePort)
}

// Storage is a StorageConnection for this server.
func (s *Server) Storage() config.StorageConnection {
	return config.StorageConnection{Name: config.SettingHostStorage, ConnectionString: s.ConnectionString()}
}

// RepoRoot finds the directory holding go.mod, starting at dir and walking up.
func RepoRoot(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod above %s", dir)
		}
	}
}

// Binary returns the path of the pinned azurite launcher, or an error saying how to install it.
func Binary() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	root, err := RepoRoot(wd)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(root, "node_modules", ".bin", "azurite")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("azurite is not installed at %s: run `make tools` (npm ci --ignore-scripts) in %s (make test does this; it needs Node.js 20+ and npm)", bin, root)
	}
	if _, err := exec.LookPath("node"); err != nil {
		return "", fmt.Errorf("node is not on PATH: install Node.js 20+ (e.g. apt-get install -y nodejs npm), then run `make tools` in %s", root)
	}
	return bin, nil
}

// Start launches Azurite and waits until its blob and queue endpoints accept connections.
//
// Free ports are found by listening and closing (below the kernel's ephemeral range where it
// can, see freePorts), so another process can take one before Azurite binds it; Azurite then
// exits with EADDRINUSE. Start tries again on fresh ports, up to startTries launches,
// unless the port taken is one that Options fixed.
func Start(ctx context.Context, opts Options) (*Server, error) {
	return start(ctx, opts, freePorts)
}

// startTries bounds the launches of one Start that lost a picked port to another process.
const startTries = 5

func start(ctx context.Context, opts Options, pick func(n int) ([]int, error)) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	for try := 1; ; try++ {
		ports, err := pick(3)
		if err != nil {
			return nil, err
		}
		s, err := launch(ctx, bin, opts, ports)
		if err == nil {
			reserve(s.BlobPort, s.QueuePort, s.TablePort)
		}
		var lost *portInUseError
		if err == nil || !errors.As(err, &lost) || lost.port == opts.BlobPort || lost.port == opts.QueuePort || try == startTries {
			return s, err
		}
	}
}

// portInUseError is Azurite exiting because one of its ports was taken.
type portInUseError struct {
	port   int
	output string
}

func (e *portInUseError) Error() string {
	return fmt.Sprintf("azurite exited before it was ready: port %d is in use: %s", e.port, e.output)
}

// launch starts Azurite on ports (blob, queue, table; Options' fixed ports win) and waits until
// it is ready.
func launch(ctx context.Context, bin string, opts Options, ports []int) (*Server, error) {
	s := &Server{opts: opts, done: make(chan struct{})}
	s.BlobPort, s.QueuePort, s.TablePort = ports[0], ports[1], ports[2]
	if opts.BlobPort != 0 {
		s.BlobPort = opts.BlobPort
	}
	if opts.QueuePort != 0 {
		s.QueuePort = opts.QueuePort
	}
	args := []string{
		"--blobHost", "127.0.0.1", "--queueHost", "127.0.0.1", "--tableHost", "127.0.0.1",
		"--blobPort", fmt.Sprint(s.BlobPort), "--queuePort", fmt.Sprint(s.QueuePort), "--tablePort", fmt.Sprint(s.TablePort),
		// azblob v1.8.x sends an API version newer than Azurite 3.37 knows.
		"--skipApiVersionCheck", "--silent", "--disableTelemetry",
	}
	if opts.Dir != "" {
		if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
			return nil, err
		}
		args = append(args, "--location", opts.Dir)
	} else {
		args = append(args, "--inMemoryPersistence")
	}
	cmd := exec.Command(bin, args...)
	// Its own process group, so Stop reaches node's children; and killed with its parent, so a
	// test binary that dies (a timeout, a kill) does not leave Azurite running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if opts.Dir != "" {
		cmd.Dir = opts.Dir
	} else {
		cmd.Dir = os.TempDir()
	}
	// The output is kept (its start, up to 16 KiB) even when Log is set: it says why Azurite
	// exited.
	var out strings.Builder
	var w io.Writer = &limitedWriter{b: &out, n: 16 << 10}
	if opts.Log != nil {
		w = io.MultiWriter(opts.Log, w)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start azurite: %w", err)
	}
	s.cmd = cmd
	go func() { _ = cmd.Wait(); close(s.done) }()

	deadline := time.Now().Add(60 * time.Second)
	for {
		if ready(s.BlobPort) && ready(s.QueuePort) && ready(s.TablePort) {
			return s, nil
		}
		select {
		case <-s.done:
			return nil, exitError(strings.TrimSpace(out.String()))
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, errors.New("azurite was not ready within 60s")
		}
	}
}

// addrInUse is how Node reports a port taken: "listen EADDRINUSE: address already in use
// 127.0.0.1:40681".
var addrInUse = regexp.MustCompile(`EADDRINUSE: address already in use [^\s]*:(\d+)`)

// exitError is the error for Azurite exiting before it was ready with output: a
// *portInUseError when a port was taken.
func exitError(output string) error {
	if m := addrInUse.FindStringSubmatch(output); m != nil {
		if port, err := strconv.Atoi(m[1]); err == nil {
			return &portInUseError{port: port, output: output}
		}
	}
	return fmt.Errorf("azurite exited before it was ready: %s", output)
}

// Stop terminates Azurite (SIGTERM, then SIGKILL after 5 s), waits for it to exit, and
// gives its ports back to other processes' picks.
func (s *Server) Stop() {
	s.Shutdown(5 * time.Second)
	release(s.BlobPort, s.QueuePort, s.TablePort)
}

// RestartGrace is how long a restart waits for Azurite to exit by itself (see Shutdown).
const RestartGrace = time.Minute

// Shutdown asks Azurite to exit (SIGTERM) and waits for it up to grace, then kills it
// (SIGKILL); it reports whether Azurite exited by itself. Only then is its data all there
// for a restart on the same directory: Azurite keeps its metadata in memory and saves it
// every 5 s and on its way out, so a killed Azurite loses the writes of its last seconds,
// acknowledged ones too, which Azure Storage never does. On a loaded machine its own way out
// can take longer than 5 s, so a restart that means "storage down, back with its data" waits
// longer (RestartGrace). Later calls do nothing and report true.
func (s *Server) Shutdown(grace time.Duration) (exited bool) {
	exited = true
	s.stopOnce.Do(func() {
		if s.cmd == nil || s.cmd.Process == nil {
			return
		}
		pgid := -s.cmd.Process.Pid
		_ = syscall.Kill(pgid, syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(grace):
			exited = false
			_ = syscall.Kill(pgid, syscall.SIGKILL)
			<-s.done
		}
	})
	return exited
}

// Restart stops the server and starts it again on the same ports and data directory. Only
// meaningful with Options.Dir (in-memory data is lost). It waits RestartGrace for Azurite to
// exit by itself, and fails if Azurite had to be killed (its last writes may be lost).
func (s *Server) Restart(ctx context.Context) (*Server, error) {
	if !s.Shutdown(RestartGrace) {
		return nil, fmt.Errorf("azurite did not exit within %s of SIGTERM and was killed: writes of its last seconds may be lost", RestartGrace)
	}
	opts := s.opts
	opts.BlobPort, opts.QueuePort = s.BlobPort, s.QueuePort
	return Start(ctx, opts)
}

// ready reports whether Azurite answers on port. An open port is not enough: the free ports
// are found by listening and closing, so another process (another package's Azurite, a
// handler) can take one before Azurite binds it; Azurite then exits, and a dial-only check
// could have taken the other process for it. Azurite names itself in the Server header of
// every reply (Azurite-Blob/3.37.0, an authorization error here).
func ready(port int) bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/devstoreaccount1?comp=list", port))
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return strings.HasPrefix(resp.Header.Get("Server"), "Azurite-")
}

// freePorts finds n free loopback ports, below the kernel's range of ephemeral ports when it
// leaves room for them there: the local port of an outgoing connection comes from that range,
// and one of the many connections a test opens (to another package's Azurite, say) may take
// an Azurite port while Restart has it closed, so that the restarted Azurite cannot bind it.
// Elsewhere (no /proc, no room below the range) it lets the kernel pick.
//
// A port a live Azurite of this machine's tests holds (reserve) is not picked, even while a
// Restart has it closed.
func freePorts(n int) ([]int, error) {
	if low, ok := ephemeralLow(); ok && low-belowEphemeralFrom >= 1000 {
		below := func() int {
			for {
				if p := belowEphemeralFrom + rand.IntN(low-belowEphemeralFrom); !reserved(p) {
					return p
				}
			}
		}
		if ports, err := listenPorts(n, 50*n, below); err == nil {
			return ports, nil
		}
	}
	return listenPorts(n, n, func() int { return 0 })
}

// belowEphemeralFrom is the lowest port freePorts picks below the ephemeral range (clear of
// well-known and registered low ports that services on a developer's machine tend to use).
const belowEphemeralFrom = 20000

// listenPorts listens on loopback ports chosen by port (0: the kernel picks) until it holds
// n, at most tries times, then closes them and returns them.
func listenPorts(n, tries int, port func() int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	var err error
	for try := 0; len(ports) < n && try < tries; try++ {
		var l net.Listener
		if l, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port())); err != nil {
			continue
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	if len(ports) < n {
		return nil, fmt.Errorf("find a free port: %w", err)
	}
	return ports, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux).
func ephemeralLow() (int, bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, false
	}
	low, err := strconv.Atoi(f[0])
	return low, err == nil
}

type limitedWriter struct {
	mu sync.Mutex
	b  *strings.Builder
	n  int
}

func (w *limitedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := w.n - w.b.Len(); room > 0 {
		w.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// Reservations: a file per port in reservations() naming the process whose Azurite holds the
// port, from its start to its Stop, so that another test process does not pick the port while
// a Restart has it closed. A reservation of a process that is gone is void.
func reservations() string { return filepath.Join(os.TempDir(), "baton-azurite-ports") }

func reserve(ports ...int) {
	dir := reservations()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return // best effort: without it, a restart may lose its port as before
	}
	for _, p := range ports {
		_ = os.WriteFile(filepath.Join(dir, strconv.Itoa(p)), []byte(strconv.Itoa(os.Getpid())), 0o644)
	}
}

func release(ports ...int) {
	for _, p := range ports {
		name := filepath.Join(reservations(), strconv.Itoa(p))
		if b, err := os.ReadFile(name); err == nil && string(b) == strconv.Itoa(os.Getpid()) {
			_ = os.Remove(name)
		}
	}
}

// reserved reports whether a live process holds port for its Azurite.
func reserved(port int) bool {
	b, err := os.ReadFile(filepath.Join(reservations(), strconv.Itoa(port)))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(string(b))
	if err != nil || pid <= 0 {
		return false
	}
	err = syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
