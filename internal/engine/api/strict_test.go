package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/ledger"
)

// Every request body is decoded strictly: a repeated key, or a field's name in another case,
// at any depth, is a 400 JSON error naming the key, and nothing is started or changed
// (encoding/json alone would run the last of {"job":"synthetic","JOB":"inventory"}).
func TestBodies_RepeatedAndWrongCaseKeys(t *testing.T) {
	for _, c := range []struct{ name, body, want string }{
		{"job in upper case", `{"job":"synthetic","JOB":"inventory"}`, `key "JOB" must be written "job"`},
		{"job only in upper case", `{"JOB":"inventory"}`, `key "JOB" must be written "job"`},
		{"job twice", `{"job":"synthetic","job":"inventory"}`, `duplicate key "job"`},
		{"params in another case", `{"job":"synthetic","Params":{"partitions":2}}`, `key "Params" must be written "params"`},
		{"a param twice", `{"job":"synthetic","params":{"partitions":2,"partitions":7}}`, `duplicate key "partitions" in "params"`},
	} {
		t.Run("runs/"+c.name, func(t *testing.T) {
			s := &fakeStarter{fn: func(coordinator.ManualRequest) (coordinator.Outcome, error) {
				return coordinator.Outcome{Status: coordinator.StatusStarted, Run: "manual-x"}, nil
			}}
			r := post(newTestAPI(t, newFakeLedger(), s, nil), c.body, nil)
			v := decodeReply(t, r)
			if r.Status != http.StatusBadRequest || errCode(v) != CodeBadRequest || !strings.Contains(errMessage(v), c.want) {
				t.Errorf("POST /api/runs %s: %d %v, want 400 saying %q", c.body, r.Status, v, c.want)
			}
			if len(s.calls) != 0 {
				t.Errorf("StartManual ran %+v", s.calls)
			}
		})
	}
	e := newSchedEnv(t, t0)
	for _, c := range []struct{ path, body, want string }{
		{"nightly/pause", `{"note":"a","NOTE":"b"}`, `key "NOTE" must be written "note"`},
		{"nightly/pause", `{"Note":"b"}`, `key "Note" must be written "note"`},
		{"nightly/pause", `{"note":"a","note":"b"}`, `duplicate key "note"`},
		{"nightly/resume", `{"a":1,"a":2}`, `duplicate key "a"`},
		{"nightly/runs", `{"a":1,"a":2}`, `duplicate key "a"`},
	} {
		if r, v := e.do(http.MethodPost, c.path, nil, nil, c.body); r.Status != http.StatusBadRequest || errCode(v) != CodeBadRequest ||
			!strings.Contains(errMessage(v), c.want) {
			t.Errorf("POST %s %s: %d %v, want 400 saying %q", c.path, c.body, r.Status, v, c.want)
		}
	}
	if calls := e.s.called(); len(calls) != 0 {
		t.Errorf("refused bodies reached the scheduler: %q", calls)
	}
}

// A pause note may hold no control character (NUL, ESC, tab, CR, LF…), line or paragraph
// separator, or bidirectional formatting character: each is a 400 naming the field and the
// character, and the schedule stays as it was. Other text, in any script, is kept as written.
func TestPause_NoteRefusesSpoofingCharacters(t *testing.T) {
	e := newSchedEnv(t, t0)
	bad := []rune{0x00, 0x1b, '\t', '\r', '\n', 0x7f, 0x85, 0x9b, 0x061c, 0x200e, 0x200f, 0x2028, 0x2029,
		0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2066, 0x2067, 0x2068, 0x2069}
	for _, r := range bad {
		note := "back at 14:00 " + string(r) + "gpj.exe"
		body := `{"note":` + jsonString(t, note) + `}`
		resp, v := e.do(http.MethodPost, "nightly/pause", nil, nil, body)
		msg := errMessage(v)
		if resp.Status != http.StatusBadRequest || errCode(v) != CodeBadRequest || !strings.HasPrefix(msg, fmt.Sprintf("note: character 15 is %U,", r)) {
			t.Errorf("note with %U: %d %v, want 400 naming the note and the character", r, resp.Status, v)
		}
	}
	if calls := e.s.called(); len(calls) != 0 {
		t.Fatalf("refused notes reached the scheduler: %q", calls)
	}
	for _, note := range []string{"Wartung bis 14:00 – Grüße", "صيانة حتى الساعة ٢", "維護中 👩‍💻", `a \u202e escape written out`} {
		if r, v := e.do(http.MethodPost, "nightly/pause", nil, nil, `{"note":`+jsonString(t, note)+`}`); r.Status != http.StatusOK || v["note"] != note {
			t.Errorf("note %q: %d %v", note, r.Status, v)
		}
	}
}

