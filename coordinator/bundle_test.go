package coordinator

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/work"
)

func batchOf(first, n int, payload func(i int) string) ledger.PlanBatch {
	b := ledger.PlanBatch{First: first}
	for i := range n {
		var p json.RawMessage
		if s := payload(first + i); s != "" {
			p = json.RawMessage(s)
		}
		b.Partitions = append(b.Partitions, p)
	}
	return b
}

// spans describes envelopes as "part+count" (count 1 for a message of one partition).
func spans(envs []work.Envelope) string {
	var out []string
	for _, e := range envs {
		out = append(out, fmt.Sprintf("%d+%d", e.Part, max(e.Count, 1)))
	}
	return strings.Join(out, " ")
}

func TestBundles_AlignedConsecutiveAndComplete(t *testing.T) {
	head := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: "r1", Epoch: 3, Round: 1}
	// Batch 1 of a run with batches of 100: partitions 100-199, bundles of 32 aligned on 32.
	b := batchOf(100, 100, func(i int) string { return fmt.Sprintf(`{"i":%d}`, i) })
	envs := bundles(head, b, 32, nil)
	if got, want := spans(envs), "100+28 128+32 160+32 192+8"; got != want {
		t.Fatalf("bundles = %s, want %s", got, want)
	}
	next := 100
	for _, e := range envs {
		if e.Epoch != 3 || e.Round != 1 || e.Run != "r1" {
			t.Errorf("bundle %d lost the header: %+v", e.Part, e)
		}
		for _, one := range e.Singles() {
			if one.Part != next || string(one.Payload) != fmt.Sprintf(`{"i":%d}`, next) {
				t.Fatalf("partition %d carries part %d payload %s", next, one.Part, one.Payload)
			}
			next++
		}
		if _, err := e.Encode(); err != nil {
			t.Errorf("bundle %d: %v", e.Part, err)
		}
	}
	if next != 200 {
		t.Errorf("bundles end at %d, want 200", next)
	}
}

func TestBundles_NoPayloadsAndSingles(t *testing.T) {
	head := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: "r1", Epoch: 1}
	b := batchOf(0, 10, func(int) string { return "" })
	envs := bundles(head, b, 4, nil)
	if got, want := spans(envs), "0+4 4+4 8+2"; got != want {
		t.Fatalf("bundles = %s, want %s", got, want)
	}
	for _, e := range envs {
		if e.Payloads != nil {
			t.Errorf("bundle %d carries payloads %v; a batch without any sends none", e.Part, e.Payloads)
		}
	}
	// Size 1, and a re-enqueue of some partitions: one message each, with its own payload.
	b = batchOf(0, 5, func(i int) string { return fmt.Sprint(i) })
	if got := spans(bundles(head, b, 1, nil)); got != "0+1 1+1 2+1 3+1 4+1" {
		t.Errorf("size 1: %s", got)
	}
	only := bundles(head, b, 32, []int{1, 3})
	if got := spans(only); got != "1+1 3+1" || string(only[1].Payload) != "3" || only[1].Count != 0 {
		t.Errorf("only 1 and 3: %s %+v", got, only)
	}
	// A bundle of one left over at an alignment edge is a plain message.
	b = batchOf(7, 2, func(i int) string { return fmt.Sprint(i) })
	envs = bundles(head, b, 8, nil)
	if got := spans(envs); got != "7+1 8+1" || string(envs[0].Payload) != "7" || envs[0].Payloads != nil {
		t.Errorf("edges: %s %+v", got, envs)
	}
}

func TestBundles_LargePayloadsCutBundlesToFit(t *testing.T) {
	head := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: strings.Repeat("r", 63), Epoch: 1 << 53,
		Parts: 1 << 30, Round: 1 << 20}
	// 10 KiB payloads: four fit in a message, not five.
	big := `"` + strings.Repeat("x", 10<<10) + `"`
	b := batchOf(0, 12, func(int) string { return big })
	envs := bundles(head, b, 32, nil)
	if got, want := spans(envs), "0+4 4+4 8+4"; got != want {
		t.Fatalf("bundles = %s, want %s", got, want)
	}
	for _, e := range envs {
		if _, err := e.Encode(); err != nil {
			t.Errorf("bundle %d: %v", e.Part, err)
		}
	}
	// A payload of nearly a whole message goes alone.
	huge := `"` + strings.Repeat("y", work.MaxPayloadBytes-2) + `"`
	b = batchOf(0, 3, func(i int) string {
		if i == 1 {
			return huge
		}
		return "1"
	})
	if got := spans(bundles(head, b, 4, nil)); got != "0+1 1+1 2+1" {
		t.Errorf("around a huge payload: %s", got)
	}
}

