package work

import "github.com/batonfn/baton/internal/lib/memo"

// runFacts remembers, per process, what it has learnt of runs that stays true once learnt: the
// partition count a message of the last plan batch carried (a process that has it needs no
// copy of the manifest saying planning is done to tell whether an append may have completed
// the run), and the done shards found complete (every partition a shard holds has its record;
// records are only appended, so it stays so, and later finish tries read only the others).
type runFacts struct {
	runs *memo.Map[runFact]
}

type runFact struct {
	count    int          // the run's partition count (0: not learnt)
	complete map[int]bool // done shards found complete
}

// runFactsMax bounds the runs remembered; past it the memory starts over.
const runFactsMax = 1024

func newRunFacts() runFacts { return runFacts{memo.New[runFact](runFactsMax)} }

// learnCount remembers run's partition count, as a message of its last plan batch (or one sent
// once planning was done) carries it (n > 0).
func (f runFacts) learnCount(run string, n int) {
	if n > 0 {
		f.runs.Update(run, func(r *runFact) { r.count = n })
	}
}

// count returns the partition count learnt for run (0: none).
func (f runFacts) count(run string) int {
	r, _ := f.runs.Get(run)
	return r.count
}

// openShards returns run's shards below shards not known complete, in order.
func (f runFacts) openShards(run string, shards int) []int {
	open := make([]int, 0, shards)
	f.runs.View(run, func(r runFact, _ bool) {
		for s := range shards {
			if !r.complete[s] {
				open = append(open, s)
			}
		}
	})
	return open
}

// shardComplete remembers done shard s of run as complete.
func (f runFacts) shardComplete(run string, s int) {
	f.runs.Update(run, func(r *runFact) {
		if r.complete == nil {
			r.complete = map[int]bool{}
		}
		r.complete[s] = true
	})
}
