package ledger

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Span is the block of consecutive partitions whose results may be recorded together:
// [First, First+Size), First a multiple of Size. A plan batch's spans are its bundles as
// planned (PlanBatch.Bundle); the zero Span means "a result of its own".
type Span struct {
	First int `json:"first"`
	Size  int `json:"size"`
}

// SpanOf is the span of size holding partition i (the zero Span when size < 2).
func SpanOf(i, size int) Span {
	if size < 2 || i < 0 {
		return Span{}
	}
	return Span{First: i / size * size, Size: size}
}

// IsZero reports whether s is the zero Span.
func (s Span) IsZero() bool { return s.Size == 0 }

// Contains reports whether partition i is in s.
func (s Span) Contains(i int) bool { return s.Size > 0 && i >= s.First && i < s.First+s.Size }

func (s Span) String() string { return fmt.Sprintf("%d+%d", s.First, s.Size) }

// MaxSpan is the largest span a block may have (a job's highest bundle cap).
const MaxSpan = 1024

// Block is runs/<runID>/results/<first>+<size>.json: the results of some partitions of one
// span, written together once. The rule that keeps one outcome per partition: a span has at
// most one block (create-once), and a result of its own (PutResult) is written for a partition
// of a span only once the span's block exists without it (TakeSpan, Record). A block may have
// no results: it then only says that every partition of the span records its own.
type Block struct {
	Run  string `json:"run"`
	Span Span   `json:"span"`
	// Results are the recorded outcomes, in index order, each of a distinct partition of Span.
	Results []Result `json:"results"`
}

// Validate reports what makes b unfit to write.
func (b Block) Validate() error {
	if b.Span.Size < 2 || b.Span.Size > MaxSpan || b.Span.First < 0 || b.Span.First%b.Span.Size != 0 {
		return fmt.Errorf("block %s/%s: want a span of 2 to %d partitions starting on a multiple of its size", b.Run, b.Span, MaxSpan)
	}
	for k, r := range b.Results {
		if r.Run != b.Run || !b.Span.Contains(r.Index) || (k > 0 && r.Index <= b.Results[k-1].Index) {
			return fmt.Errorf("block %s/%s: result %d (%s/%d) is not in the span, in order and of the run", b.Run, b.Span, k, r.Run, r.Index)
		}
	}
	return nil
}

// Find returns the block's result of partition i.
func (b Block) Find(i int) (Result, bool) {
	k, ok := slices.BinarySearchFunc(b.Results, i, func(r Result, i int) int { return r.Index - i })
	if !ok {
		return Result{}, false
	}
	return b.Results[k], true
}

// Members is the block's members as a bitmap over its span, in hex (bit k of byte k/8 is
// partition First+k): what a listing of results/ reads instead of the block.
func (b Block) Members() string {
	bits := make([]byte, (b.Span.Size+7)/8)
	for _, r := range b.Results {
		k := r.Index - b.Span.First
		bits[k/8] |= 1 << (k % 8)
	}
	return hex.EncodeToString(bits)
}

// ParseMembers returns the partitions a Members bitmap of span s names, in order.
func ParseMembers(s Span, members string) ([]int, error) {
	bits, err := hex.DecodeString(members)
	if err != nil || len(bits) != (s.Size+7)/8 {
		return nil, fmt.Errorf("members of block %s: want %d hex bytes, got %q", s, (s.Size+7)/8, members)
	}
	var out []int
	for k := range s.Size {
		if bits[k/8]&(1<<(k%8)) != 0 {
			out = append(out, s.First+k)
		}
	}
	return out, nil
}

// ResultRef is where a recorded result is: in the block of Block, or on its own (zero Block).
type ResultRef struct {
	Index int
	Block Span
	// Modified is when the result's blob (or its block) was written, by the store's clock.
	Modified time.Time
}

// spanStore is what recording under the block rule needs of a Store.
type spanStore interface {
	PutBlock(ctx context.Context, b Block) error
	ReadBlock(ctx context.Context, run string, s Span) (Block, error)
	PutResult(ctx context.Context, r Result) error
	ReadResult(ctx context.Context, run string, index int) (Result, error)
}

// TakeSpan makes sure span s of run has its block: it writes one with results rs (each of s,
// in index order) unless one exists, and returns the block that stands. Afterwards a
// partition of s is either in that block or records its own result.
func TakeSpan(ctx context.Context, st spanStore, run string, s Span, rs []Result) (Block, error) {
	b := Block{Run: run, Span: s, Results: rs}
	err := st.PutBlock(ctx, b)
	if err == nil {
		return b, nil
	}
	if !errors.Is(err, ErrExists) {
		return Block{}, err
	}
	return st.ReadBlock(ctx, run, s)
}

// Recorded is the outcome of recording one result: the result that stands for its partition
// (the one given, or one recorded before), or the error that kept it from being recorded.
type Recorded struct {
	Result Result
	Err    error
}

// Record records results rs of span s (in index order; the zero Span: each on its own) under
// the block rule, in one block write when s has no block yet. taken is s's block when the
// caller has read it already (nil: not known). It returns each partition's recorded outcome,
// in rs's order, and s's block when one stands (nil for the zero Span, or when it could not
// be written or read).
func Record(ctx context.Context, st spanStore, run string, s Span, rs []Result, taken *Block) ([]Recorded, *Block) {
	out := make([]Recorded, len(rs))
	if len(rs) == 0 {
		return out, taken
	}
	if !s.IsZero() && taken == nil {
		b, err := TakeSpan(ctx, st, run, s, rs)
		if err != nil {
			for k := range out {
				out[k].Err = fmt.Errorf("record results of %s/%s: %w", run, s, err)
			}
			return out, nil
		}
		taken = &b
	}
	for k, r := range rs {
		if taken != nil {
			if got, ok := taken.Find(r.Index); ok {
				out[k].Result = got
				continue
			}
		}
		switch err := st.PutResult(ctx, r); {
		case err == nil:
			out[k].Result = r
		case errors.Is(err, ErrExists):
			out[k].Result, out[k].Err = st.ReadResult(ctx, run, r.Index)
		default:
			out[k].Err = err
		}
	}
	return out, taken
}

