package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/ledger"
)

// Operator stops and redrives runs (coordinator.Coordinator).
type Operator interface {
	Cancel(ctx context.Context, run, note, by string) (ledger.Manifest, error)
	Redrive(ctx context.Context, run, key, by string) (coordinator.RedriveOutcome, error)
}

var _ Operator = (*coordinator.Coordinator)(nil)

// Run actions: POST /api/runs/{id}/<action>.
const (
	actionCancel  = "cancel"
	actionRedrive = "redrive"
)

// CancelBody is the optional JSON body of POST /api/runs/{id}/cancel.
type CancelBody struct {
	// Note says why (at most coordinator.MaxCancelNote characters); the run's reason carries it.
	Note string `json:"note"`
}

// runPath splits the Runs route's {*path} into the run ID and the action ("" for none); ok is
// false for a path of more than two segments.
func runPath(path string) (id, action string, ok bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch len(parts) {
	case 1:
		return parts[0], "", true
	case 2:
		return parts[0], parts[1], parts[1] != ""
	}
	return "", "", false
}

// runAction serves POST /api/runs/{id}/{action}.
func (a *API) runAction(ctx context.Context, r Request) Reply {
	if err := ledger.ValidateRunID(r.ID); err != nil {
		return errorReply(http.StatusBadRequest, CodeInvalidRunID, err.Error())
	}
	if r.Action != actionCancel && r.Action != actionRedrive {
		return errorReply(http.StatusNotFound, CodeNotFound, fmt.Sprintf("no endpoint runs/%s/%s: use POST runs/{id}/cancel or runs/{id}/redrive", r.ID, r.Action))
	}
	if r.Method != http.MethodPost {
		return methodNotAllowed(http.MethodPost)
	}
	if a.cfg.Operator == nil {
		return errorReply(http.StatusServiceUnavailable, CodeUnavailable, "operating runs is not available on this endpoint")
	}
	if len(r.Body) > MaxBodyBytes {
		return errorReply(http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("body is %d bytes; the limit is %d", len(r.Body), MaxBodyBytes))
	}
	if r.Action == actionRedrive {
		return a.redriveRun(ctx, r)
	}
	return a.cancelRun(ctx, r)
}

// cancelRun stops a run: 202 with the run as it is now (its stop recorded, or already
// cancelled), the same for a second cancel (the first one's stop stands); 409 for a run that
// is final otherwise; 404 for no such run.
func (a *API) cancelRun(ctx context.Context, r Request) Reply {
	body, err := decodeCancel(r.Body)
	if err != nil {
		return errorReply(http.StatusBadRequest, CodeBadRequest, err.Error())
	}
	by := principal(r)
	m, err := a.cfg.Operator.Cancel(ctx, r.ID, body.Note, by)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return errorReply(http.StatusNotFound, CodeNotFound, fmt.Sprintf("no run %s", r.ID))
	case errors.Is(err, coordinator.ErrFinal):
		return errorReply(http.StatusConflict, CodeConflict, fmt.Sprintf("run %s has ended; only a run that is queued, planning or running can be cancelled", r.ID))
	case errors.Is(err, coordinator.ErrBadRequest):
		return errorReply(http.StatusBadRequest, CodeBadRequest, err.Error())
	case err != nil:
		return a.storageError(r, "cancel the run", err)
	}
	a.logger(r).Info("run cancel recorded", "run", r.ID, "epoch", m.Epoch, "by", m.Stop.By, "note", m.Stop.Note, "state", m.State)
	v, err := a.view(ctx, m)
	if err != nil {
		return a.storageError(r, "read the run's progress", err)
	}
	return jsonReply(http.StatusAccepted, v)
}

// decodeCancel strictly decodes a cancel body: none, or {"note": "..."} with a note of at most
// coordinator.MaxCancelNote characters and none that checkText refuses.
func decodeCancel(body []byte) (CancelBody, error) {
	var b CancelBody
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return b, nil
	}
	if err := decodeStrict(body, &b, `{"note":"why it is cancelled"}`); err != nil {
		return b, err
	}
	if n := utf8.RuneCountInString(b.Note); n > coordinator.MaxCancelNote {
		return b, fmt.Errorf("note is %d characters; at most %d", n, coordinator.MaxCancelNote)
	}
	return b, checkText("note", b.Note)
}

// RedriveReply answers POST /api/runs/{id}/redrive.
type RedriveReply struct {
	Run string `json:"run"`
	// Round is the redrive round the request started, or the one its Idempotency-Key named
	// (Status "existing").
	Round      int          `json:"round"`
	Partitions int          `json:"partitions"`
	Status     string       `json:"status"` // "started" or "existing"
	State      ledger.State `json:"state"`
}

// redriveRun runs a final run's partitions that did not succeed again: 202 started, 200 for an
// Idempotency-Key that names an earlier round; 400 without a key; 409 when the run cannot be
// redriven (not final, succeeded, stopped, its job or plan gone); 404 for no run.
func (a *API) redriveRun(ctx context.Context, r Request) Reply {
	key, err := idempotencyKey(r)
	switch {
	case err != nil:
		return errorReply(http.StatusBadRequest, CodeInvalidKey, err.Error())
	case key == "":
		return errorReply(http.StatusBadRequest, CodeInvalidKey, "a redrive needs an Idempotency-Key header: a retry with the same key answers the same round")
	}
	if err := decodeEmpty(r.Body); err != nil {
		return errorReply(http.StatusBadRequest, CodeBadRequest, err.Error())
	}
	by := principal(r)
	out, err := a.cfg.Operator.Redrive(ctx, r.ID, key, by)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return errorReply(http.StatusNotFound, CodeNotFound, fmt.Sprintf("no run %s", r.ID))
	case errors.Is(err, ledger.ErrReopen), errors.Is(err, coordinator.ErrNothingToRedrive), errors.Is(err, coordinator.ErrPlanGone),
		errors.Is(err, coordinator.ErrPlanChanged), errors.Is(err, coordinator.ErrBadRequest):
		return errorReply(http.StatusConflict, CodeConflict, ledger.Cause(err))
	case err != nil:
		return a.storageError(r, "redrive the run", err)
	}
	reply := RedriveReply{Run: out.Run, Round: out.Round, Partitions: out.Partitions, Status: "started", State: out.State}
	status := http.StatusAccepted
	if out.Existing {
		reply.Status, status = "existing", http.StatusOK
	}
	a.logger(r).Info("run redriven", "run", r.ID, "round", out.Round, "partitions", out.Partitions, "by", by, "status", reply.Status)
	return jsonReply(status, reply)
}
