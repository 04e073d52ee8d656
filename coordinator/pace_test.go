package coordinator

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/transport"
)

// The pacer leaves a healthy enqueue alone, backs off when latency per message jumps or storage
// throttles, never pauses longer than its cap, and recovers once latency is back.
func TestPacer_BacksOffOnStrainAndRecovers(t *testing.T) {
	var p pacer
	for range 5 {
		if d := p.observe(250, 250*time.Millisecond, nil); d != 0 {
			t.Fatalf("healthy batches paused %s", d)
		}
	}
	// Latency per message quadruples and more: back off, doubling.
	var pauses []time.Duration
	for range 3 {
		pauses = append(pauses, p.observe(250, 2*time.Second, nil))
	}
	if pauses[0] != paceMinPause || pauses[1] != 2*paceMinPause || pauses[2] != 4*paceMinPause {
		t.Errorf("pauses under strain %v, want %s doubling", pauses, paceMinPause)
	}
	// Throttling counts as strain even without a latency figure.
	if d := p.observe(0, 0, fmt.Errorf("send: %w", transport.ErrTransient)); d != 8*paceMinPause {
		t.Errorf("after a throttled send: %s", d)
	}
	for range 20 {
		p.observe(250, 10*time.Second, nil)
	}
	if p.pause != paceMaxPause {
		t.Errorf("pause %s, want the cap %s", p.pause, paceMaxPause)
	}
	// Back to normal: the pause halves away to nothing.
	var d time.Duration
	for range 12 {
		d = p.observe(250, 250*time.Millisecond, nil)
	}
	if d != 0 {
		t.Errorf("pause after recovery %s, want 0", d)
	}
	// A slow baseline is not strain: only a jump against it is.
	var q pacer
	for range 5 {
		if d := q.observe(10, 3*time.Second, nil); d != 0 {
			t.Fatalf("a uniformly slow store paused %s", d)
		}
	}
}

// A store that became slower for good is strain only until the baseline has seen it for a
// window of batches: then the enqueue goes on without pauses, and a jump against the new normal
// is strain again.
func TestPacer_SlowerForGoodBecomesTheBaseline(t *testing.T) {
	var p pacer
	for range 10 {
		p.observe(4, 20*time.Millisecond, nil)
	}
	paused := 0
	var d time.Duration
	for range 2 * paceWindow {
		if d = p.observe(4, 200*time.Millisecond, nil); d > 0 {
			paused++
		}
	}
	if paused == 0 {
		t.Error("a tenfold slower store never paused the enqueue")
	}
	if d != 0 {
		t.Errorf("pause %s after %d batches at the new latency, want none: the slower store is the new baseline", d, 2*paceWindow)
	}
	if paused > paceWindow+12 {
		t.Errorf("paused before %d of %d batches at a steady latency, want the pauses to end once the window has seen it", paused, 2*paceWindow)
	}
	if d := p.observe(4, 2*time.Second, nil); d != paceMinPause {
		t.Errorf("a jump against the new baseline paused %s, want %s", d, paceMinPause)
	}
}

// A send the queue throttled (after the SDK's own retries) goes straight to the longest pause,
// where a transient blip starts at the shortest; either way the pause recovers afterwards.
func TestPacer_ThrottledSendPausesLongest(t *testing.T) {
	throttled := fmt.Errorf("send batch 2 of 4: %w", transport.MarkThrottled(errors.New("com.microsoft:server-busy")))
	var p pacer
	p.observe(250, 250*time.Millisecond, nil)
	if d := p.observe(0, 0, throttled); d != paceMaxPause {
		t.Errorf("pause after a throttled send: got %s want %s", d, paceMaxPause)
	}
	var q pacer
	if d := q.observe(0, 0, transport.MarkTransient(errors.New("connection reset"))); d != paceMinPause {
		t.Errorf("pause after a transient blip: got %s want %s", d, paceMinPause)
	}
	var d time.Duration
	for range 12 {
		d = p.observe(250, 250*time.Millisecond, nil)
	}
	if d != 0 {
		t.Errorf("pause after recovery from throttling: got %s want 0", d)
	}
}
