// Package bench holds Baton's cross-cutting benchmarks: the figures a user compares
// coordinators by, measured on this machine against Azurite on loopback and published in
// BENCHMARKS.md. Package benchmarks elsewhere measure one component (bloblease: BlobLock;
// coordinator: the enqueue path; work: worker calls and TryFinish; storagequeue: the queue
// sender); the ones here measure the system:
//
//   - BenchmarkElection: contested Acquire latency with 2, 8 and 32 contenders, winners and
//     losers apart, against a plain GetProperties round trip measured in the same run.
//   - BenchmarkHandover, BenchmarkLeaseLapse, BenchmarkFailover:
//     how long leadership is vacant after a graceful release, after a crash (the lease must
//     lapse) and, with the real handler under the local host, until the run resumes through
//     its check message after kill -9 or SIGTERM.
//   - BenchmarkFanOut, BenchmarkFanOut100000: partitions enqueued per second by a run's start
//     check (its planner, under the run's own lease) on the Storage-queue transport, and the
//     planner's storage calls per partition.
//   - BenchmarkFanIn: worker storage calls per partition and the time from the last result to
//     the report.
//   - BenchmarkEndToEnd: a 10,000-partition no-op run on 1, 2 and 4 handler processes under the
//     local host; completed partitions per second, CPU time and peak RSS of every process.
//   - BenchmarkHandler*: the handler binary's size, start-up, idle memory and the overhead of a
//     no-op invocation under concurrent load.
//   - BenchmarkAzuriteQueueDepth: what the emulator's queue calls cost with 100 and 10,000
//     messages waiting, which bounds the end-to-end figures.
//   - BenchmarkReportLatency: last result → report.json at 1,000, 10,000 and 100,000
//     partitions, from the 32 folded partials and by the full read, on the same stored results,
//     with the aggregating process's calls, allocations and peak RSS.
//   - BenchmarkThroughput: Azurite's raw rate for the calls one partition makes on the critical
//     path, at the queue depth a run creates, then end-to-end runs on 1, 2 and 4 instances with
//     and without waves, as a percentage of the limit that rate gives.
//   - BenchmarkLeaseUnderLoad: a 10,000-partition run on 3 instances with everything enqueued
//     up front; fails if the leader loses its lease or any invocation fails.
//   - BenchmarkLimits: the same run without a limit and under named limits (rates of 1,000
//     and 200 starts/s; 8, 500 and 1 in flight with a known work time per partition): calls per
//     partition, the limit blob's share and its lost races, the hottest window, and the steady
//     starts/s as a percentage of what the limit allows.
//   - BenchmarkScale (`make bench-scale`, not `make bench`): 10,000 and 100,000 partitions on 4
//     instances with progress, calls per partition (a counting proxy between the cluster and
//     Azurite), report latency and peak RSS.
//
// Benchmarks never fail on a number. They fail only when the system misbehaves (two winners
// in one election round, a run that does not finish), since then the figure would be wrong.
// Each does a fixed amount of work per iteration, documented on it, so `-benchtime 1x` is the
// intended setting (`make bench` uses it); more iterations pool more samples. Under -short each
// runs once on a small amount of work (its smallest size, 1,000 partitions for an end-to-end
// run, three stops of the failover chain): `go test -short -run '^$' -bench . -benchtime 1x
// ./internal/bench` shows that every benchmark works, in minutes; its figures mean nothing.
//
// The helpers here (percentiles, /proc readers, the listening-socket lookup) are plain code
// with their own tests; internal/bench/cmd/benchtable turns `go test -bench` output into the
// BENCHMARKS.md tables.
package bench
