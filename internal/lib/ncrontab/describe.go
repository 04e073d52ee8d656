package ncrontab

import (
	"fmt"
	"strconv"
	"strings"
)

// Describe returns the expression in English, for people: "every 5 seconds", "at 02:00:00 every
// day", "at minute 0 of every hour", "at 09:30:00 on Monday through Friday", "at 00:00:00 on day
// 1 of the month". Times are on the wall clock of the time zone the expression is evaluated in.
// Expressions without a common phrase are described field by field. The zero Expr describes as
// the empty string.
func (e Expr) Describe() string {
	if !e.valid() {
		return ""
	}
	when, daily := e.describeTime()
	return when + e.describeDate(daily)
}

// describeTime describes the second, minute and hour fields. daily is true for a phrase naming
// times of the day ("at 09:30:00"), which then reads better followed by "every day".
func (e Expr) describeTime() (phrase string, daily bool) {
	sec, secOne := e.single(fSecond)
	if !secOne {
		var b strings.Builder
		listed := false
		switch n, ok := e.every(fSecond); {
		case ok && n == 1:
			b.WriteString("every second")
		case ok:
			fmt.Fprintf(&b, "every %d seconds", n)
		default:
			b.WriteString("at " + e.list(fSecond, "and"))
			listed = true
		}
		minAll, hourAll := e.all(fMinute), e.all(fHour)
		switch {
		case minAll && listed:
			b.WriteString(" of every minute")
		case !minAll && listed:
			b.WriteString(" of " + e.list(fMinute, "and"))
		case !minAll:
			b.WriteString(" during " + e.list(fMinute, "and"))
		}
		switch {
		case hourAll && !minAll:
			b.WriteString(" of every hour")
		case !hourAll && (listed || !minAll):
			b.WriteString(" of " + e.list(fHour, "and"))
		case !hourAll:
			b.WriteString(" during " + e.list(fHour, "and"))
		}
		return b.String(), false
	}

	atSecond := ""
	if sec != 0 {
		atSecond = " at second " + strconv.Itoa(sec)
	}
	during := ""
	if !e.all(fHour) {
		during = " during " + e.list(fHour, "and")
	}
	if n, ok := e.every(fMinute); ok {
		if n == 1 {
			return "every minute" + atSecond + during, false
		}
		return fmt.Sprintf("every %d minutes", n) + atSecond + during, false
	}
	minute, minOne := e.single(fMinute)
	if !minOne {
		phrase = "at " + e.list(fMinute, "and")
		if sec != 0 {
			phrase = "at second " + strconv.Itoa(sec) + " of " + e.list(fMinute, "and")
		}
		if e.all(fHour) {
			return phrase + " of every hour", false
		}
		return phrase + " of " + e.list(fHour, "and"), false
	}

	atMinute := "at minute " + strconv.Itoa(minute)
	if sec != 0 {
		atMinute = "at second " + strconv.Itoa(sec) + " of minute " + strconv.Itoa(minute)
	}
	hours := values(e.f[fHour])
	clock := func(h int) string { return fmt.Sprintf("%02d:%02d:%02d", h, minute, sec) }
	switch n, ok := e.every(fHour); {
	case ok && n == 1:
		return atMinute + " of every hour", false
	case ok && minute == 0 && sec == 0 && n < 12:
		return fmt.Sprintf("every %d hours", n), false
	}
	if len(hours) <= 4 {
		times := make([]string, len(hours))
		for i, h := range hours {
			times[i] = clock(h)
		}
		return "at " + join(times, "and"), true
	}
	if rs := runs(hours); len(rs) == 1 {
		return "every hour from " + clock(rs[0][0]) + " through " + clock(rs[0][1]), false
	}
	return atMinute + " of " + e.list(fHour, "and"), false
}

// describeDate describes the day, month and day-of-week fields, as a phrase to append.
func (e Expr) describeDate(daily bool) string {
	dayAll, monthAll, dowAll := e.all(fDay), e.all(fMonth), e.all(fDow)
	months := "the month"
	if !monthAll {
		months = e.list(fMonth, "and")
	}
	switch {
	case dayAll && dowAll && monthAll && daily:
		return " every day"
	case dayAll && dowAll && monthAll:
		return ""
	case dayAll && dowAll && daily:
		return " every day in " + months
	case dayAll && dowAll:
		return " in " + months
	case dayAll && monthAll:
		return " on " + e.list(fDow, "and")
	case dayAll:
		return " on " + e.list(fDow, "and") + " in " + months
	case dowAll:
		return " on " + e.list(fDay, "and") + " of " + months
	default:
		// Both must match (see the package documentation).
		return " on " + e.list(fDay, "and") + " of " + months + ", if a " + e.list(fDow, "or")
	}
}

// all reports whether field f matches every value.
func (e Expr) all(f int) bool { return e.f[f] == fieldInfo[f].all() }

// single returns the value of field f if it has exactly one.
func (e Expr) single(f int) (int, bool) {
	vals := values(e.f[f])
	if len(vals) != 1 {
		return 0, false
	}
	return vals[0], true
}

// every returns n if field f is */n with evenly spaced occurrences: n divides the number of
// values, so that the last value is followed by the first one n later.
func (e Expr) every(f int) (int, bool) {
	fi := &fieldInfo[f]
	size := fi.max - fi.min + 1
	for n := 1; n <= size/2; n++ {
		if size%n != 0 {
			continue
		}
		var set uint64
		for v := fi.min; v <= fi.max; v += n {
			set |= 1 << v
		}
		if set == e.f[f] {
			return n, true
		}
	}
	return 0, false
}

// list writes the values of field f in English, with the field's name for numbers: "minute 5",
// "hours 9 through 17", "days 1 and 15", "Monday through Friday", "January, April and July".
// Consecutive values are joined with "through" when there are three or more.
func (e Expr) list(f int, conj string) string {
	fi := &fieldInfo[f]
	word := func(v int) string {
		if fi.names != nil {
			return fi.names[v-fi.min]
		}
		return strconv.Itoa(v)
	}
	var parts []string
	for _, r := range runs(values(e.f[f])) {
		switch {
		case r[1]-r[0] >= 2:
			parts = append(parts, word(r[0])+" through "+word(r[1]))
		case r[1] > r[0]:
			parts = append(parts, word(r[0]), word(r[1]))
		default:
			parts = append(parts, word(r[0]))
		}
	}
	s := join(parts, conj)
	if fi.names != nil {
		return s
	}
	name := fi.name
	if len(parts) > 1 || strings.Contains(s, " through ") {
		name += "s"
	}
	return name + " " + s
}

// join joins "a", "b", "c" as "a, b and c".
func join(parts []string, conj string) string {
	if len(parts) == 1 {
		return parts[0]
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " " + conj + " " + parts[len(parts)-1]
}
