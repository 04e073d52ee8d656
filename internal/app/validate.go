package app

import (
	"fmt"
	"strings"

	"encoding/json"

	"github.com/batonfn/baton/internal/engine/config"
)

// templateHeartbeat is infra/main.bicep's default BATON_HEARTBEAT (every minute). Every other
// setting the template deploys by default equals config's default, which the infra tests check.
const templateHeartbeat = "0 * * * * *"

// envSettings are the settings `azd env set` can change: the ones infra/main.parameters.json
// maps from the azd environment into the template, and the caps on manual runs.
var envSettings = []string{
	config.SettingHeartbeat, config.SettingSchedule, config.SettingSchedules, config.SettingFailureBudgets, config.SettingLimits, config.SettingJob, config.SettingJobParams,
	config.SettingManualJobs, config.SettingMaxManual, config.SettingMaxManualJob,
	config.SettingOverlap, config.SettingLeaseDuration, config.SettingRunTimeout, config.SettingLogLevel,
	// Not mapped any more, but an environment that still sets them must hear so.
	config.SettingMisfire, config.SettingStartDeadline,
}

// validate is `<exe> validate`, run by azd's preprovision hook on the developer's machine
// before anything is provisioned. It checks the azd environment's Baton settings with the
// handler's own start-up checks (config.Load, the schedule, the timer job's params, the jobs
// BATON_MANUAL_JOBS names), so a bad value fails `azd up`/`azd provision` with the handler's
// message instead of reaching Azure.
// Settings only the template knows (connections) get stand-ins; an unset setting takes the
// template's default. FUNCTIONS_APP_ROOT_PATH (default: the current folder) locates host.json.
// It returns the process exit code.
func validate(o Options) int {
	getenv, stdout, stderr := o.Getenv, o.Stdout, o.Stderr
	env := map[string]string{
		config.SettingTransport:                                string(config.TransportServiceBus),
		config.SettingHostStorage + "__blobServiceUri":         "https://account.blob.core.windows.net",
		config.SettingHostStorage + "__queueServiceUri":        "https://account.queue.core.windows.net",
		config.SettingHostStorage + "__credential":             "managedidentity",
		config.SettingServiceBus + "__fullyQualifiedNamespace": "namespace.servicebus.windows.net",
		config.SettingServiceBus + "__credential":              "managedidentity",
		config.SettingHeartbeat:                                templateHeartbeat,
		config.SettingAppRoot:                                  getenv(config.SettingAppRoot),
		config.SettingInstanceID:                               "validate",
	}
	for _, name := range envSettings {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			env[name] = v
		}
	}
	lookup := func(k string) string { return env[k] }
	cfg, err := config.Load(lookup)
	o.Getenv = lookup
	resolveTimerJob(&cfg, o)
	var problems []string
	if err != nil {
		problems = append(problems, strings.Split(err.Error(), "\n")...)
	}
	// The inventory connection is the operator's to add (docs/deploy.md): a stand-in, like the
	// template's connections, so that only the params are judged here.
	if cfg.Inventory == nil {
		cfg.Inventory = &config.StorageConnection{Name: "stand-in"}
	}
	configureBuiltins(o.Jobs, cfg, nil)
	var jobErr error
	var params json.RawMessage
	if cfg.Schedule != "" {
		if jobErr = jobError(o.Jobs, cfg.Job, cfg.JobParams); jobErr != nil {
			problems = append(problems, jobErr.Error())
		} else if cfg.JobParams != "" {
			params = json.RawMessage(cfg.JobParams)
		}
	}
	heartbeat, err := heartbeatPeriod(cfg.Heartbeat)
	if err != nil && cfg.Heartbeat != "" {
		problems = append(problems, err.Error())
	}
	schedules, err := buildSchedules(cfg, o, jobErr, params)
	if err != nil {
		problems = append(problems, strings.Split(err.Error(), "\n")...)
	}
	if err := checkSchedules(schedules, heartbeat); err != nil {
		problems = append(problems, strings.Split(err.Error(), "\n")...)
	}
	if _, _, err := manualJobs(cfg, o.Jobs, schedules); err != nil {
		problems = append(problems, err.Error())
	}
	if err := checkRunTimeouts(cfg, o.Jobs); err != nil {
		problems = append(problems, strings.Split(err.Error(), "\n")...)
	}
	if len(problems) > 0 {
		fmt.Fprintln(stderr, "baton validate: the azd environment's Baton settings would not work (fix them with azd env set):")
		for _, p := range problems {
			fmt.Fprintln(stderr, "  "+p)
		}
		return 2
	}
	var names []string
	for _, s := range schedules {
		params := string(s.Params)
		if params == "" {
			params = "none"
		}
		names = append(names, fmt.Sprintf("%s (%q %s, job %s, params %s)", s.Name, s.Cron.String(), s.TimeZone, s.Job, params))
	}
	fmt.Fprintf(stdout, "baton validate: ok: %s=%s; schedules: %s\n", config.SettingHeartbeat, cfg.Heartbeat, orNone(names))
	return 0
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
