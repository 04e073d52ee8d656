package infra_test

import (
	"fmt"
	"strings"
	"testing"
)

// bicepScan is the result of lexing one Bicep file far enough to check its structure: the
// source with comments blanked (strings kept, offsets and newlines unchanged), and for every
// opening bracket outside strings and comments the offset of its closing partner.
type bicepScan struct {
	src  string
	code string      // src with every comment replaced by spaces (newlines kept)
	str  []bool      // str[i]: byte i is inside a string literal (quotes included)
	pair map[int]int // offset of an opening ( [ { in code -> offset of its closer
}

// scanBicep lexes src: '…' strings with \ escapes and ${…} interpolation (which may nest
// strings), triple-quoted multi-line strings (no escapes, no interpolation), // and /* */
// comments.
// It reports the first structural error with its line: an unmatched or mismatched bracket, an
// unclosed string or comment, or a bracket left open at the end.
func scanBicep(src string) (*bicepScan, error) {
	s := &bicepScan{src: src, str: make([]bool, len(src)), pair: map[int]int{}}
	code := []byte(src)
	type open struct {
		at     int
		ch     byte
		interp bool // the { of a ${ interpolation: its } resumes the enclosing string
	}
	var stack []open
	line := func(i int) int { return strings.Count(src[:i], "\n") + 1 }
	closer := map[byte]byte{')': '(', ']': '[', '}': '{'}

	i := 0
	inString := false // inside a '…' string (not in one of its interpolations)
	strStart := 0
	for i < len(src) {
		c := src[i]
		if inString {
			s.str[i] = true
			switch {
			case c == '\\' && i+1 < len(src):
				s.str[i+1] = true
				i += 2
			case c == '\'':
				inString = false
				i++
			case c == '$' && i+1 < len(src) && src[i+1] == '{':
				s.str[i+1] = true
				stack = append(stack, open{at: i + 1, ch: '{', interp: true})
				inString = false
				i += 2
			case c == '\n':
				return nil, fmt.Errorf("line %d: string opened at line %d is not closed before the end of the line", line(i), line(strStart))
			default:
				i++
			}
			continue
		}
		switch {
		case strings.HasPrefix(src[i:], "//"):
			end := strings.IndexByte(src[i:], '\n')
			if end < 0 {
				end = len(src) - i
			}
			blank(code, i, i+end)
			i += end
		case strings.HasPrefix(src[i:], "/*"):
			end := strings.Index(src[i+2:], "*/")
			if end < 0 {
				return nil, fmt.Errorf("line %d: block comment is not closed", line(i))
			}
			blank(code, i, i+2+end+2)
			i += 2 + end + 2
		case strings.HasPrefix(src[i:], "'''"):
			end := strings.Index(src[i+3:], "'''")
			if end < 0 {
				return nil, fmt.Errorf("line %d: multi-line string is not closed", line(i))
			}
			for j := i; j < i+3+end+3; j++ {
				s.str[j] = true
			}
			i += 3 + end + 3
		case c == '\'':
			s.str[i] = true
			inString, strStart = true, i
			i++
		case c == '(' || c == '[' || c == '{':
			stack = append(stack, open{at: i, ch: c})
			i++
		case c == ')' || c == ']' || c == '}':
			if len(stack) == 0 {
				return nil, fmt.Errorf("line %d: %q closes nothing", line(i), c)
			}
			top := stack[len(stack)-1]
			if top.ch != closer[c] {
				return nil, fmt.Errorf("line %d: %q closes %q opened at line %d", line(i), c, top.ch, line(top.at))
			}
			stack = stack[:len(stack)-1]
			if top.interp {
				s.str[i] = true
				inString = true
			} else {
				s.pair[top.at] = i
			}
			i++
		default:
			i++
		}
	}
	if inString {
		return nil, fmt.Errorf("line %d: string is not closed", line(strStart))
	}
	if len(stack) > 0 {
		top := stack[len(stack)-1]
		return nil, fmt.Errorf("line %d: %q is never closed", line(top.at), top.ch)
	}
	s.code = string(code)
	return s, nil
}

// blank replaces code[from:to] with spaces, keeping newlines.
func blank(code []byte, from, to int) {
	for j := from; j < to; j++ {
		if code[j] != '\n' {
			code[j] = ' '
		}
	}
}

// inCode reports whether offset i is outside strings (comments are already blank in code).
func (s *bicepScan) inCode(i int) bool { return !s.str[i] }

func TestScanBicep(t *testing.T) {
	ok := []struct {
		name, src string
	}{
		{"nested brackets", "var a = { b: [ (1), { c: 2 } ] }\n"},
		{"brackets inside a string", "var a = 'x { ( ['\n"},
		{"brackets inside comments", "// {\n/* ( [ */ var a = 1\n"},
		{"escaped quote", `var a = 'it\'s { fine'` + "\n"},
		{"interpolation with a nested string", "var a = '${empty(b) ? '{' : c}-x'\n"},
		{"interpolation of an object access", "var a = '${b.c}${d[0]}'\n"},
		{"multi-line string", "var a = '''\n{ ( [\n'''\n"},
		{"comment marker inside a string", "var a = 'http://x/*y'\n"},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := scanBicep(tc.src); err != nil {
				t.Errorf("scanBicep(%q): got %v, want no error", tc.src, err)
			}
		})
	}

	bad := []struct {
		name, src, want string
	}{
		{"unclosed brace", "var a = {\n  b: 1\n", "line 1: '{' is never closed"},
		{"extra closer", "var a = 1 }\n", "line 1: '}' closes nothing"},
		{"mismatched closer", "var a = [ 1 )\n", "line 1: ')' closes '['"},
		{"unclosed string", "var a = 'abc\nvar b = 1\n", "line 1: string opened at line 1 is not closed"},
		{"unclosed interpolation", "var a = '${b\n", "line 1: '{' is never closed"},
		{"string after an interpolation not closed", "var a = '${b}\n", "line 1: string opened at line 1 is not closed"},
		{"unclosed block comment", "/* abc\n", "line 1: block comment is not closed"},
		{"unclosed multi-line string", "var a = '''\nabc\n", "line 1: multi-line string is not closed"},
		{"brace hidden by a comment", "var a = { // }\n", "line 1: '{' is never closed"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := scanBicep(tc.src)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("scanBicep(%q): got %v, want an error containing %q", tc.src, err, tc.want)
			}
		})
	}
}

func TestScanBicep_BlanksCommentsOnly(t *testing.T) {
	src := "var a = 'x // y' // z\n/* w */var b = 1\n"
	s, err := scanBicep(src)
	if err != nil {
		t.Fatal(err)
	}
	want := "var a = 'x // y'     \n       var b = 1\n"
	if s.code != want {
		t.Errorf("code: got %q, want %q", s.code, want)
	}
	if len(s.code) != len(src) {
		t.Errorf("code length: got %d, want %d (offsets must not move)", len(s.code), len(src))
	}
}
