package config

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// HostJSON is the part of host.json that Baton's own behaviour depends on.
type HostJSON struct {
	// FunctionTimeout is functionTimeout; 0 means unbounded ("-1").
	FunctionTimeout time.Duration
	// MaxDequeueCount is extensions.queues.maxDequeueCount (0 when unset).
	MaxDequeueCount int
	// MaxAutoLockRenewal is extensions.serviceBus.maxAutoLockRenewalDuration (0 when unset, in
	// which case the extension's default of 5 minutes applies).
	MaxAutoLockRenewal time.Duration
}

// DefaultMaxAutoLockRenewal is the Service Bus extension's maxAutoLockRenewalDuration when
// host.json leaves it unset.
const DefaultMaxAutoLockRenewal = 5 * time.Minute

// ReadHostJSON reads host.json from the app root. A missing file is reported with
// os.ErrNotExist so callers can fall back to defaults (unit tests, tools run elsewhere).
func ReadHostJSON(appRoot string) (HostJSON, error) {
	var h HostJSON
	path := filepath.Join(appRoot, "host.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return h, fmt.Errorf("read %s: %w", path, err)
	}
	var raw struct {
		FunctionTimeout *string `json:"functionTimeout"`
		Extensions      struct {
			Queues struct {
				MaxDequeueCount int `json:"maxDequeueCount"`
			} `json:"queues"`
			ServiceBus struct {
				MaxAutoLockRenewalDuration *string `json:"maxAutoLockRenewalDuration"`
			} `json:"serviceBus"`
		} `json:"extensions"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return h, fmt.Errorf("%s is not valid JSON: %w", path, err)
	}
	h.FunctionTimeout = DefaultFunctionTimeout
	if raw.FunctionTimeout != nil {
		d, err := ParseDuration(*raw.FunctionTimeout)
		if err != nil {
			return h, fmt.Errorf("%s functionTimeout: %w", path, err)
		}
		h.FunctionTimeout = d
	}
	h.MaxDequeueCount = raw.Extensions.Queues.MaxDequeueCount
	h.MaxAutoLockRenewal = DefaultMaxAutoLockRenewal
	if v := raw.Extensions.ServiceBus.MaxAutoLockRenewalDuration; v != nil {
		d, err := ParseDuration(*v)
		if err != nil {
			return h, fmt.Errorf("%s extensions.serviceBus.maxAutoLockRenewalDuration: %w", path, err)
		}
		h.MaxAutoLockRenewal = d
	}
	return h, nil
}
