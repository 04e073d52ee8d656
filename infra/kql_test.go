package infra_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// A structural checker for the alert queries (infra/app/alerts/*.kql), where no Kusto parser
// is available: it lexes the query (strings, comments, numbers and timespans, identifiers,
// operators), checks brackets, and walks the pipeline — let statements, a known table, then
// known tabular operators — tracking the columns each operator leaves, so that a misspelt
// column, an unknown function, an aggregate outside summarize or an unclosed string is a
// problem. It records what the query reads from the parsed log line (line.<key>) and every
// string literal, which the alert tests hold to what the handler really logs.

type kqlToken struct {
	kind string // "ident", "string", "number", "punct"
	text string // a string's value, unquoted
	line int
	end  int // offset just past the token, to tell adjacent tokens (project-away)
	at   int
}

// lexKQL splits a query into tokens, dropping // comments.
func lexKQL(q string) ([]kqlToken, error) {
	var toks []kqlToken
	line := 1
	isIdent := func(c byte, first bool) bool {
		return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && c >= '0' && c <= '9'
	}
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == '\n':
			line++
			i++
		case c == ' ' || c == '\t' || c == '\r':
			i++
		case strings.HasPrefix(q[i:], "//"):
			for i < len(q) && q[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '@' && i+1 < len(q) && (q[i+1] == '"' || q[i+1] == '\''):
			verbatim := c == '@'
			start := i
			if verbatim {
				i++
			}
			quote := q[i]
			i++
			var b strings.Builder
			closed := false
			for i < len(q) && q[i] != '\n' {
				if q[i] == '\\' && !verbatim && i+1 < len(q) {
					b.WriteByte(q[i+1])
					i += 2
					continue
				}
				if q[i] == quote {
					if verbatim && i+1 < len(q) && q[i+1] == quote {
						b.WriteByte(quote)
						i += 2
						continue
					}
					i++
					closed = true
					break
				}
				b.WriteByte(q[i])
				i++
			}
			if !closed {
				return nil, fmt.Errorf("line %d: string is not closed", line)
			}
			toks = append(toks, kqlToken{kind: "string", text: b.String(), line: line, at: start, end: i})
		case c >= '0' && c <= '9':
			start := i
			for i < len(q) && (q[i] >= '0' && q[i] <= '9' || q[i] == '.') {
				i++
			}
			for i < len(q) && isIdent(q[i], true) { // a timespan's unit: 5m, 2d, 10ms
				i++
			}
			toks = append(toks, kqlToken{kind: "number", text: q[start:i], line: line, at: start, end: i})
		case isIdent(c, true):
			start := i
			for i < len(q) && isIdent(q[i], false) {
				i++
			}
			toks = append(toks, kqlToken{kind: "ident", text: q[start:i], line: line, at: start, end: i})
		default:
			text := string(c)
			for _, two := range []string{"==", "!=", "<=", ">=", "=~", "!~", "=>"} {
				if strings.HasPrefix(q[i:], two) {
					text = two
				}
			}
			if !strings.Contains("|()[],;.=<>+-*/%!", string(c)) {
				return nil, fmt.Errorf("line %d: unexpected character %q", line, c)
			}
			toks = append(toks, kqlToken{kind: "punct", text: text, line: line, at: i, end: i + len(text)})
			i += len(text)
		}
	}
	return toks, nil
}

// The traces table of Application Insights: the columns a query may read before defining any,
// with their Kusto types.
var tracesSchema = [][2]string{{"timestamp", "datetime"}, {"message", "string"}, {"severityLevel", "int"},
	{"itemType", "string"}, {"customDimensions", "dynamic"}, {"customMeasurements", "dynamic"},
	{"operation_Name", "string"}, {"operation_Id", "string"}, {"operation_ParentId", "string"},
	{"cloud_RoleName", "string"}, {"cloud_RoleInstance", "string"}, {"appName", "string"}, {"appId", "string"},
	{"itemId", "string"}, {"itemCount", "int"}, {"sdkVersion", "string"}}

var tracesColumns = func() []string {
	var out []string
	for _, c := range tracesSchema {
		out = append(out, c[0])
	}
	return out
}()

var kqlTables = map[string][]string{"traces": tracesColumns}

var kqlScalarFuncs = []string{"parse_json", "todynamic", "tostring", "tolong", "toint", "todouble", "todatetime",
	"indexof", "substring", "strlen", "strcat", "tolower", "toupper", "trim", "extract", "ago", "now", "case", "iff",
	"iif", "isempty", "isnotempty", "isnull", "isnotnull", "bin", "coalesce", "datetime", "timespan", "dynamic", "array_length"}

