package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/ledger"
)

// Runs serves /api/runs (GET lists, POST starts) and /api/runs/{id} (GET shows one run).
func (a *API) Runs(ctx context.Context, r Request) Reply {
	if r.ID == "" && r.Path != "" {
		var ok bool
		if r.ID, r.Action, ok = runPath(r.Path); !ok {
			return errorReply(http.StatusNotFound, CodeNotFound, fmt.Sprintf("no endpoint runs/%s: use GET runs, GET runs/{id}, POST runs or POST runs/{id}/cancel", r.Path))
		}
	}
	switch {
	case r.Action != "":
		return a.runAction(ctx, r)
	case r.Method == http.MethodGet && r.ID == "":
		return a.listRuns(ctx, r)
	case r.Method == http.MethodGet:
		return a.getRun(ctx, r)
	case r.Method == http.MethodPost && r.ID == "":
		return a.startRun(ctx, r)
	case r.ID == "":
		return methodNotAllowed(http.MethodGet, http.MethodPost)
	default:
		return methodNotAllowed(http.MethodGet)
	}
}

// StartBody is the optional JSON body of POST /api/runs. Both fields may be omitted: the run
// then executes the timer's job and parameters (BATON_JOB, BATON_JOB_PARAMS).
type StartBody struct {
	Job    string          `json:"job"`
	Params json.RawMessage `json:"params"`
}

// StartReply answers an accepted POST /api/runs.
type StartReply struct {
	Run string `json:"run"`
	// Status is "started" (this request created the run and handed it to a planner),
	// "queued" (a run now that waits for the schedule's run in progress: overlap policy
	// buffer-one), "resumed" (it finished planning a run an earlier leader left half-enqueued)
	// or "existing" (the Idempotency-Key's run already existed).
	Status string       `json:"status"`
	State  ledger.State `json:"state"`
	// Schedule names the schedule of a run now (POST /api/schedules/{name}/runs).
	Schedule string `json:"schedule,omitempty"`
}

// ConflictBody is the 409 reply: the error, the leader and the run that blocks the start.
type ConflictBody struct {
	Error     ErrorDetail     `json:"error"`
	Leader    *ConflictLeader `json:"leader,omitempty"`
	ActiveRun string          `json:"activeRun,omitempty"`
}

// ConflictLeader names the lease holder (or the last one) and its epoch.
type ConflictLeader struct {
	Holder ledger.Holder `json:"holder"`
	Epoch  int64         `json:"epoch"`
}

// decodeStart strictly decodes a POST body: empty or a JSON object with only job and params.
func decodeStart(body []byte) (StartBody, error) {
	var b StartBody
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return b, nil
	}
	if err := decodeStrict(body, &b, `{"job":"synthetic","params":{...}}`); err != nil {
		return b, err
	}
	if p := bytes.TrimSpace(b.Params); len(p) == 0 || bytes.Equal(p, []byte("null")) {
		b.Params = nil
	}
	if b.Job == "" && b.Params != nil {
		// The coordinator would run the timer job with the timer's params and drop these.
		return b, errors.New(`body: "params" needs "job" (without a job the run uses the timer's job and params)`)
	}
	return b, nil
}

// idempotencyKey returns the Idempotency-Key header ("" when absent): one value of 1–200
// printable ASCII characters.
func idempotencyKey(r Request) (string, error) {
	vals := r.headerValues("Idempotency-Key")
	switch len(vals) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", errors.New("Idempotency-Key must be sent once")
	}
	k := vals[0]
	if len(k) < 1 || len(k) > MaxKeyLength {
		return "", fmt.Errorf("Idempotency-Key must be 1-%d characters, got %d", MaxKeyLength, len(k))
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return "", fmt.Errorf("Idempotency-Key must be printable ASCII; byte %d is 0x%02x", i, k[i])
		}
	}
	return k, nil
}

func (a *API) startRun(ctx context.Context, r Request) Reply {
	log := a.logger(r)
	if len(r.Body) > MaxBodyBytes {
		return errorReply(http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("body is %d bytes; the limit is %d", len(r.Body), MaxBodyBytes))
	}
	key, err := idempotencyKey(r)
	if err != nil {
		return errorReply(http.StatusBadRequest, CodeInvalidKey, err.Error())
	}
	body, err := decodeStart(r.Body)
	if err != nil {
		return errorReply(http.StatusBadRequest, CodeBadRequest, err.Error())
	}
	if a.cfg.Starter == nil {
		return errorReply(http.StatusServiceUnavailable, CodeUnavailable, "manual runs are not configured on this instance")
	}

	out, err := a.cfg.Starter.StartManual(ctx, coordinator.ManualRequest{Job: body.Job, Params: body.Params, IdempotencyKey: key})
	if reply, ok := refusedStart(err); ok {
		log.Info("manual run refused", "reason", err.Error(), "run", out.Run)
		return reply
	}
	switch {
	case errors.Is(err, coordinator.ErrBadRequest):
		return errorReply(http.StatusBadRequest, CodeBadRequest, err.Error())
	case errors.Is(err, coordinator.ErrRunInProgress):
		// No job: a run now of the settings' schedule, which its overlap policy refused.
		msg := out.Reason
		if msg == "" {
			msg = fmt.Sprintf("run %s is still in progress; the overlap policy refuses a second one", out.ActiveRun)
		}
		return a.conflict(ctx, r, out, msg)
	case errors.Is(err, coordinator.ErrSchedulerBusy):
		if key != "" {
			if m, ok, err := a.waitManifest(ctx, out.Run); err != nil {
				return a.storageError(r, "read the run", err)
			} else if ok {
				return a.existingManifest(r, body, m)
			}
		}
		return a.busy(r, out)
	case err != nil:
		return a.storageError(r, "start the run", err)
	}
	log = log.With("run", out.Run, "status", out.Status)

	switch out.Status {
	case coordinator.StatusStarted, coordinator.StatusResumed, coordinator.StatusQueued:
		log.Info("manual run accepted", "state", out.State, "epoch", out.Epoch)
		return a.accepted(http.StatusAccepted, out.Run, out.Status, out.State)
	case coordinator.StatusExisting:
		return a.existing(ctx, r, out.Run)
	case coordinator.StatusHeld:
		if key != "" {
			// Another request with this key may hold the lease and be creating the run right
			// now: answer with that run once its manifest appears.
			if m, ok, err := a.waitManifest(ctx, out.Run); err != nil {
				return a.storageError(r, "read the run", err)
			} else if ok {
				return a.existingManifest(r, body, m)
			}
		}
		msg := fmt.Sprintf("the lease is held by %s (epoch %d); try again when it is released", out.Holder, out.HolderEpoch)
		return a.conflict(ctx, r, out, msg)
	default:
		return a.conflict(ctx, r, out, "the run was not started: "+out.Reason)
	}
}

