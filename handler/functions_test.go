package main

import (
	"net/http"
	"strings"
	"testing"
	"time"
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
		{FnTick, `{"Data":{"timer":"not an object"},"Metadata":{}}`, "timer data is not a JSON object"},
		{FnTick, `{"Data":{"other":{}},"Metadata":{}}`, "no Data.timer"},
		{FnTick, `{"Data":{"timer":{"ScheduleStatus":{"Next":"tomorrow"}}},"Metadata":{}}`, "not RFC 3339"},
		{FnWorkQueue, `{"Data":{"message":"\"{}\""},"Metadata":{"Id":"\"m1\""}}`, "DequeueCount"},
		{FnWorkQueue, `{"Data":{"message":"\"not json\""},"Metadata":{"Id":"\"m1\"","DequeueCount":"1"}}`, "malformed message"},
		{FnWorkQueue, `{"Data":{"message":"\"{\\\"baton\\\":1,\\\"kind\\\":\\\"partition\\\",\\\"run\\\":\\\"../x\\\",\\\"epoch\\\":1}\""},"Metadata":{"Id":"\"m2\"","DequeueCount":"2"}}`, "run ID"},
		{FnWork, `{"Data":{"message":"\"{\\\"baton\\\":9}\""},"Metadata":{"MessageId":"\"m3\"","DeliveryCount":"1"}}`, "envelope version"},
		{FnWork, `{"Data":{"message":42},"Metadata":{"MessageId":"\"m4\"","DeliveryCount":"1"}}`, "want a string"},
		{FnControlQueue, `{"Data":{"message":"\"{}\""},"Metadata":{"Id":"\"m5\""}}`, "DequeueCount"},
		{FnControl, `{"Data":{"message":"\"{\\\"baton\\\":9}\""},"Metadata":{"MessageId":"\"m6\"","DeliveryCount":"1"}}`, "envelope version"},
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
