package ledger_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// responseError builds a real azcore.ResponseError, as the storage SDK returns it.
func responseError(t *testing.T, status int, code, body string) error {
	t.Helper()
	u, err := url.Parse("https://acct.blob.core.windows.net/missing?comp=list&restype=container")
	if err != nil {
		t.Fatal(err)
	}
	resp := &http.Response{
		StatusCode: status, Status: fmt.Sprintf("%d %s", status, http.StatusText(status)),
		Header:  http.Header{"X-Ms-Error-Code": {code}, "X-Ms-Request-Id": {"5f0c1ab2-301e-0042-7d1b-4a8c2b000000"}},
		Body:    io.NopCloser(strings.NewReader(body)),
		Request: &http.Request{Method: http.MethodGet, URL: u},
	}
	return runtime.NewResponseError(resp)
}

func TestCause(t *testing.T) {
	xml := `<?xml version="1.0" encoding="utf-8"?><Error><Code>ContainerNotFound</Code><Message>The specified container does not exist.
RequestId:5f0c1ab2-301e-0042-7d1b-4a8c2b000000
Time:2026-11-25T12:00:00.0000000Z</Message></Error>`
	notFound := responseError(t, http.StatusNotFound, "ContainerNotFound", xml)
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"plain text is kept", errors.New("params: partitions 0, want 1..10"), "params: partitions 0, want 1..10"},
		{"a wrapped storage response", fmt.Errorf("planning failed: inventory: list missing/: %w", notFound),
			"planning failed: inventory: list missing/: ContainerNotFound (404)"},
		{"a storage response without a body", fmt.Errorf("read: %w", responseError(t, http.StatusForbidden, "AuthorizationPermissionMismatch", "")),
			"read: AuthorizationPermissionMismatch (403)"},
		{"two responses joined", errors.Join(notFound, responseError(t, http.StatusServiceUnavailable, "ServerBusy", "")),
			"ContainerNotFound (404) ServerBusy (503)"},
		{"a transport error's URL", fmt.Errorf("list: %w", &url.Error{Op: "Get", URL: "https://acct.blob.core.windows.net/x?sig=secret", Err: errors.New("dial tcp: i/o timeout")}),
			`list: Get "<url>": dial tcp: i/o timeout`},
		{"lines are joined", errors.New("first\n\n  second\tthird"), "first second third"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ledger.Cause(tc.err); got != tc.want {
				t.Errorf("Cause = %q\nwant    %q", got, tc.want)
			}
		})
	}
}

func TestCause_Bounded(t *testing.T) {
	got := ledger.Cause(errors.New(strings.Repeat("é", ledger.MaxCauseBytes)))
	if len(got) > ledger.MaxCauseBytes || !strings.HasSuffix(got, "…") || !utf8Valid(got) {
		t.Errorf("Cause of a long error: %d bytes %q, want at most %d, valid UTF-8, ending in …", len(got), got, ledger.MaxCauseBytes)
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }
