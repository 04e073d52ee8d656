package devhost

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ListenError is a listener of the host (Options.HTTPAddr or Options.ControlAddr) that was
// refused because its address is not loopback (Remote), or that could not be opened (Err).
type ListenError struct {
	Option string // "HTTPAddr" or "ControlAddr"
	Addr   string
	Remote bool
	Err    error
}

func (e *ListenError) Error() string { return e.Describe("Options."+e.Option, "Options.AllowRemote") }

func (e *ListenError) Unwrap() error { return e.Err }

// Describe is the error's message with the option and the allow-remote switch named as the
// caller exposes them (a command's flags).
func (e *ListenError) Describe(option, allowRemote string) string {
	if e.Remote {
		return fmt.Sprintf("%s %s is not a loopback address: the local host checks no keys, and its Host-header check is no defence against a client on the network; use 127.0.0.1, or set %s if you mean to listen there",
			option, e.Addr, allowRemote)
	}
	msg := fmt.Sprintf("%s %s: %v", option, e.Addr, e.Err)
	if errors.Is(e.Err, syscall.EADDRINUSE) {
		msg += fmt.Sprintf(" (another local host may be running): choose another address with %s, or port 0 (127.0.0.1:0) for a free one", option)
	}
	return msg
}

// CheckListenAddr refuses (with a *ListenError naming option) an address that is not on the
// loopback interface — an IP outside 127.0.0.0/8 and ::1, a host name other than localhost,
// or none (":7071", every interface) — unless allowRemote.
func CheckListenAddr(option, addr string, allowRemote bool) error {
	if allowRemote || loopbackListen(addr) {
		return nil
	}
	return &ListenError{Option: option, Addr: addr, Remote: true}
}

func loopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	return loopbackHost(host)
}

// serve listens on addr and serves handler to local callers only (localOnly); it returns the
// base URL, with 127.0.0.1 for an address that listens on every interface.
func serve(option, addr string, handler http.Handler) (string, *http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, &ListenError{Option: option, Addr: addr, Err: err}
	}
	srv := &http.Server{Handler: localOnly(handler), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	tcp := ln.Addr().(*net.TCPAddr)
	host := tcp.IP.String()
	if tcp.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(tcp.Port)), srv, nil
}

// EndpointsDir, under the app root, is where each Host serving a control endpoint announces
// it (one JSON file per host, see Endpoint) from Start to Close, so that tools such as
// `devhost ctl` find a host that took a free port. The folder ignores itself in git.
const EndpointsDir = ".baton/devhost"

// Endpoint is a running Host's announcement: its process and base URLs.
type Endpoint struct {
	PID     int       `json:"pid"`
	Control string    `json:"control"`
	HTTP    string    `json:"http,omitempty"`
	Started time.Time `json:"started"`
	file    string
}

// RunningHosts lists the hosts announced in appRoot's EndpointsDir whose process is alive,
// oldest first; none (and no error) when the folder does not exist.
func RunningHosts(appRoot string) ([]Endpoint, error) {
	dir := filepath.Join(appRoot, EndpointsDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Endpoint
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // removed meanwhile
		}
		var ep Endpoint
		if json.Unmarshal(b, &ep) != nil || ep.Control == "" || !processAlive(ep.PID) {
			continue
		}
		ep.file = filepath.Join(dir, e.Name())
		out = append(out, ep)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	return out, nil
}

func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// announce writes the host's Endpoint into the app's EndpointsDir (dropping announcements of
// processes that are gone) and returns the file, for Close to remove.
func (h *Host) announce() (string, error) {
	dir := filepath.Join(h.app.Root, EndpointsDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	ignore := filepath.Join(dir, ".gitignore")
	if _, err := os.Stat(ignore); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(ignore, []byte("# written by the local host while it runs\n*\n"), 0o644); err != nil {
			return "", err
		}
	}
	if entries, err := os.ReadDir(dir); err == nil {
		for _, e := range entries {
			var ep Endpoint
			path := filepath.Join(dir, e.Name())
			if b, err := os.ReadFile(path); err == nil && strings.HasSuffix(e.Name(), ".json") &&
				json.Unmarshal(b, &ep) == nil && !processAlive(ep.PID) {
				_ = os.Remove(path)
			}
		}
	}
	ep := Endpoint{PID: os.Getpid(), Control: h.ctlURL, HTTP: h.httpURL, Started: h.started}
	b, err := json.MarshalIndent(ep, "", "  ")
	if err != nil {
		return "", err
	}
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(h.ctlURL, "http://"))
	path := filepath.Join(dir, fmt.Sprintf("%d-%s.json", ep.PID, port))
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return "", err
	}
	_, werr := tmp.Write(append(b, '\n'))
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		_ = os.Remove(tmp.Name())
		return "", werr
	}
	return path, nil
}
