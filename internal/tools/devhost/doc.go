// Package devhost is a local stand-in for the Azure Functions host that runs several instances
// of a custom handler against Azurite, for the demo and the end-to-end tests. Core Tools runs one
// host instance; leader election only shows with many.
//
// The model: one Host reads an app folder the way the Functions host does (host.json, every
// <Function>/function.json, local.settings.json Values with %SETTING% references) and runs N
// instances. Each instance is one handler process (the binary named by
// customHandler.description.defaultExecutablePath) on its own free loopback port, started with
// FUNCTIONS_CUSTOMHANDLER_PORT, FUNCTIONS_APP_ROOT_PATH, the settings, BATON_INSTANCE_ID and a
// per-instance WEBSITE_INSTANCE_ID, watched, and restarted when it exits. The triggers are
// emulated per instance, as N real hosts would run them:
//
//   - timerTrigger, in the default mode (Options.TimerMode "all"), fires on every instance at
//     every occurrence (the worst case a lease must handle); in mode "one" it fires each
//     occurrence on one running instance drawn from a seeded RNG (Options.TimerSeed), as
//     Azure's per-app singleton timer does, and never retries it. Each fire has a random skew
//     of up to ±300 ms, so some fire early. IsPastDue is set when a fire is more than a second
//     late.
//   - queueTrigger: each instance polls the queue (backoff up to maxPollingInterval), dequeues
//     with a 10-minute visibility (Options.MessageLease) renewed while the invocation runs, base64-decodes, invokes
//     itself, deletes on success, makes the message visible again after visibilityTimeout on
//     failure, and moves it to <queue>-poison once DequeueCount reaches maxDequeueCount (a
//     message that is not base64 goes there at once). At most batchSize+newBatchThreshold
//     messages are in flight per instance.
//   - httpTrigger: one local listener serves /<routePrefix>/<route> for every HTTP function and
//     invokes a random live instance. No function key is needed locally (as with Core Tools).
//   - serviceBusTrigger is not emulated by default (there is no local broker); the host says so
//     at start. With Options.Delivery DeliveryServiceBus it is, on the Storage queue of the same
//     name and in place of the queueTrigger function there: peek-lock with a lock that lapses
//     after maxAutoLockRenewalDuration, immediate redelivery after a failure, DeliveryCount,
//     dead-lettering to <queue>-poison after the max delivery count, scheduled messages to the
//     millisecond and duplicate detection by MessageId (servicebus.go; docs/design.md lists
//     what it cannot emulate).
//
// Every request has the host's wire form (built with the protocol package's encoders; see
// docs/design.md, Host protocol) and every reply is judged as the host judges it: a success only when
// the status is 2xx, the Content-Type is JSON and the body is a JSON object. An invocation that
// outlives functionTimeout kills and restarts its instance's handler, failing everything else in
// flight there, as the host does. A handler that exits three times within 30 minutes is given up.
//
// Chaos controls (Go API and a loopback control endpoint): kill -9, SIGTERM, SIGSTOP/SIGCONT and
// restart one instance. A paused (SIGSTOPped) instance models a frozen VM: its timer does not
// fire (the occurrence it missed fires past due on SIGCONT) and its queue listener takes no new
// messages, but messages it holds stay invisible. Delivery faults (faults.go), armed on a queue
// for its next message a filter accepts, in both delivery modes: a message the queue accepted
// and never delivers; a receive that took effect with its answer lost (the message comes back
// after the message lease or the lock, its count spent); and a crash of the instance while it
// handles the message (its handler killed, and nothing it held settled: each message comes back
// when its lease or lock lapses). POST /admin/functions/<Name> fires a timer
// function once, as Core Tools' admin API does.
//
// Having no keys, the HTTP front and the control endpoint serve only local callers: they listen
// only on loopback addresses unless Options.AllowRemote, answer only a Host header that names
// the loopback interface, and from a browser only same-origin requests with JSON bodies, so
// neither a web page open in the developer's browser nor a DNS name rebound to 127.0.0.1 can
// start runs or kill instances. A host serving a control endpoint (on a free port with :0)
// announces its URLs in the app's EndpointsDir while it runs, where RunningHosts finds them.
//
// The host also checks, before starting anything, that Baton's config.Load accepts the
// settings (Options.SkipConfigCheck turns that off for other handlers), and Preflight runs one
// handler to surface a start-up failure once. A progress line follows every run the instances
// report creating (an occurrence of any schedule, a run now, a manual run), read every second
// from the run ledger and the run's own lease blob; every handler output line is kept in memory
// for tests (Lines, WaitLine, Subscribe) and rendered for a terminal.
//
// What is not emulated: the host's timer singleton lock and schedule monitor storage (mode
// "one" picks the instance without a lock, and each instance keeps its own ScheduleStatus), a Service Bus broker, function keys, HTTP forwarding/proxying mode, output
// bindings other than http, retry policies, health-ping restarts, and the host's own logs beyond
// the few lines that help read a run.
package devhost
