// Package ledger is the durable record of Baton's runs, kept as blobs in the runs container:
//
//	runs/<runID>/manifest.json        the run record (leader: create-once, then ETag CAS)
//	runs/<runID>/plan/<batch>.json    the partitions of one enqueue batch (leader: create-once)
//	runs/<runID>/results/<first>+<size>.json the results of a span's partitions, written
//	                                  together (worker: create-once; Block)
//	runs/<runID>/results/<index>.json a result of its own: a partition outside any block
//	                                  (worker: create-once)
//	runs/<runID>/done/<shard>         append blob, one fixed-size record per recorded result,
//	                                  in the run's DoneLayout
//	runs/<runID>/report.json          the aggregate (the one aggregating worker: create-once)
//
// Guarantees, all enforced by storage conditions rather than by timing:
//   - A manifest is created once (If-None-Match: *); every later update sends the ETag it read
//     (If-Match), so a writer never overwrites a change it has not seen. Updates are functions
//     of the current record, retried a bounded number of times on conflict.
//   - Fencing: a manifest carries the epoch of the leader that last took it over. An update
//     made for an older epoch fails with ErrFenced, so a deposed leader cannot change the run.
//   - A plan batch, a block, a result and the report are each written at most once; the first writer
//     wins and later writers get ErrExists. Every message for partition i therefore carries the
//     payload stored in its plan batch, whichever leader sent it.
//   - The done shards count completions in one append call each: the offset an append returns
//     divided by the record size is the number of records before it (the completion ordinal).
//     Redeliveries may append twice, so the ordinal only says "maybe complete"; ListResults is
//     the proof. A partition has one recorded outcome: in its span's block, or — only once
//     that block exists without it — on its own (see Block). BlobCommittedBlockCount is never used (Azurite reports it non-uniquely under
//     concurrent appends).
//
// Not guaranteed: clocks. Deadlines in the manifest are the writer's local time; readers
// compare them with their own clock and must tolerate skew (the check message retries).
package ledger
