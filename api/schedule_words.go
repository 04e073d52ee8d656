package api

import (
	"fmt"
	"strconv"
	"strings"
)

// DescribeSchedule puts a six-field NCRONTAB expression (second minute hour day month
// day-of-week, UTC) into English, e.g. "0 30 9 * * 1-5" → "at 09:30 UTC, Monday through
// Friday". It handles *, numbers, names, lists, ranges and steps; an expression it cannot
// read field by field comes back as "cron <expr> (UTC)".
func DescribeSchedule(expr string) string {
	f := strings.Fields(expr)
	if len(f) == 5 {
		f = append([]string{"0"}, f...)
	}
	if len(f) != 6 {
		return "cron " + expr + " (UTC)"
	}
	sec, minute, hour, dom, month, dow := f[0], f[1], f[2], f[3], f[4], f[5]
	tp, ok := describeTime(sec, minute, hour)
	if !ok {
		return "cron " + expr + " (UTC)"
	}
	parts := []string{tp}
	dp, ok := describeDays(dom, dow)
	if !ok {
		return "cron " + expr + " (UTC)"
	}
	// "every day" adds nothing to "every 5 minutes"; it does to "at 03:00 UTC".
	if dp != "every day" || strings.HasPrefix(tp, "at ") {
		parts = append(parts, dp)
	}
	if month != "*" {
		m, ok := describeList(month, monthNames, 1)
		if !ok {
			return "cron " + expr + " (UTC)"
		}
		parts = append(parts, "in "+m)
	}
	return strings.Join(parts, ", ")
}

var (
	monthNames = []string{"January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"}
	dayNames   = []string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
)

// number parses a plain field value ("5", "05"); names are looked up in names (first three
// letters, case-insensitive), numbered from base.
func number(s string, names []string, base int) (int, bool) {
	if n, err := strconv.Atoi(s); err == nil && n >= 0 {
		return n, true
	}
	for i, name := range names {
		if len(s) == 3 && strings.EqualFold(s, name[:3]) {
			return i + base, true
		}
	}
	return 0, false
}

// step splits "*/n" or "a/n" or "a-b/n".
func step(s string) (from string, n int, ok bool) {
	from, by, found := strings.Cut(s, "/")
	if !found {
		return "", 0, false
	}
	n, err := strconv.Atoi(by)
	if err != nil || n < 1 {
		return "", 0, false
	}
	return from, n, true
}

func plural(n int, unit string) string {
	if n == 1 {
		return unit
	}
	return strconv.Itoa(n) + " " + unit + "s"
}

// describeUnit describes a second, minute or hour field as a clause: "every 5 minutes",
// "at minute 30", "at minutes 0 and 30", "every minute from 0 through 10".
func describeUnit(s, unit string) (string, bool) {
	if s == "*" {
		return "every " + unit, true
	}
	if from, n, ok := step(s); ok {
		out := "every " + plural(n, unit)
		switch {
		case from == "*" || from == "0":
		case strings.Contains(from, "-"):
			r, ok := describeList(from, nil, 0)
			if !ok {
				return "", false
			}
			out += " " + strings.Replace(r, "–", " through ", 1)
		default:
			if _, ok := number(from, nil, 0); !ok {
				return "", false
			}
			out += " starting at " + unit + " " + from
		}
		return out, true
	}
	l, ok := describeList(s, nil, 0)
	if !ok {
		return "", false
	}
	if strings.ContainsAny(s, ",-") {
		return "at " + unit + "s " + l, true
	}
	return "at " + unit + " " + l, true
}

// describeList renders "1,3,5" as "1, 3 and 5", "1-5" as "1 through 5", with names when
// given (numbered from base).
func describeList(s string, names []string, base int) (string, bool) {
	items := strings.Split(s, ",")
	words := make([]string, 0, len(items))
	name := func(v string) (string, bool) {
		n, ok := number(v, names, base)
		if !ok {
			return "", false
		}
		if names == nil {
			return strconv.Itoa(n), true
		}
		if n == 7 && len(names) == 7 {
			n = 0 // Sunday is 0 or 7
		}
		if n-base < 0 || n-base >= len(names) {
			return "", false
		}
		return names[n-base], true
	}
	for _, it := range items {
		if lo, hi, found := strings.Cut(it, "-"); found {
			a, ok1 := name(lo)
			b, ok2 := name(hi)
			if !ok1 || !ok2 {
				return "", false
			}
			words = append(words, a+" through "+b)
			continue
		}
		w, ok := name(it)
		if !ok {
			return "", false
		}
		words = append(words, w)
	}
	if len(words) == 1 {
		return words[0], true
	}
	return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1], true
}

