// Package coordinator fires an app's schedules and leads each run to the end: it decides every
// schedule occurrence exactly once, plans each run under a lease of its own, and keeps the run's
// check chain going until the run is final.
//
// It is Baton's engine, not its API: apps use package baton (github.com/batonfn/baton), and
// nothing here is covered by its compatibility promise.
//
// # Two kinds of lease
//
// The scheduler lease (the Leader's own lock, leases/<BATON_LEASE_NAME>) is held by whoever
// decides occurrences: a heartbeat (the Tick timer) or a run now. It is held for a few storage
// calls at a time and never while planning (heartbeat.go). Each run's planning holds the run's
// own lease (leases/runs/<run>, Leader.RunAsLeaderOf), taken by the check that starts the run,
// a check or lease probe that resumes it, or a handover; so a long planning of one run never
// delays another run or a schedule's next occurrence.
//
// # Leader election
//
// Leadership is the lease on a zero-length blob (bloblease.BlobLock). The election.Lock
// interface is a try-once mutex: Acquire makes a single attempt and returns *election.HeldError, naming
// the current holder, when someone else leads. Nothing here waits or polls for the lock:
// instances contest it only when a heartbeat, a run now or a check message arrives.
//
// Every acquisition records in the blob's metadata the holder's identity (app, instance,
// process id), the acquired-at time and an epoch one higher than the last one recorded. Only
// the lease holder can write that metadata, and the write is also conditioned on the ETag of
// the record it bumped, so two acquisitions can never record the same epoch: epochs strictly
// increase (they may skip a number when a write's response is lost and it is retried).
//
// Leader.RunAsLeader acquires once, runs a task with a context, renews the lease every
// RenewInterval (a third of the duration, jittered) and cancels the task's context as soon as
// leadership can no longer be guaranteed:
//   - a renewal fails (the lease was broken or taken, or transient failures used up its
//     budget, which ends at the local deadline);
//   - the local deadline passes: last successful renewal + LeaseDuration − SafetyMargin,
//     counted from the moment each renewal was sent;
//   - the task stops calling beat for StallTimeout (it then stops renewing, so the lease
//     lapses and another instance can take over);
//   - ReleaseAll hands leadership over (SIGTERM).
//
// When the task returns, the lease is released with a fresh bounded context so the next
// contender wins at once. election.Leader.State and election.Lock.State read the leadership without contending.
//
// # Failover of a run mid-enqueue
//
// Check messages travel on the control queue (Config.Control), apart from the partitions.
// Besides each run's chain of checks, a leader enqueueing a run schedules a lease probe when
// it starts and after every renewal, due when that renewal's lease would lapse; the probe of
// the last renewal before a crash finds the lease free and resumes the run. A leader stopped
// gracefully (Coordinator.Handover) releases the lease and sends an immediate check instead.
// See handover.go.
//
// # What is guaranteed
//
// Storage grants a lease to one lease ID at a time, so at most one Acquire succeeds while a
// lease is live, and after a release, break or expiry the next Acquire succeeds at once. A
// task's context is cancelled as soon as a renewal finds the lease lost, so within one renew
// interval of the loss, and no later than the local deadline when storage cannot be reached.
// The stall watchdog is checked between renewals, so a stall is noticed at most one renewal's
// budget late.
//
// # What is not guaranteed
//
// Cancelling a context does not stop code that ignores it, and a process can pause (GC, VM
// freeze) between checking its context and writing. So leadership alone is not mutual
// exclusion for side effects: writes must carry election.Lease.Epoch and readers must reject a write
// whose epoch is older than one they have seen (fencing). Time is measured only on the local
// clock, from before each request was sent; a clock that runs slow by more than SafetyMargin
// over one lease duration defeats the local deadline. election.HeldError's holder is read from storage
// just after the failed attempt; for a few milliseconds after a takeover by a holder that has
// not yet recorded itself, it can still name the previous holder.
package coordinator
