// Package soak is Baton's chaos soak: a seeded plan of faults, manual starts and schedule
// pauses to drive a local multi-instance host with (plan.go), and a history checker that
// proves, after the faults stop and a quiet period lets runs finish, what Baton promises
// whatever fails, for every schedule the app declares:
//
//   - every due occurrence of every schedule, from the schedule's first cursor to the end of
//     the window (the last heartbeat less one heartbeat and a margin), has exactly one ledger
//     record named by the schedule and the occurrence, with trigger "timer", its occurrence,
//     and a reason when it was skipped, missed, paused, failed or timed out; no record names an
//     occurrence before the app started or decides one early;
//   - a record is decided within a heartbeat (and a margin) of its occurrence unless a fault
//     explains the delay: no schedule is held up by another's runs or planning; a missed
//     record is later than the schedule's catch-up window and a fault explains it;
//   - the overlap policy: a skip names the schedule's run in progress (created before it, not
//     yet final), allow never skips, and under skip and buffer-one no run starts before the one
//     before it is final (a queued run plans only once it is);
//   - a paused record is decided while the schedule is paused (through its ledger state, as
//     the API's pause writes it) and names the note; nothing else is decided then (one
//     heartbeat of lag at each edge);
//   - no duplicate runs: one "run created" per run, one run per Idempotency-Key, every
//     accepted manual start names a run that exists, no run that nobody asked for;
//   - every run is planned under its own lease (leases/runs/<run>): its segments' epochs and
//     every line that begins or resumes its planning belong to that lease's leaderships;
//   - every partition of every planned run has exactly one result (the results listing is
//     exactly 0..partitions-1) and the report's counts match the results;
//   - every finished planned run was aggregated once: one report, one aggregation log line;
//   - per lease (the scheduler's and every run's), leaderships never overlap and epochs
//     strictly increase, from the handlers' own log lines, from samples of the scheduler lease
//     blob and from each run's lease blob read at the end;
//   - supervision's bounds (supervise.go), which hold as long as heartbeats fire and storage
//     answers, whatever control messages are lost: a run no planner took a check delay after its
//     start (its turn, for a queued run) is planned by the next heartbeat; a planner that died,
//     or whose slice's follow-up check was lost, is replaced within its lease, the check margin
//     and the next heartbeat; a planned run still missing partitions when a re-enqueue round
//     comes due is re-enqueued by the next heartbeat, round after round;
//   - every run is final within its documented bound (coordinator FinalBound: the hard
//     deadline plus one check delay and one lease) plus one heartbeat, plus a slack for the
//     checker.
//
// The checker reads plain data (History): the ledger as read from the runs container
// (ReadLedger), the handler log lines the host kept, the heartbeats the host fired, the
// schedules as the app declared them, and the manual calls, pauses and faults the driver
// made, delivery faults included (a control message lost, a receive whose answer was lost, an
// instance crashed while it handled a check, every control message of one run lost, a partition
// message lost). It never trusts a claim the system makes about itself without the evidence in
// storage.
// What it cannot see: a partition processed twice whose second result was refused (that is the
// create-once rule working, not a violation), and log lines a killed process never wrote (an
// aggregation line missing because its writer was killed is therefore tolerated when the
// driver killed that very process).
//
// The driver lives in the e2e tests (TestSoak): `make soak` for the long run, a short seeded
// run inside `make test`. docs/reliability.md says how to run and replay it.
package soak
