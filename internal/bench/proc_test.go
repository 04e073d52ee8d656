package bench

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// A command name with spaces and a ')' inside, as the kernel writes it.
	stat := "4242 (a b) c)) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 75 0 0 20 0 9 0 123 456 789\n"
	got, err := parseStatCPU([]byte(stat))
	if err != nil {
		t.Fatal(err)
	}
	if want := 3250 * time.Millisecond; got != want { // (250+75) ticks of 10 ms
		t.Errorf("cpu = %v, want %v", got, want)
	}
	if _, err := parseStatCPU([]byte("4242 (x) S 1 2")); err == nil {
		t.Error("a truncated stat parsed without error")
	}
}

func TestParseStatusMem(t *testing.T) {
	status := "Name:\tbaton\nVmPeak:\t  900000 kB\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\nThreads:\t7\n"
	rss, peak, err := parseStatusMem([]byte(status))
	if err != nil {
		t.Fatal(err)
	}
	if rss != 10240<<10 || peak != 20480<<10 {
		t.Errorf("rss, peak = %d, %d; want %d, %d", rss, peak, 10240<<10, 20480<<10)
	}
	if _, _, err := parseStatusMem([]byte("Name:\tkthreadd\n")); err == nil {
		t.Error("a status without VmRSS parsed without error")
	}
}

// TestReadProc_Self checks the /proc reading against getrusage for this very process.
func TestReadProc_Self(t *testing.T) {
	// Burn some CPU so the comparison is not 0 against 0.
	for deadline := time.Now().Add(150 * time.Millisecond); time.Now().Before(deadline); {
	}
	st, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	usage := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	if d := usage - st.CPU; d < -50*time.Millisecond || d > 50*time.Millisecond {
		t.Errorf("cpu from /proc = %v, getrusage = %v: want them within 50ms", st.CPU, usage)
	}
	// The CPU time is precise to far below the 10 ms ticks of /proc/<pid>/stat: what a short
	// burn adds agrees with getrusage's account of it.
	ru0 := usage
	for deadline := time.Now().Add(25 * time.Millisecond); time.Now().Before(deadline); {
	}
	st1, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	burnt, seen := time.Duration(ru.Utime.Nano()+ru.Stime.Nano())-ru0, st1.CPU-st.CPU
	if d := burnt - seen; d < -3*time.Millisecond || d > 3*time.Millisecond {
		t.Errorf("a burn added %v of cpu in /proc, %v by getrusage: want them within 3ms", seen, burnt)
	}
	if st.RSS <= 0 || st.PeakRSS < st.RSS {
		t.Errorf("rss = %d, peak = %d: want 0 < rss <= peak", st.RSS, st.PeakRSS)
	}
	// Touch 64 MiB: the resident set and its high-water mark must both see it.
	buf := make([]byte, 64<<20)
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = 1
	}
	after, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after.PeakRSS < 64<<20 {
		t.Errorf("peak rss %d MiB after touching 64 MiB (was %d MiB)", after.PeakRSS>>20, st.PeakRSS>>20)
	}
	if after.RSS < 64<<20 {
		t.Errorf("rss %d MiB while 64 MiB are touched", after.RSS>>20)
	}
	runtime.KeepAlive(buf)
}

func TestListeningPID_Self(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	pid, err := ListeningPID(port)
	if err != nil {
		t.Fatal(err)
	}
	if pid != os.Getpid() {
		t.Errorf("ListeningPID(%d) = %d, want this process %d", port, pid, os.Getpid())
	}
}

func TestListeningInode_SkipsNonListeningSockets(t *testing.T) {
	// Port 10000 = 0x2710: an established socket first, then the listener.
	table := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
		"   0: 0100007F:2710 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 111 1 0\n" +
		"   1: 0100007F:2710 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 222 1 0\n"
	path := filepath.Join(t.TempDir(), "tcp")
	if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := listeningInode(path, 10000)
	if err != nil || got != "222" {
		t.Errorf("listeningInode = %q, %v; want 222", got, err)
	}
	if _, err := listeningInode(path, 10001); err == nil {
		t.Errorf("port 10001 found in %s", path)
	}
}
