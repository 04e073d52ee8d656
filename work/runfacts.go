package work

import "sync"

// runFacts remembers, per process, what it has learnt of runs that stays true once learnt: the
// partition count a message of the last plan batch carried (a process that has it needs no
// copy of the manifest saying planning is done to tell whether an append may have completed
// the run), and the done shards found complete (every partition a shard holds has its record;
// records are only appended, so it stays so, and later finish tries read only the others).
type runFacts struct {
	mu   sync.Mutex
	runs map[string]*runFact
}

type runFact struct {
	count    int          // the run's partition count (0: not learnt)
	complete map[int]bool // done shards found complete
}

// runFactsMax bounds the runs remembered; past it the memory starts over.
const runFactsMax = 1024

// factLocked returns run's facts, created if need be; f.mu is held.
func (f *runFacts) factLocked(run string) *runFact {
	if r, ok := f.runs[run]; ok {
		return r
	}
	if f.runs == nil || len(f.runs) >= runFactsMax {
		f.runs = map[string]*runFact{}
	}
	r := &runFact{}
	f.runs[run] = r
	return r
}

// learnCount remembers run's partition count, as a message of its last plan batch (or one sent
// once planning was done) carries it (n > 0).
func (f *runFacts) learnCount(run string, n int) {
	if n <= 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.factLocked(run).count = n
}

// count returns the partition count learnt for run (0: none).
func (f *runFacts) count(run string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.runs[run]; ok {
		return r.count
	}
	return 0
}

// openShards returns run's shards below shards not known complete, in order.
func (f *runFacts) openShards(run string, shards int) []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var done map[int]bool
	if r, ok := f.runs[run]; ok {
		done = r.complete
	}
	open := make([]int, 0, shards)
	for s := range shards {
		if !done[s] {
			open = append(open, s)
		}
	}
	return open
}

// shardComplete remembers done shard s of run as complete.
func (f *runFacts) shardComplete(run string, s int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.factLocked(run)
	if r.complete == nil {
		r.complete = map[int]bool{}
	}
	r.complete[s] = true
}
