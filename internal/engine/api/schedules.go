package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/lib/strictjson"
)

// Who changed a schedule.
const (
	// PrincipalHeader names the signed-in caller when App Service authentication (Easy Auth)
	// is on: App Service sets it, and drops one a client sent.
	PrincipalHeader = "X-MS-CLIENT-PRINCIPAL-NAME"
	// AnonymousOperator is who paused or resumed a schedule when PrincipalHeader is absent.
	AnonymousOperator = "a function key holder"
	// MaxPrincipalLength bounds PrincipalHeader's value as recorded, in characters.
	MaxPrincipalLength = 200
)

// Schedule actions: POST /api/schedules/{name}/<action>.
const (
	actionRuns   = "runs"
	actionPause  = "pause"
	actionResume = "resume"
)

// SchedulesReply is GET /api/schedules: every schedule the app declares, in declaration order.
type SchedulesReply struct {
	Schedules []ScheduleView `json:"schedules"`
	Now       time.Time      `json:"now"`
}

// PauseBody is the optional JSON body of POST /api/schedules/{name}/pause.
type PauseBody struct {
	// Note says why (at most coordinator.MaxPauseNote characters); every occurrence recorded
	// paused carries it as its reason.
	Note string `json:"note"`
}

// Schedules serves GET /api/schedules (every schedule), GET /api/schedules/{name} (one, with
// its occurrence strip), and POST /api/schedules/{name}/runs, /pause and /resume.
func (a *API) Schedules(ctx context.Context, r Request) Reply {
	name, action, ok := schedulePath(r.Path)
	if !ok {
		return errorReply(http.StatusNotFound, CodeNotFound, fmt.Sprintf(
			"no endpoint schedules/%s: use GET schedules, GET schedules/{name}, or POST schedules/{name}/runs, /pause or /resume", r.Path))
	}
	want := http.MethodGet
	if action != "" {
		want = http.MethodPost
	}
	if r.Method != want {
		return methodNotAllowed(want)
	}
	if a.cfg.Scheduler == nil {
		return errorReply(http.StatusServiceUnavailable, CodeUnavailable, "schedules are not configured on this instance")
	}
	if name == "" {
		return a.listSchedules(ctx, r)
	}
	all := a.cfg.Scheduler.Schedules()
	i := slices.IndexFunc(all, func(s coordinator.Schedule) bool { return s.Name == name })
	if i < 0 {
		return unknownSchedule(name, all)
	}
	s := all[i]
	switch action {
	case actionRuns:
		return a.runSchedule(ctx, r, s)
	case actionPause:
		return a.pauseSchedule(ctx, r, s)
	case actionResume:
		return a.resumeSchedule(ctx, r, s)
	}
	return a.getSchedule(ctx, r, s)
}

// schedulePath splits the route's {*path}: "" (the list), "<name>" or "<name>/<action>".
func schedulePath(p string) (name, action string, ok bool) {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	switch {
	case len(parts) == 1:
		return parts[0], "", true
	case len(parts) == 2 && parts[0] != "" && (parts[1] == actionRuns || parts[1] == actionPause || parts[1] == actionResume):
		return parts[0], parts[1], true
	}
	return "", "", false
}

func unknownSchedule(name string, all []coordinator.Schedule) Reply {
	names := make([]string, len(all))
	for i, s := range all {
		names[i] = s.Name
	}
	declared := "none"
	if len(names) > 0 {
		declared = strings.Join(names, ", ")
	}
	if len(name) > 64 {
		name = name[:64] + "…"
	}
	return errorReply(http.StatusNotFound, CodeNotFound, fmt.Sprintf("no schedule %q; this app declares: %s", name, declared))
}

func (a *API) listSchedules(ctx context.Context, r Request) Reply {
	n, err := parseOccurrences(r.query("occurrences"), 0, 0, MaxListOccurrences)
	if err != nil {
		return errorReply(http.StatusBadRequest, CodeInvalidOccurrences, err.Error())
	}
	now := a.cfg.Now()
	all := a.cfg.Scheduler.Schedules()
	out := SchedulesReply{Schedules: make([]ScheduleView, len(all)), Now: now.UTC()}
	err = forEach(ctx, len(all), func(ctx context.Context, i int) error {
		st, _, err := a.readState(ctx, all[i].Name)
		if err != nil {
			return err
		}
		out.Schedules[i], err = a.scheduleView(ctx, all[i], st, now, n)
		return err
	})
	if err != nil {
		return a.storageError(r, "read the schedules", err)
	}
	return jsonReply(http.StatusOK, out)
}

