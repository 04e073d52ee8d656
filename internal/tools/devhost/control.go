package devhost

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// Chaos actions on one instance, by name: the control endpoint's verbs.
const (
	ActionKill    = "kill"    // SIGKILL
	ActionTerm    = "term"    // SIGTERM
	ActionStop    = "stop"    // SIGSTOP (pause)
	ActionCont    = "cont"    // SIGCONT (resume)
	ActionRestart = "restart" // graceful stop, then a fresh process
)

// Actions lists the chaos verbs.
var Actions = []string{ActionKill, ActionTerm, ActionStop, ActionCont, ActionRestart}

// Do applies a chaos action to the named instance.
func (h *Host) Do(ctx context.Context, instance, action string) error {
	in := h.Instance(instance)
	if in == nil {
		return fmt.Errorf("no instance %q (have %d: instance-1..instance-%d)", instance, len(h.instances), len(h.instances))
	}
	switch action {
	case ActionKill:
		return in.Kill()
	case ActionTerm:
		return in.Term()
	case ActionStop:
		return in.Pause()
	case ActionCont:
		return in.Resume()
	case ActionRestart:
		return in.Restart(ctx)
	}
	return fmt.Errorf("unknown action %q: use one of %v", action, Actions)
}

// controlHandler serves the loopback control API:
//
//	GET  /instances                     list instances
//	GET  /inflight                      invocations in flight
//	POST /instances/{name}/{action}     kill | term | stop | cont | restart
//	POST /timers/{function}/fire        fire a timer function now on a random instance
func (h *Host) controlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /instances", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, h.Instances())
	})
	mux.HandleFunc("GET /inflight", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, h.InFlight())
	})
	mux.HandleFunc("POST /instances/{name}/{action}", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		if err := h.Do(ctx, r.PathValue("name"), r.PathValue("action")); err != nil {
			writeHTTPError(w, http.StatusBadRequest, "chaos_failed", err.Error())
			return
		}
		writeJSON(w, http.StatusOK, h.Instance(r.PathValue("name")).Info())
	})
	mux.HandleFunc("POST /timers/{function}/fire", func(w http.ResponseWriter, r *http.Request) {
		r.URL.Path = "/admin/functions/" + r.PathValue("function")
		h.serveAdmin(w, r)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		writeHTTPError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
