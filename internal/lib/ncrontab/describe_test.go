package ncrontab

import (
	"strings"
	"testing"
)

func TestDescribe(t *testing.T) {
	tests := []struct{ expr, want string }{
		{"* * * * * *", "every second"},
		{"*/5 * * * * *", "every 5 seconds"},
		{"*/7 * * * * *", "at seconds 0, 7, 14, 21, 28, 35, 42, 49 and 56 of every minute"},
		{"*/10 0-4 * * * *", "every 10 seconds during minutes 0 through 4 of every hour"},
		{"* * 9 * * *", "every second during hour 9"},
		{"*/7 * 9-17 * * *", "at seconds 0, 7, 14, 21, 28, 35, 42, 49 and 56 of every minute of hours 9 through 17"},
		{"0-10 5 * * * *", "at seconds 0 through 10 of minute 5 of every hour"},
		{"0-10 5,6 9 * * *", "at seconds 0 through 10 of minutes 5 and 6 of hour 9"},
		{"0 * * * * *", "every minute"},
		{"30 * * * * *", "every minute at second 30"},
		{"0 */5 * * * *", "every 5 minutes"},
		{"0 * 9-17 * * 1-5", "every minute during hours 9 through 17 on Monday through Friday"},
		{"0 0,30 * * * *", "every 30 minutes"},
		{"15 0,30 * * * *", "every 30 minutes at second 15"},
		{"0 */7 * * * *", "at minutes 0, 7, 14, 21, 28, 35, 42, 49 and 56 of every hour"},
		{"0 0,30 9-17 * * *", "every 30 minutes during hours 9 through 17"},
		{"0 0 * * * *", "at minute 0 of every hour"},
		{"15 30 * * * *", "at second 15 of minute 30 of every hour"},
		{"0 0 */2 * * *", "every 2 hours"},
		{"0 0 */3 * * 1-5", "every 3 hours on Monday through Friday"},
		{"0 0 0,12 * * *", "at 00:00:00 and 12:00:00 every day"},
		{"*/10 */5 * * * *", "every 10 seconds during minutes 0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50 and 55 of every hour"},
		{"0 */5 * 1 * *", "every 5 minutes on day 1 of the month"},
		{"0 0 0 31 * *", "at 00:00:00 on day 31 of the month"},
		{"0 0 12 * 1,7 *", "at 12:00:00 every day in January and July"},
		{"0 0 9,17 * * 1-5", "at 09:00:00 and 17:00:00 on Monday through Friday"},
		{"0 0 0 * * 6,0", "at 00:00:00 on Sunday and Saturday"},
		{"0 0 0 1-5 * 0,6", "at 00:00:00 on days 1 through 5 of the month, if a Sunday or Saturday"},
		{"0 30 */6 * * *", "at 00:30:00, 06:30:00, 12:30:00 and 18:30:00 every day"},
		{"0 0 */5 * * *", "at minute 0 of hours 0, 5, 10, 15 and 20"},
		{"0 0 2 * * *", "at 02:00:00 every day"},
		{"0 0 9,17 * * *", "at 09:00:00 and 17:00:00 every day"},
		{"0 0 9-17 * * *", "every hour from 09:00:00 through 17:00:00"},
		{"0 30 9 * * 1-5", "at 09:30:00 on Monday through Friday"},
		{"0 0 0 1 * *", "at 00:00:00 on day 1 of the month"},
		{"0 30 9 * Jan Mon", "at 09:30:00 on Monday in January"},
		{"0 0 0 13 * 5", "at 00:00:00 on day 13 of the month, if a Friday"},
		{"0 0 0 29 2 *", "at 00:00:00 on day 29 of February"},
		{"0 0 0 * 2 *", "at 00:00:00 every day in February"},
		{"0 */15 * * 1-3 *", "every 15 minutes in January through March"},
		{"0 0 12 1,15 * *", "at 12:00:00 on days 1 and 15 of the month"},
		{"0 0 0 * * 0,6", "at 00:00:00 on Sunday and Saturday"},
		{"0 0 0 1-7 * 1", "at 00:00:00 on days 1 through 7 of the month, if a Monday"},
		{"0 0 0 1,15 1,4,7,10 *", "at 00:00:00 on days 1 and 15 of January, April, July and October"},
		{"0 0 0 * * 1-5/2", "at 00:00:00 on Monday, Wednesday and Friday"},
		{"0 0 1,3,5,7,9,11 * * *", "at minute 0 of hours 1, 3, 5, 7, 9 and 11"},
	}
	for _, tt := range tests {
		if got := MustParse(tt.expr).Describe(); got != tt.want {
			t.Errorf("%q.Describe() = %q, want %q", tt.expr, got, tt.want)
		}
	}
}

func TestDescribeZero(t *testing.T) {
	if got := (Expr{}).Describe(); got != "" {
		t.Errorf("Expr{}.Describe() = %q, want empty", got)
	}
}

// TestDescribeRandom: every expression has a description, and it reads as text.
func TestDescribeRandom(t *testing.T) {
	r := newRand(t)
	for range 2000 {
		s := randExpr(r, r.IntN(2) == 0)
		e, err := Parse(s)
		if err != nil {
			continue
		}
		d := e.Describe()
		if !strings.HasPrefix(d, "at ") && !strings.HasPrefix(d, "every ") || strings.Contains(d, "  ") ||
			strings.Contains(d, "%!") || strings.HasSuffix(d, " ") {
			t.Errorf("%q.Describe() = %q", s, d)
		}
	}
}