// describeTime describes the second, minute and hour fields.
func describeTime(sec, minute, hour string) (string, bool) {
	s, sOK := number(sec, nil, 0)
	m, mOK := number(minute, nil, 0)
	h, hOK := number(hour, nil, 0)
	clock := func(h, m, s int) string {
		if s == 0 {
			return fmt.Sprintf("%02d:%02d", h, m)
		}
		return fmt.Sprintf("%02d:%02d:%02d", h, m, s)
	}
	switch {
	case sOK && mOK && hOK:
		return "at " + clock(h, m, s) + " UTC", true
	case sOK && mOK && !strings.ContainsAny(hour, "*/-"):
		// A list of hours at a fixed minute: "at 09:00 and 17:00 UTC".
		var times []string
		for _, it := range strings.Split(hour, ",") {
			hh, ok := number(it, nil, 0)
			if !ok {
				return "", false
			}
			times = append(times, clock(hh, m, s))
		}
		if len(times) == 1 {
			return "at " + times[0] + " UTC", true
		}
		return "at " + strings.Join(times[:len(times)-1], ", ") + " and " + times[len(times)-1] + " UTC", true
	}
	var parts []string
	// The coarsest field that is not "*" decides the frame; finer fields fix a position in it.
	switch {
	case hour == "*" && minute == "*":
		d, ok := describeUnit(sec, "second")
		if !ok {
			return "", false
		}
		parts = append(parts, d)
	case hour == "*":
		d, ok := describeUnit(minute, "minute")
		if !ok {
			return "", false
		}
		if mOK {
			d = fmt.Sprintf("every hour at minute %d", m)
		}
		parts = append(parts, d)
		if !sOK || s != 0 {
			ds, ok := describeUnit(sec, "second")
			if !ok {
				return "", false
			}
			parts = append(parts, ds)
		}
	default:
		dh, ok := describeUnit(hour, "hour")
		if !ok {
			return "", false
		}
		parts = append(parts, dh)
		if minute != "0" || sec != "0" {
			if mOK && sOK {
				at := fmt.Sprintf("at minute %d", m)
				if s != 0 {
					at += fmt.Sprintf(" second %d", s)
				}
				parts = append(parts, at)
			} else {
				dm, ok := describeUnit(minute, "minute")
				if !ok {
					return "", false
				}
				parts = append(parts, dm)
				if !sOK || s != 0 {
					ds, ok := describeUnit(sec, "second")
					if !ok {
						return "", false
					}
					parts = append(parts, ds)
				}
			}
		}
	}
	return strings.Join(parts, ", ") + " (UTC)", true
}

// describeDays describes the day-of-month and day-of-week fields ("" for every day). When
// both are restricted, cron fires on either.
func describeDays(dom, dow string) (string, bool) {
	var parts []string
	if dom != "*" && dom != "?" {
		if _, n, ok := step(dom); ok && strings.HasPrefix(dom, "*") {
			parts = append(parts, "every "+plural(n, "day"))
		} else {
			l, ok := describeList(dom, nil, 0)
			if !ok {
				return "", false
			}
			parts = append(parts, "on day "+l+" of the month")
		}
	}
	if dow != "*" && dow != "?" {
		l, ok := describeList(dow, dayNames, 0)
		if !ok {
			return "", false
		}
		if strings.Contains(dow, "-") && !strings.Contains(dow, ",") {
			parts = append(parts, l)
		} else {
			parts = append(parts, "on "+l)
		}
	}
	switch len(parts) {
	case 0:
		return "every day", true
	case 1:
		return parts[0], true
	}
	return parts[0] + " or " + parts[1], true
}
