package api

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// SegmentView is one leadership of a run: from partition From (inclusive) to To (exclusive;
// To is the enqueue position so far while the last segment is still enqueuing), partitions
// were (re)enqueued by the leader of Epoch. The manifest names only the latest leader, so
// Leader is set on the segment of the run's current epoch and null on earlier ones.
type SegmentView struct {
	Epoch  int64          `json:"epoch"`
	From   int            `json:"from"`
	To     int            `json:"to"`
	Leader *ledger.Holder `json:"leader"`
}

func segments(m ledger.Manifest) []SegmentView {
	if len(m.Segments) == 0 {
		return nil
	}
	end := m.Checkpoint.Next
	if m.PlanDone {
		end = max(end, m.Partitions)
	}
	out := make([]SegmentView, len(m.Segments))
	for i, s := range m.Segments {
		out[i] = SegmentView{Epoch: s.Epoch, From: s.From, To: end}
		if i+1 < len(m.Segments) {
			out[i].To = m.Segments[i+1].From
		}
		if s.Epoch == m.Epoch && !isZeroHolder(m.Leader) {
			h := m.Leader
			out[i].Leader = &h
		}
	}
	return out
}

func isZeroHolder(h ledger.Holder) bool { return h == ledger.Holder{} }

// FailureView is a failed partition of a finished run: the report's error, and from its
// result the attempts, each failed try's error (shortened), the worker and the epoch (absent
// when the result could not be read).
type FailureView struct {
	Index    int            `json:"index"`
	Error    string         `json:"error"`
	Attempts int            `json:"attempts,omitempty"`
	Errors   []string       `json:"errors,omitempty"`
	Worker   *ledger.Holder `json:"worker,omitempty"`
	Epoch    int64          `json:"epoch,omitempty"`
	Finished time.Time      `json:"finished,omitzero"`
	// Redrives counts the redrive rounds the partition ran in; Attempts and Errors then cover
	// every round, and the worker, epoch and finish are the latest round's.
	Redrives int `json:"redrives,omitempty"`
}

// RedriveView is one redrive round of a run: who started it and when, how many partitions it
// ran again, and the state it reopened.
type RedriveView struct {
	Round      int          `json:"round"`
	By         string       `json:"by"`
	At         time.Time    `json:"at"`
	Partitions int          `json:"partitions"`
	From       ledger.State `json:"from"`
	FromReason string       `json:"fromReason,omitempty"`
	// Outcomes are, in GET /api/runs/{id} only, the round's first MaxFailureReads partitions as
	// the round recorded them (absent: no result yet), each with its attempts in the round and
	// over every round.
	Outcomes []RedrivenView `json:"outcomes,omitempty"`
}

// RedrivenView is one partition of a redrive round: its outcome in the round.
type RedrivenView struct {
	Index    int    `json:"index"`
	OK       bool   `json:"ok"`
	Error    string `json:"error,omitempty"`
	Attempts int    `json:"attempts"`
	// Total is its attempts over the run's rounds up to this one.
	Total int `json:"total"`
}

func redrives(m ledger.Manifest) []RedriveView {
	var out []RedriveView
	for _, rd := range m.Redrives {
		out = append(out, RedriveView{Round: rd.Round, By: rd.By, At: rd.At, Partitions: len(rd.Indexes), From: rd.From, FromReason: rd.FromReason})
	}
	return out
}

// roundResults reads the results of a run's redrive rounds once per request, however many of
// the detail's parts ask (the failures and the rounds' outcomes read the same ones). It is
// safe for concurrent use.
type roundResults struct {
	a   *API
	run string
	mu  sync.Mutex
	got map[[2]int]roundResult // (round, index) → what the read found
}

type roundResult struct {
	res   ledger.Result
	found bool
}

// read returns partition i's result in redrive round r (found false when it has none).
func (rr *roundResults) read(ctx context.Context, r, i int) (ledger.Result, bool, error) {
	rr.mu.Lock()
	got, ok := rr.got[[2]int{r, i}]
	rr.mu.Unlock()
	if ok {
		return got.res, got.found, nil
	}
	res, err := rr.a.cfg.Ledger.ReadResult(ctx, ledger.RoundRun(rr.run, r), i)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
	case err != nil:
		return res, false, err
	default:
		got = roundResult{res, true}
	}
	rr.mu.Lock()
	rr.got[[2]int{r, i}] = got
	rr.mu.Unlock()
	return got.res, got.found, nil
}

// redriven adds to f what the redrive rounds of m that ran its partition recorded.
func (rr *roundResults) redriven(ctx context.Context, m ledger.Manifest, f *FailureView) error {
	for _, rd := range m.Redrives {
		if _, ok := slices.BinarySearch(rd.Indexes, f.Index); !ok {
			continue
		}
		res, found, err := rr.read(ctx, rd.Round, f.Index)
		if err != nil {
			return err
		}
		if !found {
			continue
		}
		w := res.Worker
		f.Redrives++
		f.Attempts += res.Attempts
		f.Errors = append(f.Errors, res.Errors...)
		f.Worker, f.Epoch, f.Finished = &w, res.Epoch, res.Finished
	}
	return nil
}

// WorkersView is who processed a run's partitions, from the worker recorded in each result:
// every result when the run has at most MaxWorkerReads partitions, else an even sample of
// MaxWorkerReads partition indexes (Sampled, Read says how many results were read and found).
type WorkersView struct {
	Sampled   bool           `json:"sampled"`
	Read      int            `json:"read"`
	Instances []WorkerCount  `json:"instances"`
	Epochs    map[string]int `json:"epochs,omitempty"`
}

