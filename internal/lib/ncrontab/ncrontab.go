// Package ncrontab parses and evaluates NCRONTAB expressions, the schedule format of the Azure
// Functions timer trigger, on the wall clock of any IANA time zone.
//
// # Format
//
// An expression has six fields separated by white space:
//
//	{second} {minute} {hour} {day} {month} {day-of-week}
//
// Five fields are accepted too, as {minute} {hour} {day} {month} {day-of-week} with second 0.
// Each field is a comma-separated list of items; an item is one of
//
//	n        one value
//	a-b      the values a through b (a must not be greater than b)
//	*        every value of the field
//	*/s      every s-th value from the field's minimum: */15 in the minute field is 0,15,30,45
//	a-b/s    every s-th value from a through b
//	a/s      every s-th value from a through the field's maximum: 5/20 is 5,25,45
//
// with these ranges: second and minute 0-59, hour 0-23, day 1-31, month 1-12, day-of-week 0-6
// (Sunday is 0). Months and days of the week may also be written as English names, case
// insensitively, in full or cut to at least three letters (Jan, SEPT, thu, Wednesday). A step is
// 1 through the field's number of values. Nothing else is accepted: no 7 for Sunday, no L, W, #
// or ?, no year field, no @daily macros. An expression that can never fire, such as
// "0 0 0 30 2 *" or "0 0 0 31 4 *", is rejected too.
//
// This is the syntax of NCrontab (NCrontab/CrontabFieldImpl.cs, CrontabField.cs), the library
// the Functions host uses, except where NCrontab quietly reads a mistake as something else:
// it swaps the ends of a reversed range (22-2 is 2-22, not a range over midnight), reads a
// step of 0 as 1, and takes any prefix of a name (J is January, S is Sunday). Parse rejects
// these instead. It also accepts tabs between fields, where NCrontab splits on spaces only.
//
// # Day and day of week
//
// An occurrence must match both the day field and the day-of-week field (their intersection):
// "0 0 0 13 * FRI" fires only on a Friday the 13th. This is what NCrontab does, unlike Vixie
// cron, which fires on either when both are restricted: CrontabSchedule.TryGetNextOccurrence in
// NCrontab/CrontabSchedule.cs (github.com/atifaziz/NCrontab) first finds a date whose day and
// month match, then returns it only if daysOfWeek.Contains(its day of week) and otherwise
// searches again from the end of that day; its test suite expects "45 16 1 * Mon" to fire next
// on 2003-09-01, the first Monday that is a 1st of the month after 2003-01-01.
//
// # Time zones and daylight saving time
//
// Fields are matched against the wall clock of the time zone given to [Expr.Next] and
// [Expr.Prev]. An expression fires at each instant whose wall clock matches every field and
// that is the first instant to show that wall clock:
//
//   - A wall-clock time that does not exist, because the clocks jump over it (spring forward),
//     does not fire: "0 30 2 * * *" in Europe/Berlin has no occurrence on 2026-03-29.
//   - A wall-clock time that occurs twice, because the clocks are put back (fall back), fires
//     once, at its first instant (still on summer time): "0 30 2 * * *" in Europe/Berlin fires
//     on 2026-10-25 at 02:30 CEST (00:30 UTC), not again at 02:30 CET.
//
// Frequent schedules follow the same rule. "0 */15 * * * *" keeps firing every 15 minutes of
// real time across a spring-forward jump (in Berlin at 01:45 CET and then 03:00 CEST), but it
// does not fire during the second pass of a repeated hour: on
// 2026-10-25 "0 */15 * * * *" fires 4 times in Berlin between 02:00 and 03:00 wall clock (02:00,
// 02:15, 02:30 and 02:45 CEST), not 8, and then nothing for an hour of real time until 03:00 CET.
// (The Functions host's own timer, CronSchedule in azure-webjobs-sdk-extensions, differs here:
// it runs schedules with a wildcard, range or step in their second, minute or hour fields
// through both passes of a repeated hour.)
//
// The occurrences of an expression in a time zone are thus a set of instants. [Expr.Next]
// returns the smallest one strictly after a time, [Expr.Prev] the largest one at or before a
// time, so that for any t: Prev(Next(t)) == Next(t), and Next(Prev(t)) == Next(t) > t. Both
// search at most 400 years of wall-clock dates, a full cycle of the Gregorian calendar, in which
// every expression that Parse accepts has a matching date; they report false beyond it, which
// can only happen for a time zone that skips every matching wall-clock time, and for instants
// more than 100 million years away from 1970.
package ncrontab

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// Field indices into Expr.f, in the order of a six-field expression.
const (
	fSecond = iota
	fMinute
	fHour
	fDay
	fMonth
	fDow
	nFields
)

