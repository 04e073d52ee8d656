package api

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Free text the API stores (a pause note) is shown by the dashboard, written to the log and
// recorded as paused occurrences' reason. Characters that can make it look like other text
// there are refused in what a caller writes (checkText) and escaped in what the API takes from
// elsewhere (escapeText: the principal header, records already stored).

// spoofing reports whether r can disguise text where it is shown: a control character (C0,
// DEL and C1: NUL, ESC, tab, CR, LF…), a line or paragraph separator, or a bidirectional
// formatting character (the marks U+200E, U+200F and U+061C, the embeddings and overrides
// U+202A–U+202E, the isolates U+2066–U+2069).
func spoofing(r rune) bool {
	switch {
	case unicode.IsControl(r), r == '\u2028', r == '\u2029', r == '\u061c', r == '\u200e', r == '\u200f',
		r >= '\u202a' && r <= '\u202e', r >= '\u2066' && r <= '\u2069':
		return true
	}
	return false
}

// checkText returns nil when s, the request's field named field, holds no spoofing character
// and is valid UTF-8; else an error naming the field, the character and where it is.
func checkText(field, s string) error {
	for i, n := 0, 1; i < len(s); n++ {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return fmt.Errorf("%s: character %d is not valid UTF-8", field, n)
		case spoofing(r):
			return fmt.Errorf("%s: character %d is %U, a control or bidirectional formatting character "+
				"(line breaks and tabs are ones too); the %s may hold none", field, n, r, field)
		}
		i += size
	}
	return nil
}

// escapeText returns s with each spoofing character written as a visible escape (`\u202e`)
// and each byte that is not UTF-8 as `\xff`, cut to at most max characters (0: no bound)
// without splitting an escape.
func escapeText(s string, max int) string {
	var b strings.Builder
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		piece := string(r)
		switch {
		case r == utf8.RuneError && size == 1:
			piece = fmt.Sprintf(`\x%02x`, s[i])
		case spoofing(r):
			piece = fmt.Sprintf(`\u%04x`, r)
		}
		w := utf8.RuneCountInString(piece)
		if max > 0 && n+w > max {
			break
		}
		b.WriteString(piece)
		n += w
		i += size
	}
	return b.String()
}
