package blobstore

import (
	"sync"

	"github.com/batonfn/baton/ledger"
)

// maxRememberedManifests bounds manifestMemo: a process works on a few runs at a time.
const maxRememberedManifests = 256

// manifestMemo remembers, per run, the manifest as this store last read or wrote it (its
// JSON) with the ETag it had then. UpdateManifest's first try applies the change to that copy
// and writes it conditioned on that ETag, without reading: a leader that checkpoints after
// every batch, or writes right after it read, makes one call instead of two. A copy that is no
// longer current costs the failed write, then the read it saved.
type manifestMemo struct {
	mu   sync.Mutex
	runs map[string]rememberedManifest
}

type rememberedManifest struct {
	body []byte
	etag ledger.ETag
}

func (r *manifestMemo) get(run string) (rememberedManifest, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.runs[run]
	return m, ok
}

// put remembers body and etag as run's manifest; an empty ETag forgets it.
func (r *manifestMemo) put(run string, body []byte, etag ledger.ETag) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if etag == "" {
		delete(r.runs, run)
		return
	}
	if r.runs == nil {
		r.runs = map[string]rememberedManifest{}
	}
	if _, ok := r.runs[run]; !ok && len(r.runs) >= maxRememberedManifests {
		for k := range r.runs { // any one: the runs a process still works on come back
			delete(r.runs, k)
			break
		}
	}
	r.runs[run] = rememberedManifest{body: body, etag: etag}
}

// forget drops run's copy: a write whose outcome is unknown may have changed the manifest.
func (r *manifestMemo) forget(run string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.runs, run)
}