// field describes one field of an expression.
type field struct {
	name     string
	min, max int
	names    []string // English names of min, min+1, ... (nil: numbers only)
}

var fieldInfo = [nFields]field{
	{name: "second", max: 59},
	{name: "minute", max: 59},
	{name: "hour", max: 23},
	{name: "day", min: 1, max: 31},
	{name: "month", min: 1, max: 12, names: []string{"January", "February", "March", "April", "May", "June",
		"July", "August", "September", "October", "November", "December"}},
	{name: "day-of-week", max: 6, names: []string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}},
}

// all is the set of every value of the field.
func (f *field) all() uint64 { return span(f.min, f.max) }

// span is the set {lo, ..., hi}.
func span(lo, hi int) uint64 { return (^uint64(0) >> (63 - hi)) &^ (1<<lo - 1) }

// Expr is a parsed NCRONTAB expression: for each field, the set of values it matches (bit v
// set for value v). The zero value is invalid: its String is empty and Next and Prev report
// false. An Expr is comparable, and two Exprs are equal exactly when they fire at the same
// times.
type Expr struct {
	f [nFields]uint64
}

// Parse parses an NCRONTAB expression of six fields; five are refused, since the same text read
// with or without a second field means different times. The errors name the
// expression, the field and what is wrong with it.
func Parse(s string) (Expr, error) {
	fail := func(format string, args ...any) (Expr, error) {
		return Expr{}, fmt.Errorf("ncrontab: %q: "+format, append([]any{s}, args...)...)
	}
	parts := strings.Fields(s)
	if len(parts) > 0 && strings.HasPrefix(parts[0], "@") {
		return fail(`macros such as %s are not supported: write the fields, e.g. "0 0 0 * * *"`, parts[0])
	}
	var e Expr
	switch len(parts) {
	case 6:
	case 5:
		// Five fields read as a cron line would mean something else than the same text read
		// with a second field, silently: refuse it, showing both readings.
		return fail("want 6 fields {second} {minute} {hour} {day} {month} {day-of-week}, got 5: %s", sixFieldReadings(parts))
	default:
		extra := ""
		if len(parts) == 7 {
			extra = " (a year field is not supported)"
		}
		return fail("want 6 fields (second minute hour day month day-of-week), got %d%s", len(parts), extra)
	}
	for i, p := range parts {
		set, err := parseField(p, &fieldInfo[i])
		if err != nil {
			return fail("%s: %v", fieldInfo[i].name, err)
		}
		e.f[i] = set
	}
	if err := e.checkFires(); err != nil {
		return fail("%v", err)
	}
	return e, nil
}

// sixFieldReadings says what five fields mean as a cron line (a second 0 first) and with a field
// missing at the end (every day of the week), each described when it parses.
func sixFieldReadings(parts []string) string {
	reading := func(expr string) string {
		if e, err := Parse(expr); err == nil {
			return fmt.Sprintf("%q (%s)", expr, e.Describe())
		}
		return fmt.Sprintf("%q", expr)
	}
	return "as a cron line, write " + reading("0 "+strings.Join(parts, " ")) +
		"; with a field missing at the end, " + reading(strings.Join(parts, " ")+" *")
}