// WorkerCount is one worker process and the number of partitions (of those read) it
// recorded, succeeded and failed.
type WorkerCount struct {
	Worker     ledger.Holder `json:"worker"`
	Partitions int           `json:"partitions"`
	Failed     int           `json:"failed"`
}

// detail adds a run's failures and workers to its view: at most MaxFailureReads +
// MaxWorkerReads result reads, whatever the run's size.
func (a *API) detail(ctx context.Context, m ledger.Manifest, v *RunView) error {
	rd := ledger.NewReader(a.cfg.Ledger, m.RunID)
	rounds := &roundResults{a: a, run: m.RunID, got: map[[2]int]roundResult{}}
	if v.Report != nil && len(v.Report.FailedList) > 0 {
		list := v.Report.FailedList
		v.Failures = make([]FailureView, len(list))
		err := forEach(ctx, len(list), func(ctx context.Context, i int) error {
			f := FailureView{Index: list[i].Index, Error: list[i].Error}
			if i < MaxFailureReads {
				res, err := rd.Read(ctx, list[i].Index)
				switch {
				case errors.Is(err, ledger.ErrNotFound):
				case err != nil:
					return err
				default:
					w := res.Worker
					f.Attempts, f.Errors, f.Worker, f.Epoch, f.Finished = res.Attempts, res.Errors, &w, res.Epoch, res.Finished
				}
				if err := rounds.redriven(ctx, m, &f); err != nil {
					return err
				}
			}
			v.Failures[i] = f
			return nil
		})
		if err != nil {
			return err
		}
	}
	w, err := a.workers(ctx, m, rd)
	if err != nil {
		return err
	}
	v.Workers = w
	return rounds.outcomes(ctx, m, rd, v)
}

// outcomes adds to each redrive round of v its first MaxFailureReads partitions' outcomes in
// the round, with their attempts over the first round and every redrive round up to it.
func (rr *roundResults) outcomes(ctx context.Context, m ledger.Manifest, first *ledger.Reader, v *RunView) error {
	for k, rd := range m.Redrives {
		for _, i := range rd.Indexes[:min(len(rd.Indexes), MaxFailureReads)] {
			res, found, err := rr.read(ctx, rd.Round, i)
			if err != nil {
				return err
			}
			if !found {
				continue
			}
			total := 0
			if r0, err := first.Read(ctx, i); err == nil {
				total = r0.Attempts
			} else if !errors.Is(err, ledger.ErrNotFound) {
				return err
			}
			for _, prev := range m.Redrives[:k+1] {
				if _, ok := slices.BinarySearch(prev.Indexes, i); !ok {
					continue
				}
				r, found, err := rr.read(ctx, prev.Round, i)
				if err != nil {
					return err
				}
				if found {
					total += r.Attempts
				}
			}
			v.Redrives[k].Outcomes = append(v.Redrives[k].Outcomes, RedrivenView{Index: i, OK: res.OK, Error: res.Error,
				Attempts: res.Attempts, Total: total})
		}
	}
	return nil
}

// workers reads the results of every partition (up to MaxWorkerReads) or of an even sample.
func (a *API) workers(ctx context.Context, m ledger.Manifest, rd *ledger.Reader) (*WorkersView, error) {
	n := m.Checkpoint.Next
	if m.PlanDone {
		n = max(n, m.Partitions)
	}
	if n == 0 || m.State == ledger.StateSkipped || m.State == ledger.StateMissed {
		return nil, nil
	}
	idx := make([]int, 0, min(n, MaxWorkerReads))
	sampled := n > MaxWorkerReads
	if !sampled {
		for i := range n {
			idx = append(idx, i)
		}
	} else {
		for k := range MaxWorkerReads {
			idx = append(idx, k*n/MaxWorkerReads)
		}
	}
	var (
		mu     sync.Mutex
		counts = map[ledger.Holder]*WorkerCount{}
		epochs = map[string]int{}
		read   int
	)
	err := forEach(ctx, len(idx), func(ctx context.Context, i int) error {
		res, err := rd.Read(ctx, idx[i])
		if errors.Is(err, ledger.ErrNotFound) {
			return nil // not processed yet
		}
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		read++
		c := counts[res.Worker]
		if c == nil {
			c = &WorkerCount{Worker: res.Worker}
			counts[res.Worker] = c
		}
		c.Partitions++
		if !res.OK {
			c.Failed++
		}
		epochs[epochKey(res.Epoch)]++
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := &WorkersView{Sampled: sampled, Read: read, Instances: make([]WorkerCount, 0, len(counts))}
	for _, c := range counts {
		out.Instances = append(out.Instances, *c)
	}
	sort.Slice(out.Instances, func(i, j int) bool {
		x, y := out.Instances[i], out.Instances[j]
		if x.Partitions != y.Partitions {
			return x.Partitions > y.Partitions
		}
		if x.Worker.Instance != y.Worker.Instance {
			return x.Worker.Instance < y.Worker.Instance
		}
		return x.Worker.PID < y.Worker.PID
	})
	if len(epochs) > 0 {
		out.Epochs = epochs
	}
	return out, nil
}

func epochKey(e int64) string { return strconv.FormatInt(e, 10) }
