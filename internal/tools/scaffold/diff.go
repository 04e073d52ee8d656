package scaffold

import (
	"fmt"
	"strings"
)

// Bounds of a Drift's diff: it shows at most maxDiffLines lines after its header, each cut at
// maxDiffLineLen bytes, so a large or rewritten file cannot flood a CI log.
const (
	maxDiffLines   = 60
	maxDiffLineLen = 200
	// maxLCSCells bounds the table of the line diff (the lines left once the common head and tail
	// are set aside, multiplied); beyond it the differing middle is shown as one replacement.
	maxLCSCells = 1 << 21
)

// unifiedDiff returns a unified diff (3 lines of context) from want, what Baton writes, to got,
// what is on disk, labelled with rel; "" when they are equal. It is bounded as described above.
func unifiedDiff(rel string, want, got []byte) string {
	a, b := splitLines(string(want)), splitLines(string(got))
	ops := diffLines(a, b)
	var out []string
	const context = 3
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		// A hunk: from context lines before the first change to context lines after the last
		// change that is at most 2*context equal lines from the next.
		start := max(i-context, 0)
		end := i
		for end < len(ops) {
			if ops[end].kind != ' ' {
				end++
				continue
			}
			run := end
			for run < len(ops) && ops[run].kind == ' ' {
				run++
			}
			if run == len(ops) || run-end > 2*context {
				end = min(end+context, len(ops))
				break
			}
			end = run
		}
		aStart, bStart := ops[start].a, ops[start].b
		var aLen, bLen int
		var body []string
		for _, op := range ops[start:end] {
			if op.kind != '+' {
				aLen++
			}
			if op.kind != '-' {
				bLen++
			}
			body = append(body, showLine(op.kind, op.line)...)
		}
		out = append(out, fmt.Sprintf("@@ -%s +%s @@", hunkRange(aStart, aLen), hunkRange(bStart, bLen)))
		out = append(out, body...)
		i = end
	}
	if len(out) == 0 {
		return ""
	}
	if len(out) > maxDiffLines {
		n := len(out) - maxDiffLines
		out = append(out[:maxDiffLines], fmt.Sprintf("… %d more diff lines not shown", n))
	}
	return fmt.Sprintf("--- %s (what this Baton writes)\n+++ %s (on disk)\n%s\n", rel, rel, strings.Join(out, "\n"))
}

// hunkRange is a unified diff range: the 1-based first line and the count (a count of 0 names
// the line before).
func hunkRange(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	if n == 1 {
		return fmt.Sprint(start + 1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

// showLine renders one diff line, cut to maxDiffLineLen, noting a missing final newline.
func showLine(kind byte, line string) []string {
	text, nl := strings.CutSuffix(line, "\n")
	if len(text) > maxDiffLineLen {
		text = text[:maxDiffLineLen] + "…"
	}
	if nl {
		return []string{string(kind) + text}
	}
	return []string{string(kind) + text, `\ No newline at end of file`}
}

// splitLines splits s after each newline; the last line lacks one when s does.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

type diffOp struct {
	kind byte // ' ' both, '-' only in a, '+' only in b
	line string
	a, b int // index of the line in a and in b (for '+', the a line it comes before; for '-', likewise in b)
}

// diffLines is a line edit script from a to b: the common head and tail, and between them a
// longest common subsequence when its table fits maxLCSCells, else all of a's lines then b's.
func diffLines(a, b []string) []diffOp {
	var ops []diffOp
	head := 0
	for head < len(a) && head < len(b) && a[head] == b[head] {
		ops = append(ops, diffOp{' ', a[head], head, head})
		head++
	}
	tail := 0
	for tail < len(a)-head && tail < len(b)-head && a[len(a)-1-tail] == b[len(b)-1-tail] {
		tail++
	}
	ma, mb := a[head:len(a)-tail], b[head:len(b)-tail]
	n, m := len(ma), len(mb)
	if n > 0 && m > 0 && n*m <= maxLCSCells {
		// lcs[i*(m+1)+j] is the length of the longest common subsequence of ma[i:] and mb[j:].
		w := m + 1
		lcs := make([]int32, (n+1)*w)
		for i := n - 1; i >= 0; i-- {
			for j := m - 1; j >= 0; j-- {
				if ma[i] == mb[j] {
					lcs[i*w+j] = lcs[(i+1)*w+j+1] + 1
				} else {
					lcs[i*w+j] = max(lcs[(i+1)*w+j], lcs[i*w+j+1])
				}
			}
		}
		i, j := 0, 0
		for i < n || j < m {
			switch {
			case i < n && j < m && ma[i] == mb[j]:
				ops = append(ops, diffOp{' ', ma[i], head + i, head + j})
				i, j = i+1, j+1
			case j == m || (i < n && lcs[(i+1)*w+j] >= lcs[i*w+j+1]):
				ops = append(ops, diffOp{'-', ma[i], head + i, head + j})
				i++
			default:
				ops = append(ops, diffOp{'+', mb[j], head + i, head + j})
				j++
			}
		}
	} else {
		for i, l := range ma {
			ops = append(ops, diffOp{'-', l, head + i, head})
		}
		for j, l := range mb {
			ops = append(ops, diffOp{'+', l, head + n, head + j})
		}
	}
	for k := 0; k < tail; k++ {
		ia, ib := len(a)-tail+k, len(b)-tail+k
		ops = append(ops, diffOp{' ', a[ia], ia, ib})
	}
	return ops
}
