// Package api is Baton's HTTP API: show the app's schedules and run, pause or resume one,
// start a manual run, list and inspect runs, show the leader and the limits, and serve the
// dashboard page. It knows nothing of the Functions host: the handler turns an httpTrigger
// invocation into a Request and a Reply into the `res` output binding. The coordinator, the
// ledger, the lock and the limiter are reached through the small interfaces in api.go and
// limits.go.
//
// Endpoints (paths as the host exposes them, under the "api" route prefix):
//
//	GET  /api/schedules                every schedule: expression in words, zone, next
//	                                   occurrences, policies, pause, last run; ?occurrences=N
//	                                   adds each one's strip
//	GET  /api/schedules/{name}         one schedule and its last N occurrences (?occurrences=N),
//	                                   each with its record or why it has none
//	POST /api/schedules/{name}/runs    run the schedule now, through its overlap policy
//	POST /api/schedules/{name}/pause   pause it, with an optional note; .../resume resumes it
//	POST /api/runs                     start an ad-hoc run of a job
//	GET  /api/runs                     recent runs, newest first, with progress; limit and
//	                                   continuation; state, trigger and schedule filters
//	GET  /api/runs/{id}                one run: state, trigger, epoch, segments, progress,
//	                                   timings, report, failed partitions and workers
//	GET  /api/leader                   the scheduler lease: holder, epoch, since, lease state
//	                                   (read, never contended), dead letters
//	GET  /api/limits                   every limit the jobs run under: settings, in flight,
//	                                   waiting, started, holders, the last slow-down
//	GET  /api/limits/{name}            one limit, the same
//	GET  /api/dashboard                a self-contained HTML page over all of the above
//
// Every error is JSON {"error": {"code", "message"}} with a 4xx or 5xx status; a refused run
// (409) and a busy scheduler (503) add "leader", and a run in progress "activeRun".
//
// # Guarantees
//
//   - The same Idempotency-Key always maps to the same run ID (coordinator.ManualRunID), and the
//     run is created once (the ledger's create-once manifest). Concurrent POSTs with one key
//     get that one run: the request that wins the lease creates it, a request that finds the
//     lease held waits up to Config.KeyWait for the winner's manifest and answers with it.
//   - A key names one request: sent again to another endpoint (an ad-hoc run, a run now), for
//     another schedule, job or params, it is refused with 422 (coordinator.ErrKeyReused).
//   - Manual runs in progress are capped in the app and per job (coordinator.ErrTooManyRuns:
//     429 with Retry-After); a schedule's occurrences are never counted nor refused.
//   - Run IDs from the caller are validated (ledger.ValidateRunID) before any storage call, so
//     no ID can address a blob outside its run's prefix.
//   - Reads never contend for the lease: GET requests only read blobs.
//   - Every read a request makes is bounded: a filtered page reads at most MaxScanReads
//     manifests, a schedule's strip of N occurrences at most N (and the list N per schedule),
//     a run's detail at most MaxFailureReads + MaxWorkerReads results, whatever the size of
//     the ledger or the run.
//   - Reads of what cannot change are made once per process: a final run's manifest, and an
//     occurrence known to have no record (one before the schedule's first cursor).
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
//   - A 409 or 503 names the leader read from storage a moment earlier; it may have released
//     the lease since.
//   - The caps on manual runs are counted without a lock: requests in flight at once may
//     exceed a cap by their number. Two requests with one key sent at once to two endpoints may
//     each make their run (each looks the key up before it creates its own).
//   - Who paused or resumed a schedule comes from the X-MS-CLIENT-PRINCIPAL-NAME header, which
//     only App Service authentication vouches for; without it, any caller with a function key
//     can set it.
package api