// MustParse is like Parse but panics if s is not a valid expression. It is meant for tests and
// for expressions fixed in the program.
func MustParse(s string) Expr {
	e, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return e
}

// daysInMonth is the largest day of each month in any year (index 1-12).
var daysInMonth = [13]int{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}

// checkFires reports an error if no selected month has a selected day. Every other combination
// occurs: every date occurs on every day of the week within the 400-year Gregorian cycle.
func (e Expr) checkFires() error {
	for m := 1; m <= 12; m++ {
		if e.has(fMonth, m) && e.f[fDay]&span(1, daysInMonth[m]) != 0 {
			return nil
		}
	}
	var months []string
	for m := 1; m <= 12; m++ {
		if e.has(fMonth, m) {
			months = append(months, fieldInfo[fMonth].names[m-1])
		}
	}
	days := "day " + formatField(e.f[fDay], &fieldInfo[fDay])
	if bits.OnesCount64(e.f[fDay]) > 1 {
		days = "days " + formatField(e.f[fDay], &fieldInfo[fDay])
	}
	return fmt.Errorf("never fires: no %s in %s", days, strings.Join(months, " or "))
}

func (e Expr) has(f, v int) bool { return v >= 0 && v < 64 && e.f[f]&(1<<v) != 0 }

func parseField(s string, f *field) (uint64, error) {
	if strings.ContainsAny(s, "?#") {
		return 0, fmt.Errorf("%q: ? and # are not supported", s)
	}
	var set uint64
	for item := range strings.SplitSeq(s, ",") {
		if item == "" {
			return 0, fmt.Errorf("%q has an empty list item", s)
		}
		b, err := parseItem(item, f)
		if err != nil {
			return 0, err
		}
		set |= b
	}
	return set, nil
}

func parseItem(item string, f *field) (uint64, error) {
	rng, stepText, hasStep := strings.Cut(item, "/")
	step := 1
	if hasStep {
		n, ok := number(stepText)
		switch {
		case stepText == "":
			return 0, fmt.Errorf("%q has no step after /", item)
		case !ok:
			return 0, fmt.Errorf("%q: step %q is not a number", item, stepText)
		case n < 1 || n > f.max-f.min+1:
			return 0, fmt.Errorf("%q: step %d is out of range 1-%d", item, n, f.max-f.min+1)
		}
		step = n
	}
	var lo, hi int
	switch {
	case rng == "*":
		lo, hi = f.min, f.max
	case strings.Contains(rng, "-"):
		a, b, _ := strings.Cut(rng, "-")
		if a == "" || b == "" || strings.Contains(b, "-") {
			return 0, fmt.Errorf("%q is not a range a-b", rng)
		}
		var err error
		if lo, err = value(a, f); err != nil {
			return 0, err
		}
		if hi, err = value(b, f); err != nil {
			return 0, err
		}
		if lo > hi {
			return 0, fmt.Errorf("range %q is reversed (wrap-around ranges are not supported; NCrontab would swap the ends)", rng)
		}
	default:
		var err error
		if lo, err = value(rng, f); err != nil {
			return 0, err
		}
		hi = lo
		if hasStep {
			hi = f.max // a/s: a through the maximum, as NCrontab reads it
		}
	}
	var set uint64
	for v := lo; v <= hi; v += step {
		set |= 1 << v
	}
	return set, nil
}

