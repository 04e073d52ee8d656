// Package batontest checks a job against what Baton's exactly-once relies on, in the job
// author's own tests, in memory.
//
// One call runs the job end to end — plan, process every partition through Baton's real
// worker over an in-memory ledger, fold or aggregate — several times over, and reports each
// broken promise with t.Errorf, naming the property and the partition:
//
//	func TestExport(t *testing.T) {
//		rep := batontest.Check(t, exportJob(), `{"container":"data"}`)
//		// rep.Aggregate is the report's aggregate, for the test's own assertions.
//	}
//
// The properties (the job's side of the contract):
//
//   - plan: planning twice gives the same partitions, and planning resumed from a cursor it
//     emitted (up to about 100 of them, spread over the run, and the last) gives exactly the
//     partitions after it (a leader that takes over resumes there); a cursor is never empty,
//     since "" means "from the start";
//   - payload size: every payload fits a message (baton.MaxPayloadBytes, measured on the bytes
//     a send produces);
//   - redelivery: a partition processed twice (a worker crashed after the work, before
//     recording it) and delivered twice gives the same report;
//   - out of order: partitions delivered in reverse order give the same report;
//   - failed attempt: a partition whose first attempt did the work and then failed gives the
//     same output on its retry;
//   - merge: for a Merger, merging is associative and order-insensitive, and folding the
//     results one by one gives what aggregating them all at once gives;
//   - failed partition: Aggregate copes with a partition recorded as failed (its last delivery
//     failed, or the run's deadline passed): a failure is data in the report;
//   - permanent errors: a payload that is not the job's does not panic Process and, if it is
//     refused, is refused with an error marked permanent (baton.Permanent), not one the host
//     would retry until it dead-letters;
//   - cancellation: Process returns within a second once its context is cancelled (as when
//     the run is cancelled, or past its failure budget, with baton.ErrRunStopped as the cause);
//   - under limit (with UnderLimit): run first under the limit, many partitions at once, with
//     every wait (a slow-down's, a full limit's, a rate's) taking no real time, no more than
//     its MaxInFlight partitions run at once, the run never goes the default run timeout of
//     its own time without progress (a job that keeps asking to slow down does), and it gives
//     the same results as the reference run; Report.SlowDowns counts the times the job
//     returned baton.SlowDown, for a test that its job slows down when its downstream answers
//     429;
//   - all partitions failed: a run none of whose partitions succeeded (failed permanently or
//     out of retries) fails the check, with the first errors, unless AllowAllFailed says the
//     test expects it.
//
// Check compares JSON by value (key order and spacing do not matter). It does not prove a job
// correct — only that Baton can run it exactly once: a job that gives the wrong answer the same
// way every time passes.
package batontest
