// Package coordinator fires an app's schedules and leads each run to the end: it decides every
// schedule occurrence exactly once under the scheduler lease (a heartbeat, or a run now), plans
// each run under a lease of its own, and supervises every run until it is final — by its chain
// of check messages (the fast path) and by each heartbeat's pass over the runs in progress, so
// a lost message delays a run by a heartbeat or two and never strands it.
//
// Leases are try-once: nothing waits or polls for one. A lease's epoch fences every write made
// under it, so a leader that lost its lease (a pause, a slow clock) cannot overwrite its
// successor's work. Leadership, failover and the bounds are in docs/design.md.
//
// It is Baton's engine, not its API: apps use package baton (github.com/batonfn/baton), and
// nothing here is covered by its compatibility promise.
package coordinator
