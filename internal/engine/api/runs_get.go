package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// RunView is one run as the API shows it. The listing leaves out Params and Report.
type RunView struct {
	Run     string         `json:"run"`
	State   ledger.State   `json:"state"`
	Reason  string         `json:"reason,omitempty"`
	Trigger ledger.Trigger `json:"trigger"`
	// Schedule names the run's schedule (an occurrence or a run now); absent for an ad-hoc run.
	Schedule   string          `json:"schedule,omitempty"`
	Job        string          `json:"job"`
	Params     json.RawMessage `json:"params,omitempty"`
	Occurrence time.Time       `json:"occurrence,omitzero"`
	// Epoch and Leader are the lease epoch and identity of the leader that created the run
	// or last took it over.
	Epoch  int64         `json:"epoch"`
	Leader ledger.Holder `json:"leader"`
	// Segments are the run's leaderships, oldest first: a takeover (failover) adds one.
	Segments []SegmentView `json:"segments,omitempty"`
	// Stop is the cancel (or the failure budget) that ended the run early: who, when and why.
	Stop *ledger.Stop `json:"stop,omitempty"`
	// Round is the run's redrive round (absent: its first), Redrives its rounds, oldest first.
	Round    int           `json:"round,omitempty"`
	Redrives []RedriveView `json:"redrives,omitempty"`
	Progress Progress      `json:"progress"`
	Timings  Timings       `json:"timings"`
	// Report is the run's report once it finished (nil before, and for skipped and missed
	// records).
	Report *ReportView `json:"report,omitempty"`
	// Failures and Workers are in GET /api/runs/{id} only (see run_detail.go).
	Failures []FailureView `json:"failures,omitempty"`
	// Trace is the run's OpenTelemetry trace ID and TraceURL its page in a trace UI
	// (Config.TraceURL), in GET /api/runs/{id} only; absent for a run recorded with telemetry off.
	Trace    string       `json:"trace,omitempty"`
	TraceURL string       `json:"traceUrl,omitempty"`
	Workers  *WorkersView `json:"workers,omitempty"`
}

// Timings are the run's timestamps (UTC, from the writers' clocks) and the durations
// between them in milliseconds. Zero ones are left out.
type Timings struct {
	Created    time.Time `json:"created"`
	Enqueued   time.Time `json:"enqueued,omitzero"`
	Finished   time.Time `json:"finished,omitzero"`
	Deadline   time.Time `json:"deadline,omitzero"`
	Updated    time.Time `json:"updated,omitzero"`
	PlanningMs int64     `json:"planningMs,omitempty"`
	DurationMs int64     `json:"durationMs,omitempty"`
	// StartDelayMs is occurrence→created for a timer run; RunningMs is enqueued→finished.
	StartDelayMs int64 `json:"startDelayMs,omitempty"`
	RunningMs    int64 `json:"runningMs,omitempty"`
}

// ReportView is the run's report, whole when it is at most MaxReportBytes, else a summary:
// the counts, the first SummaryFailures failures, no aggregate, and Truncated set.
type ReportView struct {
	State      ledger.State `json:"state"`
	Partitions int          `json:"partitions"`
	Succeeded  int          `json:"succeeded"`
	Failed     int          `json:"failed"`
	// Cancelled counts the partitions of a stopped run that never ran.
	Cancelled  int                 `json:"cancelled,omitempty"`
	FailedList []ledger.FailedPart `json:"failedPartitions,omitempty"`
	Aggregate  json.RawMessage     `json:"aggregate,omitempty"`
	Aggregator ledger.Holder       `json:"aggregator"`
	Created    time.Time           `json:"created,omitzero"`
	// Truncated is true for a summary; Bytes is then the stored report's size.
	Truncated bool  `json:"truncated,omitempty"`
	Bytes     int64 `json:"bytes,omitempty"`
}

func timings(m ledger.Manifest) Timings {
	t := Timings{Created: m.Created, Enqueued: m.Enqueued, Finished: m.Finished, Deadline: m.Deadline, Updated: m.Updated}
	if !m.Enqueued.IsZero() && !m.Created.IsZero() {
		t.PlanningMs = m.Enqueued.Sub(m.Created).Milliseconds()
	}
	if !m.Finished.IsZero() && !m.Created.IsZero() {
		t.DurationMs = m.Finished.Sub(m.Created).Milliseconds()
	}
	if !m.Occurrence.IsZero() && !m.Created.IsZero() {
		t.StartDelayMs = m.Created.Sub(m.Occurrence).Milliseconds()
	}
	if !m.Finished.IsZero() && !m.Enqueued.IsZero() {
		t.RunningMs = m.Finished.Sub(m.Enqueued).Milliseconds()
	}
	return t
}