func (a *API) accepted(status int, run string, st coordinator.Status, state ledger.State) Reply {
	return Reply{
		Status:  status,
		Headers: map[string]string{"Location": a.cfg.BasePath + "/runs/" + run},
		JSON:    StartReply{Run: run, Status: string(st), State: state},
	}
}

// existing answers a repeated Idempotency-Key the coordinator found to name the same request
// (else it refuses with coordinator.ErrKeyReused): 200 with its run.
func (a *API) existing(ctx context.Context, r Request, run string) Reply {
	m, err := a.cfg.Ledger.ReadManifest(ctx, run)
	if err != nil {
		return a.storageError(r, "read the run", err)
	}
	return a.existingManifest(r, StartBody{}, m)
}

// existingManifest answers 200 with the key's run, or 422 when the request asked for another
// job or other params than the run has (a key names one request, as in the IETF
// Idempotency-Key draft), when the coordinator could not compare: the run was made by another
// request holding the lease. A body without a job asked for a run now, whose ID names its
// schedule, and is not compared.
func (a *API) existingManifest(r Request, body StartBody, m ledger.Manifest) Reply {
	if body.Job != "" && (body.Job != m.Job || !sameJSON(body.Params, m.Params)) {
		return errorReply(http.StatusUnprocessableEntity, CodeKeyReused,
			fmt.Sprintf("Idempotency-Key already used for run %s with job %q and other params", m.RunID, m.Job))
	}
	a.logger(r).Info("manual run exists for this key", "run", m.RunID, "state", m.State)
	return a.accepted(http.StatusOK, m.RunID, coordinator.StatusExisting, m.State)
}

// waitManifest polls the run's manifest for up to KeyWait (each read is one GET; nothing
// contends for the lease).
func (a *API) waitManifest(ctx context.Context, run string) (ledger.Manifest, bool, error) {
	var deadline <-chan time.Time
	if a.cfg.KeyWait > 0 {
		t := time.NewTimer(a.cfg.KeyWait)
		defer t.Stop()
		deadline = t.C
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		m, err := a.cfg.Ledger.ReadManifest(ctx, run)
		if err == nil {
			return m, true, nil
		}
		if !errors.Is(err, ledger.ErrNotFound) {
			return m, false, err
		}
		if deadline == nil {
			return m, false, nil
		}
		select {
		case <-ctx.Done():
			return m, false, ctx.Err()
		case <-deadline:
			return m, false, nil
		case <-tick.C:
		}
	}
}

// conflict answers 409 with the leader and the run in the way. A held lease names its
// holder; a run in progress names the leader as storage shows it now.
func (a *API) conflict(ctx context.Context, r Request, out coordinator.Outcome, msg string) Reply {
	body := ConflictBody{Error: ErrorDetail{Code: CodeConflict, Message: msg}, ActiveRun: out.ActiveRun}
	if out.Status == coordinator.StatusHeld {
		body.Leader = &ConflictLeader{Holder: out.Holder, Epoch: out.HolderEpoch}
	} else if st, err := a.cfg.Leader.State(ctx); err == nil && !st.Holder.IsZero() {
		body.Leader = &ConflictLeader{Holder: st.Holder, Epoch: st.Epoch}
	} else if err != nil {
		a.logger(r).Warn("read leader state for a 409", "err", err)
	}
	a.logger(r).Info("manual run refused", "reason", msg, "activeRun", out.ActiveRun)
	return jsonReply(http.StatusConflict, body)
}

// sameJSON compares two JSON values by meaning (key order and spacing do not matter).
func sameJSON(x, y json.RawMessage) bool {
	var vx, vy any
	if len(bytes.TrimSpace(x)) > 0 {
		if json.Unmarshal(x, &vx) != nil {
			return false
		}
	}
	if len(bytes.TrimSpace(y)) > 0 {
		if json.Unmarshal(y, &vy) != nil {
			return false
		}
	}
	return reflect.DeepEqual(vx, vy)
}
