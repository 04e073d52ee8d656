// Package work defines what Baton runs and how one partition is processed.
//
// It is Baton's engine, not its API: apps use package baton (github.com/batonfn/baton), whose
// Job, Partition and Result this package adapts, and nothing here is covered by its
// compatibility promise.
//
// A Job plans a run as a stream of partitions, processes one partition at a time on any
// instance, and aggregates the results once. Jobs are registered by name in a Registry and
// selected with BATON_JOB (manual runs may choose another registered job).
//
// Partition and check messages travel as an Envelope: versioned JSON whose field names never
// collide with a key the Functions host puts in trigger metadata (body properties leak into
// metadata and overwrite it). DecodeEnvelope is strict: size-limited, unknown fields rejected,
// every field validated.
//
// The Worker (worker.go) makes processing idempotent and the fan-in exactly-once on top of the
// ledger: a result is recorded create-once, completion is counted with one append, and exactly
// one worker claims the report and aggregates (TryFinish, which the coordinator also calls
// after planning and from check messages). A partition whose Process fails is retried under
// its job's RetryPolicy (retry.go): the worker sends it again as a message scheduled after
// the policy's delay, with the try number and the errors so far in the envelope, and
// completes the failed one; after the last try the failure is recorded with every try's error
// and the run can still finish as partial. Without a Retries sender the host's redeliveries
// retry instead, and the last allowed delivery records the failure and returns ErrGaveUp, so
// the message is dead-lettered. Jobs must make Process safe to repeat (a partition may be
// processed again after a crash before its result was recorded) and Aggregate a pure function
// of the results.
package work
