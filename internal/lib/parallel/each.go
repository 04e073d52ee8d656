// Package parallel runs indexed work on a bounded number of goroutines.
package parallel

import (
	"sync"
	"sync/atomic"
)

// Each calls fn(i) for i from 0 to n-1, in order of start, on at most workers goroutines at
// once (at least one), and returns when every call has returned. A goroutine whose fn returns
// false takes no more indexes; the others go on (fn sees why it should stop, e.g. a context
// it checks, and returns false there too).
func Each(n, workers int, fn func(i int) bool) {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range min(max(workers, 1), n) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n && fn(i); i = int(next.Add(1)) - 1 {
			}
		})
	}
	wg.Wait()
}
