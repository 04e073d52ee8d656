// Package latency keeps the floor of recent latencies: the baseline against which the leader's
// pacer and the Storage-queue sender's window judge whether the store is strained, and the
// round trip a blob lock's head start is counted in. The floor
// is the lowest of the last Window observations, not of all time, so a store that has become
// slower for good (a busier account, a machine with other work) is the new normal after Window
// observations.
package latency

import "time"

// Window is how many recent observations the floor is the lowest of.
const Window = 32

// Floor is the lowest of the last Window latencies observed. The zero value is ready to use;
// it is not safe for concurrent use.
type Floor struct {
	recent [Window]time.Duration // a ring
	next   int                   // where the next observation goes in recent
	seen   int                   // observations recorded, up to Window
}

// Observe returns the lowest of d and the recent latencies before it, then records d.
func (f *Floor) Observe(d time.Duration) time.Duration {
	low := d
	for _, l := range f.recent[:f.seen] {
		low = min(low, l)
	}
	f.recent[f.next] = d
	f.next = (f.next + 1) % Window
	f.seen = min(f.seen+1, Window)
	return low
}

// Low returns the lowest of the recent latencies, 0 before the first observation.
func (f *Floor) Low() time.Duration {
	if f.seen == 0 {
		return 0
	}
	low := f.recent[0]
	for _, l := range f.recent[1:f.seen] {
		low = min(low, l)
	}
	return low
}
