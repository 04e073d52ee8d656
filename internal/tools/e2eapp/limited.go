package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/batonfn/baton"
	"github.com/batonfn/baton/work/synthetic"
)

// jobLimited calls a URL once per partition under the limit stubLimit; it answers the
// downstream's 429 with baton.SlowDown. The e2e limits test runs it against a stub server
// that counts what reaches it.
const jobLimited = "limited"

// stubLimit is the limited job's limit as declared; the test sets its numbers through
// BATON_LIMITS. Bundles of 32 let four instances hold its slots at once.
var (
	stubLimit     = baton.Limit{Name: "stub", MaxInFlight: 128, Rate: 120, Per: time.Second, Burst: 12}
	limitedBundle = 32
)

// limitedParams are the limited job's params: partitions, each a GET of url.
type limitedParams struct {
	Partitions int    `json:"partitions"`
	URL        string `json:"url"`
}

func parseLimited(raw json.RawMessage) (limitedParams, error) {
	var p limitedParams
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, fmt.Errorf("params: %w", err)
	}
	if p.Partitions < 1 || p.Partitions > synthetic.MaxPartitions {
		return p, fmt.Errorf("params: partitions %d, want 1..%d", p.Partitions, synthetic.MaxPartitions)
	}
	if u, err := url.Parse(p.URL); err != nil || u.Scheme != "http" || u.Host == "" {
		return p, fmt.Errorf("params: url %q, want an http:// URL", p.URL)
	}
	return p, nil
}

// limited plans partitions 0..n-1 and GETs url?part=<i>&pid=<pid>&began=<when Process began,
// in Unix ns> for each; its outputs and aggregate are the synthetic job's (v = i²), so the
// e2e checks of a run apply as they are.
type limited struct{ *synthetic.Job }

// client keeps enough idle connections for every slot of the limit.
var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 30 * time.Second}

func (limited) ValidateParams(params json.RawMessage) error {
	_, err := parseLimited(params)
	return err
}

func (limited) Plan(ctx context.Context, params json.RawMessage, cursor string, emit func(json.RawMessage, string) error) error {
	p, err := parseLimited(params)
	if err != nil {
		return err
	}
	start := 0
	if cursor != "" {
		if start, err = strconv.Atoi(cursor); err != nil || start < 0 || start > p.Partitions {
			return fmt.Errorf("limited: bad cursor %q", cursor)
		}
	}
	for i := start; i < p.Partitions; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		b, _ := json.Marshal(synthetic.Payload{I: i})
		if err := emit(b, strconv.Itoa(i+1)); err != nil {
			return err
		}
	}
	return nil
}

func (limited) Process(ctx context.Context, part baton.Partition) (json.RawMessage, error) {
	began := time.Now()
	p, err := parseLimited(part.Params)
	if err != nil {
		return nil, baton.Permanent(err)
	}
	u := fmt.Sprintf("%s?part=%d&pid=%d&began=%d&run=%s", p.URL, part.Index, os.Getpid(), began.UnixNano(), url.QueryEscape(part.Run))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, baton.Permanent(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
		secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if err != nil {
			secs = 1
		}
		return nil, baton.SlowDown(time.Duration(secs)*time.Second, fmt.Errorf("GET %s: %s", p.URL, resp.Status))
	case resp.StatusCode != http.StatusOK:
		return nil, errors.New("GET " + p.URL + ": " + resp.Status)
	}
	return json.Marshal(synthetic.Output{I: part.Index, V: int64(part.Index) * int64(part.Index)})
}