var kqlAggFuncs = []string{"count", "countif", "dcount", "dcountif", "sum", "sumif", "avg", "avgif", "min", "max",
	"minif", "maxif", "arg_max", "arg_min", "make_set", "make_list", "take_any", "any"}

// Words of an expression that are neither columns nor functions.
var kqlWords = []string{"and", "or", "not", "in", "has", "contains", "startswith", "endswith", "has_any",
	"matches", "regex", "between", "true", "false", "null", "asc", "desc", "nulls", "first", "last"}

// kqlQuery is what checkKQL found in a query.
type kqlQuery struct {
	lineKeys []string // keys read from the parsed log line: line.<key> or line["<key>"]
	strings  []string // every string literal
	columns  []string // the columns of the result
}

// lineVar is the column holding the parsed JSON of a handler log line in the alert queries.
const lineVar = "line"

// checkKQL checks q's structure and returns what it reads; problems are returned all at once.
func checkKQL(q string) (kqlQuery, []string) {
	var out kqlQuery
	toks, err := lexKQL(q)
	if err != nil {
		return out, []string{err.Error()}
	}
	var probs []string
	problem := func(tok kqlToken, format string, args ...any) {
		probs = append(probs, fmt.Sprintf("line %d: ", tok.line)+fmt.Sprintf(format, args...))
	}
	// Brackets.
	var stack []kqlToken
	for _, tk := range toks {
		if tk.kind == "string" {
			out.strings = append(out.strings, tk.text)
		}
		if tk.kind != "punct" {
			continue
		}
		switch tk.text {
		case "(", "[":
			stack = append(stack, tk)
		case ")", "]":
			want := map[string]string{")": "(", "]": "["}[tk.text]
			if len(stack) == 0 || stack[len(stack)-1].text != want {
				problem(tk, "%q closes nothing open", tk.text)
				return out, probs
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) > 0 {
		problem(stack[len(stack)-1], "%q is never closed", stack[len(stack)-1].text)
		return out, probs
	}

	// Statements: let …; then one tabular expression.
	stmts := splitTop(toks, ";")
	if len(stmts) > 0 && len(stmts[len(stmts)-1]) == 0 {
		stmts = stmts[:len(stmts)-1] // a trailing ;
	}
	if len(stmts) == 0 {
		return out, []string{"the query is empty"}
	}
	scalars := map[string]bool{}
	for _, st := range stmts[:len(stmts)-1] {
		if len(st) < 4 || st[0].text != "let" || st[1].kind != "ident" || st[2].text != "=" {
			problem(st[0], "want let <name> = <value>; before the query, got %q", joinTokens(st))
			continue
		}
		checkExpr(st[3:], nil, scalars, false, &out, problem)
		scalars[st[1].text] = true
	}
	segs := splitTop(stmts[len(stmts)-1], "|")
	first := segs[0]
	if len(first) != 1 || first[0].kind != "ident" {
		problem(first[0], "want the query to start with a table, got %q", joinTokens(first))
		return out, probs
	}
	cols, ok := kqlTables[first[0].text]
	if !ok {
		problem(first[0], "unknown table %q", first[0].text)
		return out, probs
	}
	columns := map[string]bool{}
	for _, c := range cols {
		columns[c] = true
	}
	for _, seg := range segs[1:] {
		if len(seg) == 0 {
			problem(first[0], "empty pipeline stage")
			continue
		}
		op, rest := seg[0].text, seg[1:]
		if op == "project" && len(rest) > 1 && rest[0].text == "-" && rest[0].at == seg[0].end && rest[1].text == "away" {
			op, rest = "project-away", rest[2:]
		}
		if (op == "order" || op == "sort") && len(rest) > 0 && rest[0].text == "by" {
			op, rest = op+" by", rest[1:]
		}
		switch op {
		case "where":
			checkExpr(rest, columns, scalars, false, &out, problem)
		case "extend":
			for _, item := range splitTop(rest, ",") {
				name, expr := assignment(item)
				checkExpr(expr, columns, scalars, false, &out, problem)
				if name == "" {
					problem(seg[0], "extend %q: name the column (name = expression)", joinTokens(item))
					continue
				}
				columns[name] = true
			}
		case "project":
			next := map[string]bool{}
			for _, item := range splitTop(rest, ",") {
				name, expr := assignment(item)
				checkExpr(expr, columns, scalars, false, &out, problem)
				if name == "" {
					if len(expr) != 1 || expr[0].kind != "ident" {
						problem(seg[0], "project %q: name the column (name = expression)", joinTokens(item))
						continue
					}
					name = expr[0].text
				}
				next[name] = true
			}
			columns = next
		case "project-away":
			for _, item := range splitTop(rest, ",") {
				if len(item) != 1 || !columns[item[0].text] {
					problem(seg[0], "project-away %q: not a column", joinTokens(item))
					continue
				}
				delete(columns, item[0].text)
			}
		case "summarize":
			aggs, by, hasBy := rest, []kqlToken(nil), false
			for i, tk := range rest {
				if tk.kind == "ident" && tk.text == "by" && depthAt(rest, i) == 0 {
					aggs, by, hasBy = rest[:i], rest[i+1:], true
					break
				}
			}
			next := map[string]bool{}
			for _, item := range splitTop(aggs, ",") {
				name, expr := assignment(item)
				if len(expr) < 3 || expr[0].kind != "ident" || !slices.Contains(kqlAggFuncs, expr[0].text) || expr[1].text != "(" {
					problem(seg[0], "summarize %q: want name = <aggregation>(…)", joinTokens(item))
					continue
				}
				checkExpr(expr, columns, scalars, true, &out, problem)
				if name == "" {
					problem(seg[0], "summarize %q: name the aggregation (name = …)", joinTokens(item))
					continue
				}
				next[name] = true
			}
			for _, item := range splitTop(by, ",") {
				if !hasBy {
					break
				}
				name, expr := assignment(item)
				checkExpr(expr, columns, scalars, false, &out, problem)
				if name == "" && len(expr) == 1 && expr[0].kind == "ident" {
					name = expr[0].text
				}
				if name == "" {
					problem(seg[0], "summarize by %q: name the column", joinTokens(item))
					continue
				}
				next[name] = true
			}
			columns = next
		case "top":
			var n, by []kqlToken
			for i, tk := range rest {
				if tk.kind == "ident" && tk.text == "by" {
					n, by = rest[:i], rest[i+1:]
					break
				}
			}
			if len(n) != 1 || !(n[0].kind == "number" || n[0].kind == "ident" && scalars[n[0].text]) || len(by) == 0 {
				problem(seg[0], "want top <count or let name> by <column> [asc|desc], got %q", joinTokens(seg))
				continue
			}
			checkExpr(by, columns, scalars, false, &out, problem)
		case "order by", "sort by":
			checkExpr(rest, columns, scalars, false, &out, problem)
		case "take", "limit":
			if len(rest) != 1 || !(rest[0].kind == "number" || scalars[rest[0].text]) {
				problem(seg[0], "want %s <count>", op)
			}
		case "distinct":
			next := map[string]bool{}
			for _, item := range splitTop(rest, ",") {
				if len(item) != 1 || !columns[item[0].text] {
					problem(seg[0], "distinct %q: not a column", joinTokens(item))
					continue
				}
				next[item[0].text] = true
			}
			columns = next
		default:
			problem(seg[0], "unknown tabular operator %q", op)
		}
	}
	out.columns = sortedKeys(columns)
	return out, probs
}

// checkExpr checks an expression's identifiers: a function is known (aggregations only where
// agg), a name is a column, a let name or a keyword, and member access on the log line is
// recorded as a key the query reads.
func checkExpr(expr []kqlToken, columns, scalars map[string]bool, agg bool, out *kqlQuery, problem func(kqlToken, string, ...any)) {
	if len(expr) == 0 {
		problem(kqlToken{}, "empty expression")
		return
	}
	for i, tk := range expr {
		if tk.kind != "ident" {
			continue
		}
		if i > 0 && expr[i-1].text == "." {
			continue // a member: its base was checked
		}
		if i+1 < len(expr) && expr[i+1].text == "(" && !slices.Contains(kqlWords, tk.text) {
			switch {
			case slices.Contains(kqlScalarFuncs, tk.text):
			case slices.Contains(kqlAggFuncs, tk.text):
				if !agg {
					problem(tk, "aggregation %s() outside summarize", tk.text)
				}
			default:
				problem(tk, "unknown function %s()", tk.text)
			}
			continue
		}
		if tk.text == lineVar && columns[lineVar] && i+2 < len(expr) {
			switch {
			case expr[i+1].text == "." && expr[i+2].kind == "ident":
				out.lineKeys = append(out.lineKeys, expr[i+2].text)
			case expr[i+1].text == "[" && expr[i+2].kind == "string":
				out.lineKeys = append(out.lineKeys, expr[i+2].text)
			}
		}
		if slices.Contains(kqlWords, tk.text) || columns[tk.text] || scalars[tk.text] {
			continue
		}
		if i+1 < len(expr) && expr[i+1].text == "=" && (i == 0 || expr[i-1].text == "," || expr[i-1].text == "(") {
			continue // a named argument or an output name inside an aggregation
		}
		problem(tk, "%q is not a column, a let name or a keyword here", tk.text)
	}
}

// splitTop splits toks at sep outside brackets.
func splitTop(toks []kqlToken, sep string) [][]kqlToken {
	var out [][]kqlToken
	start := 0
	for i, tk := range toks {
		if tk.kind == "punct" && tk.text == sep && depthAt(toks, i) == 0 {
			out = append(out, toks[start:i])
			start = i + 1
		}
	}
	return append(out, toks[start:])
}

// depthAt is the bracket depth just before toks[i].
func depthAt(toks []kqlToken, i int) int {
	d := 0
	for _, tk := range toks[:i] {
		if tk.kind != "punct" {
			continue
		}
		switch tk.text {
		case "(", "[":
			d++
		case ")", "]":
			d--
		}
	}
	return d
}

// assignment splits `name = expr` (a single =, not ==) into its name and expression.
func assignment(item []kqlToken) (string, []kqlToken) {
	if len(item) >= 3 && item[0].kind == "ident" && item[1].kind == "punct" && item[1].text == "=" {
		return item[0].text, item[2:]
	}
	return "", item
}

func joinTokens(toks []kqlToken) string {
	parts := make([]string, len(toks))
	for i, tk := range toks {
		parts[i] = tk.text
		if tk.kind == "string" {
			parts[i] = fmt.Sprintf("%q", tk.text)
		}
	}
	return strings.Join(parts, " ")
}

func TestCheckKQL(t *testing.T) {
	good := `let beats = 3;
traces
| where customDimensions.Category == "Host.Function.Console" // the handler's lines
| extend start = indexof(message, "{")
| where start >= 0
| extend line = parse_json(substring(message, start))
| extend msg = tostring(line.msg), n = tolong(line["count"])
| where msg in ("a", 'b') or msg == @"c\d"
| top beats by timestamp desc
| summarize rows = count(), odd = countif(n % 2 == 1), last = max(timestamp) by msg
| where rows > 0 and last > ago(5m)
| project msg, rows`
	q, probs := checkKQL(good)
	if len(probs) > 0 {
		t.Fatalf("checkKQL(good): %v", probs)
	}
	if got := strings.Join(q.lineKeys, ","); got != "msg,count" {
		t.Errorf("line keys %q, want msg,count", got)
	}
	if got := strings.Join(q.strings, "|"); got != `Host.Function.Console|{|count|a|b|c\d` {
		t.Errorf("strings %q", got)
	}
	if got := strings.Join(q.columns, ","); got != "msg,rows" {
		t.Errorf("result columns %q, want msg,rows", got)
	}

	bad := []struct{ name, query, want string }{
		{"unclosed string", "traces\n| where message == \"x\n", "line 2: string is not closed"},
		{"unbalanced paren", "traces | where tostring(message", `"(" is never closed`},
		{"stray closer", "traces | where message == \"x\")", `")" closes nothing open`},
		{"unknown table", "tracez | take 5", `unknown table "tracez"`},
		{"unknown operator", "traces | wher message == \"x\"", `unknown tabular operator "wher"`},
		{"misspelt column", "traces | where mesage == \"x\"", `"mesage" is not a column`},
		{"column gone after project", "traces | project timestamp | where message == \"x\"", `"message" is not a column`},
		{"column gone after summarize", "traces | summarize n = count() by cloud_RoleName | where timestamp > ago(1h)", `"timestamp" is not a column`},
		{"unknown function", "traces | extend x = parse_jsn(message)", "unknown function parse_jsn()"},
		{"aggregation outside summarize", "traces | where count() > 0", "aggregation count() outside summarize"},
		{"unnamed extend", "traces | extend tostring(message)", "name the column"},
		{"top without a count", "traces | top by timestamp", "want top <count or let name> by"},
		{"top with an undefined name", "traces | top beats by timestamp", "want top <count or let name> by"},
		{"bad let", "let x 5;\ntraces", "want let <name> = <value>"},
		{"empty stage", "traces | | take 1", "empty pipeline stage"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, probs := checkKQL(tc.query)
			if got := strings.Join(probs, "\n"); !strings.Contains(got, tc.want) {
				t.Errorf("checkKQL(%q): problems %q, want one containing %q", tc.query, got, tc.want)
			}
		})
	}
}
