package azurite

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// A port that something else listens on is not Azurite: Start must not take a process that
// took one of its ports first (found free, then taken before Azurite bound it) for Azurite,
// which then exits on the port in use.
func TestStart_PortTakenByAnotherProcess(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
	}))
	defer other.Close()
	port := other.Listener.Addr().(*net.TCPAddr).Port
	if ready(port) {
		t.Fatalf("ready(%d) with another HTTP server on it: want false", port)
	}
	if _, err := Binary(); err != nil {
		t.Skipf("the rest needs Azurite: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srv, err := Start(ctx, Options{BlobPort: port})
	if err == nil {
		srv.Stop()
		t.Fatalf("Start on a blob port held by another server succeeded; want an error")
	}
}

// A picked port that another process takes before Azurite binds it (here: held all along)
// makes Azurite exit with EADDRINUSE; Start picks fresh ports and launches again.
func TestStart_PickedPortTakenTriesFreshPorts(t *testing.T) {
	if _, err := Binary(); err != nil {
		t.Fatalf("needs Azurite: %v", err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port
	picks := 0
	pick := func(n int) ([]int, error) {
		picks++
		ports, err := freePorts(n)
		if picks == 1 && err == nil {
			ports[2] = takenPort // the table port, which Options cannot fix
		}
		return ports, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := start(ctx, Options{}, pick)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	defer srv.Stop()
	if picks != 2 {
		t.Errorf("ports picked %d times, want 2 (the first launch lost port %d)", picks, takenPort)
	}
	if srv.TablePort == takenPort || !ready(srv.BlobPort) || !ready(srv.QueuePort) {
		t.Errorf("server on %d/%d/%d: want fresh ports, all Azurite", srv.BlobPort, srv.QueuePort, srv.TablePort)
	}
}

func TestExitError(t *testing.T) {
	out := "Azurite Queue service is starting at http://127.0.0.1:40681\nExit due to unhandled error: listen EADDRINUSE: address already in use 127.0.0.1:40681"
	var lost *portInUseError
	if err := exitError(out); !errors.As(err, &lost) || lost.port != 40681 {
		t.Errorf("exitError(EADDRINUSE) = %v; want a *portInUseError for port 40681", err)
	}
	if err := exitError("Exit due to unhandled error: something else"); errors.As(err, &lost) {
		t.Errorf("exitError(other) = %v; want a plain error", err)
	}
}

// Azurite's ports are picked below the kernel's ephemeral range, where no outgoing connection
// takes its local port, so a restart on the same ports finds them free.
func TestFreePorts_BelowTheEphemeralRange(t *testing.T) {
	low, ok := ephemeralLow()
	if !ok {
		t.Skip("no /proc/sys/net/ipv4/ip_local_port_range on this system: the kernel picks the ports")
	}
	if low-belowEphemeralFrom < 1000 {
		t.Skipf("the ephemeral range starts at %d: no room below it; the kernel picks the ports", low)
	}
	ports, err := freePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < belowEphemeralFrom || p >= low || seen[p] {
			t.Errorf("ports %v: want 3 distinct ports in [%d, %d)", ports, belowEphemeralFrom, low)
		}
		seen[p] = true
	}
}

// A running Azurite's ports stay reserved for it, across a restart, until Stop: another test
// process's pick skips them while the restart has them closed. A reservation left by a
// process that is gone is void.
func TestReservations_HoldAPortUntilStop(t *testing.T) {
	dir := t.TempDir()
	s, err := Start(t.Context(), Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ports := []int{s.BlobPort, s.QueuePort, s.TablePort}
	for _, p := range ports {
		if !reserved(p) {
			t.Fatalf("port %d of a running Azurite: not reserved", p)
		}
	}
	s2, err := s.Restart(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !reserved(s2.BlobPort) || !reserved(s2.QueuePort) {
		t.Fatalf("ports %d, %d after a restart: not reserved", s2.BlobPort, s2.QueuePort)
	}
	s2.Stop()
	for _, p := range ports[:2] {
		if reserved(p) {
			t.Errorf("port %d after Stop: still reserved", p)
		}
	}
	// A process that exited: its reservation does not count.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	p := belowEphemeralFrom - 1 // never picked: no live reservation of it to overwrite
	if err := os.WriteFile(filepath.Join(reservations(), strconv.Itoa(p)), []byte(strconv.Itoa(gone.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(filepath.Join(reservations(), strconv.Itoa(p)))
	if reserved(p) {
		t.Errorf("port %d reserved by the exited process %d: want it void", p, gone.Process.Pid)
	}
}
