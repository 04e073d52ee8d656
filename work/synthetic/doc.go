// Package synthetic is a job for benchmarks and chaos tests: N partitions, a configurable work
// time and payload size per partition, and deterministic failure rules.
//
// Params (JSON object):
//
//	partitions       number of partitions, 1..1,000,000 (required)
//	workMs           time each partition takes, 0..600,000 ms (a timer that honours the context)
//	payloadBytes     size of each partition payload, up to baton.MaxPayloadBytes
//	failAlways       indexes that fail (transiently) on every delivery, each 0..partitions-1,
//	                 at most partitions of them
//	failOncePercent  0..100: indexes picked by a hash of the index (FailsOnce) fail on their
//	                 first delivery only, then succeed
//	permanent        indexes that fail permanently (baton.ErrPermanent), bounded as failAlways
//	failUntil        an RFC 3339 time: every partition fails (transiently) while the job's
//	                 clock is before it, as if a dependency were down until then
//
// An app may cap runs below these limits (Caps, Configure): partitions, workMs, the run's total
// payload (partitions × payloadBytes) and how far ahead failUntil may lie. Baton's app sets
// them from BATON_SYNTHETIC_MAX_PARTITIONS, BATON_SYNTHETIC_MAX_WORK_MS,
// BATON_SYNTHETIC_MAX_PAYLOAD_BYTES and BATON_RUN_TIMEOUT.
//
// Partition i outputs {"i":i,"v":i*i}; the aggregate reports counts and the exact sum of v over
// successful partitions, so tests can check it against the truth.
package synthetic
