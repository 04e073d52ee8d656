package devhost

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
)

// Defaults the Functions host applies when host.json leaves a setting out (the host and the
// Storage Queues extension 5.x; see docs/design.md, Host protocol).
const (
	DefaultFunctionTimeout    = 30 * time.Minute
	DefaultRoutePrefix        = "api"
	DefaultBatchSize          = 16
	DefaultMaxDequeueCount    = 5
	DefaultMaxPollingInterval = time.Minute
	DefaultMessageEncoding    = "base64"
	// DefaultMaxAutoLockRenewal and DefaultMaxConcurrentCalls are the Service Bus extension
	// 5.x defaults of maxAutoLockRenewalDuration and maxConcurrentCalls (one processor).
	DefaultMaxAutoLockRenewal = 5 * time.Minute
	DefaultMaxConcurrentCalls = 16
	// MaxBatchSize is the most messages one Get Messages call may return.
	MaxBatchSize = 32
)

// HostConfig is the part of host.json the devhost acts on.
type HostConfig struct {
	// FunctionTimeout bounds every invocation; 0 means unbounded ("-1").
	FunctionTimeout time.Duration
	// Executable, WorkingDirectory and Arguments come from customHandler.description.
	Executable       string
	WorkingDirectory string
	Arguments        []string
	// ForwardHTTP is customHandler.enableForwardingHttpRequest (not emulated; a warning).
	ForwardHTTP bool
	// RoutePrefix is extensions.http.routePrefix ("api" unless set, "" allowed).
	RoutePrefix string
	Queues      QueueOptions
	ServiceBus  ServiceBusOptions
}

// ServiceBusOptions is the part of extensions.serviceBus that the Service Bus delivery mode
// (Options.Delivery) acts on.
type ServiceBusOptions struct {
	// MaxAutoLockRenewal is maxAutoLockRenewalDuration: how long the trigger keeps renewing a
	// message's lock while its invocation runs (default 5 minutes).
	MaxAutoLockRenewal time.Duration
	// MaxConcurrentCalls bounds the invocations in flight per instance and queue (default 16
	// per processor; the devhost counts one processor).
	MaxConcurrentCalls int
}

// QueueOptions is extensions.queues.
type QueueOptions struct {
	BatchSize          int
	NewBatchThreshold  int
	MaxDequeueCount    int
	VisibilityTimeout  time.Duration
	MaxPollingInterval time.Duration
	// MessageEncoding is "base64" or "none".
	MessageEncoding string
}

// Binding is one entry of a function.json "bindings" array. Props holds every property as
// written; the named fields are the common ones.
type Binding struct {
	Name      string
	Type      string
	Direction string
	Props     map[string]any
}

// Prop returns a string property ("" when absent or not a string).
func (b Binding) Prop(key string) string {
	for k, v := range b.Props {
		if strings.EqualFold(k, key) {
			if s, ok := v.(string); ok {
				return s
			}
		}
	}
	return ""
}

