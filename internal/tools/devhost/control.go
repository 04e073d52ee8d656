package devhost

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
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
//	POST /queues/{queue}/faults/{kind}  arm a delivery fault (lost | answer-lost | crash) on
//	                                    the next message of the queue ("control", "work" or a
//	                                    name) whose body contains ?match=, crashing ?crashAfter=
//	                                    into the invocation; answers its strike once it hit
//	                                    (within ?wait=, default 30s, else 504 and disarmed)
//	GET  /faults                        every message a delivery fault hit
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
	mux.HandleFunc("POST /queues/{queue}/faults/{kind}", h.serveFault)
	mux.HandleFunc("GET /faults", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, h.Strikes())
	})
	mux.HandleFunc("POST /timers/{function}/fire", func(w http.ResponseWriter, r *http.Request) {
		r.URL.Path = "/admin/functions/" + r.PathValue("function")
		h.serveAdmin(w, r)
	})
	return mux
}

// maxFaultWait bounds how long POST /queues/{queue}/faults/{kind} waits for its message.
const maxFaultWait = 10 * time.Minute

// serveFault arms a delivery fault and answers what it hit.
func (h *Host) serveFault(w http.ResponseWriter, r *http.Request) {
	kind, err := ParseFaultKind(r.PathValue("kind"))
	if err != nil {
		writeHTTPError(w, http.StatusBadRequest, "bad_fault", err.Error())
		return
	}
	q := r.URL.Query()
	f := MessageFault{Kind: kind, Queue: r.PathValue("queue")}
	if m := q.Get("match"); m != "" {
		f.Match = func(body string) bool { return strings.Contains(body, m) }
	}
	wait := 30 * time.Second
	for name, d := range map[string]*time.Duration{"crashAfter": &f.CrashAfter, "wait": &wait} {
		v := q.Get(name)
		if v == "" {
			continue
		}
		if *d, err = time.ParseDuration(v); err != nil || *d < 0 || *d > maxFaultWait {
			writeHTTPError(w, http.StatusBadRequest, "bad_fault", fmt.Sprintf("%s=%q: want a duration from 0 to %s", name, v, maxFaultWait))
			return
		}
	}
	a, err := h.InjectFault(f)
	if err != nil {
		writeHTTPError(w, http.StatusBadRequest, "bad_fault", err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	strikes, err := a.Wait(ctx)
	if err != nil {
		a.Cancel()
		if strikes = a.Strikes(); len(strikes) == 0 {
			writeHTTPError(w, http.StatusGatewayTimeout, "no_message",
				fmt.Sprintf("no message of queue %s matched within %s; the fault is disarmed", a.q.name, wait))
			return
		}
	}
	writeJSON(w, http.StatusOK, strikes[0])
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