// view builds the listing's view of a run (no params, no report).
func (a *API) view(ctx context.Context, m ledger.Manifest) (RunView, error) {
	p, err := a.progress(ctx, m)
	if err != nil {
		return RunView{}, err
	}
	schedule := m.Schedule
	if schedule == "" {
		n, _ := ledger.ParseRunID(m.RunID) // a run recorded before manifests named their schedule
		schedule = n.Schedule
	}
	return RunView{
		Run: m.RunID, State: m.State, Reason: m.Reason, Trigger: m.Trigger, Schedule: schedule, Job: m.Job, Occurrence: m.Occurrence,
		Epoch: m.Epoch, Leader: m.Leader, Segments: segments(m), Stop: m.Stop, Round: m.Round, Redrives: redrives(m), Progress: p, Timings: timings(m),
	}, nil
}

func (a *API) getRun(ctx context.Context, r Request) Reply {
	if err := ledger.ValidateRunID(r.ID); err != nil {
		return errorReply(http.StatusBadRequest, CodeInvalidRunID, err.Error())
	}
	m, err := a.cfg.Ledger.ReadManifest(ctx, r.ID)
	if errors.Is(err, ledger.ErrNotFound) {
		return errorReply(http.StatusNotFound, CodeNotFound, fmt.Sprintf("no run %s", r.ID))
	}
	if err != nil {
		return a.storageError(r, "read the run", err)
	}
	v, err := a.view(ctx, m)
	if err != nil {
		return a.storageError(r, "read the run's progress", err)
	}
	v.Params = m.Params
	if m.State.Final() && m.State != ledger.StateSkipped && m.State != ledger.StateMissed {
		rep, err := a.report(ctx, m)
		if err != nil {
			return a.storageError(r, "read the run's report", err)
		}
		v.Report = rep
	}
	if err := a.detail(ctx, m, &v); err != nil {
		return a.storageError(r, "read the run's results", err)
	}
	v.Trace, v.TraceURL = a.trace(m)
	return jsonReply(http.StatusOK, v)
}

// trace is m's trace ID, from the traceparent its manifest stores ("00-<trace>-<span>-<flags>"),
// and its address in the trace UI when Config.TraceURL is set.
func (a *API) trace(m ledger.Manifest) (id, url string) {
	parts := strings.Split(m.Trace, "-")
	if len(parts) != 4 || len(parts[1]) != 32 || strings.Trim(parts[1], "0123456789abcdef") != "" {
		return "", ""
	}
	id = parts[1]
	if a.cfg.TraceURL != "" {
		url = strings.ReplaceAll(a.cfg.TraceURL, TraceURLPlaceholder, id)
	}
	return id, url
}

// report reads the run's report, summarising a large one. A missing report is nil (a run
// that failed in planning has none).
func (a *API) report(ctx context.Context, m ledger.Manifest) (*ReportView, error) {
	// A redriven run's report is its latest round's; the earlier rounds' stay where they were.
	rep, info, err := a.cfg.Ledger.ReadReportBounded(ctx, ledger.RoundRun(m.RunID, m.Round), MaxReportReadBytes)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !info.Decoded {
		// Too large to read at all: the manifest holds the final counts.
		return &ReportView{State: m.State, Partitions: m.Partitions, Succeeded: m.Succeeded, Failed: m.Failed,
			Truncated: true, Bytes: info.Size}, nil
	}
	v := &ReportView{State: rep.State, Partitions: rep.Partitions, Succeeded: rep.Succeeded, Failed: rep.Failed, Cancelled: rep.Cancelled,
		FailedList: rep.FailedList, Aggregate: rep.Aggregate, Aggregator: rep.Aggregator, Created: rep.Created}
	if info.Size > MaxReportBytes {
		v.Aggregate, v.Truncated, v.Bytes = nil, true, info.Size
		if len(v.FailedList) > SummaryFailures {
			v.FailedList = v.FailedList[:SummaryFailures]
		}
	}
	return v, nil
}