func (a *API) getSchedule(ctx context.Context, r Request, s coordinator.Schedule) Reply {
	n, err := parseOccurrences(r.query("occurrences"), DefaultOccurrences, 1, MaxOccurrences)
	if err != nil {
		return errorReply(http.StatusBadRequest, CodeInvalidOccurrences, err.Error())
	}
	st, _, err := a.readState(ctx, s.Name)
	if err != nil {
		return a.storageError(r, "read the schedule", err)
	}
	v, err := a.scheduleView(ctx, s, st, a.cfg.Now(), n)
	if err != nil {
		return a.storageError(r, "read the schedule's runs", err)
	}
	return jsonReply(http.StatusOK, v)
}

// runSchedule is POST /api/schedules/{name}/runs: a run now of the schedule, through its
// overlap policy.
func (a *API) runSchedule(ctx context.Context, r Request, s coordinator.Schedule) Reply {
	if len(r.Body) > MaxBodyBytes {
		return errorReply(http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("body is %d bytes; the limit is %d", len(r.Body), MaxBodyBytes))
	}
	key, err := idempotencyKey(r)
	if err != nil {
		return errorReply(http.StatusBadRequest, CodeInvalidKey, err.Error())
	}
	if err := decodeEmpty(r.Body); err != nil {
		return errorReply(http.StatusBadRequest, CodeBadRequest, err.Error()+
			": a run now runs the schedule's own job and params (POST /api/runs runs a job with other params)")
	}
	log := a.logger(r).With("schedule", s.Name)
	out, err := a.cfg.Scheduler.RunNow(ctx, s.Name, key)
	if reply, ok := refusedStart(err); ok {
		log.Info("run now refused", "reason", err.Error(), "run", out.Run)
		return reply
	}
	switch {
	case errors.Is(err, coordinator.ErrUnknownSchedule):
		return unknownSchedule(s.Name, a.cfg.Scheduler.Schedules())
	case errors.Is(err, coordinator.ErrBadRequest):
		return errorReply(http.StatusBadRequest, CodeBadRequest, err.Error())
	case errors.Is(err, coordinator.ErrRunInProgress):
		if key != "" && out.Run != "" {
			// A repeat of a request whose run is the one in progress (a client retrying, or
			// racing itself): that run, as for any repeated key.
			if m, err := a.cfg.Ledger.ReadManifest(ctx, out.Run); err == nil {
				return a.scheduleAccepted(http.StatusOK, s.Name, out.Run, coordinator.StatusExisting, m.State)
			} else if !errors.Is(err, ledger.ErrNotFound) {
				return a.storageError(r, "read the run", err)
			}
		}
		msg := out.Reason
		if msg == "" {
			msg = fmt.Sprintf("run %s is still in progress; the overlap policy %s refuses another", out.ActiveRun, s.Overlap)
		}
		return a.conflict(ctx, r, out, msg)
	case errors.Is(err, coordinator.ErrSchedulerBusy):
		if key != "" {
			// Another request with this key may hold the lease and be creating the run.
			if m, ok, err := a.waitManifest(ctx, out.Run); err != nil {
				return a.storageError(r, "read the run", err)
			} else if ok {
				return a.scheduleAccepted(http.StatusOK, s.Name, out.Run, coordinator.StatusExisting, m.State)
			}
		}
		return a.busy(r, out)
	case err != nil:
		return a.storageError(r, "run the schedule now", err)
	}
	log = log.With("run", out.Run, "status", out.Status)
	switch out.Status {
	case coordinator.StatusStarted, coordinator.StatusQueued:
		log.Info("run now accepted", "state", out.State, "epoch", out.Epoch)
		return a.scheduleAccepted(http.StatusAccepted, s.Name, out.Run, out.Status, out.State)
	case coordinator.StatusExisting:
		log.Info("run now exists for this key", "state", out.State)
		return a.scheduleAccepted(http.StatusOK, s.Name, out.Run, out.Status, out.State)
	}
	return a.conflict(ctx, r, out, "the run was not started: "+out.Reason)
}

func (a *API) scheduleAccepted(status int, schedule, run string, st coordinator.Status, state ledger.State) Reply {
	rep := a.accepted(status, run, st, state)
	v := rep.JSON.(StartReply)
	v.Schedule = schedule
	rep.JSON = v
	return rep
}

// busy answers 503 when the scheduler lease stayed held while a run now waited for it: a
// heartbeat or another run now was deciding.
func (a *API) busy(r Request, out coordinator.Outcome) Reply {
	msg := "the scheduler lease stayed held; try again in a few seconds"
	body := ConflictBody{Error: ErrorDetail{Code: CodeSchedulerBusy}}
	if !out.Holder.IsZero() {
		msg = fmt.Sprintf("the scheduler lease stayed held by %s (epoch %d); try again in a few seconds", out.Holder, out.HolderEpoch)
		body.Leader = &ConflictLeader{Holder: out.Holder, Epoch: out.HolderEpoch}
	}
	body.Error.Message = msg
	a.logger(r).Warn("run now refused: the scheduler is busy", "leader", out.Holder.String())
	return Reply{Status: http.StatusServiceUnavailable, Headers: map[string]string{"Retry-After": "5"}, JSON: body}
}

