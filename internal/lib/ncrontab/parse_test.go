package ncrontab

import (
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		// Every field kind, plain.
		{"* * * * * *", "* * * * * *"},
		{"0 0 0 1 1 0", "0 0 0 1 1 0"},
		{"59 59 23 31 12 6", "59 59 23 31 12 6"},
		// Five fields: second 0.
		{"0 * * * * *", "0 * * * * *"},
		{"0 30 9 * * 1-5", "0 30 9 * * 1-5"},
		// Any white space between fields, around the expression too.
		{"  0\t*/5 *\n* *   * ", "0 */5 * * * *"},
		// Lists and ranges, merged and normalised.
		{"5,8,10 * * * * *", "5,8,10 * * * * *"},
		{"5-7 * * * * *", "5-7 * * * * *"},
		{"1-3,2-4,10 * * * * *", "1-4,10 * * * * *"},
		{"0-59 0-59 0-23 1-31 1-12 0-6", "* * * * * *"},
		{"0,1 * * * * *", "0-1 * * * * *"},
		{"3-3 * * * * *", "3 * * * * *"},
		{"0007 * * * * *", "7 * * * * *"},
		// Steps.
		{"*/5 * * * * *", "*/5 * * * * *"},
		{"0 */15 * * * *", "0 */15 * * * *"},
		{"0 0 */2 * * *", "0 0 */2 * * *"},
		{"0 0 0 */2 * *", "0 0 0 */2 * *"}, // 1,3,...,31
		{"0 0 0 * */3 *", "0 0 0 * */3 *"}, // 1,4,7,10
		{"*/1 * * * * *", "* * * * * *"},
		{"*/60 * * * * *", "0 * * * * *"},
		{"*/30 * * * * *", "0,30 * * * * *"},
		{"*/20 * * * * *", "*/20 * * * * *"},
		{"*/7 * * * * *", "*/7 * * * * *"}, // 0,7,...,56
		{"10-40/15 * * * * *", "10-40/15 * * * * *"},
		{"10-45/15 * * * * *", "10-40/15 * * * * *"},
		{"10-20/15 * * * * *", "10 * * * * *"},
		{"0-10/5 * * * * *", "0-10/5 * * * * *"},
		{"0-30/30 * * * * *", "0,30 * * * * *"},
		{"0-50/25 * * * * *", "*/25 * * * * *"}, // the same values as */25
		{"0-30/15 * * * * *", "0-30/15 * * * * *"},
		// a/s: a through the field's maximum (NCrontab's "2/5" and "14/1").
		{"2/5 * * * * *", "2-57/5 * * * * *"},
		{"5/20 * * * * *", "5-45/20 * * * * *"},
		{"0 0 14/1 * * *", "0 0 14-23 * * *"},
		{"0 0 0 * * 1/2", "0 0 0 * * 1-5/2"},
		{"0 0/30 * * * *", "0 0,30 * * * *"},
		// Names: English, case-insensitive, at least three letters of the full name.
		{"0 30 9 * Jan Mon", "0 30 9 * 1 1"},
		{"0 0 0 * JAN-DEC SUN-SAT", "0 0 0 * * *"},
		{"0 0 0 * jan,FeB,mar,april,May,JuNE,July,Augu,SEPT-October,Nov,DECEM *", "0 0 0 * * *"},
		{"0 0 0 * * sunday,MONDAY,tue,Wednes,thurs,FRI,Sat", "0 0 0 * * *"},
		{"0 0 0 * * Mon-Fri", "0 0 0 * * 1-5"},
		{"0 0 0 * Jan/3 *", "0 0 0 * */3 *"},
		{"0 0 0 * * Sun,Sat", "0 0 0 * * 0,6"},
		// Day 29-31 is fine as long as one selected month has it.
		{"0 0 0 29 2 *", "0 0 0 29 2 *"},
		{"0 0 0 31 1-4 *", "0 0 0 31 1-4 *"},
		{"0 0 0 30,31 2,4 *", "0 0 0 30-31 2,4 *"},
		// Day and day of week together (both must match: Friday the 13th).
		{"0 0 0 13 * FRI", "0 0 0 13 * 5"},
	}
	for _, tt := range tests {
		e, err := Parse(tt.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		if got := e.String(); got != tt.want {
			t.Errorf("Parse(%q).String() = %q, want %q", tt.in, got, tt.want)
		}
		if e2, err := Parse(e.String()); err != nil || e2 != e {
			t.Errorf("Parse(%q) = %v, %v; want it equal to Parse(%q)", e.String(), e2, err, tt.in)
		}
	}
}

