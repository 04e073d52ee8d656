// Command benchtable prints the machine a benchmark run happens on and turns `go test -bench`
// output into the Markdown tables of BENCHMARKS.md. `make bench` uses it:
//
//	benchtable machine          # cores, memory, Go, Node and Azurite versions, load average
//	benchtable [file]           # tables from the output (stdin when no file)
//
// The output may hold several `go test` runs, each preceded by its command line (a line
// starting with "go test "), as `make bench` writes them; every table row names the command
// that produced it. A run that ended with "exit status N" (N ≠ 0) is listed at the end and
// makes benchtable exit with status 1, so a failed benchmark fails `make bench`.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "machine" {
		fmt.Print(machine())
		return
	}
	in := io.Reader(os.Stdin)
	if len(os.Args) > 1 {
		f, err := os.Open(os.Args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchtable:", err)
			os.Exit(2)
		}
		defer f.Close()
		in = f
	}
	rep, err := parse(in)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(2)
	}
	fmt.Print(rep.markdown())
	fmt.Printf("\nLoad average at the end (1/5/15 min): %s\n", loadavg())
	if len(rep.Failed) > 0 {
		os.Exit(1)
	}
}

// machine describes this machine in Markdown, read now.
func machine() string {
	var b strings.Builder
	b.WriteString("## Machine\n\n")
	row := func(k, v string) { fmt.Fprintf(&b, "- %s: %s\n", k, v) }
	row("CPU", fmt.Sprintf("%s, %d logical cores (GOMAXPROCS %d)", cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0)))
	row("Memory", memTotal())
	row("Kernel", strings.TrimSpace(readFile("/proc/sys/kernel/osrelease")))
	row("Go", strings.TrimSpace(command("go", "version")))
	row("Node", strings.TrimSpace(command("node", "--version")))
	row("Azurite", azuriteVersion())
	row("Load average at start (1/5/15 min)", loadavg())
	b.WriteString("\n")
	return b.String()
}

// loadavg is the 1, 5 and 15 minute load averages: other work on the machine skews the figures.
func loadavg() string {
	if f := strings.Fields(readFile("/proc/loadavg")); len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return string(b)
}

func command(name string, args ...string) string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return string(out)
}

func cpuModel() string {
	for _, l := range strings.Split(readFile("/proc/cpuinfo"), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func memTotal() string {
	for _, l := range strings.Split(readFile("/proc/meminfo"), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && k == "MemTotal" {
			f := strings.Fields(v)
			if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
	}
	return "unknown"
}

// azuriteVersion reads the pinned Azurite's package.json under the module root.
func azuriteVersion() string {
	dir, _ := os.Getwd()
	for ; ; dir = filepath.Dir(dir) {
		if b, err := os.ReadFile(filepath.Join(dir, "node_modules", "azurite", "package.json")); err == nil {
			for _, l := range strings.Split(string(b), "\n") {
				if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok && k == `"version"` {
					return strings.Trim(strings.TrimSpace(v), `",`) + " (npm, pinned in package-lock.json)"
				}
			}
		}
		if filepath.Dir(dir) == dir {
			return "not installed (run make tools)"
		}
	}
}

// Row is one benchmark result.
type Row struct {
	Command string
	Pkg     string
	Name    string // without the -GOMAXPROCS suffix
	N       int64
	Metrics []Metric // in output order; ns/op first
}

// Metric is one value and its unit.
type Metric struct {
	Value float64
	Unit  string
}

// Report is everything parsed from one output.
type Report struct {
	Rows   []Row
	Failed []string // commands (or packages) that failed
}

// parse reads `go test -bench` output.
func parse(r io.Reader) (*Report, error) {
	rep := &Report{}
	var cmd, pkg string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "go test "):
			cmd, pkg = line, ""
		case strings.HasPrefix(line, "pkg: "):
			pkg = strings.TrimPrefix(line, "pkg: ")
		case strings.HasPrefix(line, "exit status "):
			// go test prints its own "exit status 1" before FAIL; make bench adds one per run.
			if f := orElse(cmd, pkg); line != "exit status 0" && (len(rep.Failed) == 0 || rep.Failed[len(rep.Failed)-1] != f) {
				rep.Failed = append(rep.Failed, f)
			}
		case strings.HasPrefix(line, "FAIL\t"):
			if cmd == "" { // without command lines, FAIL is the only failure signal
				rep.Failed = append(rep.Failed, strings.Fields(line)[1])
			}
		case strings.HasPrefix(line, "Benchmark"):
			if row, ok := parseRow(line); ok {
				row.Command, row.Pkg = cmd, pkg
				rep.Rows = append(rep.Rows, row)
			}
		}
	}
	return rep, sc.Err()
}

