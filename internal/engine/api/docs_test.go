package api

import (
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/tools/readme"
)

// The API reference (docs/api.md) names every error code the API answers with, and the limits
// it states are the code's.
func TestDocs_MatchTheCode(t *testing.T) {
	doc, err := readme.File("../../..", "docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc, "# HTTP API\n") {
		t.Error("docs/api.md must open with its title, # HTTP API")
	}
	if _, closed := readme.Prose(doc); !closed {
		t.Error("docs/api.md: a code fence is not closed")
	}
	for _, code := range []string{CodeBadRequest, CodeInvalidRunID, CodeInvalidLimit, CodeInvalidContinuation, CodeInvalidKey,
		CodeKeyReused, CodeNotFound, CodeMethodNotAllowed, CodeTooLarge, CodeConflict, CodeUnavailable, CodeStorage, CodeTimeout,
		CodeInvalidState, CodeInvalidTrigger, CodeInvalidOccurrences, CodeInvalidSchedule, CodeSchedulerBusy, CodeTooManyRuns} {
		if !strings.Contains(doc, "`"+code+"`") {
			t.Errorf("docs/api.md does not list the error code %q", code)
		}
	}
	for _, want := range []string{"64 KiB", "1–100, default 20", "1–200 printable", "up to 3 s", "5,000 partitions", "16 per 262,144 partitions",
		"x-functions-key", "?code=", "az functionapp keys list", "az functionapp function keys list", "127.0.0.1:7071", "localhost:7071",
		"200 manifests from storage", "`occurrences` is not 1–100", "10,000 of them", "sample of 100 partitions", "read for the first 20",
		"#run=<id>", "#schedule=<name>", "`occurrences` is not 1–100 (one schedule) or 0–30 (the list)", "`?occurrences=N`, 1–100, default 20",
		"at most 500", "X-MS-CLIENT-PRINCIPAL-NAME", `"a function key holder"`, "younger than one heartbeat (`BATON_HEARTBEAT`)\n  plus a minute",
		"`Retry-After: 5`", "waited 10 s", "`GET /api/schedules/{name}?occurrences=N`", "last 20 occurrences", "last 30 occurrences",
		"`schedules/{*path}`", "POST /api/schedules/{name}/runs", "POST /api/schedules/{name}/pause", "`Retry-After: 30`",
		"`BATON_MAX_MANUAL_RUNS` in the app (default 10)", "`BATON_MAX_MANUAL_RUNS_PER_JOB` of the job (default 3)",
		"`limits/{*path}`", "## `GET /api/limits`", "## `GET /api/limits/{name}`", "no limit of that name", "no limiter for `limits`"} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/api.md does not mention %q", want)
		}
	}
	if MaxBodyBytes != 64<<10 || DefaultLimit != 20 || MaxLimit != 100 || MaxKeyLength != 200 || DefaultKeyWait.Seconds() != 3 ||
		ExactProgressLimit != 5000 || MaxReportBytes != 64<<10 || MaxReportReadBytes != 8<<20 || SummaryFailures != 10 ||
		MaxScanReads != 200 || MaxOccurrences != 100 || maxFinal != 10_000 || MaxWorkerReads != 100 || MaxFailureReads != 20 ||
		OccurrenceGrace != time.Minute || DefaultOccurrences != 20 || MaxListOccurrences != 30 || DefaultHeartbeat != time.Minute ||
		MaxPrincipalLength != 200 || AnonymousOperator != "a function key holder" || coordinator.MaxPauseNote != 500 ||
		ManualRunsRetryAfter != 30*time.Second || config.DefaultMaxManualRuns != 10 || config.DefaultMaxManualRunsPerJob != 3 {
		t.Error("a limit changed: update docs/api.md and this test")
	}
}
