package app

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/protocol"
)

func loadGolden(t *testing.T, name string) *protocol.InvokeRequest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	req, err := protocol.DecodeRequest(b)
	if err != nil {
		t.Fatalf("decode %s: %v", name, err)
	}
	return req
}

func TestGolden_Timer(t *testing.T) {
	cases := []struct {
		file       string
		wantNext   time.Time
		wantLast   time.Time
		wantStatus bool
		wantPast   bool
	}{
		// During an invocation the status is the one from before it: Next is the occurrence being
		// fired, Last the previous fire (webjobs-sdk-extensions TimerListener).
		{"timer.json", time.Date(2026, 11, 21, 2, 0, 0, 0, time.UTC), time.Date(2026, 11, 20, 1, 59, 59, 973123400, time.UTC), true, false},
		{"timer-z.json", time.Date(2023, 10, 12, 20, 18, 49, 0, time.UTC), time.Date(2023, 10, 12, 20, 13, 49, 640002000, time.UTC), true, true},
		{"timer-null-status.json", time.Time{}, time.Time{}, false, false},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			req := loadGolden(t, c.file)
			ti, err := protocol.DecodeTimer(req.Data[bindingTimer])
			if err != nil {
				t.Fatal(err)
			}
			if (ti.ScheduleStatus != nil) != c.wantStatus {
				t.Fatalf("ScheduleStatus present = %v, want %v", ti.ScheduleStatus != nil, c.wantStatus)
			}
			if ti.IsPastDue != c.wantPast {
				t.Errorf("IsPastDue = %v, want %v", ti.IsPastDue, c.wantPast)
			}
			if c.wantStatus {
				if !ti.ScheduleStatus.Next.Equal(c.wantNext) {
					t.Errorf("Next = %v, want %v", ti.ScheduleStatus.Next, c.wantNext)
				}
				if !ti.ScheduleStatus.Last.Equal(c.wantLast) {
					t.Errorf("Last = %v, want %v", ti.ScheduleStatus.Last, c.wantLast)
				}
			}
			if got := req.Sys().MethodName; got != fnTick {
				t.Errorf("sys.MethodName = %q, want %q", got, fnTick)
			}
			if _, err := protocol.ParseTime(req.Sys().UtcNow); err != nil {
				t.Errorf("sys.UtcNow: %v", err)
			}
		})
	}
}

const goldenEnvelope = `{"baton":1,"kind":"partition","run":"tick-20261121t020000z","epoch":3,"part":7,"parts":20}`

func TestGolden_ServiceBus_BothEncodings(t *testing.T) {
	for _, file := range []string{"servicebus.json", "servicebus-single-encoded.json"} {
		t.Run(file, func(t *testing.T) {
			req := loadGolden(t, file)
			body, err := protocol.DecodeMessage(req.Data[bindingMessage])
			if err != nil {
				t.Fatal(err)
			}
			if string(body) != goldenEnvelope {
				t.Errorf("body = %s\nwant   %s", body, goldenEnvelope)
			}
			md, err := protocol.DecodeServiceBusMetadata(req.Metadata)
			if err != nil {
				t.Fatal(err)
			}
			if md.DeliveryCount != 1 || md.MessageID != "tick-20261121t020000z/7" || md.SequenceNumber != 42 {
				t.Errorf("metadata = %+v, want DeliveryCount 1, MessageID tick-20261121t020000z/7, SequenceNumber 42", md)
			}
			if want := time.Date(2026, 11, 21, 2, 0, 3, 0, time.UTC); !md.EnqueuedTime.Equal(want) {
				t.Errorf("EnqueuedTime = %v, want %v (DateTime without offset is UTC)", md.EnqueuedTime, want)
			}
			if md.ApplicationProperties["run"] != "tick-20261121t020000z" {
				t.Errorf("ApplicationProperties = %v", md.ApplicationProperties)
			}
		})
	}
}

