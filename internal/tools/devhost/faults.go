package devhost

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Delivery faults: what a queue (or the host reading it) can do to a message besides
// delivering it, injected on purpose (Host.InjectFault, the control endpoint's
// POST /queues/{queue}/faults/{kind}). Each is armed on a queue and hits the next message of
// that queue its filter accepts, at the moment the host would hand the message to an instance
// (a scheduled message at its time), in both delivery modes:
//
//   - FaultLost: the queue accepted the message and never delivers it. It is deleted instead of
//     delivered.
//   - FaultAnswerLost: a receive took effect and its answer never reached the host. The message
//     stays invisible as that receive left it, then is delivered again with its count one
//     higher: on the Storage queue for the listener's message lease (Options.MessageLease, 10
//     minutes, as the Storage Queues extension takes it: longer than most runs, so in effect
//     the message is lost for a while); with Service Bus for the lock duration, the receive's
//     DeliveryCount spent (the broker counts a delivery whose lock lapses).
//   - FaultCrash: the instance the message is delivered to crashes while it handles it: its
//     handler is killed (-9) CrashAfter into the invocation (or as the invocation ends, if it
//     ends first: before the message is settled) and, its host gone with it, nothing the
//     instance held is settled or renewed. The message, and every other message in flight on
//     that instance, stays invisible until its lease (Storage queue, 10 minutes) or lock
//     (Service Bus) lapses and is then delivered again. (Instance.Kill is the other case: only
//     the handler dies, and its host fails the invocations, which the queue delivers again
//     after visibilityTimeout, or at once with Service Bus.) The host restarts the handler.

// FaultKind names a delivery fault.
type FaultKind string

const (
	FaultLost       FaultKind = "lost"
	FaultAnswerLost FaultKind = "answer-lost"
	FaultCrash      FaultKind = "crash"
)

// FaultKinds lists the delivery faults.
var FaultKinds = []FaultKind{FaultLost, FaultAnswerLost, FaultCrash}

// ParseFaultKind reads a delivery fault's name.
func ParseFaultKind(s string) (FaultKind, error) {
	k := FaultKind(strings.ToLower(strings.TrimSpace(s)))
	for _, known := range FaultKinds {
		if k == known {
			return k, nil
		}
	}
	return "", fmt.Errorf("delivery fault %q: use one of %v", s, FaultKinds)
}

// MessageFault describes a delivery fault to arm (Host.InjectFault).
type MessageFault struct {
	Kind FaultKind
	// Queue names the queue: "" or "control" for the control queue (BATON_CONTROL_QUEUE),
	// "work" for the work queue (BATON_WORK_QUEUE), else a queue's name.
	Queue string
	// Match, when set, picks the messages the fault hits by their body (the message as the
	// function receives it); nil hits any.
	Match func(body string) bool
	// Times is how many messages the fault hits: 0 is one; negative, every message Match
	// accepts until Armed.Cancel.
	Times int
	// CrashAfter is how long into the invocation the instance crashes (FaultCrash).
	CrashAfter time.Duration
}

// Strike is one message a fault hit.
type Strike struct {
	Kind  FaultKind `json:"kind"`
	Queue string    `json:"queue"`
	// Message is the Storage message's ID; MessageID the Service Bus MessageId (Service Bus
	// delivery only).
	Message   string `json:"message"`
	MessageID string `json:"messageId,omitempty"`
	Body      string `json:"body"`
	// Count is the delivery the fault took: DequeueCount, or DeliveryCount with Service Bus.
	Count int64 `json:"count"`
	// Instance and PID are the instance that crashed and its handler (FaultCrash).
	Instance string    `json:"instance,omitempty"`
	PID      int       `json:"pid,omitempty"`
	At       time.Time `json:"at"`
	// Again is about when the message becomes visible again (zero: never).
	Again time.Time `json:"again,omitzero"`
	Note  string    `json:"note,omitempty"`
}

// Armed is an armed delivery fault.
type Armed struct {
	f    MessageFault
	q    *queueTrigger
	done chan struct{}

	mu        sync.Mutex
	left      int // messages still to hit; negative: unbounded
	pending   int // hits taken whose strike is not recorded yet
	cancelled bool
	closed    bool
	strikes   []Strike
}

// Done is closed once the fault has hit its last message, or was cancelled.
func (a *Armed) Done() <-chan struct{} { return a.done }

// Strikes lists the messages the fault hit so far.
func (a *Armed) Strikes() []Strike {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Strike(nil), a.strikes...)
}

// Cancel disarms the fault; a hit already under way (a crash waiting for its moment) still
// completes. It is safe to call more than once.
func (a *Armed) Cancel() {
	a.q.disarm(a)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cancelled, a.left = true, 0
	a.closeIfDone()
}

// Wait blocks until the fault is done (Done) or ctx ends, and returns its strikes.
func (a *Armed) Wait(ctx context.Context) ([]Strike, error) {
	select {
	case <-a.done:
		return a.Strikes(), nil
	case <-ctx.Done():
		return a.Strikes(), fmt.Errorf("wait for a %s fault on %s: %w", a.f.Kind, a.q.name, ctx.Err())
	}
}

// closeIfDone must be called with mu held.
func (a *Armed) closeIfDone() {
	if !a.closed && a.left == 0 && a.pending == 0 {
		a.closed = true
		close(a.done)
	}
}

