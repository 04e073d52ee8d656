package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// State is a run's lifecycle position; State.Next says which changes of it are allowed.
type State string

// States in order. Succeeded, Partial, Failed, TimedOut, Cancelled, Skipped, Missed and Paused
// are final.
const (
	// StateQueued: a schedule's occurrence waiting for the schedule's run in progress to end
	// (overlap policy buffer-one); the scheduler starts it then.
	StateQueued    State = "queued"
	StatePlanning  State = "planning"  // manifest created, nothing enqueued yet
	StateEnqueuing State = "enqueuing" // partitions being enqueued (checkpointed)
	StateRunning   State = "running"   // every partition enqueued; workers busy
	StateSucceeded State = "succeeded" // every partition succeeded and the report is written
	StatePartial   State = "partial"   // finished, some partitions recorded failures
	StateFailed    State = "failed"    // planning failed, or every partition failed
	StateTimedOut  State = "timed-out" // deadline passed and the check rounds ran out
	// StateCancelled: an operator stopped the run (Manifest.Stop says who, when and why); its
	// report holds the results recorded until then.
	StateCancelled State = "cancelled"
	StateSkipped   State = "skipped" // never started: the overlap policy skipped it
	// StateMissed records a schedule occurrence that never fired or could not be decided when
	// it fired (the app was stopped, scaled to zero or broken across it); Reason says why.
	StateMissed State = "missed"
	// StatePaused records a schedule occurrence that came while the schedule was paused; Reason
	// carries the pause note.
	StatePaused State = "paused"
)

// Final reports whether a run in this state will never change again.
func (s State) Final() bool {
	switch s {
	case StateSucceeded, StatePartial, StateFailed, StateTimedOut, StateCancelled, StateSkipped, StateMissed, StatePaused:
		return true
	}
	return false
}

// Trigger says what started a run.
type Trigger string

const (
	TriggerTimer  Trigger = "timer"
	TriggerManual Trigger = "manual"
	TriggerCheck  Trigger = "check"
)

// Holder names a process: the function app (WEBSITE_SITE_NAME), the instance
// (WEBSITE_INSTANCE_ID or the host name) and the process id. It is who holds or wants the lease,
// and who wrote a record.
type Holder struct {
	App      string `json:"app"`
	Instance string `json:"instance"`
	PID      int    `json:"pid"`
}

// String is "app/instance/pid".
func (h Holder) String() string { return h.App + "/" + h.Instance + "/" + strconv.Itoa(h.PID) }

// IsZero reports whether no holder is recorded.
func (h Holder) IsZero() bool { return h == Holder{} }

// Validate requires the app and the instance.
func (h Holder) Validate() error {
	switch {
	case h.App == "":
		return errors.New("holder app is required")
	case h.Instance == "":
		return errors.New("holder instance is required")
	}
	return nil
}

// Segment records a takeover: from index From on, partitions were (re)enqueued by the leader
// of Epoch. A partition message is current when its epoch is at least the epoch of the last
// segment starting at or before its index.
type Segment struct {
	Epoch int64 `json:"epoch"`
	From  int   `json:"from"`
}

// Checkpoint is how far enqueueing got: Batches plan batches (Next partitions) are stored and
// sent; Cursor resumes the job's planner after them.
type Checkpoint struct {
	Batches int    `json:"batches"`
	Next    int    `json:"next"`
	Cursor  string `json:"cursor,omitempty"`
	// Done is the completion count the leader last saw while waiting for a wave (a bounded
	// backlog): progress there moves the run's hard deadline too.
	Done int64 `json:"done,omitempty"`
	// Unbounded says the backlog bound no longer holds this run's planning back: its backlog
	// did not drain at all for a quarter of the run timeout (a message lost, say), so the rest
	// is sent regardless and the run's re-enqueue rounds bring back what never completed.
	Unbounded bool `json:"unbounded,omitempty"`
	// Quiet is how long the backlog had shown no completion when a leader last left its wave:
	// a run whose work completes in bursts that far apart keeps its next leader waiting
	// longer for room before it leaves.
	Quiet time.Duration `json:"quiet,omitempty"`
}

