package e2e_test

import (
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/batonfn/baton/internal/engine/telemetry/otlptest"
	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
)

// otlpReceiver is an OTLP/HTTP receiver (protobuf encoding, as the SDK's otlptracehttp and
// otlpmetrichttp exporters send it): it decodes every export request of the handlers under
// test and keeps their spans and the latest value of each cumulative counter.
type otlpReceiver struct {
	srv *httptest.Server

	mu       sync.Mutex
	spans    map[string]*gotSpan // by span ID
	counters map[string]int64    // instance|start|metric|attrs → latest cumulative value (a histogram's count as metric.count)
	gauges   map[string]int64    // instance|start|metric|attrs → latest value
	requests int
}

// gotSpan is a span as exported.
type gotSpan struct {
	Trace, ID, Parent string
	Name              string
	Attrs             map[string]string
	Links             []string // linked span IDs
	Instance          string   // the exporting process's service.instance.id
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{spans: map[string]*gotSpan{}, counters: map[string]int64{}, gauges: map[string]int64{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, req *http.Request) {
		var in coltracepb.ExportTraceServiceRequest
		if !otlptest.Decode(w, req, &in) {
			return
		}
		r.addTraces(&in)
		otlptest.Reply(w, &coltracepb.ExportTraceServiceResponse{})
	})
	mux.HandleFunc("POST /v1/metrics", func(w http.ResponseWriter, req *http.Request) {
		var in colmetricspb.ExportMetricsServiceRequest
		if !otlptest.Decode(w, req, &in) {
			return
		}
		r.addMetrics(&in)
		otlptest.Reply(w, &colmetricspb.ExportMetricsServiceResponse{})
	})
	r.srv = httptest.NewServer(mux)
	t.Cleanup(r.srv.Close)
	return r
}

func attrString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	}
	return v.String()
}

func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		out[kv.GetKey()] = attrString(kv.GetValue())
	}
	return out
}

func (r *otlpReceiver) addTraces(in *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	for _, rs := range in.GetResourceSpans() {
		inst := attrMap(rs.GetResource().GetAttributes())["service.instance.id"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				g := &gotSpan{Trace: hex.EncodeToString(s.GetTraceId()), ID: hex.EncodeToString(s.GetSpanId()),
					Parent: hex.EncodeToString(s.GetParentSpanId()), Name: s.GetName(), Attrs: attrMap(s.GetAttributes()), Instance: inst}
				for _, l := range s.GetLinks() {
					g.Links = append(g.Links, hex.EncodeToString(l.GetSpanId()))
				}
				r.spans[g.ID] = g
			}
		}
	}
}

func (r *otlpReceiver) addMetrics(in *colmetricspb.ExportMetricsServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	for _, rm := range in.GetResourceMetrics() {
		inst := attrMap(rm.GetResource().GetAttributes())["service.instance.id"]
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				switch d := m.GetData().(type) {
				case *metricspb.Metric_Gauge:
					for _, dp := range d.Gauge.GetDataPoints() {
						key := fmt.Sprintf("%s|%d|%s|%s", inst, dp.GetStartTimeUnixNano(), m.GetName(), attrKey(attrMap(dp.GetAttributes())))
						r.gauges[key] = dp.GetAsInt()
					}
					continue
				case *metricspb.Metric_Histogram:
					// A histogram's count is a cumulative counter of its recordings.
					for _, dp := range d.Histogram.GetDataPoints() {
						key := fmt.Sprintf("%s|%d|%s.count|%s", inst, dp.GetStartTimeUnixNano(), m.GetName(), attrKey(attrMap(dp.GetAttributes())))
						r.counters[key] = int64(dp.GetCount())
					}
					continue
				}
				sum, ok := m.GetData().(*metricspb.Metric_Sum)
				if !ok || sum.Sum.GetAggregationTemporality() != metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE {
					continue
				}
				for _, dp := range sum.Sum.GetDataPoints() {
					key := fmt.Sprintf("%s|%d|%s|%s", inst, dp.GetStartTimeUnixNano(), m.GetName(), attrKey(attrMap(dp.GetAttributes())))
					r.counters[key] = dp.GetAsInt()
				}
			}
		}
	}
}

