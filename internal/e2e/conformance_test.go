package e2e_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/protocol"
	"github.com/batonfn/baton/internal/tools/devhost"
)

// form classifies a JSON value by its wire form, the way the host's converter shapes it: the
// kind of JSON value, and for strings what their text looks like.
func form(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "absent"
	}
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	case '"':
	default:
		return "number"
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "bad-string"
	}
	return "string:" + textForm(s)
}

var (
	reUUID        = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	reOffsetTime  = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,7})?\+00:00$`)
	reOffsetSecs  = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00$`)
	reUtcNow      = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{7}Z$`)
	reInt         = regexp.MustCompile(`^-?\d+$`)
	reQuotedInner = regexp.MustCompile(`^".*"$`)
)

func textForm(s string) string {
	switch {
	case reUUID.MatchString(s):
		return "uuid"
	case reOffsetSecs.MatchString(s):
		return "time+00:00-seconds"
	case reOffsetTime.MatchString(s):
		return "time+00:00"
	case reUtcNow.MatchString(s):
		return "time-7-digits-Z"
	case reInt.MatchString(s):
		return "int"
	case reQuotedInner.MatchString(s) && json.Valid([]byte(s)):
		var inner string
		if json.Unmarshal([]byte(s), &inner) == nil {
			return "quoted(" + textForm(inner) + ")"
		}
	}
	if json.Valid([]byte(s)) && strings.HasPrefix(strings.TrimSpace(s), "{") {
		return "json-object-text"
	}
	return "text"
}

// forms maps every key of a JSON object to its form; nested objects are flattened with "."
// (object-valued keys listed in deep are descended into).
func forms(raw json.RawMessage, deep map[string]bool, prefix string) map[string]string {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(raw, &m)
	out := map[string]string{}
	for k, v := range m {
		key := prefix + k
		f := form(v)
		if f == "object" && deep[key] {
			for kk, vv := range forms(v, deep, key+".") {
				out[kk] = vv
			}
			continue
		}
		out[key] = f
	}
	return out
}

type payload struct {
	Data     map[string]json.RawMessage `json:"Data"`
	Metadata map[string]json.RawMessage `json:"Metadata"`
}

func loadGolden(t *testing.T, name string) payload {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "internal", "app", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var p payload
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return p
}

// renameParam renames an HTTP payload's route parameter from to to, in req.Params and in the
// metadata.
func renameParam(t *testing.T, p payload, from, to string) payload {
	t.Helper()
	var req map[string]json.RawMessage
	if err := json.Unmarshal(p.Data["req"], &req); err != nil {
		t.Fatal(err)
	}
	var params map[string]json.RawMessage
	if err := json.Unmarshal(req["Params"], &params); err != nil {
		t.Fatal(err)
	}
	params[to] = params[from]
	delete(params, from)
	req["Params"] = mustJSON(params)
	p.Data["req"] = mustJSON(req)
	if v, ok := p.Metadata[from]; ok {
		p.Metadata[to] = v
		delete(p.Metadata, from)
	}
	return p
}

func decodePayload(t *testing.T, b []byte) payload {
	t.Helper()
	var p payload
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("devhost payload: %v\n%s", err, b)
	}
	return p
}

// compareForms reports keys missing on either side and keys whose forms differ. ignore lists
// keys whose presence depends on the payload's content (leaked body properties, route params).
func compareForms(t *testing.T, what string, golden, got map[string]string, ignore func(string) bool) {
	t.Helper()
	keys := map[string]bool{}
	for k := range golden {
		keys[k] = true
	}
	for k := range got {
		keys[k] = true
	}
	var sorted []string
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		if ignore != nil && ignore(k) {
			continue
		}
		g, ok1 := golden[k]
		d, ok2 := got[k]
		switch {
		case !ok1:
			t.Errorf("%s: devhost sends %s (%s), the golden payload has no such key", what, k, d)
		case !ok2:
			t.Errorf("%s: devhost lacks %s (golden: %s)", what, k, g)
		case g != d:
			t.Errorf("%s: %s has form %s, golden %s", what, k, d, g)
		}
	}
}

// TestConformance_PayloadsMatchGoldens captures the requests the devhost sends to the real
// handler for a timer fire (the heartbeat), a queue message and HTTP calls, and checks each against the golden
// payloads in internal/app/testdata: the same keys with the same wire forms (double-encoded data,
// quoted strings, stringified integers, +00:00 times, sys with a 7-digit UtcNow, leaked body
// properties), the invocation headers, and that the protocol package decodes them. Every
// invocation must also be a success as the host judges replies.
func TestConformance_PayloadsMatchGoldens(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	byFn := map[string][]devhost.InvokeRecord{}
	// The Storage-queue delivery, whatever E2E_DELIVERY says: its payloads are the ones compared
	// with queue.json (the Service Bus trigger's forms have their goldens in internal/app).
	c := startCluster(t, clusterOpts{instances: 2, params: `{"partitions":3}`, delivery: devhost.DeliveryQueue, onInvoke: func(r devhost.InvokeRecord) {
		mu.Lock()
		byFn[r.Function] = append(byFn[r.Function], r)
		mu.Unlock()
	}})
	ctx := testCtx(t, 90*time.Second)
	run, _ := c.runFinal(ctx)
	ts := checkLeadership(t, c)
	checkNoPolling(t, c, ts)
	checkRun(t, c, run, runWant{partitions: 3, state: ledger.StateSucceeded}, ts)
	call := func(method, path, body string, hdr map[string]string) {
		req, _ := http.NewRequestWithContext(ctx, method, c.h.HTTPURL()+path, strings.NewReader(body))
		if body == "" {
			req.Body = nil
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	call("GET", "/api/runs/"+run+"?limit=5", "", map[string]string{"Accept": "application/json"})
	call("POST", "/api/runs", `{"job":"synthetic","params":{"partitions":3}}`,
		map[string]string{"Content-Type": "application/json", "Idempotency-Key": "conformance-" + run})

	// A heartbeat fires every second on both instances: wait for the first two to be answered.
	if err := waitFor(ctx, 100*time.Millisecond, "two heartbeats answered", func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(byFn["Tick"]) >= 2, nil
	}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for fn, recs := range byFn {
		for _, r := range recs {
			if r.Err != nil {
				t.Errorf("%s on %s failed: %v", fn, r.Instance, r.Err)
			}
			if _, err := uuid.Parse(r.Header.Get(protocol.HeaderInvocationID)); err != nil {
				t.Errorf("%s: %s = %q", fn, protocol.HeaderInvocationID, r.Header.Get(protocol.HeaderInvocationID))
			}
			if r.Header.Get(protocol.HeaderHostVersion) == "" || r.Header.Get("User-Agent") != "Azure-Functions-Host/"+r.Header.Get(protocol.HeaderHostVersion) {
				t.Errorf("%s: host version %q, User-Agent %q", fn, r.Header.Get(protocol.HeaderHostVersion), r.Header.Get("User-Agent"))
			}
			if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
				t.Errorf("%s: Content-Type %q", fn, r.Header.Get("Content-Type"))
			}
		}
	}

	t.Run("timer", func(t *testing.T) {
		if len(byFn["Tick"]) < 2 {
			t.Fatalf("%d Tick invocations, want at least one per instance (a heartbeat every second)", len(byFn["Tick"]))
		}
		golden := loadGolden(t, "timer.json")
		deep := map[string]bool{"timer": true, "timer.Schedule": true, "timer.ScheduleStatus": true, "sys": true}
		// A timer status time carries a fraction or not depending on its value (the host moves
		// an early fire's Last to its whole-second occurrence); both are one form here.
		wholeOrFraction := func(m map[string]string) map[string]string {
			for k, v := range m {
				if v == "string:time+00:00-seconds" {
					m[k] = "string:time+00:00"
				}
			}
			return m
		}
		for _, r := range byFn["Tick"] {
			got := decodePayload(t, r.Request)
			compareForms(t, "Tick Data", wholeOrFraction(forms(mustJSON(golden.Data), deep, "")), wholeOrFraction(forms(mustJSON(got.Data), deep, "")), nil)
			compareForms(t, "Tick Metadata", forms(mustJSON(golden.Metadata), deep, ""), forms(mustJSON(got.Metadata), deep, ""), nil)
			ti, err := protocol.DecodeTimer(got.Data["timer"])
			if err != nil || ti.ScheduleStatus == nil {
				t.Fatalf("DecodeTimer: %+v, %v", ti, err)
			}
			if occ, _ := time.Parse(time.RFC3339, r.Detail); !ti.ScheduleStatus.Next.Equal(occ) {
				t.Errorf("ScheduleStatus.Next = %s, want the occurrence %s", ti.ScheduleStatus.Next, occ)
			}
		}
	})

	t.Run("queue", func(t *testing.T) {
		golden := loadGolden(t, "queue.json")
		var goldenBody map[string]json.RawMessage
		gb, _ := protocol.DecodeMessage(golden.Data["message"])
		_ = json.Unmarshal(gb, &goldenBody)
		partitions := 0
		for _, r := range byFn["WorkQueue"] {
			got := decodePayload(t, r.Request)
			body, err := protocol.DecodeMessage(got.Data["message"])
			if err != nil {
				t.Fatal(err)
			}
			if want := string(protocol.EncodeStringData(string(body))); string(got.Data["message"]) != want {
				t.Errorf("Data.message is not the double-encoded body: %s", got.Data["message"])
			}
			var props map[string]json.RawMessage
			if err := json.Unmarshal(body, &props); err != nil {
				t.Fatalf("body %s: %v", body, err)
			}
			leaked := func(k string) bool { _, ok := props[k]; _, gok := goldenBody[k]; return ok || gok }
			compareForms(t, "WorkQueue Metadata", forms(mustJSON(golden.Metadata), map[string]bool{"sys": true}, ""),
				forms(mustJSON(got.Metadata), map[string]bool{"sys": true}, ""), leaked)
			compareForms(t, "WorkQueue Data", forms(mustJSON(golden.Data), nil, ""), forms(mustJSON(got.Data), nil, ""), nil)
			// Every top-level non-array, non-null body property leaks in with the host's form.
			for k, v := range props {
				want := map[string]string{"string": "string:quoted(", "number": "string:int", "object": "object"}
				f := form(v)
				if f == "array" || f == "null" {
					if _, ok := got.Metadata[k]; ok {
						t.Errorf("body property %s (%s) leaked; the host skips arrays and nulls", k, f)
					}
					continue
				}
				kind := strings.SplitN(f, ":", 2)[0]
				if gf := form(got.Metadata[k]); !strings.HasPrefix(gf, want[kind]) {
					t.Errorf("leaked %s: form %s, want %s… (body value %s)", k, gf, want[kind], v)
				}
			}
			md, err := protocol.DecodeQueueMetadata(got.Metadata)
			if err != nil || md.DequeueCount < 1 || md.ID == "" || md.PopReceipt == "" {
				t.Errorf("DecodeQueueMetadata = %+v, %v", md, err)
			}
			if string(props["kind"]) == `"partition"` {
				partitions++
			}
		}
		if partitions < 3 {
			t.Errorf("%d partition deliveries captured, want at least 3", partitions)
		}
	})

	t.Run("http", func(t *testing.T) {
		var gotGet, gotPost *payload
		for _, r := range byFn["Runs"] {
			p := decodePayload(t, r.Request)
			hr, err := protocol.DecodeHTTPRequest(p.Data["req"])
			if err != nil {
				t.Fatal(err)
			}
			switch hr.Method {
			case "GET":
				gotGet = &p
				if hr.Param("path") != run || hr.Query["limit"] != "5" || hr.Header("Accept") != "application/json" || hr.Body != nil {
					t.Errorf("GET decoded as %+v", hr)
				}
			case "POST":
				if hr.Body == nil {
					continue // the run the test started (runFinal)
				}
				gotPost = &p
				if hr.Body == nil || !strings.Contains(*hr.Body, `"partitions":3`) || hr.Header("Idempotency-Key") == "" {
					t.Errorf("POST decoded as %+v", hr)
				}
				if v, ok := hr.Params["path"]; !ok || v != nil {
					t.Errorf("POST Params = %v, want path: null", hr.Params)
				}
			}
		}
		if gotGet == nil || gotPost == nil {
			t.Fatalf("captured GET %v, POST %v", gotGet != nil, gotPost != nil)
		}
		deep := map[string]bool{"req": true, "sys": true}
		// Header names and values differ between the capture and this client; their forms must not.
		headerKey := func(k string) bool {
			return strings.HasPrefix(k, "req.Headers.") || strings.HasPrefix(k, "Headers.")
		}
		for _, c := range []struct {
			golden string
			got    *payload
		}{{"http-get.json", gotGet}, {"http-post.json", gotPost}} {
			// Captured when the Runs route was runs/{id?}: its parameter is the catch-all's
			// {*path} now, which the host sends in the same forms (http-schedules-*.json).
			g := renameParam(t, loadGolden(t, c.golden), "id", "path")
			deepH := map[string]bool{"req": true, "sys": true, "req.Headers": true, "Headers": true, "req.Query": true, "Query": true, "req.Params": true}
			compareForms(t, c.golden+" Data", forms(mustJSON(g.Data), deepH, ""), forms(mustJSON(c.got.Data), deepH, ""),
				func(k string) bool { return headerKey(k) || strings.HasPrefix(k, "req.Query.") })
			compareForms(t, c.golden+" Metadata", forms(mustJSON(g.Metadata), deepH, ""), forms(mustJSON(c.got.Metadata), deepH, ""),
				func(k string) bool { return headerKey(k) || strings.HasPrefix(k, "Query.") })
			// Header values: arrays of strings in Data, single strings in Metadata.
			var dh map[string][]string
			var req map[string]json.RawMessage
			_ = json.Unmarshal(c.got.Data["req"], &req)
			if err := json.Unmarshal(req["Headers"], &dh); err != nil || len(dh) == 0 {
				t.Errorf("%s: Data.req.Headers = %s, want an object of string arrays", c.golden, req["Headers"])
			}
			var mh map[string]string
			if err := json.Unmarshal(c.got.Metadata["Headers"], &mh); err != nil || len(mh) == 0 {
				t.Errorf("%s: Metadata.Headers = %s, want an object of strings", c.golden, c.got.Metadata["Headers"])
			}
			_ = deep
		}
	})
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}
