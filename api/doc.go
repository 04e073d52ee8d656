// Package api is Baton's HTTP API: start a manual run, list and inspect runs, show the
// leader, and serve the dashboard page. It knows nothing of the Functions host: the handler
// turns an httpTrigger invocation into a Request and a Reply into the `res` output binding.
// The coordinator, the ledger and the lock are reached through the small interfaces in api.go.
//
// Endpoints (paths as the host exposes them, under the "api" route prefix):
//
//	POST /api/runs        start a manual run through the same lease as the timer
//	GET  /api/runs        recent runs, newest first, with progress; limit and continuation;
//	                      state and trigger filters; occurrences=N adds the schedule and its
//	                      last N occurrences, each with its record or null
//	GET  /api/runs/{id}   one run: state, trigger, epoch, segments, progress, timings, report,
//	                      failed partitions and workers (bounded reads of its results)
//	GET  /api/leader      the lease: holder, epoch, since, lease state (read, never contended)
//	GET  /api/dashboard   a self-contained HTML page over the three above, with Run now
//
// Every error is JSON {"error": {"code", "message"}} with a 4xx or 5xx status; a refused
// manual start (409) adds "leader" and "activeRun".
//
// # Guarantees
//
//   - The same Idempotency-Key always maps to the same run ID (coordinator.ManualRunID), and the
//     run is created once (the ledger's create-once manifest). Concurrent POSTs with one key
//     get that one run: the request that wins the lease creates it, a request that finds the
//     lease held waits up to Config.KeyWait for the winner's manifest and answers with it.
//   - Run IDs from the caller are validated (ledger.ValidateRunID) before any storage call, so
//     no ID can address a blob outside its run's prefix.
//   - Reads never contend for the lease: GET requests only read blobs.
//   - Every read a request makes is bounded: a filtered page reads at most MaxScanReads
//     manifests, ?occurrences=N at most N, a run's detail at most MaxFailureReads +
//     MaxWorkerReads results, whatever the size of the ledger or the run.
//
// # Not guaranteed
//
//   - Progress of a large unfinished run (more than ExactProgressLimit partitions) is counted
//     from the done shards, which can over-count redelivered partitions; it is capped at the
//     total and flagged "approximate". Smaller runs are counted exactly by listing results,
//     and a finished run's counts come from its manifest.
//   - The listing is a snapshot: a run created between two pages appears at the top of the
//     next listing, not in the middle of a page walk (the continuation token is a position in
//     the newest-first order, so a page walk never repeats or skips an older run).
//   - A 409 for a held lease names the holder read from storage a moment earlier; it may have
//     released the lease since.
package api
