package work

import (
	"errors"
	"fmt"
	"github.com/batonfn/baton/internal/engine/ledger"
	"hash/fnv"
	"math"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// Defaults of a RetryPolicy's zero-valued fields. Together they ride out a dependency that is
// down for about two minutes: the fifth attempt comes at least 2 minutes (at most 2.5) after
// the first, well inside the default run timeout.
const (
	DefaultRetryAttempts     = 5
	DefaultRetryInitialDelay = 10 * time.Second
	DefaultRetryMultiplier   = 2.0
	DefaultRetryMaxDelay     = 5 * time.Minute
	DefaultRetryJitter       = 0.2
)

// Limits of a RetryPolicy.
const (
	// MaxRetryAttempts bounds Attempts: each attempt's error travels in the retry message, and
	// every one must fit beside the largest payload (MaxEnvelopeBytes − MaxPayloadBytes).
	MaxRetryAttempts = 10
	// MaxRetryDelay bounds MaxDelay: a partition message lives at most a day in the queue.
	MaxRetryDelay = 24 * time.Hour
	// MaxAttemptError is the longest attempt error kept, in bytes.
	MaxAttemptError = 64
)

// RetryPolicy says how often a partition whose Process fails (with an error not marked
// Permanent) is tried, and how long to wait between tries. A retry is a new message scheduled
// for the delay, sent by the worker before it completes the failed one, so it works the same
// on Service Bus (which would redeliver an abandoned message at once) and on the Storage queue
// (which would wait only its fixed visibility timeout). After Attempts tries the partition is
// recorded failed, with each attempt's error.
//
// The zero value of each field takes its default (the Default* constants).
type RetryPolicy struct {
	// Attempts is how many times Process runs at most, the first included: 1 means no retry.
	// Default 5, at most MaxRetryAttempts.
	Attempts int
	// InitialDelay is the wait before the second attempt. Default 10 s. The Storage queue
	// rounds each delay up to whole seconds.
	InitialDelay time.Duration
	// Multiplier grows each wait from the one before: delay n = InitialDelay × Multiplier^(n−1).
	// Default 2; at least 1 (1 waits the same every time).
	Multiplier float64
	// MaxDelay caps every wait. Default 5 min; at least InitialDelay, at most MaxRetryDelay.
	MaxDelay time.Duration
	// Jitter shortens each wait by up to this fraction (0..1), so partitions that failed
	// together do not all come back together. The fraction is a hash of the retry message's
	// ID: a redelivered original schedules its retry with the same wait. Default 0.2; a
	// negative value turns jitter off.
	Jitter float64
}

// DefaultRetryPolicy is the policy of a job registered without one.
func DefaultRetryPolicy() RetryPolicy { return RetryPolicy{}.withDefaults() }

// withDefaults fills in the zero-valued fields.
func (p RetryPolicy) withDefaults() RetryPolicy {
	p.Attempts = orDefault(p.Attempts, DefaultRetryAttempts)
	p.InitialDelay = orDefault(p.InitialDelay, DefaultRetryInitialDelay)
	p.MaxDelay = orDefault(p.MaxDelay, DefaultRetryMaxDelay)
	if p.Multiplier == 0 {
		p.Multiplier = DefaultRetryMultiplier
	}
	switch {
	case p.Jitter == 0:
		p.Jitter = DefaultRetryJitter
	case p.Jitter < 0:
		p.Jitter = 0
	}
	return p
}

// PolicyError is a RetryPolicy field with a value out of range.
type PolicyError struct {
	Field string // "Attempts", "InitialDelay", "Multiplier", "MaxDelay" or "Jitter"
	Err   error
}

func (e *PolicyError) Error() string { return e.Field + ": " + e.Err.Error() }

// Validate reports every field out of range (after defaults), each as a *PolicyError, joined.
func (p RetryPolicy) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &PolicyError{Field: field, Err: fmt.Errorf(format, args...)})
	}
	if p.Attempts < 0 || p.Attempts > MaxRetryAttempts {
		bad("Attempts", "%d, want 1..%d (0 takes the default %d)", p.Attempts, MaxRetryAttempts, DefaultRetryAttempts)
	}
	if p.InitialDelay < 0 {
		bad("InitialDelay", "%v is negative", p.InitialDelay)
	}
	if math.IsNaN(p.Multiplier) || math.IsInf(p.Multiplier, 0) || (p.Multiplier != 0 && p.Multiplier < 1) {
		bad("Multiplier", "%v, want at least 1 (0 takes the default %v)", p.Multiplier, DefaultRetryMultiplier)
	}
	if math.IsNaN(p.Jitter) || p.Jitter > 1 {
		bad("Jitter", "%v, want 0..1 (negative turns jitter off)", p.Jitter)
	}
	d := p.withDefaults()
	switch {
	case p.MaxDelay < 0 || d.MaxDelay > MaxRetryDelay:
		bad("MaxDelay", "%v, want up to %v", p.MaxDelay, MaxRetryDelay)
	case p.InitialDelay >= 0 && d.MaxDelay < d.InitialDelay:
		bad("MaxDelay", "%v is shorter than InitialDelay %v", d.MaxDelay, d.InitialDelay)
	}
	return errors.Join(errs...)
}

// Delay is the wait after attempt (1-based) failed, before attempt+1, for the retry message
// with ID key. It is a pure function of its arguments.
func (p RetryPolicy) Delay(attempt int, key string) time.Duration {
	p = p.withDefaults()
	d := float64(p.InitialDelay) * math.Pow(p.Multiplier, float64(max(attempt, 1)-1))
	d = min(d, float64(p.MaxDelay))
	if p.Jitter > 0 {
		h := fnv.New64a()
		h.Write([]byte(key))
		u := float64(h.Sum64()>>11) / (1 << 53) // uniform in [0, 1)
		d *= 1 - p.Jitter*u
	}
	return time.Duration(d)
}

var urlPattern = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://\S+`)

// attemptError is err as one attempt's entry in a result's Errors: a storage error's short
// cause (ledger.Cause), URLs replaced (they can carry SAS tokens and are long), control
// characters, quotes and backslashes replaced (so the JSON encoding is as long as the text), at
// most MaxAttemptError bytes.
func attemptError(err error) string {
	s := urlPattern.ReplaceAllString(ledger.Cause(err), "<url>")
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '"' || r == '\\':
			return '\''
		case r < ' ' || r == utf8.RuneError || r == 0x7f || r == 0x2028 || r == 0x2029:
			return ' '
		}
		return r
	}, s)
	if len(s) <= MaxAttemptError {
		return s
	}
	const more = "..."
	cut := MaxAttemptError - len(more)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + more
}
