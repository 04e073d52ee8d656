package config

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/limit"
)

func env(kv map[string]string) Getenv { return func(k string) string { return kv[k] } }

// base is a minimal valid local configuration.
func base() map[string]string {
	return map[string]string{
		SettingHostStorage: "UseDevelopmentStorage=true",
		SettingTransport:   "queue",
		SettingHeartbeat:   "0 * * * * *",
		SettingSchedule:    "0 */5 * * * *",
		SettingAppRoot:     "/nonexistent-app-root",
	}
}

func with(m map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func TestLoad_Defaults(t *testing.T) {
	c, err := Load(env(base()))
	if err != nil {
		t.Fatal(err)
	}
	if c.Port != DefaultPort || c.LeaseDuration != DefaultLeaseDuration || c.WorkQueue != DefaultWorkQueue ||
		c.ControlQueue != DefaultControlQueue ||
		c.Overlap != OverlapSkip || c.MaxDeliveries != DefaultMaxDeliveries || c.Job != DefaultJob ||
		c.FunctionTimeout != DefaultFunctionTimeout || c.AppName != "local" || c.InstanceID == "" ||
		c.EnqueueBatch != DefaultEnqueueBatch || c.BatchSpread != DefaultBatchSpread {
		t.Errorf("defaults not applied: %+v", c)
	}
	if c.Job != "synthetic" || c.JobParams != DefaultJobParams {
		t.Errorf("default job %s %s, want synthetic with %s (a job that runs without input)", c.Job, c.JobParams, DefaultJobParams)
	}
	if c.Storage.ConnectionString != AzuriteConnectionString {
		t.Errorf("UseDevelopmentStorage=true expanded to %q", c.Storage.ConnectionString)
	}
}

func TestLoad_Errors(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want []string // every fragment must appear in the error
	}{
		{"no storage", with(base(), SettingHostStorage, ""), []string{"AzureWebJobsStorage is not set", "__blobServiceUri"}},
		{"bad port", with(base(), SettingPort, "http"), []string{SettingPort, `"http"`, "1-65535"}},
		{"lease too short", with(base(), SettingLeaseDuration, "10s"), []string{SettingLeaseDuration, "10s", "15s to 60s"}},
		{"lease too long", with(base(), SettingLeaseDuration, "00:01:30"), []string{SettingLeaseDuration, "1m30s"}},
		{"lease not a duration", with(base(), SettingLeaseDuration, "soon"), []string{SettingLeaseDuration, `"soon"`, "duration"}},
		{"lease not whole seconds", with(base(), SettingLeaseDuration, "20.5s"), []string{SettingLeaseDuration, "20.5s", "whole number of seconds"}},
		{"stall longer than the invocation", with(base(), SettingStallTimeout, "48h"), []string{SettingStallTimeout, "48h", "invocation timeout", "functionTimeout"}},
		{"stall equal to the invocation", with(base(), SettingStallTimeout, "29m"), []string{SettingStallTimeout, "shorter than the invocation timeout"}},
		{"run timeout beyond the message ttl", with(base(), SettingRunTimeout, "25h"), []string{SettingRunTimeout, "25h", "time to live"}},
		{"run horizon beyond a week", with(base(), SettingRunTimeout, "20h", SettingCheckRounds, "20"), []string{SettingRunTimeout, SettingCheckRounds, "220h", "168h"}},
		{"stall shorter than renew", with(base(), SettingStallTimeout, "5s"), []string{SettingStallTimeout, "renew interval"}},
		{"batch spread of none", with(base(), SettingBatchSpread, "0"), []string{SettingBatchSpread, `"0"`, "from 1 to 64"}},
		{"batch spread above 64", with(base(), SettingBatchSpread, "65"), []string{SettingBatchSpread, `"65"`, "from 1 to 64"}},
		{"bad overlap", with(base(), SettingOverlap, "queue"), []string{SettingOverlap, `"queue"`, "skip", "buffer-one", "allow"}},
		{"slice budget past the invocation timeout", with(base(), SettingSliceBudget, "1h"), []string{SettingSliceBudget, "invocation timeout"}},
		{"misfire is gone", with(base(), SettingMisfire, "skip"), []string{SettingMisfire, "no longer read", "catch-up window", SettingSchedules}},
		{"starting deadline is gone", with(base(), SettingStartDeadline, "10m"), []string{SettingStartDeadline, "no longer read", `"catchUp"`}},
		{"schedules not json", with(base(), SettingSchedules, "tick=paused"), []string{SettingSchedules, "JSON object"}},
		{"budgets not json", with(base(), SettingFailureBudgets, "sync=10"), []string{SettingFailureBudgets, "JSON object of job names"}},
		{"budgets unknown field", with(base(), SettingFailureBudgets, `{"sync":{"max":10}}`), []string{SettingFailureBudgets, `job "sync"`, `unknown field "max"`, "maxFailed"}},
		{"budgets out of range", with(base(), SettingFailureBudgets, `{"sync":{"maxPercent":120}}`), []string{SettingFailureBudgets, `job "sync"`, "maxPercent 120", "0 to 100"}},
		{"limits not json", with(base(), SettingLimits, "crm=2"), []string{SettingLimits, "JSON object of limit names"}},
		{"limits unknown field", with(base(), SettingLimits, `{"crm":{"max":2}}`), []string{SettingLimits, `limit "crm"`, `unknown field "max"`, "maxInFlight"}},
		{"limits without a bound", with(base(), SettingLimits, `{"crm":{}}`), []string{SettingLimits, `limit "crm"`, "maxInFlight", "needs maxInFlight or rate"}},
		{"limits burst above the rate", with(base(), SettingLimits, `{"crm":{"rate":5,"burst":9}}`), []string{SettingLimits, `limit "crm"`, "burst: 9", "1 to the rate (5)"}},
		{"limits bad per", with(base(), SettingLimits, `{"crm":{"rate":5,"per":"second"}}`), []string{SettingLimits, `limit "crm"`, `per "second"`, "duration"}},
		{"limits bad name", with(base(), SettingLimits, `{"CRM":{"maxInFlight":1}}`), []string{SettingLimits, `limit "CRM"`, "name"}},
		{"schedules unknown field", with(base(), SettingSchedules, `{"tick":{"pause":true}}`), []string{SettingSchedules, `schedule "tick"`, `unknown field "pause"`, "paused"}},
		{"schedules bad overlap", with(base(), SettingSchedules, `{"tick":{"overlap":"replace"}}`), []string{SettingSchedules, `"replace"`, "buffer-one"}},
		{"schedules bad catch-up", with(base(), SettingSchedules, `{"a":{"catchUp":"0s"}}`), []string{SettingSchedules, `schedule "a"`, "catchUp", "positive duration"}},
		{"schedules empty cron", with(base(), SettingSchedules, `{"a":{"cron":" "}}`), []string{SettingSchedules, "cron is empty"}},
		{"bad transport", with(base(), SettingTransport, "kafka"), []string{SettingTransport, "kafka", "servicebus"}},
		{"servicebus without connection", with(base(), SettingTransport, "servicebus"), []string{"ServiceBusConnection is not set", "__fullyQualifiedNamespace"}},
		{"servicebus namespace with scheme", with(base(), SettingTransport, "servicebus", "ServiceBusConnection__fullyQualifiedNamespace", "sb://x.servicebus.windows.net"), []string{"without scheme"}},
		{"bad queue name", with(base(), SettingWorkQueue, "Work_Queue"), []string{SettingWorkQueue, "lowercase"}},
		{"bad control queue name", with(base(), SettingControlQueue, "Control_Queue"), []string{SettingControlQueue, "lowercase"}},
		{"control queue is the work queue", with(base(), SettingControlQueue, "baton-work"), []string{SettingControlQueue, "must differ from " + SettingWorkQueue}},
		{"bad container", with(base(), SettingRunsContainer, "r"), []string{SettingRunsContainer, "3-63"}},
		{"bad lease name", with(base(), SettingLeaseName, "../x"), []string{SettingLeaseName}},
		{"no heartbeat", with(base(), SettingHeartbeat, ""), []string{SettingHeartbeat, "Tick", "0 * * * * *"}},
		{"bad max deliveries", with(base(), SettingMaxDeliveries, "0"), []string{SettingMaxDeliveries, "1 to 100"}},
		{"bad log level", with(base(), SettingLogLevel, "loud"), []string{SettingLogLevel, "debug"}},
		{"client id without credential", with(base(), SettingHostStorage, "", "AzureWebJobsStorage__blobServiceUri", "https://a.blob.core.windows.net", "AzureWebJobsStorage__clientId", "1111"), []string{"__credential=managedidentity"}},
		{"unknown credential", with(base(), SettingHostStorage, "", "AzureWebJobsStorage__blobServiceUri", "https://a.blob.core.windows.net", "AzureWebJobsStorage__credential", "secret"), []string{"__credential", "managedidentity"}},
		{"blob uri not a url", with(base(), SettingHostStorage, "", "AzureWebJobsStorage__blobServiceUri", "a.blob.core.windows.net"), []string{"__blobServiceUri", "URL"}},
		{"connection string without account", with(base(), SettingHostStorage, "DefaultEndpointsProtocol=https"), []string{"AzureWebJobsStorage", "AccountName"}},
		{"queue transport without queue endpoint", with(base(), SettingHostStorage, "", "AzureWebJobsStorage__blobServiceUri", "https://a.blob.core.windows.net"), []string{"queueServiceUri"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(env(c.env))
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestLoad_AllErrorsAtOnce(t *testing.T) {
	_, err := Load(env(with(base(), SettingLeaseDuration, "5s", SettingOverlap, "x", SettingPort, "0")))
	if err == nil {
		t.Fatal("want errors")
	}
	for _, s := range []string{SettingLeaseDuration, SettingOverlap, SettingPort} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("joined error lacks %s: %v", s, err)
		}
	}
}

func TestLoad_IdentityConnections(t *testing.T) {
	c, err := Load(env(map[string]string{
		SettingSchedule:                                 "0 0 2 * * *",
		SettingHeartbeat:                                "0 * * * * *",
		SettingAppRoot:                                  "/nonexistent",
		"AzureWebJobsStorage__blobServiceUri":           "https://acct.blob.core.windows.net",
		"AzureWebJobsStorage__queueServiceUri":          "https://acct.queue.core.windows.net",
		"AzureWebJobsStorage__credential":               "managedidentity",
		"AzureWebJobsStorage__clientId":                 "00000000-0000-0000-0000-000000000001",
		"ServiceBusConnection__fullyQualifiedNamespace": "ns.servicebus.windows.net",
		"ServiceBusConnection__credential":              "managedidentity",
		"ServiceBusConnection__clientId":                "00000000-0000-0000-0000-000000000001",
		SettingSiteName:                                 "baton-prod",
		SettingWebsiteInstance:                          "abc123",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Transport != TransportServiceBus || c.ServiceBus.Namespace != "ns.servicebus.windows.net" ||
		!c.ServiceBus.Credential.ManagedIdentity || c.ServiceBus.Credential.ClientID == "" {
		t.Errorf("service bus = %+v", c.ServiceBus)
	}
	if c.Storage.BlobServiceURL != "https://acct.blob.core.windows.net" || !c.Storage.Credential.ManagedIdentity {
		t.Errorf("storage = %+v", c.Storage)
	}
	if c.AppName != "baton-prod" || c.InstanceID != "abc123" {
		t.Errorf("identity = %s/%s", c.AppName, c.InstanceID)
	}
	if !c.Storage.Credential.ManagedIdentity || c.Storage.Credential.ClientID == "" {
		t.Errorf("credential = %+v, want a user-assigned managed identity", c.Storage.Credential)
	}
}

func TestLoad_BatonStorageNamesAnotherConnection(t *testing.T) {
	c, err := Load(env(with(base(), SettingStorage, "LeaseStorage", "LeaseStorage", "UseDevelopmentStorage=true;DevelopmentStorageProxyUri=http://10.0.0.5")))
	if err != nil {
		t.Fatal(err)
	}
	if c.Storage.Name != "LeaseStorage" || !strings.Contains(c.Storage.ConnectionString, "http://10.0.0.5:10000/devstoreaccount1") {
		t.Errorf("storage = %+v", c.Storage)
	}
	_, err = Load(env(with(base(), SettingStorage, "Missing")))
	if err == nil || !strings.Contains(err.Error(), "Missing is not set") {
		t.Errorf("BATON_STORAGE naming an unset connection: %v", err)
	}
}

func TestLoad_HostJSON(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) {
		if err := os.WriteFile(filepath.Join(dir, "host.json"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"version":"2.0","functionTimeout":"00:05:00","extensions":{"queues":{"maxDequeueCount":5}}}`)
	c, err := Load(env(with(base(), SettingAppRoot, dir)))
	if err != nil {
		t.Fatal(err)
	}
	if c.FunctionTimeout != 5*time.Minute || c.InvocationTimeout() != 5*time.Minute-30*time.Second {
		t.Errorf("FunctionTimeout %s, InvocationTimeout %s", c.FunctionTimeout, c.InvocationTimeout())
	}
	_, err = Load(env(with(base(), SettingAppRoot, dir, SettingMaxDeliveries, "7")))
	if err == nil || !strings.Contains(err.Error(), "maxDequeueCount=5") {
		t.Errorf("mismatched max deliveries: %v", err)
	}
	write(`{"functionTimeout":"-1"}`)
	c, err = Load(env(with(base(), SettingAppRoot, dir)))
	if err != nil || c.FunctionTimeout != 0 || c.InvocationTimeout() != 0 {
		t.Errorf("unbounded timeout: %v, %s", err, c.FunctionTimeout)
	}
	write(`{"functionTimeout": 5`)
	if _, err = Load(env(with(base(), SettingAppRoot, dir))); err == nil || !strings.Contains(err.Error(), "host.json") {
		t.Errorf("broken host.json: %v", err)
	}
}

// TestRepoHostJSON keeps the repo's host.json loadable and in step with the defaults.
func TestRepoHostJSON(t *testing.T) {
	h, err := ReadHostJSON("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if h.MaxDequeueCount != DefaultMaxDeliveries {
		t.Errorf("host.json maxDequeueCount = %d, want %s default %d", h.MaxDequeueCount, SettingMaxDeliveries, DefaultMaxDeliveries)
	}
	if h.FunctionTimeout < time.Minute {
		t.Errorf("host.json functionTimeout = %s", h.FunctionTimeout)
	}
	if h.MaxAutoLockRenewal < h.FunctionTimeout {
		t.Errorf("host.json extensions.serviceBus.maxAutoLockRenewalDuration = %s, shorter than functionTimeout %s", h.MaxAutoLockRenewal, h.FunctionTimeout)
	}
}

func TestParseDuration(t *testing.T) {
	cases := map[string]time.Duration{
		"30s": 30 * time.Second, "00:00:30": 30 * time.Second, "01:02:03": time.Hour + 2*time.Minute + 3*time.Second,
		"1.00:00:00": 24 * time.Hour, "-1": 0, "00:00:01.5": 1500 * time.Millisecond,
	}
	for in, want := range cases {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "1:2", "00:61:00", "x:y:z", "5 minutes"} {
		if _, err := ParseDuration(bad); err == nil {
			t.Errorf("ParseDuration(%q) succeeded", bad)
		}
	}
}

// The default params belong to the default job only: another job without BATON_JOB_PARAMS
// gets none (its own validation decides), and explicit params are kept as given.
func TestLoad_DefaultJobParams(t *testing.T) {
	c, err := Load(env(with(base(), SettingJob, "inventory")))
	if err != nil || c.JobParams != "" {
		t.Errorf("inventory without params: %q, %v; want no params", c.JobParams, err)
	}
	c, err = Load(env(with(base(), SettingJobParams, `{"partitions":3}`)))
	if err != nil || c.Job != DefaultJob || c.JobParams != `{"partitions":3}` {
		t.Errorf("explicit params: %s %q, %v", c.Job, c.JobParams, err)
	}
}

// Limits that depend on each other: the boundaries that must still load.
func TestLoad_LimitsAccepted(t *testing.T) {
	for _, kv := range [][]string{
		{SettingLeaseDuration, "15s"}, {SettingLeaseDuration, "60s"}, {SettingLeaseDuration, "00:00:45"},
		{SettingStallTimeout, "28m"},                         // the invocation timeout is 29m without host.json (30m less 1m)
		{SettingRunTimeout, "24h", SettingCheckRounds, "11"}, // 24h + 11 x 12h = 156h
		{SettingRunTimeout, "1m", SettingCheckRounds, "20"},
	} {
		if _, err := Load(env(with(base(), kv...))); err != nil {
			t.Errorf("%v: %v", kv, err)
		}
	}
}

func TestLoad_StallTimeoutUnboundedFunctionTimeout(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "host.json"), []byte(`{"functionTimeout":"-1"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(env(with(base(), SettingAppRoot, dir, SettingStallTimeout, "50m"))); err != nil {
		t.Errorf("50m with an unbounded functionTimeout: %v", err)
	}
	_, err := Load(env(with(base(), SettingAppRoot, dir, SettingStallTimeout, "48h")))
	if err == nil || !strings.Contains(err.Error(), SettingStallTimeout) || !strings.Contains(err.Error(), "at most 1h") {
		t.Errorf("48h with an unbounded functionTimeout: %v", err)
	}
}

// The Service Bus lock must be renewed for as long as an invocation may run.
func TestLoad_LockRenewalCoversFunctionTimeout(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) {
		if err := os.WriteFile(filepath.Join(dir, "host.json"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sb := with(base(), SettingAppRoot, dir, SettingTransport, "servicebus", "ServiceBusConnection__fullyQualifiedNamespace", "ns.servicebus.windows.net")
	write(`{"functionTimeout":"00:10:00","extensions":{"serviceBus":{"maxAutoLockRenewalDuration":"00:05:00"}}}`)
	_, err := Load(env(sb))
	if err == nil || !strings.Contains(err.Error(), "maxAutoLockRenewalDuration=5m0s") || !strings.Contains(err.Error(), "functionTimeout=10m0s") {
		t.Errorf("5m renewal under a 10m timeout: %v", err)
	}
	write(`{"functionTimeout":"00:10:00"}`) // the extension's default renewal is 5m
	if _, err := Load(env(sb)); err == nil || !strings.Contains(err.Error(), "maxAutoLockRenewalDuration") {
		t.Errorf("default renewal under a 10m timeout: %v", err)
	}
	write(`{"functionTimeout":"00:10:00","extensions":{"serviceBus":{"maxAutoLockRenewalDuration":"00:10:00"}}}`)
	if _, err := Load(env(sb)); err != nil {
		t.Errorf("10m renewal, 10m timeout: %v", err)
	}
	// The queue transport has no lock to renew.
	write(`{"functionTimeout":"00:10:00","extensions":{"serviceBus":{"maxAutoLockRenewalDuration":"00:05:00"}}}`)
	if _, err := Load(env(with(base(), SettingAppRoot, dir))); err != nil {
		t.Errorf("queue transport: %v", err)
	}
}

// The inventory job reads through its own connection: locally (a connection string, Azurite)
// Baton's storage by default; with identity-based storage (Azure) nothing unless
// BATON_INVENTORY_STORAGE names a connection.
func TestLoad_InventoryStorage(t *testing.T) {
	identity := map[string]string{
		SettingSchedule: "0 0 2 * * *", SettingHeartbeat: "0 * * * * *", SettingAppRoot: "/nonexistent", SettingTransport: "queue",
		"AzureWebJobsStorage__blobServiceUri":  "https://host.blob.core.windows.net",
		"AzureWebJobsStorage__queueServiceUri": "https://host.queue.core.windows.net",
		"AzureWebJobsStorage__credential":      "managedidentity",
	}
	cases := []struct {
		name    string
		env     map[string]string
		wantURL string // "" : no inventory connection
		wantErr string
	}{
		{"local: Baton's storage", base(), "http://127.0.0.1:10000/devstoreaccount1", ""},
		{"Azure: none unless named", identity, "", ""},
		{"Azure: the named connection", with(identity, SettingInventory, "InventoryStorage",
			"InventoryStorage__blobServiceUri", "https://data.blob.core.windows.net", "InventoryStorage__credential", "managedidentity"),
			"https://data.blob.core.windows.net", ""},
		{"a named connection that is not set", with(base(), SettingInventory, "Nope"), "", "Nope is not set"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(env(tc.env))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if c.Inventory != nil {
				got = c.Inventory.BlobServiceURL + c.Inventory.ConnectionString
			}
			if (tc.wantURL == "") != (got == "") || !strings.Contains(got, tc.wantURL) {
				t.Errorf("inventory connection %q, want %q", got, tc.wantURL)
			}
		})
	}
}

func TestLoad_ManualJobsAndSyntheticCaps(t *testing.T) {
	c, err := Load(env(base()))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.ManualJobs) != 0 || c.ManualAll || c.SyntheticMax != DefaultSyntheticMax || c.SyntheticWorkMs != DefaultSyntheticWorkMs ||
		c.SyntheticPayloadBytes != DefaultSyntheticPayloadBytes {
		t.Errorf("defaults: manual %v (all %v), synthetic caps %d/%d/%d, want no job beyond the schedules' and the default caps",
			c.ManualJobs, c.ManualAll, c.SyntheticMax, c.SyntheticWorkMs, c.SyntheticPayloadBytes)
	}
	c, err = Load(env(with(base(), SettingManualJobs, " synthetic, ,inventory ", SettingSyntheticMax, "1000", SettingSyntheticWork, "30000",
		SettingSyntheticBytes, "1048576")))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.ManualJobs, "|") != "synthetic|inventory" || c.ManualAll || c.SyntheticMax != 1000 || c.SyntheticWorkMs != 30000 ||
		c.SyntheticPayloadBytes != 1<<20 {
		t.Errorf("manual %v (all %v), synthetic caps %d/%d/%d", c.ManualJobs, c.ManualAll, c.SyntheticMax, c.SyntheticWorkMs, c.SyntheticPayloadBytes)
	}
	_, err = Load(env(with(base(), SettingSyntheticMax, "0", SettingSyntheticWork, "700000", SettingSyntheticBytes, "0")))
	if err == nil || !strings.Contains(err.Error(), SettingSyntheticMax) || !strings.Contains(err.Error(), SettingSyntheticWork) ||
		!strings.Contains(err.Error(), SettingSyntheticBytes) {
		t.Errorf("out-of-range caps: %v, want all three settings named", err)
	}
}

// The caps on manual runs in progress default to 10 in the app and 3 of one job; each is an
// integer from 1 to MaxManualRuns (no value turns a cap off), and a value out of range is
// refused naming its setting.
func TestLoad_ManualRunCaps(t *testing.T) {
	c, err := Load(env(base()))
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxManualRuns != DefaultMaxManualRuns || c.MaxManualRunsPerJob != DefaultMaxManualRunsPerJob ||
		DefaultMaxManualRuns != 10 || DefaultMaxManualRunsPerJob != 3 {
		t.Errorf("defaults %d/%d, want 10 in the app and 3 per job", c.MaxManualRuns, c.MaxManualRunsPerJob)
	}
	c, err = Load(env(with(base(), SettingMaxManual, " 25 ", SettingMaxManualJob, "1000")))
	if err != nil || c.MaxManualRuns != 25 || c.MaxManualRunsPerJob != MaxManualRuns {
		t.Errorf("set: %d/%d, %v; want 25 and %d", c.MaxManualRuns, c.MaxManualRunsPerJob, err, MaxManualRuns)
	}
	for _, bad := range []string{"0", "-1", "1001", "ten", "2.5"} {
		_, err := Load(env(with(base(), SettingMaxManual, bad, SettingMaxManualJob, bad)))
		if err == nil || !strings.Contains(err.Error(), SettingMaxManual+"=") || !strings.Contains(err.Error(), SettingMaxManualJob+"=") ||
			!strings.Contains(err.Error(), "from 1 to 1000") {
			t.Errorf("%q: %v, want both settings named with their range", bad, err)
		}
	}
}

// BATON_MANUAL_JOBS=* allows every job, explicitly; beside job names it is refused, naming the
// setting, rather than read as either.
func TestLoad_ManualJobsAll(t *testing.T) {
	for _, v := range []string{"*", " * ", "*,"} {
		c, err := Load(env(with(base(), SettingManualJobs, v)))
		if err != nil || !c.ManualAll || len(c.ManualJobs) != 0 {
			t.Errorf("%s=%q: all %v, jobs %v, %v; want every job", SettingManualJobs, v, c.ManualAll, c.ManualJobs, err)
		}
	}
	for _, v := range []string{"*,inventory", "synthetic, *"} {
		_, err := Load(env(with(base(), SettingManualJobs, v)))
		if err == nil || !strings.Contains(err.Error(), SettingManualJobs) || !strings.Contains(err.Error(), `"*"`) {
			t.Errorf("%s=%q: %v, want an error naming the setting and *", SettingManualJobs, v, err)
		}
	}
}

// BATON_SCHEDULES changes declared schedules: each field it names, nothing else; the
// settings' schedule (BATON_SCHEDULE) is optional.
// BATON_FAILURE_BUDGETS gives jobs budgets by name.
func TestLoad_FailureBudgets(t *testing.T) {
	c, err := Load(env(with(base(), SettingFailureBudgets, `{"sync":{"maxFailed":10},"export":{"maxFailed":3,"maxPercent":2.5}}`)))
	if err != nil {
		t.Fatal(err)
	}
	if c.Budgets["sync"] != (Budget{MaxFailed: 10}) || c.Budgets["export"] != (Budget{MaxFailed: 3, MaxPercent: 2.5}) || len(c.Budgets) != 2 {
		t.Fatalf("budgets = %+v", c.Budgets)
	}
}

// BATON_LIMITS gives named limits their settings, defaults filled in.
func TestLoad_Limits(t *testing.T) {
	c, err := Load(env(with(base(), SettingLimits, `{"crm":{"maxInFlight":2},"api":{"rate":10,"per":"1m","burst":4},"both":{"maxInFlight":3,"rate":5}}`)))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]limit.Spec{
		"crm":  {Name: "crm", MaxInFlight: 2},
		"api":  {Name: "api", Rate: 10, Per: time.Minute, Burst: 4},
		"both": {Name: "both", MaxInFlight: 3, Rate: 5, Per: time.Second, Burst: 1},
	}
	if !maps.Equal(c.Limits, want) {
		t.Fatalf("limits = %+v, want %+v", c.Limits, want)
	}
}

func TestLoad_ScheduleOverrides(t *testing.T) {
	c, err := Load(env(with(base(), SettingSchedule, "", SettingSchedules,
		`{"nightly":{"cron":"0 0 3 * * *","timeZone":"Europe/Berlin","paused":true,"overlap":"Buffer-One","catchUp":"00:30:00","jitter":"0s","autoPause":3},"hourly":{"paused":false}}`)))
	if err != nil {
		t.Fatal(err)
	}
	n, h := c.Overrides["nightly"], c.Overrides["hourly"]
	if n.Cron != "0 0 3 * * *" || n.TimeZone != "Europe/Berlin" || n.Paused == nil || !*n.Paused || n.Overlap != OverlapBufferOne ||
		n.CatchUp == nil || *n.CatchUp != 30*time.Minute || n.Jitter == nil || *n.Jitter != 0 || n.AutoPause == nil || *n.AutoPause != 3 {
		t.Errorf("nightly override %+v", n)
	}
	if h.Paused == nil || *h.Paused || h.Cron != "" || h.CatchUp != nil || h.Overlap != "" || h.AutoPause != nil {
		t.Errorf("hourly override %+v: only paused=false", h)
	}
	if c.Schedule != "" {
		t.Errorf("Schedule = %q, want none", c.Schedule)
	}
}

// BATON_SCHEDULES's autoPause is a number of runs, 0 (off) to MaxAutoPause: anything else is
// an error naming the setting and the schedule.
func TestLoad_ScheduleOverrides_AutoPause(t *testing.T) {
	c, err := Load(env(with(base(), SettingSchedules, `{"tick":{"autoPause":0}}`)))
	if err != nil || c.Overrides["tick"].AutoPause == nil || *c.Overrides["tick"].AutoPause != 0 {
		t.Errorf("autoPause 0: %v %+v; want it turned off", err, c.Overrides)
	}
	for _, v := range []string{`-1`, `101`, `"3"`, `2.5`} {
		_, err := Load(env(with(base(), SettingSchedules, `{"tick":{"autoPause":`+v+`}}`)))
		if err == nil || !strings.Contains(err.Error(), SettingSchedules) || !strings.Contains(err.Error(), `schedule "tick"`) {
			t.Errorf("autoPause %s: %v, want an error naming %s and the schedule", v, err, SettingSchedules)
		}
	}
}

// BATON_SCHEDULES is decoded strictly: a repeated key at any level, or a field's name in
// another case, is an error naming the setting, the schedule and the key, never the last value
// or a case-insensitive match taken silently. Schedule names differing in case are distinct.
func TestLoad_ScheduleOverrides_Strict(t *testing.T) {
	for _, c := range []struct {
		name, value string
		want        []string
	}{
		{"a schedule twice", `{"tick":{"paused":true},"tick":{"paused":false}}`, []string{SettingSchedules, `schedule "tick" is given twice`}},
		{"a field twice", `{"tick":{"paused":true,"paused":false}}`, []string{SettingSchedules, `schedule "tick"`, `duplicate key "paused"`}},
		{"a field in upper case", `{"tick":{"PAUSED":true}}`, []string{SettingSchedules, `schedule "tick"`, `key "PAUSED"`, `"paused"`}},
		{"a field in mixed case", `{"nightly":{"cron":"0 0 3 * * *","TimeZone":"UTC"}}`, []string{SettingSchedules, `schedule "nightly"`, `key "TimeZone"`, `"timeZone"`}},
		{"a field in either case", `{"tick":{"paused":false,"Paused":true}}`, []string{SettingSchedules, `schedule "tick"`, `key "Paused"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(env(with(base(), SettingSchedules, c.value)))
			if err == nil {
				t.Fatalf("%s=%s loaded; want an error", SettingSchedules, c.value)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	c, err := Load(env(with(base(), SettingSchedules, `{"tick":{"paused":true},"Tick":{"paused":false}}`)))
	if err != nil || c.Overrides["tick"].Paused == nil || !*c.Overrides["tick"].Paused || c.Overrides["Tick"].Paused == nil || *c.Overrides["Tick"].Paused {
		t.Errorf("two schedule names differing in case: %v %+v", err, c.Overrides)
	}
}

func TestLoad_TraceURL(t *testing.T) {
	c, err := Load(env(base()))
	if err != nil || c.TraceURL != "" {
		t.Fatalf("unset: %q, %v; want none", c.TraceURL, err)
	}
	const ok = "https://jaeger.example.com/trace/{trace}"
	if c, err := Load(env(with(base(), SettingTraceURL, " "+ok+" "))); err != nil || c.TraceURL != ok {
		t.Errorf("%s=%q: %q, %v", SettingTraceURL, ok, c.TraceURL, err)
	}
	for _, bad := range []string{"http://localhost:16686/trace/", "ftp://host/{trace}", "/trace/{trace}", "jaeger {trace}"} {
		_, err := Load(env(with(base(), SettingTraceURL, bad)))
		if err == nil || !strings.Contains(err.Error(), SettingTraceURL) || !strings.Contains(err.Error(), "{trace}") {
			t.Errorf("%s=%q: %v, want an error naming the setting and {trace}", SettingTraceURL, bad, err)
		}
	}
}
