package infra_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/blobstore"
	"github.com/batonfn/baton/internal/engine/protocol"
	"github.com/batonfn/baton/internal/lib/ncrontab"
	"github.com/batonfn/baton/internal/tools/azurite"
)

// The deployed app, run here: the real handler binary started with exactly the app settings
// infra/app/api.bicep produces when `azd up` runs with an empty azd environment (parameters at
// their main.parameters.json / main.bicep defaults, read the way the config contract test reads
// them), with three substitutions that a workstation forces:
//
//   - Identity-based connections cannot work locally (no managed identity, and Azurite takes
//     only its account key). AzureWebJobsStorage__blobServiceUri/__queueServiceUri/
//     __tableServiceUri/__credential/__clientId become one AzureWebJobsStorage connection string
//     to an Azurite this test starts.
//   - There is no Service Bus here (nor its emulator, which needs Docker), so BATON_TRANSPORT is
//     switched from servicebus to queue and ServiceBusConnection__* are dropped. The test then
//     plays the host's queue trigger: it delivers the work queue to the WorkQueue function, the
//     Storage-queue twin of Work that runs the same code path.
//   - APPLICATIONINSIGHTS_* are read by the Functions host, not by Baton, and hold values only
//     Azure knows; they are left out.
//
// Anything else the template sets and the test cannot resolve fails the test, so a new app
// setting is either resolvable or listed above.

// deployTestTimeout bounds each end-to-end test; generous, because the machine is shared.
const deployTestTimeout = 3 * time.Minute

// batonRoot is this repository's root, for the golden payloads even while a test works in the
// infra/ folder of an app written by the scaffold (t.Chdir).
var batonRoot = func() string {
	root, err := filepath.Abs("..")
	if err != nil {
		panic(err)
	}
	return root
}()

// handlerBuild is the handler binary, built once per test binary.
var handlerBuild struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := azurite.Main(m)
	if handlerBuild.dir != "" {
		_ = os.RemoveAll(handlerBuild.dir)
	}
	os.Exit(code)
}

// handlerBinary builds ./handler for this machine (the package script builds the linux/amd64
// twin for Azure from the same sources).
func handlerBinary(t *testing.T) string {
	t.Helper()
	handlerBuild.once.Do(func() {
		handlerBuild.dir, handlerBuild.err = os.MkdirTemp("", "baton-infra-test-")
		if handlerBuild.err != nil {
			return
		}
		handlerBuild.path = filepath.Join(handlerBuild.dir, "baton")
		cmd := exec.Command("go", "build", "-o", handlerBuild.path, "./handler")
		cmd.Dir = repoRoot(t)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			handlerBuild.err = fmt.Errorf("go build ./handler: %v\n%s", err, out)
		}
	})
	if handlerBuild.err != nil {
		t.Fatal(handlerBuild.err)
	}
	return handlerBuild.path
}

// deployedAppSettings returns the app settings the template deploys by default, with the
// substitutions described above, plus the platform settings the host gives a handler.
func deployedAppSettings(t *testing.T, srv *azurite.Server, port int) map[string]string {
	t.Helper()
	r := newDeployResolver(t)
	objects := scanFile(t, "app/api.bicep").settingsObjects()
	env := map[string]string{}
	var unresolved []string
	for name, entries := range objects {
		if name == "sharedLeaseSettings" || name == "inventorySettings" { // only with their account IDs set
			continue
		}
		for _, e := range entries {
			switch {
			case strings.HasPrefix(e.Key, config.SettingHostStorage+"__"), strings.HasPrefix(e.Key, config.SettingServiceBus+"__"),
				strings.HasPrefix(e.Key, "APPLICATIONINSIGHTS_"):
				continue // substituted or left out, see above
			}
			v, ok := r.value(e.Value)
			if !ok {
				unresolved = append(unresolved, fmt.Sprintf("%s = %s", e.Key, e.Value))
				continue
			}
			env[e.Key] = v
		}
	}
	if len(unresolved) > 0 {
		t.Fatalf("app/api.bicep settings the test cannot resolve: %v", unresolved)
	}
	if env[config.SettingTransport] != string(config.TransportServiceBus) {
		t.Fatalf("the template deploys %s=%q; this test assumes servicebus and switches it to queue", config.SettingTransport, env[config.SettingTransport])
	}
	env[config.SettingTransport] = string(config.TransportQueue)
	env[config.SettingHostStorage] = srv.ConnectionString()
	env[config.SettingPort] = strconv.Itoa(port)
	env[config.SettingAppRoot] = repoRoot(t)
	env[config.SettingSiteName] = "func-baton-test"
	env[config.SettingWebsiteInstance] = "instance-0"
	return env
}

