package devhost

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Settings are the app settings every instance sees: local.settings.json Values, overridden by
// the devhost's environment (as Core Tools skips a Value already defined in the environment),
// overridden by explicit settings (flags, tests).
type Settings struct {
	values map[string]string
	// Source is the settings file read ("" when none).
	Source string
	// Skipped lists Values that the environment overrode.
	Skipped []string
}

// LocalSettingsFiles are tried in order under the app root.
var LocalSettingsFiles = []string{"local.settings.json", "local.settings.example.json"}

// LoadSettings builds the settings: file (or the first of LocalSettingsFiles under root when
// file is ""), then environ (KEY=VALUE pairs, usually os.Environ()), then overrides.
func LoadSettings(root, file string, environ []string, overrides map[string]string) (*Settings, error) {
	s := &Settings{values: map[string]string{}}
	candidates := []string{file}
	if file == "" {
		candidates = candidates[:0]
		for _, f := range LocalSettingsFiles {
			candidates = append(candidates, filepath.Join(root, f))
		}
	}
	for _, path := range candidates {
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) && file == "" {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read settings %s: %w", path, err)
		}
		var raw struct {
			Values map[string]any `json:"Values"`
		}
		if err := json.Unmarshal(b, &raw); err != nil {
			return nil, fmt.Errorf("settings %s is not valid JSON: %w", path, err)
		}
		for k, v := range raw.Values {
			str, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("settings %s: Values.%s must be a string (the host reads Values as strings)", path, k)
			}
			s.values[k] = str
		}
		s.Source = path
		break
	}
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	for k := range s.values {
		if v, ok := env[k]; ok {
			s.values[k] = v
			s.Skipped = append(s.Skipped, k)
		}
	}
	sort.Strings(s.Skipped)
	for k, v := range overrides {
		s.values[k] = v
	}
	return s, nil
}

// Get returns a setting ("" when unset).
func (s *Settings) Get(key string) string { return s.values[key] }

// Lookup returns a setting and whether it is set.
func (s *Settings) Lookup(key string) (string, bool) {
	v, ok := s.values[key]
	return v, ok
}

// Map returns a copy of every setting.
func (s *Settings) Map() map[string]string {
	out := make(map[string]string, len(s.values))
	for k, v := range s.values {
		out[k] = v
	}
	return out
}

// Environ returns base (KEY=VALUE pairs) with every setting applied on top: the environment a
// handler process inherits from its host.
func (s *Settings) Environ(base []string, extra map[string]string) []string {
	merged := map[string]string{}
	var order []string
	put := func(k, v string) {
		if _, ok := merged[k]; !ok {
			order = append(order, k)
		}
		merged[k] = v
	}
	for _, kv := range base {
		if k, v, ok := strings.Cut(kv, "="); ok {
			put(k, v)
		}
	}
	for k, v := range s.values {
		put(k, v)
	}
	for k, v := range extra {
		put(k, v)
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+merged[k])
	}
	return out
}

var settingRef = regexp.MustCompile(`%([A-Za-z_][A-Za-z0-9_.:-]*)%`)

// Resolve replaces every %NAME% in v with the setting NAME, as the host does for binding
// properties. An unset setting is an error naming it.
func (s *Settings) Resolve(v string) (string, error) {
	var missing []string
	out := settingRef.ReplaceAllStringFunc(v, func(m string) string {
		name := m[1 : len(m)-1]
		val, ok := s.values[name]
		if !ok {
			val, ok = os.LookupEnv(name)
		}
		if !ok {
			missing = append(missing, name)
		}
		return val
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("%q refers to unset setting(s) %s", v, strings.Join(missing, ", "))
	}
	return out, nil
}

// Disabled reports whether the app setting AzureWebJobs.<fn>.Disabled is true. The form with
// underscores for dots (for environments that cannot hold dots) is accepted too.
func (s *Settings) Disabled(fn string) bool {
	for _, key := range []string{"AzureWebJobs." + fn + ".Disabled", "AzureWebJobs_" + fn + "_Disabled"} {
		for k, v := range s.values {
			if strings.EqualFold(k, key) {
				v = strings.TrimSpace(strings.ToLower(v))
				if v == "true" || v == "1" {
					return true
				}
			}
		}
	}
	return false
}