// The leader bundles each job's partitions up to its own cap: with the default plan batch of
// 2,048, a job at the default cap goes as 8 messages of 256 a batch, one capped at 1,024 as
// 2 messages of 1,024, and one capped at 1 partition by partition. The run's last, shorter
// batch is bundled as a full one (its spread comes from the batches before it), not in more,
// smaller bundles.
func TestEnqueue_BundlesUpToTheJobsCap(t *testing.T) {
	const n = 2*2048 + 1808
	e := newSchedEnv(t, "2026-11-27T10:00:01Z")
	e.jobs.Register("short", &countJob{})
	e.jobs.SetMaxBundle("short", work.MaxBundle)
	e.jobs.Register("alone", &countJob{})
	e.jobs.SetMaxBundle("alone", 1)
	c := e.instanceWith("a", func(cfg *Config) { cfg.BatchSize = 0 }) // the default, 2,048
	want := map[string]int{"count": 256, "short": work.MaxBundle, "alone": 1}
	for job, size := range want {
		envs := plannedRun(t, e, c, job, n)
		wantSpans := spansOf(n, size)
		if got := spans(envs); got != wantSpans {
			t.Errorf("%s (cap %d) sent %d messages: %.200s…, want %.200s…", job, e.jobs.MaxBundle(job), len(envs), got, wantSpans)
		}
	}
}

// BatchSpread sets the fewest messages a batch goes out as: at 4, batches of 1,024 go as 4
// messages of 256 at the default cap (8 of 128 at the default spread), the last one too.
func TestEnqueue_BatchSpreadSetsTheMessagesPerBatch(t *testing.T) {
	const n = 3*1024 + 1000
	for _, tc := range []struct {
		spread, size int
	}{{4, 256}, {0, 128}} {
		t.Run(fmt.Sprint("spread ", tc.spread), func(t *testing.T) {
			e := newSchedEnv(t, "2026-11-27T10:00:01Z")
			c := e.instanceWith("a", func(cfg *Config) { cfg.BatchSize, cfg.BatchSpread = 1024, tc.spread })
			envs := plannedRun(t, e, c, "count", n)
			if got, want := spans(envs), spansOf(n, tc.size); got != want {
				t.Errorf("sent %d messages: %.200s…, want %.200s…", len(envs), got, want)
			}
		})
	}
}

// plannedRun starts a manual run of n partitions of job on c, plans it, and returns the
// partition messages sent for it.
func plannedRun(t *testing.T, e *schedEnv, c *Coordinator, job string, n int) []work.Envelope {
	t.Helper()
	out, err := c.StartManual(testCtx(t), ManualRequest{Job: job, Params: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), IdempotencyKey: job})
	if err != nil {
		t.Fatal(err)
	}
	e.deliverChecks(c)
	if m := e.manifest(out.Run); !m.PlanDone || m.Partitions != n {
		t.Fatalf("%s: run not planned: %+v", job, m)
	}
	var envs []work.Envelope
	for _, msg := range e.sender.messages() {
		env, err := work.DecodeEnvelope(msg.Body)
		if err != nil {
			t.Fatal(err)
		}
		if env.Kind == work.KindPartition && env.Run == out.Run {
			envs = append(envs, env)
		}
	}
	return envs
}

// spansOf is spans of n partitions in bundles of size.
func spansOf(n, size int) string {
	var out []string
	for first := 0; first < n; first += size {
		out = append(out, fmt.Sprintf("%d+%d", first, min(size, n-first)))
	}
	return strings.Join(out, " ")
}

// The setting's default is the engine's.
func TestBatchSpread_DefaultIsTheEngines(t *testing.T) {
	if config.DefaultBatchSpread != work.MinBundlesPerBatch {
		t.Errorf("config.DefaultBatchSpread = %d, work.MinBundlesPerBatch = %d", config.DefaultBatchSpread, work.MinBundlesPerBatch)
	}
}