// templateQueues are the queues the test delivers as the host's queue triggers would: the work
// queue to WorkQueue and the control queue (start checks, checks) to ControlQueue.
type templateQueues struct{ work, control *azqueue.QueueClient }

// createTemplateResources creates what infra/app/storage.bicep creates in the account for the
// Storage-queue transport: the leases and runs containers and the work and control queues, by
// the names main.bicep gives them.
func createTemplateResources(t *testing.T, ctx context.Context, srv *azurite.Server) templateQueues {
	t.Helper()
	r := newDeployResolver(t)
	name := func(v string) string {
		t.Helper()
		s, ok := r.value(v)
		if !ok {
			t.Fatalf("main.bicep: var %s has no literal value", v)
		}
		return s
	}
	blobs, err := azclient.Blob(srv.Storage(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{name("leaseContainerName"), name("runsContainerName")} {
		if _, err := blobs.ServiceClient().NewContainerClient(c).Create(ctx, nil); err != nil {
			t.Fatalf("create container %s: %v", c, err)
		}
	}
	qs, err := azclient.Queue(srv.Storage(), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := templateQueues{work: qs.NewQueueClient(name("workQueueName")), control: qs.NewQueueClient(name("controlQueueName"))}
	for _, q := range []*azqueue.QueueClient{out.work, out.control} {
		if _, err := q.Create(ctx, nil); err != nil {
			t.Fatalf("create queue: %v", err)
		}
	}
	return out
}

// deployedSchedule is one schedule the deployed app declares, as `<app> validate` (the
// preprovision hook) lists it.
type deployedSchedule struct{ Name, Cron, TimeZone, Job string }

var validatedScheduleRE = regexp.MustCompile(`([a-z][a-z0-9-]*) \("([^"]+)" ([^,]+), job ([^,]+),`)

// validateDeployed runs the app's preprovision check (`<exe> validate`) with the deployed
// settings, as azd runs it before provisioning: it must pass. It returns the schedules it lists.
func validateDeployed(t *testing.T, ctx context.Context, exe string, env map[string]string) []deployedSchedule {
	t.Helper()
	cmd := exec.CommandContext(ctx, exe, "validate")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok") {
		t.Fatalf("%s validate with the deployed settings: %v\n%s", filepath.Base(exe), err, out)
	}
	_, list, _ := strings.Cut(string(out), "schedules: ")
	var ss []deployedSchedule
	for _, m := range validatedScheduleRE.FindAllStringSubmatch(list, -1) {
		ss = append(ss, deployedSchedule{Name: m[1], Cron: m[2], TimeZone: m[3], Job: m[4]})
	}
	return ss
}

// makeDue stands in for the clock reaching an occurrence of s. The handler decides occurrences
// against the real clock, and the first heartbeat of a new schedule starts from that moment, so
// no test can wait for an hourly or nightly occurrence. makeDue writes the schedule's state as
// if the previous heartbeat had run a second before the schedule's latest occurrence, and widens
// the schedule's catch-up window through BATON_SCHEDULES (the one setting it changes) so that
// the occurrence is still due rather than missed. It returns the occurrence.
func makeDue(t *testing.T, ctx context.Context, store *blobstore.Store, env map[string]string, s deployedSchedule) time.Time {
	t.Helper()
	expr, err := ncrontab.Parse(s.Cron)
	if err != nil {
		t.Fatal(err)
	}
	loc, err := time.LoadLocation(s.TimeZone)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	occ, ok := expr.Prev(now, loc)
	if !ok {
		t.Fatalf("schedule %s (%q) has no occurrence before now", s.Name, s.Cron)
	}
	if _, err := store.UpdateSchedule(ctx, s.Name, func(st *ledger.ScheduleState) error {
		st.Cursor = occ.Add(-time.Second)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	catchUp := (now.Sub(occ) + 10*time.Minute).Truncate(time.Minute)
	if env[config.SettingSchedules] != "" {
		t.Fatalf("the template deploys %s=%q; makeDue assumes none", config.SettingSchedules, env[config.SettingSchedules])
	}
	env[config.SettingSchedules] = fmt.Sprintf(`{%q:{"catchUp":%q}}`, s.Name, catchUp.String())
	return occ
}

// syncBuffer collects a process's output for failure messages.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// deployedHandler is one running handler process.
type deployedHandler struct {
	t      *testing.T
	url    string
	out    *syncBuffer
	exited chan struct{}
}

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startHandler starts the binary with exactly env (nothing inherited) and waits until it
// answers GET /, failing with its output if it exits first.
func startHandler(t *testing.T, ctx context.Context, env map[string]string) *deployedHandler {
	t.Helper()
	return startBinary(t, ctx, handlerBinary(t), env)
}

// startBinary is startHandler for any app's handler binary.
func startBinary(t *testing.T, ctx context.Context, exe string, env map[string]string) *deployedHandler {
	t.Helper()
	cmd := exec.Command(exe)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	h := &deployedHandler{t: t, url: "http://127.0.0.1:" + env[config.SettingPort], out: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = h.out, h.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(h.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-h.exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-h.exited
		}
	})
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-h.exited:
			t.Fatalf("the handler exited at start-up (%v) with the deployed settings:\n%s", waitErr, h.out)
		case <-ctx.Done():
			t.Fatalf("the handler did not answer GET / in time:\n%s", h.out)
		case <-tick.C:
		}
		if resp, err := http.Get(h.url + "/"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return h
			}
		}
	}
}