func attrKey(attrs map[string]string) string {
	keys := make([]string, 0, len(attrs))
	for k, v := range attrs {
		keys = append(keys, k+"="+v)
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

// counter sums, over every process, the latest value of metric name's data points whose
// attributes include want.
func (r *otlpReceiver) counter(name string, want map[string]string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var total int64
	for key, v := range r.counters {
		parts := strings.SplitN(key, "|", 4)
		if parts[2] != name {
			continue
		}
		attrs := map[string]string{}
		for _, kv := range strings.Split(parts[3], ",") {
			if k, val, ok := strings.Cut(kv, "="); ok {
				attrs[k] = val
			}
		}
		match := true
		for k, v := range want {
			match = match && attrs[k] == v
		}
		if match {
			total += v
		}
	}
	return total
}

// gauged reports whether gauge name was reported with attributes including want.
func (r *otlpReceiver) gauged(name string, want map[string]string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key := range r.gauges {
		parts := strings.SplitN(key, "|", 4)
		if parts[2] == name && strings.Contains(","+parts[3]+",", ","+attrKey(want)+",") {
			return true
		}
	}
	return false
}

// runTrace returns the spans of run's trace: the trace of its spans (an error when they are in
// more than one).
func (r *otlpReceiver) runTrace(run string) ([]*gotSpan, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	traces := map[string]bool{}
	for _, s := range r.spans {
		if s.Attrs["baton.run.id"] == run {
			traces[s.Trace] = true
		}
	}
	if len(traces) != 1 {
		return nil, fmt.Errorf("run %s: spans in %d traces, want 1", run, len(traces))
	}
	var out []*gotSpan
	for _, s := range r.spans {
		if traces[s.Trace] {
			out = append(out, s)
		}
	}
	return out, nil
}

func (r *otlpReceiver) span(id string) *gotSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.spans[id]
}

// ancestors lists the names of s's ancestors within spans, nearest first; an error when a
// parent is not among them (the trace is not connected).
func ancestors(s *gotSpan, byID map[string]*gotSpan) ([]string, error) {
	var names []string
	for cur := s; cur.Parent != ""; {
		p, ok := byID[cur.Parent]
		if !ok {
			return names, fmt.Errorf("span %s (%s) has parent %s, not in the trace", cur.Name, cur.ID, cur.Parent)
		}
		names = append(names, p.Name)
		cur = p
		if len(names) > 1000 {
			return names, fmt.Errorf("span %s: parent cycle", s.Name)
		}
	}
	return names, nil
}

// checkRunTrace asserts that run's spans form one connected trace from its root, the decision
// (baton.run.start), through the planning and its enqueue batches, to one try of every
// partition below an enqueue batch and the finish with state: and returns the root.
func checkRunTrace(t *testing.T, r *otlpReceiver, run string, partitions int, state string) *gotSpan {
	t.Helper()
	spans, err := r.runTrace(run)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*gotSpan{}
	for _, s := range spans {
		byID[s.ID] = s
	}
	var roots []*gotSpan
	names := map[string]int{}
	parts := map[string]bool{}
	for _, s := range spans {
		names[s.Name]++
		about := s.Attrs["baton.run.id"]
		if p := byID[s.Parent]; s.Name == "baton.partition" && p != nil {
			// A partition's span carries only its own attributes: its run is its message's.
			if p.Name != "baton.bundle" && p.Name != "baton.partition.message" {
				t.Errorf("run %s: a partition's span is a child of %s, want its message's", run, p.Name)
			}
			about = p.Attrs["baton.run.id"]
		}
		if about != run {
			t.Errorf("span %s in run %s's trace is about run %q", s.Name, run, about)
		}
		if s.Parent == "" {
			roots = append(roots, s)
		}
		up, err := ancestors(s, byID)
		if err != nil {
			t.Errorf("run %s: %v", run, err)
			continue
		}
		if s.Name == "baton.partition" {
			parts[s.Attrs["baton.partition.index"]] = true
			if !slices.Contains(up, "baton.enqueue.batch") || !slices.Contains(up, "baton.plan.slice") {
				t.Errorf("run %s: partition %s's span descends from %v, want an enqueue batch of a planning slice", run, s.Attrs["baton.partition.index"], up)
			}
		}
		if s.Name == "baton.run.finish" && s.Attrs["baton.run.state"] == state && len(up) == 0 {
			t.Errorf("run %s: the finish span has no parent", run)
		}
	}
	if len(roots) != 1 || roots[0].Name != "baton.run.start" {
		var got []string
		for _, s := range roots {
			got = append(got, s.Name)
		}
		t.Fatalf("run %s: roots %v, want one baton.run.start", run, got)
	}
	for i := range partitions {
		if !parts[fmt.Sprint(i)] {
			t.Errorf("run %s: no span of partition %d", run, i)
		}
	}
	finished := false
	for _, s := range spans {
		finished = finished || s.Name == "baton.run.finish" && s.Attrs["baton.run.state"] == state
	}
	if !finished {
		t.Errorf("run %s: no baton.run.finish span with state %s (spans %v)", run, state, names)
	}
	for _, n := range []string{"baton.check", "baton.plan.slice", "baton.enqueue.batch"} {
		if names[n] == 0 {
			t.Errorf("run %s: no %s span (spans %v)", run, n, names)
		}
	}
	return roots[0]
}
