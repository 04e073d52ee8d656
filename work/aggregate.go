package work

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/lib/parallel"
)

// aggregate reads every result in index order (concurrently, with a bounded read-ahead) and
// hands them to Job.Aggregate, counting successes and failures on the way. Results the job
// does not consume are still read, so the counts always cover every partition. A read error
// is returned as is (transient); a panic in Aggregate, output that is not JSON and a result
// that names another partition are permanent.
func (w *Worker) aggregate(ctx context.Context, job Job, m *ledger.Manifest) (ledger.Report, error) {
	rep := ledger.Report{Run: m.RunID, Job: m.Job, Partitions: m.Partitions, Aggregator: w.cfg.Holder}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A redrive round's report (m.RunID its round's key) aggregates the run's results, each
	// partition's latest round standing for it.
	run, round := ledger.SplitRunKey(m.RunID)
	var later map[int]ledger.Result
	if round > 0 {
		var err error
		if later, err = w.redriven(ctx, run, round); err != nil {
			return rep, fmt.Errorf("read redriven results: %w", err)
		}
	}
	rd := readResults(ctx, w.cfg.Store, run, w.cfg.ReadConcurrency)
	defer rd.close()
	// A stopped run has the results it has: its partitions without one are cancelled, and it
	// has at least the partitions sent before planning stopped.
	stopped := m.Stop != nil
	if stopped {
		rep.Partitions = max(rep.Partitions, m.Checkpoint.Next)
		if n := len(rd.refs); n > 0 {
			rep.Partitions = max(rep.Partitions, rd.refs[n-1].Index+1)
		}
	}

	var readErr error
	timedOut := false
	next := 0
	take := func() (ledger.Result, error, bool) {
		if next >= rep.Partitions || readErr != nil {
			return ledger.Result{}, nil, false
		}
		r, err := rd.next()
		for err == nil && r.Index < next && r.Run == run {
			r, err = rd.next() // listed twice (recorded twice): the first stands
		}
		switch {
		case stopped && errors.Is(err, errNoMore):
			rep.Cancelled += rep.Partitions - next
			next = rep.Partitions
			return ledger.Result{}, nil, false
		case stopped && err == nil && r.Index > next && r.Run == run:
			rep.Cancelled += r.Index - next
			next = r.Index
		}
		switch {
		case errors.Is(err, errNoMore) || err == nil && r.Index > next && r.Run == run:
			err = fmt.Errorf("result %s/%d: %w", run, next, ledger.ErrNotFound)
		case err == nil && r.Run != run:
			err = Permanent(fmt.Errorf("result %s/%d names run %s partition %d", run, next, r.Run, r.Index))
		}
		if o, ok := later[r.Index]; ok && err == nil {
			r = overlay(r, o)
		}
		if err != nil {
			readErr = err
			return ledger.Result{}, err, true
		}
		next++
		if r.OK {
			rep.Succeeded++
		} else {
			rep.Failed++
			timedOut = timedOut || r.TimedOut
			if len(rep.FailedList) < MaxReportFailures {
				rep.FailedList = append(rep.FailedList, ledger.FailedPart{Index: r.Index, Error: r.Error})
			}
		}
		return r, nil, true
	}
	seq := func(yield func(ledger.Result, error) bool) {
		for {
			r, err, ok := take()
			if !ok || !yield(r, err) || err != nil {
				return
			}
		}
	}

	info := RunInfo{Run: run, Job: m.Job, Params: m.Params, Partitions: rep.Partitions}
	out, aerr := runAggregate(ctx, job, info, seq)
	for _, _, ok := take(); ok; _, _, ok = take() {
	}
	switch {
	case readErr != nil:
		return rep, fmt.Errorf("read results: %w", readErr)
	case aerr != nil:
		return rep, aerr
	case len(out) > 0 && !json.Valid(out):
		return rep, Permanent(errors.New("job aggregate is not JSON"))
	}
	rep.Aggregate = out
	rep.State = ledger.FinalState(rep.Partitions, rep.Failed, timedOut)
	if stopped {
		rep.State = m.Stop.State
	}
	return rep, nil
}

func runAggregate(ctx context.Context, job Job, info RunInfo, seq func(func(ledger.Result, error) bool)) (out json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, Permanent(fmt.Errorf("job aggregate panicked: %v", r))
		}
	}()
	return job.Aggregate(ctx, info, seq)
}