// invoke posts an invocation as the host does; it returns the handler's status and body.
func (h *deployedHandler) invoke(fn string, payload []byte) (int, []byte) {
	h.t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.url+"/"+fn, bytes.NewReader(payload))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(protocol.HeaderInvocationID, fmt.Sprintf("00000000-0000-4000-8000-%012d", time.Now().UnixNano()%1e12))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("POST /%s: %v\nhandler output:\n%s", fn, err, h.out)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// invokeHTTP invokes an HTTP function with a golden httpTrigger payload and returns its `res`;
// a non-empty body replaces the payload's request body.
func (h *deployedHandler) invokeHTTP(fn, golden string, body ...string) protocol.HTTPResponse {
	h.t.Helper()
	payload := []byte(readFile(h.t, filepath.Join(batonRoot, "internal", "app", "testdata", golden)))
	if len(body) > 0 {
		var ir map[string]map[string]map[string]any
		if err := json.Unmarshal(payload, &ir); err != nil {
			h.t.Fatal(err)
		}
		ir["Data"]["req"]["Body"] = body[0]
		var err error
		if payload, err = json.Marshal(ir); err != nil {
			h.t.Fatal(err)
		}
	}
	status, resBody := h.invoke(fn, payload)
	if status != http.StatusOK {
		h.t.Fatalf("POST /%s: handler answered %d %s", fn, status, resBody)
	}
	var ir struct {
		Outputs struct {
			Res *protocol.HTTPResponse `json:"res"`
		}
	}
	if err := json.Unmarshal(resBody, &ir); err != nil || ir.Outputs.Res == nil {
		h.t.Fatalf("POST /%s: no Outputs.res in %s (%v)", fn, resBody, err)
	}
	return *ir.Outputs.Res
}

// tick fires the Tick function, the scheduler's heartbeat, with the golden timer payload (the
// heartbeat decides against the clock, not the payload's times).
func (h *deployedHandler) tick() {
	h.t.Helper()
	status, body := h.invoke("Tick", []byte(readFile(h.t, filepath.Join(batonRoot, "internal", "app", "testdata", "timer.json"))))
	if status != http.StatusOK {
		h.t.Fatalf("Tick: handler answered %d %s\nhandler output:\n%s", status, body, h.out)
	}
}

// deliverUntilFinal plays the host's queue triggers on the work and control queues (base64
// text, delete on success) until the run's manifest reaches a final state.
func (h *deployedHandler) deliverUntilFinal(ctx context.Context, qs templateQueues, store *blobstore.Store, run string) ledger.Manifest {
	h.t.Helper()
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	for {
		m, err := store.ReadManifest(ctx, run)
		switch {
		case err == nil && m.State.Final():
			return m
		case err != nil && !errors.Is(err, ledger.ErrNotFound):
			h.t.Fatal(err)
		}
		delivered := 0
		for _, q := range []struct {
			client *azqueue.QueueClient
			fn     string
		}{{qs.work, "WorkQueue"}, {qs.control, "ControlQueue"}} {
			delivered += h.deliver(ctx, q.client, q.fn)
		}
		if delivered > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			m, _ := store.ReadManifest(context.Background(), run)
			h.t.Fatalf("run %s did not reach a final state (state %q):\n%s", run, m.State, h.out)
		case <-poll.C:
		}
	}
}