func TestParseEquivalent(t *testing.T) {
	for _, pair := range [][2]string{
		{"0 * * * * *", "0 * * * * *"},
		{"0 30 9 * Jan Mon", "0 30 9 * 1 1"},
		{"0 30 9 * January Monday", "0 30 9 * 1 1"},
		{"10,25,40 * * * * *", "10-40/15 * * * * *"},
		{"* * * * 1,3,5,7,9,11 *", "* * * * */2 *"},
		{"* * * * 1,3,8 1-2,5", "* * * * Mar,Jan,Aug Fri,Mon-Tue"},
		{"0 0 0 * * 0-6", "0 0 0 * * *"},
	} {
		a, b := MustParse(pair[0]), MustParse(pair[1])
		if a != b {
			t.Errorf("Parse(%q) = %v != Parse(%q) = %v", pair[0], a, pair[1], b)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"0 61 * * * *", `ncrontab: "0 61 * * * *": minute: 61 is out of range 0-59`},
		{"", `ncrontab: "": want 6 fields (second minute hour day month day-of-week), got 0`},
		{"   ", `ncrontab: "   ": want 6 fields (second minute hour day month day-of-week), got 0`},
		{"* * * *", `ncrontab: "* * * *": want 6 fields (second minute hour day month day-of-week), got 4`},
		{"0 0 0 1 1 * 2026", `ncrontab: "0 0 0 1 1 * 2026": want 6 fields (second minute hour day month day-of-week), got 7 (a year field is not supported)`},
		{"@daily", `ncrontab: "@daily": macros such as @daily are not supported: write the fields, e.g. "0 0 0 * * *"`},
		{"@every 5m", `ncrontab: "@every 5m": macros such as @every are not supported: write the fields, e.g. "0 0 0 * * *"`},
		// Out of range, per field.
		{"60 * * * * *", `ncrontab: "60 * * * * *": second: 60 is out of range 0-59`},
		{"0 0 24 * * *", `ncrontab: "0 0 24 * * *": hour: 24 is out of range 0-23`},
		{"0 0 0 0 * *", `ncrontab: "0 0 0 0 * *": day: 0 is out of range 1-31`},
		{"0 0 0 32 * *", `ncrontab: "0 0 0 32 * *": day: 32 is out of range 1-31`},
		{"0 0 0 * 0 *", `ncrontab: "0 0 0 * 0 *": month: 0 is out of range 1-12`},
		{"0 0 0 * 13 *", `ncrontab: "0 0 0 * 13 *": month: 13 is out of range 1-12`},
		{"0 0 0 * * 7", `ncrontab: "0 0 0 * * 7": day-of-week: 7 is out of range 0-6 (Sunday is 0; NCrontab does not accept 7)`},
		{"0 0 0 * * 1-7", `ncrontab: "0 0 0 * * 1-7": day-of-week: 7 is out of range 0-6 (Sunday is 0; NCrontab does not accept 7)`},
		{"99999999999999999999 * * * * *", `ncrontab: "99999999999999999999 * * * * *": second: 99999999999999999999 is out of range 0-59`},
		{"0 5-61 * * * *", `ncrontab: "0 5-61 * * * *": minute: 61 is out of range 0-59`},
		{"0 70/5 * * * *", `ncrontab: "0 70/5 * * * *": minute: 70 is out of range 0-59`},
		// Five fields shift the names: the first is the minute.
		{"0 61 * * * *", `ncrontab: "0 61 * * * *": minute: 61 is out of range 0-59`},
		{"0 * * * * 7", `ncrontab: "0 * * * * 7": day-of-week: 7 is out of range 0-6 (Sunday is 0; NCrontab does not accept 7)`},
		// Syntax.
		{"a * * * * *", `ncrontab: "a * * * * *": second: "a" is not a number`},
		{"-1 * * * * *", `ncrontab: "-1 * * * * *": second: "-1" is not a range a-b`},
		{"+1 * * * * *", `ncrontab: "+1 * * * * *": second: "+1" is not a number`},
		{"1.5 * * * * *", `ncrontab: "1.5 * * * * *": second: "1.5" is not a number`},
		{"1- * * * * *", `ncrontab: "1- * * * * *": second: "1-" is not a range a-b`},
		{"1-2-3 * * * * *", `ncrontab: "1-2-3 * * * * *": second: "1-2-3" is not a range a-b`},
		{"*-5 * * * * *", `ncrontab: "*-5 * * * * *": second: "*" is not a number`},
		{"** * * * * *", `ncrontab: "** * * * * *": second: "**" is not a number`},
		{"1,,2 * * * * *", `ncrontab: "1,,2 * * * * *": second: "1,,2" has an empty list item`},
		{",1 * * * * *", `ncrontab: ",1 * * * * *": second: ",1" has an empty list item`},
		{"1, * * * * *", `ncrontab: "1, * * * * *": second: "1," has an empty list item`},
		{"0 5-2 * * * *", `ncrontab: "0 5-2 * * * *": minute: range "5-2" is reversed (wrap-around ranges are not supported; NCrontab would swap the ends)`},
		{"0 0 22-2 * * *", `ncrontab: "0 0 22-2 * * *": hour: range "22-2" is reversed (wrap-around ranges are not supported; NCrontab would swap the ends)`},
		{"0 0 0 * * FRI-MON", `ncrontab: "0 0 0 * * FRI-MON": day-of-week: range "FRI-MON" is reversed (wrap-around ranges are not supported; NCrontab would swap the ends)`},
		// Five fields: refused, showing both six-field readings.
		{"0 15 3 * *", `ncrontab: "0 15 3 * *": want 6 fields {second} {minute} {hour} {day} {month} {day-of-week}, got 5: ` +
			`as a cron line, write "0 0 15 3 * *" (at 15:00:00 on day 3 of the month); with a field missing at the end, "0 15 3 * * *" (at 03:15:00 every day)`},
		// Steps.
		{"*/0 * * * * *", `ncrontab: "*/0 * * * * *": second: "*/0": step 0 is out of range 1-60`},
		{"*/61 * * * * *", `ncrontab: "*/61 * * * * *": second: "*/61": step 61 is out of range 1-60`},
		{"0 0 */25 * * *", `ncrontab: "0 0 */25 * * *": hour: "*/25": step 25 is out of range 1-24`},
		{"0 0 0 * * */8", `ncrontab: "0 0 0 * * */8": day-of-week: "*/8": step 8 is out of range 1-7`},
		{"*/ * * * * *", `ncrontab: "*/ * * * * *": second: "*/" has no step after /`},
		{"*/x * * * * *", `ncrontab: "*/x * * * * *": second: "*/x": step "x" is not a number`},
		{"*/-1 * * * * *", `ncrontab: "*/-1 * * * * *": second: "*/-1": step "-1" is not a number`},
		{"*/2/3 * * * * *", `ncrontab: "*/2/3 * * * * *": second: "*/2/3": step "2/3" is not a number`},
		{"/5 * * * * *", `ncrontab: "/5 * * * * *": second: a value is missing`},
		// Names: only months and days of the week, at least three letters.
		{"0 0 0 * Ja *", `ncrontab: "0 0 0 * Ja *": month: "Ja" is neither a number 1-12 nor a name such as JAN or January`},
		{"0 0 0 * Janu4ry *", `ncrontab: "0 0 0 * Janu4ry *": month: "Janu4ry" is neither a number 1-12 nor a name such as JAN or January`},
		{"0 0 0 * Januaryy *", `ncrontab: "0 0 0 * Januaryy *": month: "Januaryy" is neither a number 1-12 nor a name such as JAN or January`},
		{"0 0 0 * * M", `ncrontab: "0 0 0 * * M": day-of-week: "M" is neither a number 0-6 nor a name such as SUN or Sunday`},
		{"0 0 0 * * Mun", `ncrontab: "0 0 0 * * Mun": day-of-week: "Mun" is neither a number 0-6 nor a name such as SUN or Sunday`},
		{"0 0 0 Mon * *", `ncrontab: "0 0 0 Mon * *": day: "Mon" is not a number`},
		{"0 0 0 * * Jan", `ncrontab: "0 0 0 * * Jan": day-of-week: "Jan" is neither a number 0-6 nor a name such as SUN or Sunday`},
		{"0 0 0 * * Mön", `ncrontab: "0 0 0 * * Mön": day-of-week: "Mön" is neither a number 0-6 nor a name such as SUN or Sunday`},
		// Quartz and other extensions.
		{"0 0 0 ? * MON", `ncrontab: "0 0 0 ? * MON": day: "?": ? and # are not supported`},
		{"0 0 0 * * MON#2", `ncrontab: "0 0 0 * * MON#2": day-of-week: "MON#2": ? and # are not supported`},
		{"0 0 0 L * *", `ncrontab: "0 0 0 L * *": day: "L": L and W are not supported`},
		{"0 0 0 LW * *", `ncrontab: "0 0 0 LW * *": day: "LW": L and W are not supported`},
		{"0 0 0 15W * *", `ncrontab: "0 0 0 15W * *": day: "15W": L and W are not supported`},
		{"0 0 0 L-3 * *", `ncrontab: "0 0 0 L-3 * *": day: "L": L and W are not supported`},
		{"0 0 0 * * 5L", `ncrontab: "0 0 0 * * 5L": day-of-week: "5L": L and W are not supported`},
		{"0 0 0 * * L", `ncrontab: "0 0 0 * * L": day-of-week: "L": L and W are not supported`},
		// Never fires.
		{"0 0 0 30 2 *", `ncrontab: "0 0 0 30 2 *": never fires: no day 30 in February`},
		{"0 0 0 30-31 Feb *", `ncrontab: "0 0 0 30-31 Feb *": never fires: no days 30-31 in February`},
		{"0 0 0 31 4 *", `ncrontab: "0 0 0 31 4 *": never fires: no day 31 in April`},
		{"0 0 0 31 2,4,6,9,11 *", `ncrontab: "0 0 0 31 2,4,6,9,11 *": never fires: no day 31 in February or April or June or September or November`},
		{"0 0 0 31 Apr *", `ncrontab: "0 0 0 31 Apr *": never fires: no day 31 in April`},
	}
	for _, tt := range tests {
		e, err := Parse(tt.in)
		if err == nil {
			t.Errorf("Parse(%q) = %q, want error %s", tt.in, e, tt.want)
			continue
		}
		if err.Error() != tt.want {
			t.Errorf("Parse(%q) error:\n got %s\nwant %s", tt.in, err, tt.want)
		}
		if e != (Expr{}) {
			t.Errorf("Parse(%q) returned %v with its error, want the zero Expr", tt.in, e)
		}
	}
}

func TestMustParse(t *testing.T) {
	if got := MustParse("0 0 2 * * *").String(); got != "0 0 2 * * *" {
		t.Errorf("MustParse = %q", got)
	}
	defer func() {
		r := recover()
		err, ok := r.(error)
		if !ok || err.Error() != `ncrontab: "0 0 2": want 6 fields (second minute hour day month day-of-week), got 3` {
			t.Errorf("MustParse of a bad expression panicked with %v", r)
		}
	}()
	MustParse("0 0 2")
}

func TestZeroExpr(t *testing.T) {
	var e Expr
	if s := e.String(); s != "" {
		t.Errorf("Expr{}.String() = %q, want empty", s)
	}
	if _, err := Parse(e.String()); err == nil {
		t.Error("the zero Expr's String parses")
	}
}