// Strings returns a string-array property (e.g. "methods").
func (b Binding) Strings(key string) []string {
	for k, v := range b.Props {
		if !strings.EqualFold(k, key) {
			continue
		}
		list, _ := v.([]any)
		out := make([]string, 0, len(list))
		for _, x := range list {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// IsTrigger reports whether b is an input trigger binding ("...Trigger", direction in).
func (b Binding) IsTrigger() bool {
	return strings.EqualFold(b.Direction, "in") && strings.HasSuffix(strings.ToLower(b.Type), "trigger")
}

// Function is one <Function>/function.json.
type Function struct {
	// Name is the folder name: the function name and the invocation path.
	Name     string
	Dir      string
	Bindings []Binding
	// Disabled is function.json's "disabled": true (the app setting is checked separately).
	Disabled bool
}

// Trigger returns the function's trigger binding, or nil.
func (f *Function) Trigger() *Binding {
	for i := range f.Bindings {
		if f.Bindings[i].IsTrigger() {
			return &f.Bindings[i]
		}
	}
	return nil
}

// Output returns the first output binding of the given type, or nil.
func (f *Function) Output(typ string) *Binding {
	for i := range f.Bindings {
		b := &f.Bindings[i]
		if strings.EqualFold(b.Direction, "out") && strings.EqualFold(b.Type, typ) {
			return b
		}
	}
	return nil
}

// App is a function app folder as the host reads it.
type App struct {
	Root      string
	Host      HostConfig
	Functions []*Function
}

// Function returns the named function, or nil.
func (a *App) Function(name string) *Function {
	for _, f := range a.Functions {
		if strings.EqualFold(f.Name, name) {
			return f
		}
	}
	return nil
}

// LoadApp reads host.json and every <dir>/function.json directly under root.
func LoadApp(root string) (*App, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	hc, err := ReadHostConfig(abs)
	if err != nil {
		return nil, err
	}
	app := &App{Root: abs, Host: hc}
	entries, err := os.ReadDir(abs)
	if err != nil {
		return nil, fmt.Errorf("read app folder %s: %w", abs, err)
	}
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") || e.Name() == "node_modules" {
			continue
		}
		path := filepath.Join(abs, e.Name(), "function.json")
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		fn, err := parseFunction(e.Name(), b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		fn.Dir = filepath.Join(abs, e.Name())
		app.Functions = append(app.Functions, fn)
	}
	if len(app.Functions) == 0 {
		return nil, fmt.Errorf("no <Function>/function.json under %s: is it the app root?", abs)
	}
	sort.Slice(app.Functions, func(i, j int) bool { return app.Functions[i].Name < app.Functions[j].Name })
	return app, nil
}

func parseFunction(name string, b []byte) (*Function, error) {
	var raw struct {
		Bindings []map[string]any `json:"bindings"`
		Disabled any              `json:"disabled"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	fn := &Function{Name: name}
	if d, ok := raw.Disabled.(bool); ok {
		fn.Disabled = d
	}
	for i, props := range raw.Bindings {
		bd := Binding{Props: props}
		bd.Name = bd.Prop("name")
		bd.Type = bd.Prop("type")
		bd.Direction = bd.Prop("direction")
		if bd.Type == "" || bd.Direction == "" {
			return nil, fmt.Errorf("binding %d: type and direction are required", i)
		}
		fn.Bindings = append(fn.Bindings, bd)
	}
	if fn.Trigger() == nil {
		return nil, errors.New("no trigger binding (direction in, type ...Trigger)")
	}
	return fn, nil
}

// ReadHostConfig reads root/host.json and fills in the host's defaults.
func ReadHostConfig(root string) (HostConfig, error) {
	path := filepath.Join(root, "host.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return HostConfig{}, fmt.Errorf("read %s: %w", path, err)
	}
	var raw struct {
		FunctionTimeout *string `json:"functionTimeout"`
		CustomHandler   struct {
			Description struct {
				DefaultExecutablePath string   `json:"defaultExecutablePath"`
				WorkingDirectory      string   `json:"workingDirectory"`
				Arguments             []string `json:"arguments"`
			} `json:"description"`
			EnableForwardingHTTPRequest bool `json:"enableForwardingHttpRequest"`
		} `json:"customHandler"`
		Extensions struct {
			HTTP struct {
				RoutePrefix *string `json:"routePrefix"`
			} `json:"http"`
			Queues struct {
				BatchSize          *int    `json:"batchSize"`
				NewBatchThreshold  *int    `json:"newBatchThreshold"`
				MaxDequeueCount    *int    `json:"maxDequeueCount"`
				VisibilityTimeout  *string `json:"visibilityTimeout"`
				MaxPollingInterval *string `json:"maxPollingInterval"`
				MessageEncoding    *string `json:"messageEncoding"`
			} `json:"queues"`
			ServiceBus struct {
				MaxAutoLockRenewalDuration *string `json:"maxAutoLockRenewalDuration"`
				MaxConcurrentCalls         *int    `json:"maxConcurrentCalls"`
			} `json:"serviceBus"`
		} `json:"extensions"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return HostConfig{}, fmt.Errorf("%s is not valid JSON: %w", path, err)
	}
	hc := HostConfig{
		FunctionTimeout:  DefaultFunctionTimeout,
		Executable:       raw.CustomHandler.Description.DefaultExecutablePath,
		WorkingDirectory: raw.CustomHandler.Description.WorkingDirectory,
		Arguments:        raw.CustomHandler.Description.Arguments,
		ForwardHTTP:      raw.CustomHandler.EnableForwardingHTTPRequest,
		RoutePrefix:      DefaultRoutePrefix,
		Queues: QueueOptions{BatchSize: DefaultBatchSize, MaxDequeueCount: DefaultMaxDequeueCount,
			MaxPollingInterval: DefaultMaxPollingInterval, MessageEncoding: DefaultMessageEncoding},
		ServiceBus: ServiceBusOptions{MaxAutoLockRenewal: DefaultMaxAutoLockRenewal, MaxConcurrentCalls: DefaultMaxConcurrentCalls},
	}
	var errs []error
	dur := func(field string, v *string, dst *time.Duration) {
		if v == nil {
			return
		}
		d, err := config.ParseDuration(*v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field, err))
			return
		}
		*dst = d
	}
	dur("functionTimeout", raw.FunctionTimeout, &hc.FunctionTimeout)
	if hc.Executable == "" {
		errs = append(errs, errors.New("customHandler.description.defaultExecutablePath is not set"))
	}
	if raw.Extensions.HTTP.RoutePrefix != nil {
		hc.RoutePrefix = strings.Trim(*raw.Extensions.HTTP.RoutePrefix, "/")
	}
	q := raw.Extensions.Queues
	if q.BatchSize != nil {
		hc.Queues.BatchSize = *q.BatchSize
	}
	if hc.Queues.BatchSize < 1 || hc.Queues.BatchSize > MaxBatchSize {
		errs = append(errs, fmt.Errorf("extensions.queues.batchSize %d: want 1..%d", hc.Queues.BatchSize, MaxBatchSize))
	}
	hc.Queues.NewBatchThreshold = hc.Queues.BatchSize / 2
	if q.NewBatchThreshold != nil {
		hc.Queues.NewBatchThreshold = *q.NewBatchThreshold
	}
	if q.MaxDequeueCount != nil {
		hc.Queues.MaxDequeueCount = *q.MaxDequeueCount
	}
	if hc.Queues.NewBatchThreshold < 0 || hc.Queues.MaxDequeueCount < 1 {
		errs = append(errs, errors.New("extensions.queues: newBatchThreshold must be >= 0 and maxDequeueCount >= 1"))
	}
	dur("extensions.queues.visibilityTimeout", q.VisibilityTimeout, &hc.Queues.VisibilityTimeout)
	dur("extensions.queues.maxPollingInterval", q.MaxPollingInterval, &hc.Queues.MaxPollingInterval)
	if hc.Queues.MaxPollingInterval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("extensions.queues.maxPollingInterval %s: want at least 100ms", hc.Queues.MaxPollingInterval))
	}
	if q.MessageEncoding != nil {
		hc.Queues.MessageEncoding = strings.ToLower(*q.MessageEncoding)
	}
	if hc.Queues.MessageEncoding != "base64" && hc.Queues.MessageEncoding != "none" {
		errs = append(errs, fmt.Errorf("extensions.queues.messageEncoding %q: want base64 or none", hc.Queues.MessageEncoding))
	}
	sb := raw.Extensions.ServiceBus
	dur("extensions.serviceBus.maxAutoLockRenewalDuration", sb.MaxAutoLockRenewalDuration, &hc.ServiceBus.MaxAutoLockRenewal)
	if sb.MaxConcurrentCalls != nil {
		hc.ServiceBus.MaxConcurrentCalls = *sb.MaxConcurrentCalls
	}
	if hc.ServiceBus.MaxConcurrentCalls < 1 || hc.ServiceBus.MaxAutoLockRenewal < 0 {
		errs = append(errs, errors.New("extensions.serviceBus: maxConcurrentCalls must be >= 1 and maxAutoLockRenewalDuration >= 0"))
	}
	if err := errors.Join(errs...); err != nil {
		return hc, fmt.Errorf("%s: %w", path, err)
	}
	return hc, nil
}