func orElse(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// parseRow parses "BenchmarkX-2 \t 1 \t 123 ns/op \t 4.5 unit ...".
func parseRow(line string) (Row, bool) {
	f := strings.Fields(line)
	if len(f) < 4 || len(f)%2 != 0 {
		return Row{}, false
	}
	n, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return Row{}, false
	}
	row := Row{Name: stripProcs(f[0]), N: n}
	for i := 2; i+1 < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return Row{}, false
		}
		row.Metrics = append(row.Metrics, Metric{Value: v, Unit: f[i+1]})
	}
	return row, true
}

// stripProcs removes the "-N" GOMAXPROCS suffix go test appends to a benchmark name.
func stripProcs(name string) string {
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			return name[:i]
		}
	}
	return name
}

// markdown renders one table per command: benchmark, iterations, time per iteration and every
// other metric.
func (r *Report) markdown() string {
	var b strings.Builder
	var cmd string
	for i, row := range r.Rows {
		if i == 0 || row.Command != cmd || row.Pkg != r.Rows[i-1].Pkg {
			cmd = row.Command
			if i > 0 {
				b.WriteString("\n")
			}
			title := row.Pkg
			if cmd != "" {
				title = "`" + cmd + "`"
			}
			fmt.Fprintf(&b, "%s\n\n| benchmark | n | time/op | metrics |\n| --- | ---: | ---: | --- |\n", title)
		}
		var ms []string
		timeOp := ""
		for _, m := range row.Metrics {
			if m.Unit == "ns/op" {
				timeOp = duration(m.Value)
				continue
			}
			ms = append(ms, format(m))
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s |\n", strings.TrimPrefix(row.Name, "Benchmark"), row.N, timeOp, strings.Join(ms, "<br>"))
	}
	if len(r.Failed) > 0 {
		b.WriteString("\nFAILED:\n")
		for _, f := range r.Failed {
			fmt.Fprintf(&b, "- %s\n", f)
		}
	}
	return b.String()
}

// format renders a metric: nanosecond metrics in ms, everything else with 4 significant digits.
func format(m Metric) string {
	if base, ok := strings.CutSuffix(m.Unit, "-ns"); ok {
		return fmt.Sprintf("%s %s ms", base, sig(m.Value/1e6))
	}
	return fmt.Sprintf("%s %s", m.Unit, sig(m.Value))
}

func duration(ns float64) string {
	switch {
	case ns >= 1e9:
		return sig(ns/1e9) + " s"
	case ns >= 1e6:
		return sig(ns/1e6) + " ms"
	case ns >= 1e3:
		return sig(ns/1e3) + " µs"
	}
	return sig(ns) + " ns"
}

// sig formats v with 4 significant digits, without exponent for ordinary magnitudes.
func sig(v float64) string {
	s := strconv.FormatFloat(v, 'g', 4, 64)
	if strings.ContainsAny(s, "e") {
		if f, err := strconv.ParseFloat(s, 64); err == nil && f < 1e15 && f > 1e-4 {
			return strconv.FormatFloat(f, 'f', -1, 64)
		}
	}
	return s
}