// A principal is not the caller's to fix (App Service sets it): its control and bidirectional
// characters are escaped, visibly, in what is recorded and shown, not refused.
func TestPause_PrincipalEscaped(t *testing.T) {
	e := newSchedEnv(t, t0)
	who := map[string][]string{PrincipalHeader: {"alice\u202e@contoso.com\x1b[2J"}}
	want := `alice\u202e@contoso.com\u001b[2J`
	if r, v := e.do(http.MethodPost, "nightly/pause", nil, who, ""); r.Status != http.StatusOK || v["pausedBy"] != want {
		t.Errorf("pause: %d pausedBy %q, want %q", r.Status, v["pausedBy"], want)
	}
	if r, v := e.do(http.MethodPost, "nightly/resume", nil, who, ""); r.Status != http.StatusOK {
		t.Errorf("resume: %d %v", r.Status, v)
	}
	if got, want := e.s.called(), []string{"pause nightly  by " + want, "resume nightly by " + want}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("calls %q, want %q", got, want)
	}
}

// A note or principal already in the ledger with such characters (stored before notes were
// checked) is shown escaped, in the list and in the schedule's view.
func TestSchedules_StoredNoteShownEscaped(t *testing.T) {
	e := newSchedEnv(t, t0)
	e.l.updateSchedule("nightly", func(st *ledger.ScheduleState) {
		st.Paused, st.Note, st.PausedBy, st.PausedAt = true, "back\r\n2026-11-21 INFO all clear \u202egpj.exe", "bob\u2066", t0
	})
	wantNote, wantBy := `back\u000d\u000a2026-11-21 INFO all clear \u202egpj.exe`, `bob\u2066`
	_, v := e.do(http.MethodGet, "nightly", nil, nil, "")
	if v["note"] != wantNote || v["pausedBy"] != wantBy {
		t.Errorf("schedule view: note %q by %q, want %q by %q", v["note"], v["pausedBy"], wantNote, wantBy)
	}
	_, v = e.do(http.MethodGet, "", nil, nil, "")
	if n := v["schedules"].([]any)[0].(map[string]any); n["note"] != wantNote || n["pausedBy"] != wantBy {
		t.Errorf("the list: note %q by %q, want %q by %q", n["note"], n["pausedBy"], wantNote, wantBy)
	}
}

// escapeText writes each spoofing character and each byte that is not UTF-8 as an escape, and
// never cuts one in half at its bound.
func TestEscapeText(t *testing.T) {
	for _, c := range []struct {
		in   string
		max  int
		want string
	}{
		{"plain é 👩‍💻", 0, "plain é 👩‍💻"},
		{"a\u202eb\u2066c\u200fd", 0, `a\u202eb\u2066c\u200fd`},
		{"nul\x00esc\x1b\r\n", 0, `nul\u0000esc\u001b\u000d\u000a`},
		{"bad\xffbyte", 0, `bad\xffbyte`},
		{"ab\u202ecd", 3, "ab"},
		{"ab\u202ecd", 8, `ab\u202e`},
		{"ab\u202ecd", 9, `ab\u202ec`},
	} {
		if got := escapeText(c.in, c.max); got != c.want {
			t.Errorf("escapeText(%q, %d) = %q, want %q", c.in, c.max, got, c.want)
		}
	}
}

func errMessage(v map[string]any) string {
	e, _ := v["error"].(map[string]any)
	s, _ := e["message"].(string)
	return s
}

// jsonString encodes s as a JSON string, control characters escaped.
func jsonString(t *testing.T, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
