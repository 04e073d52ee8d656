package blobstore

import "github.com/batonfn/baton/internal/engine/ledger"

// maxRememberedManifests bounds the runs whose manifest a store remembers: a process works on
// a few runs at a time.
const maxRememberedManifests = 256

// rememberedManifest is a run's manifest as this store last read or wrote it (its JSON) with
// the ETag it had then. UpdateManifest's first try applies the change to that copy and writes
// it conditioned on that ETag, without reading: a leader that checkpoints after every batch,
// or writes right after it read, makes one call instead of two. A copy that is no longer
// current costs the failed write, then the read it saved.
type rememberedManifest struct {
	body []byte
	etag ledger.ETag
}
