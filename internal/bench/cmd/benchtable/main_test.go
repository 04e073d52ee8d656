package main

import (
	"strings"
	"testing"
)

const sample = `## Machine

go test -run '^$' -bench 'Election' -benchtime 1x -count=1 ./internal/bench/
goos: linux
pkg: github.com/batonfn/baton/internal/bench
BenchmarkElection/contenders=2-2         	       1	11896337879 ns/op	         4.000 calls/contender	  22160202 loser-p50-ns
--- BENCH: BenchmarkElection/contenders=2-2
    election_test.go:1: a log line
PASS
ok  	github.com/batonfn/baton/internal/bench	42.192s
exit status 0
go test -run '^$' -bench 'FanOut' -benchtime 1x -count=1 ./internal/bench/
pkg: github.com/batonfn/baton/internal/bench
BenchmarkFanOut/partitions=1000-2 	       1	3084147218 ns/op	       646.2 partitions/s	   0.03100 leader-blob-calls/partition
--- FAIL: BenchmarkFanOut/partitions=10000
exit status 1
FAIL	github.com/batonfn/baton/internal/bench	3.2s
exit status 1
`

func TestParse(t *testing.T) {
	rep, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 2 {
		t.Fatalf("rows = %d, want 2: %+v", len(rep.Rows), rep.Rows)
	}
	r := rep.Rows[0]
	if r.Name != "BenchmarkElection/contenders=2" || r.N != 1 || r.Pkg != "github.com/batonfn/baton/internal/bench" ||
		!strings.Contains(r.Command, "-bench 'Election'") {
		t.Errorf("row 0 = %+v", r)
	}
	if len(r.Metrics) != 3 || r.Metrics[2] != (Metric{22160202, "loser-p50-ns"}) {
		t.Errorf("row 0 metrics = %+v", r.Metrics)
	}
	if len(rep.Failed) != 1 || !strings.Contains(rep.Failed[0], "-bench 'FanOut'") {
		t.Errorf("failed = %v, want the FanOut command", rep.Failed)
	}
}

func TestMarkdown(t *testing.T) {
	rep, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	md := rep.markdown()
	for _, want := range []string{
		"`go test -run '^$' -bench 'Election' -benchtime 1x -count=1 ./internal/bench/`",
		"| Election/contenders=2 | 1 | 11.9 s | calls/contender 4<br>loser-p50 22.16 ms |",
		"| FanOut/partitions=1000 | 1 | 3.084 s | partitions/s 646.2<br>leader-blob-calls/partition 0.031 |",
		"FAILED:\n- go test -run '^$' -bench 'FanOut'",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestSig(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{{646.2, "646.2"}, {0.031, "0.031"}, {11896.337, "11900"}, {4, "4"}, {1.5e-7, "1.5e-07"}} {
		if got := sig(c.v); got != c.want {
			t.Errorf("sig(%v) = %q, want %q", c.v, got, c.want)
		}
	}
}

func TestStripProcs(t *testing.T) {
	for in, want := range map[string]string{
		"BenchmarkFanOut/partitions=1000-2": "BenchmarkFanOut/partitions=1000",
		"BenchmarkFanOut100000-16":          "BenchmarkFanOut100000",
		"BenchmarkX":                        "BenchmarkX",
		"BenchmarkKill/at=1s-x":             "BenchmarkKill/at=1s-x",
	} {
		if got := stripProcs(in); got != want {
			t.Errorf("stripProcs(%q) = %q, want %q", in, got, want)
		}
	}
}
