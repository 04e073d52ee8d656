// Package soak is Baton's chaos soak: a seeded plan of faults and manual starts to drive a
// local multi-instance host with (plan.go), and a history checker that proves, after the
// faults stop and a quiet period lets runs finish, what Baton promises whatever fails:
//
//   - every schedule occurrence between the first and the last one fired has exactly one
//     ledger record, in a final state, with trigger "timer", its occurrence, and a reason when
//     it was skipped, missed, failed or timed out; an occurrence the host never fired is
//     recorded too (as missed, by the next tick);
//   - no duplicate runs: one "run created" per run, one run per Idempotency-Key, every
//     accepted manual start names a run that exists, no run that nobody asked for;
//   - every partition of every planned run has exactly one result (the results listing is
//     exactly 0..partitions-1) and the report's counts match the results;
//   - every finished planned run was aggregated once: one report, one aggregation log line;
//   - leaderships never overlap and epochs strictly increase, from the handlers' own log lines
//     and from samples of the lease blob;
//   - every run is final within FinalBound of its deadline (plus a slack for the checker).
//
// The checker reads plain data (History): the ledger as read from the runs container
// (ReadLedger), the handler log lines the host kept, the timer fires the host recorded, the
// manual calls and faults the driver made. It never trusts a claim the system makes about
// itself without the evidence in storage. What it cannot see: a partition processed twice whose
// second result was refused (that is the create-once rule working, not a violation), and log
// lines a killed process never wrote (an aggregation line missing because its writer was
// killed is therefore tolerated when the driver killed that very process).
//
// The driver lives in the e2e tests (TestSoak): `make soak` for the long run, a short seeded
// run inside `make test`. docs/reliability.md says how to run and replay it.
package soak