// InjectFault arms f on its queue. It fails when no function of the app listens on the queue.
func (h *Host) InjectFault(f MessageFault) (*Armed, error) {
	if _, err := ParseFaultKind(string(f.Kind)); err != nil {
		return nil, err
	}
	name, err := h.faultQueue(f.Queue)
	if err != nil {
		return nil, err
	}
	var q *queueTrigger
	for _, t := range h.queues {
		if t.name == name {
			q = t
		}
	}
	if q == nil {
		return nil, fmt.Errorf("no function listens on queue %q", name)
	}
	left := f.Times
	if left == 0 {
		left = 1
	}
	a := &Armed{f: f, q: q, done: make(chan struct{}), left: left}
	q.fmu.Lock()
	q.faults = append(q.faults, a)
	q.fmu.Unlock()
	h.log.Warn("chaos: delivery fault armed", "fault", string(f.Kind), "queue", name, "times", left, "filtered", f.Match != nil)
	return a, nil
}

// faultQueue resolves MessageFault.Queue.
func (h *Host) faultQueue(queue string) (string, error) {
	switch strings.ToLower(queue) {
	case "", "control":
		if h.cfg.ControlQueue == "" {
			return "", fmt.Errorf("the settings name no control queue (BATON_CONTROL_QUEUE): name the queue")
		}
		return strings.ToLower(h.cfg.ControlQueue), nil
	case "work":
		if h.cfg.WorkQueue == "" {
			return "", fmt.Errorf("the settings name no work queue (BATON_WORK_QUEUE): name the queue")
		}
		return strings.ToLower(h.cfg.WorkQueue), nil
	}
	return strings.ToLower(queue), nil
}

// Strikes lists every message a delivery fault hit, in order.
func (h *Host) Strikes() []Strike {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Strike(nil), h.strikes...)
}

// takeFault returns the first armed fault that hits a message with this body handed to in
// (nil: none). A crash needs a running instance to crash. The caller records the strike
// (strike) or gives the hit back (untake).
func (t *queueTrigger) takeFault(body string, in *Instance) *Armed {
	t.fmu.Lock()
	defer t.fmu.Unlock()
	for i, a := range t.faults {
		if a.f.Kind == FaultCrash && (in == nil || !in.live()) {
			continue
		}
		if a.f.Match != nil && !a.f.Match(body) {
			continue
		}
		a.mu.Lock()
		if a.left == 0 {
			a.mu.Unlock()
			continue
		}
		if a.left > 0 {
			a.left--
		}
		a.pending++
		if a.left == 0 {
			t.faults = append(t.faults[:i:i], t.faults[i+1:]...)
		}
		a.mu.Unlock()
		return a
	}
	return nil
}

// untake gives back a hit that could not take effect (the instance to crash was gone).
func (t *queueTrigger) untake(a *Armed) {
	a.mu.Lock()
	a.pending--
	readd := false
	if !a.cancelled && a.left >= 0 {
		a.left++
		readd = a.left == 1 // takeFault removed it when it reached 0
	}
	a.closeIfDone()
	a.mu.Unlock()
	if readd {
		t.fmu.Lock()
		t.faults = append([]*Armed{a}, t.faults...)
		t.fmu.Unlock()
	}
}

// strike records a hit.
func (t *queueTrigger) strike(a *Armed, s Strike) {
	s.Kind, s.Queue = a.f.Kind, t.name
	if s.At.IsZero() {
		s.At = time.Now()
	}
	a.mu.Lock()
	a.strikes = append(a.strikes, s)
	a.pending--
	a.closeIfDone()
	a.mu.Unlock()
	t.h.mu.Lock()
	t.h.strikes = append(t.h.strikes, s)
	t.h.mu.Unlock()
	args := []any{"fault", string(s.Kind), "queue", s.Queue, "message", s.Message, "count", s.Count}
	if s.Instance != "" {
		args = append(args, "instance", s.Instance, "pid", s.PID)
	}
	if !s.Again.IsZero() {
		args = append(args, "again", s.Again.UTC().Format(time.RFC3339Nano))
	}
	t.h.log.Warn("chaos: delivery fault: "+s.Note, args...)
}

func (t *queueTrigger) disarm(a *Armed) {
	t.fmu.Lock()
	defer t.fmu.Unlock()
	for i, b := range t.faults {
		if b == a {
			t.faults = append(t.faults[:i:i], t.faults[i+1:]...)
			return
		}
	}
}

// crasher crashes an instance while it handles one message (FaultCrash): CrashAfter into the
// invocation, or as the invocation ends if that comes first.
type crasher struct {
	t     *queueTrigger
	a     *Armed
	in    *Instance
	pid   int
	s     Strike
	timer *time.Timer
	once  sync.Once
	ok    bool // the handler was killed
}

// startCrash arms the crash of in, whose handler is about to be invoked with the message s
// describes.
func (t *queueTrigger) startCrash(a *Armed, in *Instance, s Strike) *crasher {
	_, pid := in.State()
	c := &crasher{t: t, a: a, in: in, pid: pid, s: s}
	c.timer = time.AfterFunc(a.f.CrashAfter, func() {
		c.crash("the instance crashed while it handled the message; left to its lease or lock")
	})
	return c
}

func (c *crasher) crash(note string) {
	c.once.Do(func() {
		c.ok = c.in.crash(c.pid)
		if !c.ok {
			c.t.untake(c.a) // the handler was gone already: the next message gets the fault
			return
		}
		c.s.Instance, c.s.PID, c.s.At, c.s.Note = c.in.name, c.pid, time.Now(), note
		c.t.strike(c.a, c.s)
	})
}

// end is called once the invocation returned: the instance crashes now if it has not yet,
// before the message is settled. It reports whether the instance crashed, so the message must
// be left as it is.
func (c *crasher) end() bool {
	c.timer.Stop()
	c.crash("the instance crashed as its handler answered, before the message was settled; left to its lease or lock")
	return c.ok
}
