package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// Malformed trigger payloads fail the invocation with 400 and a log line, before any storage
// call: the functions here have no coordinator or worker at all, so reaching one would panic
// (and the test would see 500, not 400).
func TestFunctions_MalformedInputs(t *testing.T) {
	s, hs, logs := newTestServer(t)
	register(s, &functions{now: time.Now})
	cases := []struct {
		fn, body, wantLog string
	}{
		{fnTick, `{"Data":{"timer":"not an object"},"Metadata":{}}`, "timer data is not a JSON object"},
		{fnTick, `{"Data":{"other":{}},"Metadata":{}}`, "no Data.timer"},
		{fnTick, `{"Data":{"timer":{"ScheduleStatus":{"Next":"tomorrow"}}},"Metadata":{}}`, "not RFC 3339"},
		{fnWorkQueue, `{"Data":{"message":"\"{}\""},"Metadata":{"Id":"\"m1\""}}`, "DequeueCount"},
		{fnWorkQueue, `{"Data":{"message":"\"not json\""},"Metadata":{"Id":"\"m1\"","DequeueCount":"1"}}`, "malformed message"},
		{fnWorkQueue, `{"Data":{"message":"\"{\\\"baton\\\":1,\\\"kind\\\":\\\"partition\\\",\\\"run\\\":\\\"../x\\\",\\\"epoch\\\":1}\""},"Metadata":{"Id":"\"m2\"","DequeueCount":"2"}}`, "run ID"},
		{fnWork, `{"Data":{"message":"\"{\\\"baton\\\":9}\""},"Metadata":{"MessageId":"\"m3\"","DeliveryCount":"1"}}`, "envelope version"},
		{fnWork, `{"Data":{"message":42},"Metadata":{"MessageId":"\"m4\"","DeliveryCount":"1"}}`, "want a string"},
		{fnControlQueue, `{"Data":{"message":"\"{}\""},"Metadata":{"Id":"\"m5\""}}`, "DequeueCount"},
		{fnControl, `{"Data":{"message":"\"{\\\"baton\\\":9}\""},"Metadata":{"MessageId":"\"m6\"","DeliveryCount":"1"}}`, "envelope version"},
	}
	for _, c := range cases {
		resp, v := post(t, hs.URL+"/"+c.fn, "", []byte(c.body))
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s %s: status %d %v, want 400", c.fn, c.body, resp.StatusCode, v)
		}
		if !strings.Contains(logs.String(), c.wantLog) && !strings.Contains(errorMessage(v), c.wantLog) {
			t.Errorf("%s %s: neither the reply %v nor the log mentions %q", c.fn, c.body, v, c.wantLog)
		}
	}
	if !strings.Contains(logs.String(), "dead-lettered after its last delivery") {
		t.Errorf("malformed messages were not logged with what happens next:\n%s", logs)
	}
}

func errorMessage(v map[string]any) string {
	e, _ := v["error"].(map[string]any)
	s, _ := e["message"].(string)
	return s
}

// A storage outage keeps the message in its invocation (retried with pauses) instead of
// failing it, which would spend one of its deliveries; any other error fails at once.
func TestWaitOutOutage_RetriesOnlyOutages(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	calls := 0
	var tries []int
	err := waitOutOutage(ctx, log, func(_ context.Context, try int) error {
		calls++
		tries = append(tries, try)
		if calls < 3 {
			return fmt.Errorf("read manifest: %w: connection refused", ledger.ErrUnavailable)
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("outage: err %v after %d calls, want success on the 3rd", err, calls)
	}
	if fmt.Sprint(tries) != "[1 2 3]" {
		t.Errorf("tries passed %v, want [1 2 3]: a handler must know a try that follows one that failed", tries)
	}

	calls = 0
	jobErr := errors.New("job failed")
	if err := waitOutOutage(ctx, log, func(context.Context, int) error { calls++; return jobErr }); !errors.Is(err, jobErr) || calls != 1 {
		t.Fatalf("job failure: err %v after %d calls, want it at once", err, calls)
	}

	// Near the invocation's deadline it gives up and fails, so the host can redeliver.
	short, cancel2 := context.WithTimeout(context.Background(), 3*outageMaxPause)
	defer cancel2()
	calls = 0
	err = waitOutOutage(short, log, func(context.Context, int) error { calls++; return ledger.ErrUnavailable })
	if !errors.Is(err, ledger.ErrUnavailable) || short.Err() != nil {
		t.Fatalf("err %v (ctx %v), want the outage reported before the deadline", err, short.Err())
	}
}
