package protocol

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestDecodeMessage(t *testing.T) {
	cases := []struct {
		name string
		raw  string
		want string
		err  bool
	}{
		{"double encoded object", `"\"{\\\"a\\\":1}\""`, `{"a":1}`, false},
		{"single encoded object", `"{\"a\":1}"`, `{"a":1}`, false},
		{"raw object", `{"a":1}`, `{"a":1}`, false},
		{"double encoded text", `"\"aaaaa\""`, `aaaaa`, false},
		{"single encoded text", `"aaaaa"`, `aaaaa`, false},
		{"unicode and escapes", `"\"h\u00e9llo <&>\""`, `héllo <&>`, false},
		{"empty string", `""`, ``, false},
		{"null", `null`, "", true},
		{"missing", ``, "", true},
		{"number", `42`, "", true},
		{"broken string", `"abc`, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := DecodeMessage(json.RawMessage(c.raw))
			if (err != nil) != c.err {
				t.Fatalf("err = %v, want error %v", err, c.err)
			}
			if !c.err && string(got) != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, s := range []string{`{"baton":1,"kind":"partition"}`, "plain", `"quoted"`, ""} {
		got, err := DecodeMessage(EncodeStringData(s))
		if err != nil || string(got) != s {
			t.Errorf("round trip %q: got %q, %v", s, got, err)
		}
	}
}

func TestMetaValues(t *testing.T) {
	md := map[string]json.RawMessage{
		"DequeueCount": json.RawMessage(`"3"`),
		"Number":       json.RawMessage(`4`),
		"QuotedInt":    json.RawMessage(`"\"5\""`),
		"Id":           json.RawMessage(`"\"abc\""`),
		"Plain":        json.RawMessage(`"plain"`),
		"When":         json.RawMessage(`"2026-11-21T02:00:03"`),
		"WhenOffset":   json.RawMessage(`"2026-11-21T02:00:03+00:00"`),
		"Null":         json.RawMessage(`null`),
		"Bad":          json.RawMessage(`"x1"`),
		"Obj":          json.RawMessage(`{}`),
	}
	for key, want := range map[string]int64{"DequeueCount": 3, "Number": 4, "QuotedInt": 5} {
		if got, err := MetaInt(md, key); err != nil || got != want {
			t.Errorf("MetaInt(%s) = %d, %v; want %d", key, got, err, want)
		}
	}
	if _, err := MetaInt(md, "Bad"); err == nil {
		t.Error("MetaInt(Bad) succeeded")
	}
	if _, err := MetaInt(md, "Absent"); !errors.Is(err, ErrMissing) {
		t.Errorf("MetaInt(Absent) = %v, want ErrMissing", err)
	}
	if s, _ := MetaString(md, "Id"); s != "abc" {
		t.Errorf("MetaString(Id) = %q", s)
	}
	if s, _ := MetaString(md, "Plain"); s != "plain" {
		t.Errorf("MetaString(Plain) = %q", s)
	}
	if _, err := MetaString(md, "Null"); !errors.Is(err, ErrMissing) {
		t.Errorf("MetaString(Null) = %v", err)
	}
	if _, err := MetaString(md, "Obj"); err == nil {
		t.Error("MetaString(Obj) succeeded")
	}
	want := time.Date(2026, 11, 21, 2, 0, 3, 0, time.UTC)
	for _, k := range []string{"When", "WhenOffset"} {
		if got, err := MetaTime(md, k); err != nil || !got.Equal(want) {
			t.Errorf("MetaTime(%s) = %v, %v", k, got, err)
		}
	}
}

func TestLeakBodyProperties_OverwritesLikeTheHost(t *testing.T) {
	md := map[string]json.RawMessage{"DequeueCount": IntMeta(1), "Id": QuoteMeta("real")}
	LeakBodyProperties(md, `{"Id":"forged","n":7,"ok":true,"obj":{"a":1},"arr":[1],"nil":null}`)
	if s, _ := MetaString(md, "Id"); s != "forged" {
		t.Errorf("Id = %q: a body property must overwrite metadata, as the host does", s)
	}
	if n, _ := MetaInt(md, "n"); n != 7 {
		t.Errorf("n = %s", md["n"])
	}
	if string(md["ok"]) != `"true"` || string(md["obj"]) != `{"a":1}` {
		t.Errorf("ok = %s, obj = %s", md["ok"], md["obj"])
	}
	if _, ok := md["arr"]; ok {
		t.Error("array property leaked; the host skips arrays")
	}
	if _, ok := md["nil"]; ok {
		t.Error("null property leaked; the host skips nulls")
	}
	before := len(md)
	LeakBodyProperties(md, "not json")
	if len(md) != before {
		t.Error("plain text body changed metadata")
	}
}

func TestHostTime_Forms(t *testing.T) {
	for _, s := range []string{`"2023-10-12T20:18:49Z"`, `"2023-10-12T20:18:49+00:00"`, `"2023-10-12T20:18:49.0000000Z"`, `"2023-10-12T20:18:49"`} {
		var ht HostTime
		if err := json.Unmarshal([]byte(s), &ht); err != nil {
			t.Errorf("%s: %v", s, err)
			continue
		}
		if !ht.Equal(time.Date(2023, 10, 12, 20, 18, 49, 0, time.UTC)) {
			t.Errorf("%s → %v", s, ht.Time)
		}
	}
	var ht HostTime
	if err := json.Unmarshal([]byte(`"yesterday"`), &ht); err == nil {
		t.Error("accepted a non-time")
	}
	b, _ := json.Marshal(HostTime{time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)})
	if string(b) != `"2026-01-02T03:04:05+00:00"` {
		t.Errorf("marshal = %s", b)
	}
}

func TestDecodeTimer_Rejects(t *testing.T) {
	for _, raw := range []string{`"x"`, `[]`, ``, `{"IsPastDue":"yes"}`, `{"ScheduleStatus":{"Next":"never"}}`} {
		if _, err := DecodeTimer(json.RawMessage(raw)); err == nil {
			t.Errorf("DecodeTimer(%s) succeeded", raw)
		}
	}
}

func TestDecodeHTTPRequest_Rejects(t *testing.T) {
	for _, raw := range []string{`"x"`, `{"Url":"/"}`, `{"Method":"GET","Query":5}`, `{"Method":"GET","Headers":"h"}`} {
		if _, err := DecodeHTTPRequest(json.RawMessage(raw)); err == nil {
			t.Errorf("DecodeHTTPRequest(%s) succeeded", raw)
		}
	}
}