// resultReader reads a run's results concurrently, after one listing of results/, and hands
// them out in index order: each block is one read. At most conc reads run at once and 4×conc
// are read ahead, so memory stays bounded however many partitions a run has.
type resultReader struct {
	ctx     context.Context
	cancel  context.CancelFunc
	futures chan chan fetched
	wg      sync.WaitGroup
	err     error                                      // the listing's
	refs    []ledger.ResultRef                         // in index order
	pos     int                                        // the next ref to hand out
	got     map[ledger.ResultRef]map[int]ledger.Result // units read and not yet handed out whole, by unit
}

type fetched struct {
	unit ledger.ResultRef
	rs   []ledger.Result
	err  error
}

// errNoMore: every listed result has been handed out.
var errNoMore = errors.New("no more results")

// readResults lists the run's results, then starts the reads: a feeder hands each read unit
// (a block, or a result of its own, in the order of their first partitions), with its
// future, to the first idle one of conc readers (parallel.Each), then queues the future for
// next. The feeder stops when the context ends, and the readers with it.
func readResults(ctx context.Context, s Ledger, run string, conc int) *resultReader {
	ctx, cancel := context.WithCancel(ctx)
	rd := &resultReader{ctx: ctx, cancel: cancel, futures: make(chan chan fetched, 4*conc), got: map[ledger.ResultRef]map[int]ledger.Result{}}
	l, err := ledger.List(ctx, s, run)
	if err != nil {
		rd.err = err
		close(rd.futures)
		return rd
	}
	rd.refs = l.Refs
	units := l.Units()
	type read struct {
		u ledger.ResultRef
		f chan fetched
	}
	reads := make(chan read) // unbuffered: a read is handed out only to an idle reader
	rd.wg.Go(func() {
		parallel.Each(len(units), conc, func(int) bool {
			rq, ok := <-reads
			if !ok {
				return false
			}
			rs, err := ledger.ReadUnit(ctx, s, run, rq.u)
			rq.f <- fetched{rq.u, rs, err}
			return true
		})
	})
	rd.wg.Go(func() {
		defer close(rd.futures)
		defer close(reads)
		for _, u := range units {
			f := make(chan fetched, 1)
			select {
			case reads <- read{u, f}:
			case <-ctx.Done():
				return
			}
			select {
			case rd.futures <- f:
			case <-ctx.Done():
				return
			}
		}
	})
	return rd
}

// unitOf is the read unit a ref belongs to (as Listing.Units names it).
func (rd *resultReader) unitOf(ref ledger.ResultRef) ledger.ResultRef {
	if ref.Block.IsZero() {
		return ref
	}
	return ledger.ResultRef{Block: ref.Block}
}

// next returns the next result in index order; errNoMore after the last. Units come in the
// order of their first partitions, so a ref's unit is at latest the next one to arrive: a
// block whose partitions interleave with results of their own is kept until handed out.
func (rd *resultReader) next() (ledger.Result, error) {
	if rd.err != nil {
		return ledger.Result{}, rd.err
	}
	if rd.pos >= len(rd.refs) {
		return ledger.Result{}, errNoMore
	}
	ref := rd.refs[rd.pos]
	key := rd.unitOf(ref)
	for rd.got[key] == nil {
		select {
		case f, ok := <-rd.futures:
			if !ok {
				if err := rd.ctx.Err(); err != nil {
					return ledger.Result{}, err
				}
				return ledger.Result{}, fmt.Errorf("result %d: its read never came", ref.Index)
			}
			v := <-f // every future handed out has a reader goroutine that fills it
			if v.err != nil {
				return ledger.Result{}, v.err
			}
			m := make(map[int]ledger.Result, len(v.rs))
			for _, r := range v.rs {
				m[r.Index] = r
			}
			rd.got[rd.unitOf(v.unit)] = m
		case <-rd.ctx.Done():
			return ledger.Result{}, rd.ctx.Err()
		}
	}
	rd.pos++
	m := rd.got[key]
	r, ok := m[ref.Index]
	if !ok {
		return ledger.Result{}, fmt.Errorf("result %d is listed but its read does not hold it", ref.Index)
	}
	delete(m, ref.Index)
	if len(m) == 0 {
		delete(rd.got, key)
	}
	return r, nil
}

// close stops the reads and waits for them.
func (rd *resultReader) close() {
	rd.cancel()
	rd.wg.Wait()
}
