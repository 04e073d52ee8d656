package ledger

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// MaxCauseBytes bounds the text Cause returns.
const MaxCauseBytes = 300

// azureResponse matches the text of an Azure SDK response error (azcore.ResponseError): the
// request line with the account's URL, the status, the error code, and the response body with
// its request ID, each part set off by a line of 80 dashes.
var azureResponse = regexp.MustCompile(`(?:[A-Z]+ [a-z][a-z0-9+.-]*://\S*|Request information not available|Missing RawResponse)\n-{80}\n` +
	`(?:RESPONSE (\d+): [^\n]*\n)?ERROR CODE(?:: (\S+)| UNAVAILABLE)\n-{80}\n(?:(?s:.*?)\n-{80}\n)?`)

// anyURL matches a URL anywhere else in an error's text (a transport error names the endpoint).
var anyURL = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"'<>]+`)

// Cause is err's text fit to store in the ledger as a run's Reason or a partition's Error,
// which every holder of a function key can read: one line of at most MaxCauseBytes, in which an
// Azure storage or Service Bus response is cut to its error code and status
// ("ContainerNotFound (404)") and any URL to "<url>", so the account's endpoint, the response
// body and its request ID stay out. Log the full error beside it.
func Cause(err error) string {
	if err == nil {
		return ""
	}
	s := azureResponse.ReplaceAllStringFunc(err.Error(), func(block string) string {
		m := azureResponse.FindStringSubmatch(block)
		status, code := m[1], m[2]
		switch {
		case code != "" && status != "":
			return fmt.Sprintf("%s (%s)", code, status)
		case code != "":
			return code
		case status != "":
			return fmt.Sprintf("storage error (%s)", status)
		}
		return "storage error"
	})
	s = anyURL.ReplaceAllString(s, "<url>")
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > MaxCauseBytes {
		cut := MaxCauseBytes - len("…")
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