// Manifest is runs/<runID>/manifest.json.
type Manifest struct {
	Version int     `json:"version"`
	RunID   string  `json:"run"`
	Trigger Trigger `json:"trigger"`
	// Schedule names the schedule of an occurrence or a run now ("" for an ad-hoc run).
	Schedule string `json:"schedule,omitempty"`
	// Occurrence is the schedule occurrence of a timer run (zero for manual runs).
	Occurrence time.Time `json:"occurrence,omitzero"`
	// IdempotencyKey is the manual caller's key, if any.
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	// Lease names the lease blob whose epochs fence this run's planning: its own
	// (RunLeaseName) for runs a scheduler created, "" for a run created before runs had their
	// own lease (the one lease of that time, now the scheduler's).
	Lease string `json:"lease,omitempty"`
	// Epoch is the lease epoch of the leader that created or last took over the run: 0 for a
	// run the scheduler created that no planner has taken up yet.
	Epoch    int64     `json:"epoch"`
	Leader   Holder    `json:"leader"`
	Segments []Segment `json:"segments"`

	Job    string          `json:"job"`
	Params json.RawMessage `json:"params,omitempty"`

	State State `json:"state"`
	// Reason explains a skipped, failed or timed-out state.
	Reason string `json:"reason,omitempty"`
	// Partitions is the partition count, known once planning finished (PlanDone).
	Partitions int        `json:"partitions"`
	PlanDone   bool       `json:"planDone"`
	Checkpoint Checkpoint `json:"checkpoint"`
	// BatchSize is the number of partitions per plan batch (batch b holds b*BatchSize...).
	BatchSize int `json:"batchSize"`
	// CheckRound counts the re-enqueue rounds the check message has run.
	CheckRound int `json:"checkRound"`
	// FoldShards is the number of partial aggregates results are folded into as they arrive
	// (jobs with an associative merge); 0 means the report reads every result at the end.
	FoldShards int `json:"foldShards,omitempty"`
	// FoldBlock is how many consecutive partitions fold into the same partial (FoldSlot), so
	// that a message carrying consecutive partitions updates one partial, not one per
	// partition; 0 (a run created before blocks) means 1.
	FoldBlock int `json:"foldBlock,omitempty"`
	// DoneLayout is how the run's completion records are spread over its done shards
	// (DoneBlocks, the zero value, for a run created before stripes).
	DoneLayout DoneLayout `json:"doneLayout,omitempty"`

	Created  time.Time `json:"created"`
	Updated  time.Time `json:"updated"`
	Enqueued time.Time `json:"enqueued,omitzero"` // planning finished
	Deadline time.Time `json:"deadline,omitzero"` // missing results are retried after this
	// RunTimeout is the run's own timeout, from which Deadline, Expires and the spacing of
	// its check rounds are computed: its job's when it has one, else the app's at creation.
	// 0 (a run created before it was recorded) means the app's current one.
	RunTimeout time.Duration `json:"runTimeout,omitempty"`
	// Expires is the hard deadline: a run still not final after it is finished as timed-out
	// by whoever holds the lease next (see coordinator: supervision of overdue runs).
	Expires time.Time `json:"expires,omitzero"`
	// Waited is, for a run of a job under a limit whose deadline found it still making
	// progress, how many partitions (of its current round) had no result then: its deadline
	// moved a run timeout ahead instead of a re-enqueue round. 0 when it never moved.
	Waited   int       `json:"waited,omitempty"`
	Finished time.Time `json:"finished,omitzero"`

	// Succeeded and Failed are filled in when the run finishes.
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`

	// Budget is the run's failure budget, from its job and schedule when it was created (nil:
	// none).
	Budget *Budget `json:"budget,omitempty"`
	// Round is the run's redrive round (0: its first run) and Redrives the rounds, oldest first
	// (Manifest.Reopen).
	Round    int       `json:"round,omitempty"`
	Redrives []Redrive `json:"redrives,omitempty"`
	// Stop, once set, ends the run early: no partition starts after it, and the run is
	// finished in Stop.State from the results it has. It is set once and never cleared.
	Stop *Stop `json:"stop,omitempty"`
	// Trace is the W3C traceparent of the run's root span (telemetry on when it was created):
	// whichever instance plans, checks or finishes the run continues that trace.
	Trace string `json:"trace,omitempty"`
}

// Stop records why a run was ended before its partitions were: an operator's cancel (State
// cancelled) or the job's failure budget (State failed).
type Stop struct {
	State State     `json:"state"`
	By    string    `json:"by"`
	At    time.Time `json:"at"`
	Note  string    `json:"note,omitempty"`
}

// Reason is the run's reason once stopped, cancelled of its partitions never run: the note and
// who stopped it.
func (s *Stop) Reason(cancelled int) string {
	what := "cancelled by " + s.By
	if s.State != StateCancelled {
		what = "stopped by " + s.By
	}
	if s.Note != "" {
		what += ": " + s.Note
	}
	if cancelled > 0 {
		what += fmt.Sprintf(" (%d partitions not run)", cancelled)
	}
	return what
}

// ManifestVersion is the schema version written by this code.
const ManifestVersion = 1

// SegmentEpoch returns the epoch that owns partition index i (see Segment).
func (m *Manifest) SegmentEpoch(i int) int64 {
	var e int64
	for _, s := range m.Segments {
		if s.From <= i {
			e = s.Epoch
		}
	}
	return e
}

// FoldSlot returns the partial that partition i folds into and its position in that
// partial's bitmap: blocks of FoldBlock consecutive partitions go to the FoldShards partials in
// turn (with a block of 1, partial i % FoldShards at position i / FoldShards). FoldShards
// must be positive.
func (m *Manifest) FoldSlot(i int) (shard, pos int) {
	b := max(m.FoldBlock, 1)
	block := i / b
	return block % m.FoldShards, block/m.FoldShards*b + i%b
}

// BatchOf returns the plan batch holding partition index i.
func (m *Manifest) BatchOf(i int) int {
	if m.BatchSize <= 0 {
		return 0
	}
	return i / m.BatchSize
}

// Errors returned by the store. Callers match them with errors.Is.
var (
	ErrNotFound = errors.New("not found")
	ErrExists   = errors.New("already exists")
	// ErrFenced: the run was taken over by a leader with a newer epoch.
	ErrFenced = errors.New("fenced by a newer epoch")
	// ErrConflict: an ETag-guarded update kept losing races and gave up.
	ErrConflict = errors.New("concurrent update conflict")
	// ErrUnavailable: storage could not be reached or answered 408, 429 or 5xx; the same call
	// may succeed later.
	ErrUnavailable = errors.New("storage unavailable")
)

var runIDPattern = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidateRunID accepts [a-z0-9-], 1–63 characters, not starting or ending with '-': safe as a
// blob path segment, never able to leave its prefix.
func ValidateRunID(id string) error {
	if !runIDPattern.MatchString(id) {
		return fmt.Errorf("run ID %q: use 1-63 characters of a-z, 0-9 and '-', not at either end", id)
	}
	return nil
}

// Result is runs/<runID>/results/<index>.json.
type Result struct {
	Run   string `json:"run"`
	Index int    `json:"index"`
	Epoch int64  `json:"epoch"`
	// OK is false for a recorded failure (the partition gave up after its last delivery, or
	// failed permanently).
	OK       bool            `json:"ok"`
	Output   json.RawMessage `json:"output,omitempty"`
	Error    string          `json:"error,omitempty"`
	Attempts int             `json:"attempts"`
	// Errors are the failed tries' errors, shortened (no URLs), oldest first: every try's for
	// a failure recorded after the job's retry policy ran out, the earlier ones for a success
	// after retries.
	Errors []string `json:"errors,omitempty"`
	// TimedOut marks a failure recorded because the run's deadline passed without a result.
	TimedOut bool      `json:"timedOut,omitempty"`
	Worker   Holder    `json:"worker"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
}

// Report is runs/<runID>/report.json.
type Report struct {
	Run        string `json:"run"`
	Job        string `json:"job"`
	State      State  `json:"state"`
	Partitions int    `json:"partitions"`
	Succeeded  int    `json:"succeeded"`
	Failed     int    `json:"failed"`
	// Cancelled counts the partitions of a stopped run (Manifest.Stop) never run.
	Cancelled  int             `json:"cancelled,omitempty"`
	FailedList []FailedPart    `json:"failedPartitions,omitempty"`
	Aggregate  json.RawMessage `json:"aggregate,omitempty"`
	Aggregator Holder          `json:"aggregator"`
	// Claim is the aggregator's random token, kept in the final report: a claim or a final
	// report whose write's answer was lost is recognised as its own by it.
	Claim   string    `json:"claim,omitempty"`
	Created time.Time `json:"created"`
	// Renewed is when the aggregator last renewed its claim (it does so while it aggregates):
	// a claim is as old as the later of Created and Renewed (ClaimedAt).
	Renewed time.Time `json:"renewed,omitzero"`
}

// ClaimedAt is when an in-progress report's claim was last taken or renewed.
func (r Report) ClaimedAt() time.Time {
	if r.Renewed.After(r.Created) {
		return r.Renewed
	}
	return r.Created
}