// deliver invokes fn with each visible message of q, deleting each on success; it returns how
// many it delivered.
func (h *deployedHandler) deliver(ctx context.Context, q *azqueue.QueueClient, fn string) int {
	h.t.Helper()
	resp, err := q.DequeueMessages(ctx, &azqueue.DequeueMessagesOptions{NumberOfMessages: to.Ptr(int32(16)), VisibilityTimeout: to.Ptr(int32(600))})
	if err != nil {
		h.t.Fatalf("dequeue: %v", err)
	}
	for _, msg := range resp.Messages {
		body, err := base64.StdEncoding.DecodeString(*msg.MessageText)
		if err != nil {
			h.t.Fatalf("message is not base64 (the queue trigger would poison it): %v", err)
		}
		inv := protocol.InvokeRequest{
			Data: map[string]json.RawMessage{"message": protocol.EncodeStringData(string(body))},
			Metadata: map[string]json.RawMessage{"Id": protocol.QuoteMeta(*msg.MessageID), "DequeueCount": protocol.IntMeta(*msg.DequeueCount),
				"sys": protocol.SysMeta(fn, time.Now(), "00000000-0000-4000-8000-000000000001")},
		}
		payload, err := json.Marshal(inv)
		if err != nil {
			h.t.Fatal(err)
		}
		if status, out := h.invoke(fn, payload); status != http.StatusOK {
			h.t.Fatalf("%s: %d %s\nhandler output:\n%s", fn, status, out, h.out)
		}
		if _, err := q.DeleteMessage(ctx, *msg.MessageID, *msg.PopReceipt, nil); err != nil {
			h.t.Fatalf("delete: %v", err)
		}
	}
	return len(resp.Messages)
}

func runsStore(t *testing.T, srv *azurite.Server) *blobstore.Store {
	t.Helper()
	blobs, err := azclient.Blob(srv.Storage(), nil)
	if err != nil {
		t.Fatal(err)
	}
	runs, ok := newDeployResolver(t).value("runsContainerName")
	if !ok {
		t.Fatal("main.bicep: runsContainerName has no literal value")
	}
	return blobstore.New(blobs.ServiceClient().NewContainerClient(runs), blobstore.Options{})
}

// onlySchedule returns the one schedule the deployed app declares, failing unless there is
// exactly one of that name and job.
func onlySchedule(t *testing.T, ss []deployedSchedule, name, job string) deployedSchedule {
	t.Helper()
	if len(ss) != 1 || ss[0].Name != name || ss[0].Job != job {
		t.Fatalf("the deployed app declares the schedules %+v, want only %s of job %s", ss, name, job)
	}
	return ss[0]
}

// TestDeployedDefaults_FirstOccurrenceRuns: `azd up` with nothing set deploys an app that
// passes its preprovision check and declares one schedule, tick (BATON_SCHEDULE, hourly) of the
// synthetic job, whose first due occurrence the heartbeat starts and which plans, works and
// finishes. A function key starts only the timer job by hand, within the synthetic caps (the
// run's total payload included).
func TestDeployedDefaults_FirstOccurrenceRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), deployTestTimeout)
	defer cancel()
	srv := azurite.Private(t, azurite.Options{})
	qs := createTemplateResources(t, ctx, srv)
	env := deployedAppSettings(t, srv, freeLoopbackPort(t))
	s := onlySchedule(t, validateDeployed(t, ctx, handlerBinary(t), env), "tick", env[config.SettingJob])
	if s.Cron != env[config.SettingSchedule] || s.TimeZone != "UTC" {
		t.Errorf("schedule tick: %q in %s, want %s=%q in UTC", s.Cron, s.TimeZone, config.SettingSchedule, env[config.SettingSchedule])
	}
	store := runsStore(t, srv)
	occ := makeDue(t, ctx, store, env, s)
	h := startHandler(t, ctx, env)

	h.tick()
	run := ledger.ScheduleRunID(s.Name, occ)
	m := h.deliverUntilFinal(ctx, qs, store, run)
	if m.State != ledger.StateSucceeded || m.Trigger != ledger.TriggerTimer || m.Schedule != s.Name || m.Job != env[config.SettingJob] || m.Partitions == 0 {
		t.Fatalf("run %s: state %s, trigger %s, schedule %s, job %s, %d partitions (reason %q); want a succeeded timer run of the default job",
			m.RunID, m.State, m.Trigger, m.Schedule, m.Job, m.Partitions, m.Reason)
	}

	for _, c := range []struct{ body, want string }{
		{`{"job":"inventory","params":{"container":"data"}}`, config.SettingManualJobs},
		{`{"job":"synthetic","params":{"partitions":1000000}}`, "cap of"},
		{`{"job":"synthetic","params":{"partitions":1,"workMs":600000}}`, "cap of"},
		{`{"job":"synthetic","params":{"partitions":10000,"payloadBytes":48128}}`, "cap of"},
	} {
		if res := h.invokeHTTP("Runs", "http-runs-post.json", c.body); res.StatusCode != http.StatusBadRequest || !strings.Contains(res.Body, c.want) {
			t.Errorf("manual run %s: %d %s, want 400 saying %q", c.body, res.StatusCode, res.Body, c.want)
		}
	}
}

