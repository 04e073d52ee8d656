package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat. The kernel fixes it
// at 100 on every architecture Go supports on Linux (reading it needs sysconf, i.e. cgo).
const clockTicks = 100

// ProcStats is one look at a process in /proc (Linux only).
type ProcStats struct {
	PID int
	// CPU is user + system time consumed so far: the time on CPU of the process's threads
	// (/proc/<pid>/task/*/schedstat, nanoseconds), or utime + stime (/proc/<pid>/stat, 10 ms
	// ticks, but counting threads that exited) when that is more.
	CPU time.Duration
	// RSS is the resident set now (VmRSS); PeakRSS the high-water mark (VmHWM). Bytes.
	RSS, PeakRSS int64
}

// ReadProc reads the CPU time and memory of pid from /proc/<pid>/stat and /proc/<pid>/status.
func ReadProc(pid int) (ProcStats, error) {
	st := ProcStats{PID: pid}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st, fmt.Errorf("read proc of %d: %w", pid, err)
	}
	if st.CPU, err = parseStatCPU(stat); err != nil {
		return st, fmt.Errorf("read proc of %d: %w", pid, err)
	}
	st.CPU = max(st.CPU, threadsCPU(pid))
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return st, fmt.Errorf("read proc of %d: %w", pid, err)
	}
	if st.RSS, st.PeakRSS, err = parseStatusMem(status); err != nil {
		return st, fmt.Errorf("read proc of %d: %w", pid, err)
	}
	return st, nil
}

// parseStatCPU returns utime + stime from the content of /proc/<pid>/stat. The command name
// (field 2) is in parentheses and may contain spaces, so fields are counted after the last ')'.
func parseStatCPU(stat []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("stat: no command name")
	}
	f := strings.Fields(string(stat[i+1:]))
	// After ")": field 3 (state) is f[0], so field k is f[k-3]; utime is 14, stime 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the command name, want at least 13", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("stat: cpu ticks %q: %w", s, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// threadsCPU sums the time on CPU of pid's live threads, in nanoseconds: the first field of
// each /proc/<pid>/task/<tid>/schedstat (0 when it cannot be read).
func threadsCPU(pid int) time.Duration {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/[0-9]*/schedstat", pid))
	var sum time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread exited meanwhile
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		if ns, err := strconv.ParseInt(f[0], 10, 64); err == nil {
			sum += time.Duration(ns)
		}
	}
	return sum
}

// parseStatusMem returns VmRSS and VmHWM in bytes from the content of /proc/<pid>/status.
func parseStatusMem(status []byte) (rss, peak int64, err error) {
	var haveRSS, havePeak bool
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("status: %s = %q, want \"<n> kB\"", key, strings.TrimSpace(val))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("status: %s: %w", key, err)
		}
		if key == "VmRSS" {
			rss, haveRSS = kb<<10, true
		} else {
			peak, havePeak = kb<<10, true
		}
	}
	if !haveRSS || !havePeak {
		return 0, 0, errors.New("status: VmRSS or VmHWM missing (a kernel thread or a zombie?)")
	}
	return rss, peak, nil
}

// ListeningPID returns the process listening on TCP port on 127.0.0.1 (or any address): it
// finds the socket's inode in /proc/net/tcp and the process holding it among /proc/*/fd. Used
// to find Azurite's node process, which the harness does not expose.
func ListeningPID(port int) (int, error) {
	inode, err := listeningInode("/proc/net/tcp", port)
	if err != nil {
		return 0, err
	}
	want := "socket:[" + inode + "]"
	procs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		fds, _ := filepath.Glob(p + "/fd/*")
		for _, fd := range fds {
			if l, err := os.Readlink(fd); err == nil && l == want {
				return strconv.Atoi(filepath.Base(p))
			}
		}
	}
	return 0, fmt.Errorf("no process holds the socket listening on port %d", port)
}

// listeningInode finds the inode of the socket in LISTEN state (0A) on port in a
// /proc/net/tcp-format file.
func listeningInode(path string, port int) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	suffix := fmt.Sprintf(":%04X", port)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		if len(f) < 10 || !strings.HasSuffix(f[1], suffix) || f[3] != "0A" {
			continue
		}
		return f[9], nil
	}
	return "", fmt.Errorf("no socket listens on port %d in %s", port, path)
}

// ResetPeakRSS sets pid's VmHWM back to its current RSS (writes 5 to /proc/<pid>/clear_refs,
// Linux 4.0+), so a later ReadProc's PeakRSS covers only what happened in between.
func ResetPeakRSS(pid int) error {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		return fmt.Errorf("reset peak rss of %d: %w", pid, err)
	}
	return nil
}