func (a *API) pauseSchedule(ctx context.Context, r Request, s coordinator.Schedule) Reply {
	if len(r.Body) > MaxBodyBytes {
		return errorReply(http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("body is %d bytes; the limit is %d", len(r.Body), MaxBodyBytes))
	}
	body, err := decodePause(r.Body)
	if err != nil {
		return errorReply(http.StatusBadRequest, CodeBadRequest, err.Error())
	}
	by := principal(r)
	st, err := a.cfg.Scheduler.Pause(ctx, s.Name, body.Note, by)
	switch {
	case errors.Is(err, coordinator.ErrUnknownSchedule):
		return unknownSchedule(s.Name, a.cfg.Scheduler.Schedules())
	case errors.Is(err, coordinator.ErrBadRequest):
		return errorReply(http.StatusBadRequest, CodeBadRequest, err.Error())
	case err != nil:
		return a.storageError(r, "pause the schedule", err)
	}
	a.logger(r).Info("schedule paused", "schedule", s.Name, "by", by, "note", body.Note)
	return a.stateReply(ctx, r, s, st)
}

func (a *API) resumeSchedule(ctx context.Context, r Request, s coordinator.Schedule) Reply {
	if len(r.Body) > MaxBodyBytes {
		return errorReply(http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("body is %d bytes; the limit is %d", len(r.Body), MaxBodyBytes))
	}
	if err := decodeEmpty(r.Body); err != nil {
		return errorReply(http.StatusBadRequest, CodeBadRequest, err.Error())
	}
	if s.Paused {
		return errorReply(http.StatusConflict, CodeConflict, fmt.Sprintf(
			"schedule %s is paused by %s, which the API cannot change: remove \"paused\": true for it there to resume it", s.Name, s.PausedBy))
	}
	by := principal(r)
	st, err := a.cfg.Scheduler.Resume(ctx, s.Name, by)
	switch {
	case errors.Is(err, coordinator.ErrUnknownSchedule):
		return unknownSchedule(s.Name, a.cfg.Scheduler.Schedules())
	case err != nil:
		return a.storageError(r, "resume the schedule", err)
	}
	a.logger(r).Info("schedule resumed", "schedule", s.Name, "by", by)
	return a.stateReply(ctx, r, s, st)
}

// stateReply answers a pause or resume with the schedule's view, from the state the change
// left.
func (a *API) stateReply(ctx context.Context, r Request, s coordinator.Schedule, st ledger.ScheduleState) Reply {
	v, err := a.scheduleView(ctx, s, st, a.cfg.Now(), 0)
	if err != nil {
		return a.storageError(r, "read the schedule's last run", err)
	}
	return jsonReply(http.StatusOK, v)
}

// principal is who the request comes from: the signed-in user App Service authentication
// names, else AnonymousOperator. The value is recorded, not refused: control and
// bidirectional formatting characters are escaped (escapeText), and it is cut to
// MaxPrincipalLength characters.
func principal(r Request) string {
	for _, v := range r.headerValues(PrincipalHeader) {
		if v = escapeText(strings.TrimSpace(v), MaxPrincipalLength); v != "" {
			return v
		}
	}
	return AnonymousOperator
}

// decodeStrict decodes body, a JSON object, into v: no unknown fields, nothing after it, and
// no key repeated or spelt in another case than its field's, at any depth (strictjson.Decode:
// encoding/json would take the last of {"job":"synthetic","JOB":"inventory"}).
func decodeStrict(body []byte, v any, example string) error {
	if body[0] != '{' {
		return errors.New("body must be a JSON object like " + example)
	}
	err := strictjson.Decode(body, v)
	switch {
	case errors.Is(err, strictjson.ErrTrailingData):
		return errors.New("body: unexpected data after the JSON object")
	case err != nil:
		return fmt.Errorf("body: %w", err)
	}
	return nil
}

// decodeEmpty accepts no body or an empty JSON object.
func decodeEmpty(body []byte) error {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil
	}
	return decodeStrict(body, &struct{}{}, "{}")
}

// decodePause strictly decodes a pause body: none, or {"note": "..."} with a note of at most
// coordinator.MaxPauseNote characters and none that checkText refuses.
func decodePause(body []byte) (PauseBody, error) {
	var b PauseBody
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return b, nil
	}
	if err := decodeStrict(body, &b, `{"note":"why it is paused"}`); err != nil {
		return b, err
	}
	if n := utf8.RuneCountInString(b.Note); n > coordinator.MaxPauseNote {
		return b, fmt.Errorf("note is %d characters; at most %d", n, coordinator.MaxPauseNote)
	}
	return b, checkText("note", b.Note)
}