// FailedPart names a failed partition in a report (the list is capped).
type FailedPart struct {
	Index int    `json:"index"`
	Error string `json:"error"`
}

// PlanBatch is runs/<runID>/plan/<batch>.json: the partitions of one enqueue batch.
type PlanBatch struct {
	Batch int `json:"batch"`
	// First is the index of Partitions[0].
	First      int               `json:"first"`
	Partitions []json.RawMessage `json:"partitions"`
	// Cursor resumes the planner after this batch.
	Cursor string `json:"cursor,omitempty"`
	// Last is true when the planner had nothing after this batch.
	Last bool `json:"last"`
	// Bundle is the batch's bundle size as planned (a power of two): its partitions' results
	// are recorded in blocks of the spans SpanOf(i, Bundle). Below 2 (and in batches written
	// before blocks existed) each partition records a result of its own.
	Bundle int `json:"bundle,omitempty"`
}

// Span is partition i's span in the batch (the zero Span when its results are its own).
func (b PlanBatch) Span(i int) Span { return SpanOf(i, b.Bundle) }

// Partial is runs/<runID>/partials/<shard>.json: the results of the partitions whose
// Manifest.FoldSlot is Shard folded together as they arrived, so finishing a run reads
// FoldShards partials instead of every result.
type Partial struct {
	Run   string `json:"run"`
	Shard int    `json:"shard"`
	// Folded is a bitmap over the FoldSlot positions of the partitions folded in (a
	// redelivery folds nothing twice).
	Folded []byte `json:"folded"`
	// Count, Failed and TimedOut count the folded results and their failures.
	Count    int  `json:"count"`
	Failed   int  `json:"failed"`
	TimedOut bool `json:"timedOut,omitempty"`
	// FailedList holds the shard's failed partitions with the lowest indexes (at most the
	// report's cap), so the union over shards holds the run's lowest.
	FailedList []FailedPart `json:"failedPartitions,omitempty"`
	// Aggregate is the job's partial aggregate of the folded successes and failures.
	Aggregate json.RawMessage `json:"aggregate,omitempty"`
}

// Has reports whether the partition at position pos (see Manifest.FoldSlot) is folded in.
func (p *Partial) Has(pos int) bool {
	return pos/8 < len(p.Folded) && p.Folded[pos/8]&(1<<(pos%8)) != 0
}

// Mark records the partition at position pos as folded in.
func (p *Partial) Mark(pos int) {
	for len(p.Folded) <= pos/8 {
		p.Folded = append(p.Folded, 0)
	}
	p.Folded[pos/8] |= 1 << (pos % 8)
}