func TestGolden_Queue(t *testing.T) {
	req := loadGolden(t, "queue.json")
	body, err := protocol.DecodeMessage(req.Data[bindingMessage])
	if err != nil {
		t.Fatal(err)
	}
	if string(body) != goldenEnvelope {
		t.Errorf("body = %s\nwant   %s", body, goldenEnvelope)
	}
	md, err := protocol.DecodeQueueMetadata(req.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	if md.DequeueCount != 2 || md.ID != "0c1d0a3e-8f3a-4c4e-9a43-1f3c0f6b2d11" || md.PopReceipt != "AgAAAAMAAAAAAAAAxr3E7dNa2wE=" {
		t.Errorf("metadata = %+v", md)
	}
	if want := time.Date(2026, 11, 21, 2, 0, 3, 0, time.UTC); !md.InsertionTime.Equal(want) {
		t.Errorf("InsertionTime = %v, want %v", md.InsertionTime, want)
	}
	// The body's properties leaked into Metadata, as the host does; they must not be mistaken
	// for delivery metadata (the envelope avoids every host key).
	if got, _ := protocol.MetaString(req.Metadata, "run"); got != "tick-20261121t020000z" {
		t.Errorf("leaked run = %q", got)
	}

	plain := loadGolden(t, "queue-plain-text.json")
	body, err = protocol.DecodeMessage(plain.Data[bindingMessage])
	if err != nil || string(body) != "aaaaa" {
		t.Errorf("plain text body = %q, %v; want aaaaa", body, err)
	}
}

func TestGolden_HTTP(t *testing.T) {
	get := loadGolden(t, "http-get.json")
	r, err := protocol.DecodeHTTPRequest(get.Data[bindingRequest])
	if err != nil {
		t.Fatal(err)
	}
	if r.Method != "GET" || r.Param("id") != "tick-20261121t020000z" || r.Query["limit"] != "5" || r.Header("accept") != "application/json" {
		t.Errorf("GET decoded as %+v", r)
	}
	if b, _ := r.BodyBytes(); b != nil {
		t.Errorf("GET body = %q, want none", b)
	}

	post := loadGolden(t, "http-post.json")
	r, err = protocol.DecodeHTTPRequest(post.Data[bindingRequest])
	if err != nil {
		t.Fatal(err)
	}
	body, _ := r.BodyBytes()
	var v map[string]any
	if err := json.Unmarshal(body, &v); err != nil || v["job"] != "synthetic" {
		t.Errorf("POST body = %s (%v)", body, err)
	}
	if r.Param("id") != "" || r.Header("Idempotency-Key") != "nightly-rerun-42" {
		t.Errorf("POST params/headers: id=%q key=%q", r.Param("id"), r.Header("Idempotency-Key"))
	}

	doc := loadGolden(t, "http-leader-doc-query.json")
	r, err = protocol.DecodeHTTPRequest(doc.Data[bindingRequest])
	if err != nil {
		t.Fatalf("Query as the string \"{}\": %v", err)
	}
	if len(r.Query) != 0 {
		t.Errorf("Query = %v, want empty", r.Query)
	}
}

// The schedules endpoints' payloads, as the host sends them for schedules/{*path}: the
// catch-all parameter carries what follows schedules/ (null when nothing does), and a call
// through App Service authentication carries the principal's headers.
func TestGolden_HTTP_Schedules(t *testing.T) {
	cases := []struct {
		file, method, path, header, body string
	}{
		{"http-schedules-list.json", "GET", "", "", ""},
		{"http-schedules-get.json", "GET", "nightly", "", ""},
		{"http-schedules-run.json", "POST", "nightly/runs", "", ""},
		{"http-schedules-pause.json", "POST", "nightly/pause", "alice@contoso.com", `{"note":"storage migration until 14:00 UTC"}`},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			req := loadGolden(t, c.file)
			if got := req.Sys().MethodName; got != fnSchedules {
				t.Errorf("sys.MethodName = %q, want %q", got, fnSchedules)
			}
			r, err := protocol.DecodeHTTPRequest(req.Data[bindingRequest])
			if err != nil {
				t.Fatal(err)
			}
			body, _ := r.BodyBytes()
			if r.Method != c.method || r.Param(routeParamPath) != c.path || r.Header("X-MS-CLIENT-PRINCIPAL-NAME") != c.header || string(body) != c.body {
				t.Errorf("decoded as %s path=%q principal=%q body=%q", r.Method, r.Param(routeParamPath), r.Header("X-MS-CLIENT-PRINCIPAL-NAME"), body)
			}
		})
	}
}

// The limits endpoints' payloads for limits/{*path}: the catch-all parameter carries the
// limit's name (null for the list).
func TestGolden_HTTP_Limits(t *testing.T) {
	for file, path := range map[string]string{"http-limits-list.json": "", "http-limits-get.json": "crm"} {
		req := loadGolden(t, file)
		if got := req.Sys().MethodName; got != fnLimits {
			t.Errorf("%s: sys.MethodName = %q, want %q", file, got, fnLimits)
		}
		r, err := protocol.DecodeHTTPRequest(req.Data[bindingRequest])
		if err != nil {
			t.Fatal(err)
		}
		if r.Method != "GET" || r.Param(routeParamPath) != path {
			t.Errorf("%s: decoded as %s path=%q", file, r.Method, r.Param(routeParamPath))
		}
	}
}
