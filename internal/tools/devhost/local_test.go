package devhost

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestHost_LocalOnly: the HTTP front and the control endpoint answer the developer's tools and
// the dashboard's own page, and refuse what a web page or a rebound DNS name can send.
func TestHost_LocalOnly(t *testing.T) {
	h := startFake(t, fakeApp(t, false), 1, nil, func(o *Options) { o.ControlAddr = "127.0.0.1:0" })
	front, err := url.Parse(h.HTTPURL())
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := url.Parse(h.ControlURL())
	if err != nil {
		t.Fatal(err)
	}
	port := func(u *url.URL) string { return u.Port() }
	type req struct {
		name         string
		base         *url.URL
		method, path string
		host         string // "" keeps the URL's
		header       map[string]string
		body         string
		want         int
	}
	cases := []req{
		{name: "a tool's GET", base: front, method: "GET", path: "/api/echo/abc", want: 201},
		{name: "a tool's text body", base: front, method: "POST", path: "/api/echo", body: "hi", header: map[string]string{"Content-Type": "text/plain"}, want: 201},
		{name: "Host localhost", base: front, method: "GET", path: "/api/echo/abc", host: "localhost:" + port(front), want: 201},
		{name: "Host [::1]", base: front, method: "GET", path: "/api/echo/abc", host: "[::1]:" + port(front), want: 201},
		{name: "the page's own JSON POST", base: front, method: "POST", path: "/api/echo", body: "{}",
			header: map[string]string{"Origin": "http://" + front.Host, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"}, want: 201},
		{name: "a rebound DNS name", base: front, method: "GET", path: "/api/echo/abc", host: "attacker.example:" + port(front), want: 403},
		{name: "a rebound DNS name on the control endpoint", base: ctl, method: "GET", path: "/instances", host: "attacker.example", want: 403},
		{name: "a cross-site Origin", base: front, method: "POST", path: "/api/echo", body: "{}",
			header: map[string]string{"Origin": "https://attacker.example", "Content-Type": "application/json"}, want: 403},
		{name: "a null Origin", base: front, method: "GET", path: "/api/echo/abc", header: map[string]string{"Origin": "null"}, want: 403},
		{name: "a cross-site read", base: front, method: "GET", path: "/api/echo/abc", header: map[string]string{"Sec-Fetch-Site": "cross-site"}, want: 403},
		{name: "a same-site read from another port", base: front, method: "GET", path: "/api/echo/abc",
			header: map[string]string{"Origin": "http://127.0.0.1:1", "Sec-Fetch-Site": "same-site"}, want: 403},
		{name: "a page's form post", base: front, method: "POST", path: "/api/echo", body: "a=1",
			header: map[string]string{"Origin": "http://" + front.Host, "Content-Type": "application/x-www-form-urlencoded"}, want: 415},
		{name: "a cross-site kill on the control endpoint", base: ctl, method: "POST", path: "/instances/instance-1/kill",
			header: map[string]string{"Origin": "https://attacker.example"}, want: 403},
		{name: "a tool's read of the control endpoint", base: ctl, method: "GET", path: "/instances", want: 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := http.NewRequest(tc.method, tc.base.String()+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.body == "" {
				r.Body = nil
			}
			if tc.host != "" {
				r.Host = tc.host
			}
			for k, v := range tc.header {
				r.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("status %d, want %d: %s", resp.StatusCode, tc.want, b)
			}
		})
	}
	if in := h.Instance("instance-1").Info(); in.State != StateRunning {
		t.Errorf("instance-1 is %q after a refused kill, want running", in.State)
	}
}
