package ncrontab

import (
	"strings"
	"testing"
	"time"
)

// FuzzParse: Parse never panics, fails with a zero Expr and an error naming the expression, or
// succeeds with an Expr whose String parses back to the same Expr.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"* * * * * *", "0 */5 * * * *", "0 30 9 * Jan Mon", "*/10 0-4 9-17 1,15 */3 1-5/2", "5/20 * * * *",
		"0 0 0 29 2 *", "0 0 0 30 2 *", "0 0 0 * * 7", "0 0 0 L * *", "@daily", "0 0 0 * * MON#2",
		"0 0 0 13 * FRI", "0 0 22-2 * * *", "*/0 * * * * *", "1,,2 * * * * *", "99999999999999999999 * * * * *",
	} {
		f.Add(s)
	}
	loc := time.FixedZone("X", 5*3600+30*60)
	from := time.Date(2026, 3, 29, 1, 59, 59, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		e, err := Parse(s)
		if err != nil {
			if e != (Expr{}) {
				t.Fatalf("Parse(%q) returned %v with error %v", s, e, err)
			}
			if !strings.HasPrefix(err.Error(), "ncrontab: ") {
				t.Fatalf("Parse(%q) error %q does not start with ncrontab:", s, err)
			}
			return
		}
		norm := e.String()
		e2, err := Parse(norm)
		if err != nil || e2 != e {
			t.Fatalf("Parse(%q).String() = %q, which parses to %v, %v", s, norm, e2, err)
		}
		if e2.String() != norm {
			t.Fatalf("String is not stable: %q, then %q", norm, e2.String())
		}
		if e.Describe() == "" {
			t.Fatalf("Parse(%q).Describe() is empty", s)
		}
		n, ok := e.Next(from, loc)
		if !ok || !n.After(from) {
			t.Fatalf("Parse(%q).Next(%v) = %v, %v", s, from, n, ok)
		}
		if p, ok := e.Prev(n, loc); !ok || !p.Equal(n) {
			t.Fatalf("Parse(%q).Prev(%v) = %v, %v; want itself", s, n, p, ok)
		}
	})
}