// value parses one value of field f: a number or, for months and days of the week, a name.
func value(s string, f *field) (int, error) {
	if s == "" {
		return 0, errors.New("a value is missing")
	}
	if n, ok := number(s); ok {
		if n < f.min || n > f.max {
			hint := ""
			if f.names != nil && n == 7 && f.max == 6 {
				hint = " (Sunday is 0; NCrontab does not accept 7)"
			}
			return 0, fmt.Errorf("%s is out of range %d-%d%s", s, f.min, f.max, hint)
		}
		return n, nil
	}
	if f.names != nil && len(s) >= 3 {
		for i, name := range f.names {
			if len(s) <= len(name) && asciiEqualFold(s, name[:len(s)]) {
				return f.min + i, nil
			}
		}
	}
	if quartz(s) {
		return 0, fmt.Errorf("%q: L and W are not supported", s)
	}
	if f.names != nil {
		return 0, fmt.Errorf("%q is neither a number %d-%d nor a name such as %s or %s", s, f.min, f.max,
			strings.ToUpper(f.names[0][:3]), f.names[0])
	}
	return 0, fmt.Errorf("%q is not a number", s)
}

// number parses a decimal number of digits only; ok is false for anything else. Numbers too
// large for any field come back as 1000, out of every field's range.
func number(s string) (n int, ok bool) {
	if s == "" {
		return 0, false
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	s = strings.TrimLeft(s, "0")
	if len(s) > 3 {
		return 1000, true
	}
	n, _ = strconv.Atoi("0" + s)
	return n, true
}

// quartz reports whether s looks like Quartz's L or W syntax: L, W, LW, 15W, 5L, L-3.
func quartz(s string) bool {
	u := strings.ToUpper(s)
	if u == "L" || u == "W" || u == "LW" || strings.HasPrefix(u, "L-") {
		return true
	}
	if n := len(u); n > 1 && (u[n-1] == 'L' || u[n-1] == 'W') {
		_, ok := number(u[:n-1])
		return ok
	}
	return false
}

func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// String returns the normalised six-field expression, in numbers: each field as *, as */s or
// a-b/s if its three or more values are evenly spaced, else as a list of values and ranges.
// Parse(e.String()) == e.
func (e Expr) String() string {
	if !e.valid() {
		return ""
	}
	var b strings.Builder
	for i := range nFields {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(formatField(e.f[i], &fieldInfo[i]))
	}
	return b.String()
}

// valid reports whether every field has at least one value, as in every parsed Expr.
func (e Expr) valid() bool {
	for i := range nFields {
		if e.f[i] == 0 {
			return false
		}
	}
	return true
}

// formatField writes a set of field f in the syntax Parse reads.
func formatField(set uint64, f *field) string {
	if set == f.all() {
		return "*"
	}
	vals := values(set)
	if step, ok := progression(vals); ok && step > 1 && len(vals) >= 3 {
		first, last := vals[0], vals[len(vals)-1]
		if first == f.min && last+step > f.max {
			return "*/" + strconv.Itoa(step)
		}
		return fmt.Sprintf("%d-%d/%d", first, last, step)
	}
	var parts []string
	for _, r := range runs(vals) {
		if r[0] == r[1] {
			parts = append(parts, strconv.Itoa(r[0]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", r[0], r[1]))
		}
	}
	return strings.Join(parts, ",")
}

// values lists the members of a set in increasing order.
func values(set uint64) []int {
	var vals []int
	for set != 0 {
		v := bits.TrailingZeros64(set)
		vals = append(vals, v)
		set &^= 1 << v
	}
	return vals
}

// progression reports whether vals (increasing, at least two) are evenly spaced, and the step.
func progression(vals []int) (step int, ok bool) {
	if len(vals) < 2 {
		return 0, false
	}
	step = vals[1] - vals[0]
	for i := 2; i < len(vals); i++ {
		if vals[i]-vals[i-1] != step {
			return 0, false
		}
	}
	return step, true
}

// runs splits increasing values into maximal runs of consecutive values, as [first, last].
func runs(vals []int) [][2]int {
	var rs [][2]int
	for _, v := range vals {
		if n := len(rs); n > 0 && rs[n-1][1] == v-1 {
			rs[n-1][1] = v
		} else {
			rs = append(rs, [2]int{v, v})
		}
	}
	return rs
}