// TestDeployedBadJobParams_AppStaysUp: with a job whose params are wrong (what `azd env set
// BATON_JOB inventory` without params deploys: BATON_JOB_PARAMS={}), the handler still starts,
// the leader and dashboard endpoints answer, a run now of the schedule tick is refused naming
// the setting, and its due occurrence records a failed run whose reason names
// BATON_JOB_PARAMS, once.
func TestDeployedBadJobParams_AppStaysUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), deployTestTimeout)
	defer cancel()
	srv := azurite.Private(t, azurite.Options{})
	qs := createTemplateResources(t, ctx, srv)
	env := deployedAppSettings(t, srv, freeLoopbackPort(t))
	env[config.SettingJob] = "inventory"
	env[config.SettingJobParams] = "{}"
	store := runsStore(t, srv)
	occ := makeDue(t, ctx, store, env, deployedSchedule{Name: "tick", Cron: env[config.SettingSchedule], TimeZone: "UTC"})
	h := startHandler(t, ctx, env)

	if res := h.invokeHTTP("Leader", "http-leader.json"); res.StatusCode != http.StatusOK {
		t.Errorf("GET /api/leader: %d %s, want 200", res.StatusCode, res.Body)
	}
	if res := h.invokeHTTP("Dashboard", "http-dashboard.json"); res.StatusCode != http.StatusOK {
		t.Errorf("GET /api/dashboard: %d, want 200", res.StatusCode)
	}
	res := h.invokeHTTP("Runs", "http-runs-post-nobody.json")
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(res.Body), &e); err != nil || res.StatusCode != http.StatusBadRequest ||
		!strings.Contains(e.Error.Message, config.SettingJobParams) || e.Error.Code == "" {
		t.Errorf("POST /api/runs of the default job: %d %s, want 400 with an error naming %s", res.StatusCode, res.Body, config.SettingJobParams)
	}

	h.tick()
	run := ledger.ScheduleRunID("tick", occ)
	m, err := store.ReadManifest(ctx, run)
	if err != nil {
		t.Fatalf("no run recorded for the occurrence: %v\n%s", err, h.out)
	}
	if m.State != ledger.StateFailed || !strings.Contains(m.Reason, config.SettingJobParams) || !strings.Contains(m.Reason, "container") {
		t.Errorf("run %s: state %s, reason %q; want failed, naming %s and what is wrong", m.RunID, m.State, m.Reason, config.SettingJobParams)
	}
	// Nothing was enqueued for it: no partitions, no check (the count includes scheduled,
	// still invisible messages).
	for _, q := range []*azqueue.QueueClient{qs.work, qs.control} {
		props, err := q.GetProperties(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if n := *props.ApproximateMessagesCount; n != 0 {
			t.Errorf("a misconfigured run enqueued %d messages", n)
		}
	}
	// A second heartbeat (another instance, a retry) keeps the one record.
	h.tick()
	if m2, err := store.ReadManifest(ctx, run); err != nil || m2.Created != m.Created {
		t.Errorf("the failed run was rewritten: %+v, %v", m2, err)
	}
}