// resultSource is what reading a run's results needs of a Store.
type resultSource interface {
	ReadResult(ctx context.Context, run string, index int) (Result, error)
	ReadBlock(ctx context.Context, run string, s Span) (Block, error)
	ListResults(ctx context.Context, run string, fn func(ResultRef) error) error
}

// Listing is where each recorded result of a run is, from one listing of results/: refs in
// index order (a partition listed twice was recorded twice, which the block rule rules out).
type Listing struct {
	Refs []ResultRef
}

// List lists run's recorded results.
func List(ctx context.Context, st resultSource, run string) (Listing, error) {
	var l Listing
	err := st.ListResults(ctx, run, func(r ResultRef) error { l.Refs = append(l.Refs, r); return nil })
	return l, err
}

// Find returns where partition i's result is.
func (l Listing) Find(i int) (ResultRef, bool) {
	k, ok := slices.BinarySearchFunc(l.Refs, i, func(r ResultRef, i int) int { return r.Index - i })
	if !ok {
		return ResultRef{}, false
	}
	return l.Refs[k], true
}

// Units groups the refs into reads, in index order: each block once (as its first ref), each
// result of its own once.
func (l Listing) Units() []ResultRef {
	var out []ResultRef
	seen := map[Span]bool{}
	for _, r := range l.Refs {
		if !r.Block.IsZero() {
			if seen[r.Block] {
				continue
			}
			seen[r.Block] = true
		}
		out = append(out, r)
	}
	return out
}

// ReadUnit reads the results one unit of Units stands for: its block's, or its own.
func ReadUnit(ctx context.Context, st resultSource, run string, u ResultRef) ([]Result, error) {
	if u.Block.IsZero() {
		r, err := st.ReadResult(ctx, run, u.Index)
		if err != nil {
			return nil, err
		}
		return []Result{r}, nil
	}
	b, err := st.ReadBlock(ctx, run, u.Block)
	if err != nil {
		return nil, err
	}
	return b.Results, nil
}

// ReadAll reads every recorded result of run (a run ID or a redrive round's key), a unit at a
// time, and calls fn with each, in index order.
func ReadAll(ctx context.Context, st resultSource, run string, fn func(Result)) error {
	l, err := List(ctx, st, run)
	if err != nil {
		return err
	}
	for _, u := range l.Units() {
		rs, err := ReadUnit(ctx, st, run, u)
		if err != nil {
			return err
		}
		for _, r := range rs {
			fn(r)
		}
	}
	return nil
}

// Reader reads a run's results by index: a result of its own directly, a block's member after
// one listing of results/ (made on the first partition not found on its own), each block at
// most once, however many read it at once (it keeps the blocks it read, and a failed read's
// error: for one bounded pass of reads). It is safe for concurrent use.
type Reader struct {
	st      resultSource
	run     string
	mu      sync.Mutex
	listing *Listing
	blocks  map[Span]*blockRead
}

// blockRead is one block's read, made once however many readers want it at once.
type blockRead struct {
	once sync.Once
	b    Block
	err  error
}

// NewReader returns a reader of run's results.
func NewReader(st resultSource, run string) *Reader {
	return &Reader{st: st, run: run, blocks: map[Span]*blockRead{}}
}

// Read reads partition i's result; ErrNotFound when none is recorded.
func (rd *Reader) Read(ctx context.Context, i int) (Result, error) {
	rd.mu.Lock()
	listed := rd.listing != nil
	rd.mu.Unlock()
	if !listed {
		r, err := rd.st.ReadResult(ctx, rd.run, i)
		if !errors.Is(err, ErrNotFound) {
			return r, err
		}
	}
	l, err := rd.list(ctx)
	if err != nil {
		return Result{}, err
	}
	ref, ok := l.Find(i)
	switch {
	case !ok || ref.Block.IsZero() && !listed:
		return Result{}, &StorageError{Name: fmt.Sprintf("%s/results/%d", rd.run, i), Kind: ErrNotFound}
	case ref.Block.IsZero():
		return rd.st.ReadResult(ctx, rd.run, i)
	}
	rd.mu.Lock()
	br := rd.blocks[ref.Block]
	if br == nil {
		br = &blockRead{}
		rd.blocks[ref.Block] = br
	}
	rd.mu.Unlock()
	br.once.Do(func() { br.b, br.err = rd.st.ReadBlock(ctx, rd.run, ref.Block) })
	if br.err != nil {
		return Result{}, br.err
	}
	r, ok := br.b.Find(i)
	if !ok {
		return Result{}, fmt.Errorf("block %s/%s lists partition %d but does not hold it", rd.run, ref.Block, i)
	}
	return r, nil
}

// list lists the run's results once.
func (rd *Reader) list(ctx context.Context) (*Listing, error) {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if rd.listing == nil {
		l, err := List(ctx, rd.st, rd.run)
		if err != nil {
			return nil, err
		}
		rd.listing = &l
	}
	return rd.listing, nil
}
