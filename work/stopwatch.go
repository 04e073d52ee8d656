package work

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// ErrRunStopped is the cause of a partition's context cancelled because its run was stopped (an
// operator's cancel, or the job's failure budget). The partition's outcome is not recorded.
var ErrRunStopped = errors.New("the run was stopped")

// DefaultStopPoll is how often a process reads the manifest of a run it has partitions in
// flight of, to cancel them once the run is stopped.
const DefaultStopPoll = 2 * time.Second

// stopWatch cancels the partitions a process has in flight when their run gets a Stop: while a
// run has deliveries in flight here, one goroutine reads its manifest every poll.
type stopWatch struct {
	mu   sync.Mutex
	runs map[string]*watchedRun
}

// watchedRun is a run with deliveries in flight in this process.
type watchedRun struct {
	cancels map[*context.Context]context.CancelCauseFunc
	quit    chan struct{}
	stopped bool
}

// watch returns ctx, cancelled with cause ErrRunStopped once the run is seen stopped, and the
// function that ends the watch of this delivery (call it when its partitions are done).
func (w *Worker) watch(ctx context.Context, run string) (context.Context, func()) {
	s := &w.stops
	wctx, cancel := context.WithCancelCause(ctx)
	key := &wctx
	s.mu.Lock()
	if s.runs == nil {
		s.runs = map[string]*watchedRun{}
	}
	r := s.runs[run]
	if r == nil {
		r = &watchedRun{cancels: map[*context.Context]context.CancelCauseFunc{}, quit: make(chan struct{})}
		s.runs[run] = r
		go w.poll(run, r)
	}
	r.cancels[key] = cancel
	if r.stopped {
		cancel(ErrRunStopped)
	}
	s.mu.Unlock()
	return wctx, func() {
		s.mu.Lock()
		delete(r.cancels, key)
		if len(r.cancels) == 0 && s.runs[run] == r {
			delete(s.runs, run)
			close(r.quit)
		}
		s.mu.Unlock()
		cancel(nil)
	}
}

// poll reads run's manifest every StopPoll until the watch ends, and cancels the deliveries in
// flight once the manifest has a Stop (the fresh copy also goes to the cache, so the process's
// later deliveries of the run are dropped).
func (w *Worker) poll(run string, r *watchedRun) {
	t := time.NewTicker(w.cfg.StopPoll)
	defer t.Stop()
	for {
		select {
		case <-r.quit:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.RecordTimeout)
		m, err := w.cfg.Store.ReadManifest(ctx, run)
		cancel()
		if err != nil || m.Stop == nil {
			continue
		}
		w.stopped(m)
		return
	}
}

// stopped acts on m, a run's manifest with a Stop: the process's copy becomes m (its later
// deliveries of the run are dropped), and its deliveries of the run in flight are cancelled.
func (w *Worker) stopped(m ledger.Manifest) {
	w.manifests.put(m, w.now())
	s := &w.stops
	s.mu.Lock()
	r := s.runs[m.RunID]
	n := 0
	if r != nil {
		r.stopped = true
		for _, c := range r.cancels {
			c(ErrRunStopped)
		}
		n = len(r.cancels)
	}
	s.mu.Unlock()
	if n > 0 {
		w.logger().Warn("run stopped: cancelling its partitions in flight here", "run", m.RunID, "epoch", m.Epoch,
			"instance", w.cfg.Holder.Instance, "deliveries", n, "stoppedBy", m.Stop.By, "state", m.Stop.State)
	}
}

// stoppedCtx reports whether ctx was cancelled because its run was stopped.
func stoppedCtx(ctx context.Context) bool { return errors.Is(context.Cause(ctx), ErrRunStopped) }
