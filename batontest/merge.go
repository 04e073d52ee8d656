package batontest

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/batonfn/baton"
)

// maxTriples bounds the associativity checks on consecutive partitions.
const maxTriples = 20

// checkMerge: for a Merger, the partial aggregate of each result (what Baton folds) merges to
// the same value in any grouping and order, and to what Aggregate makes of all the results.
func (c *checker) checkMerge(results []baton.Result) {
	c.t.Helper()
	m, ok := c.job.(baton.Merger)
	if !ok {
		return
	}
	run := baton.RunInfo{Run: "batontest-merge", Job: jobName, Params: c.params, Partitions: len(results)}
	one := make([]json.RawMessage, len(results))
	for i, r := range results {
		var err error
		if one[i], err = c.job.Aggregate(c.ctx, run, func(yield func(baton.Result, error) bool) { yield(r, nil) }); err != nil {
			c.errorf("merge", "partition %d: Aggregate of its result alone: %v", i, err)
			return
		}
	}
	// merge keeps the first Merge error; each comparison below looks at it first.
	var mergeErr error
	merge := func(parts ...json.RawMessage) json.RawMessage {
		if mergeErr != nil {
			return nil
		}
		out, err := m.Merge(c.ctx, run, parts)
		if err != nil {
			mergeErr = fmt.Errorf("Merge(%s): %w", joinJSON(parts), err)
		}
		return out
	}
	failed := func() bool {
		if mergeErr != nil {
			c.errorf("merge", "%v", mergeErr)
		}
		return mergeErr != nil
	}
	full, err := c.job.Aggregate(c.ctx, run, func(yield func(baton.Result, error) bool) {
		for _, r := range results {
			if !yield(r, nil) {
				return
			}
		}
	})
	if err != nil {
		c.errorf("merge", "Aggregate of every result: %v", err)
		return
	}
	fold := func(order []int) json.RawMessage {
		acc := one[order[0]]
		for _, i := range order[1:] {
			acc = merge(acc, one[i])
		}
		return acc
	}
	order := inOrder(len(one))
	inIndexOrder := fold(order)
	if failed() {
		return
	}
	if !sameJSON(inIndexOrder, full) {
		c.errorf("merge", "folding the results one by one in index order gives %s, but Aggregate of all of them gives %s", inIndexOrder, full)
		return
	}
	slices.Reverse(order)
	if reversed := fold(order); failed() {
		return
	} else if !sameJSON(reversed, inIndexOrder) {
		c.errorf("merge is order-sensitive", "folding partitions %d down to 0 gives %s, but 0 up to %d gives %s", len(one)-1, reversed, len(one)-1, inIndexOrder)
		return
	}
	if all := merge(one...); failed() {
		return
	} else if !sameJSON(all, inIndexOrder) {
		c.errorf("merge", "one Merge of every partial gives %s, but merging them one at a time gives %s", all, inIndexOrder)
		return
	}
	for i := 0; i+2 < len(one) && i < maxTriples; i++ {
		a, b, d := one[i], one[i+1], one[i+2]
		left, right := merge(merge(a, b), d), merge(a, merge(b, d))
		ab, ba := merge(a, b), merge(b, a)
		if failed() {
			return
		}
		if !sameJSON(left, right) {
			c.errorf("merge is not associative", "partitions %d, %d, %d: (%d+%d)+%d gives %s, %d+(%d+%d) gives %s", i, i+1, i+2, i, i+1, i+2, left, i, i+1, i+2, right)
			return
		}
		if !sameJSON(ab, ba) {
			c.errorf("merge is order-sensitive", "partitions %d and %d: merged in index order %s, the other way round %s", i, i+1, ab, ba)
			return
		}
	}
}

func joinJSON(parts []json.RawMessage) string {
	b, _ := json.Marshal(parts)
	return string(b)
}
