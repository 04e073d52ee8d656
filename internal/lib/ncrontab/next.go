package ncrontab

import (
	"math/bits"
	"time"
)

// searchYears bounds the search of Next and Prev: the Gregorian calendar repeats every 400
// years, so every date an accepted expression matches occurs within any 400 years.
const searchYears = 400

// maxCandidates bounds the matching wall-clock times Next and Prev try: only those skipped by
// the clocks (a few a year) fail, so it is never reached in 400 years.
const maxCandidates = 1 << 14

// maxUnix bounds the instants Next and Prev accept (about 140 million years either side of
// 1970), so that no arithmetic on them can overflow.
const maxUnix = 1 << 52

// Next returns the first occurrence of e in loc strictly after the instant after, in UTC. It
// reports false if there is none within the bounded search (see the package documentation) or
// if e is the zero Expr. A nil loc means UTC.
func (e Expr) Next(after time.Time, loc *time.Location) (time.Time, bool) {
	s := after.Unix() + 1 // the first whole second after `after`
	if !e.valid() || s < -maxUnix || s > maxUnix {
		return time.Time{}, false
	}
	if loc == nil {
		loc = time.UTC
	}
	// w is the least wall-clock time whose first instant is at or after s. That is s's own wall
	// clock, unless s repeats an earlier wall-clock time (the clocks were put back): then every
	// wall-clock time up to the one the clocks were put back from has already been.
	w := s + offsetAt(loc, s)
	if end, ok := repeatedFrom(loc, s, w); ok {
		w = end
	}
	limit := fromWall(w).y + searchYears
	for range maxCandidates {
		c, ok := e.nextCivil(fromWall(w), limit)
		if !ok {
			return time.Time{}, false
		}
		cw := c.wall()
		u, ok, gapStart, gapEnd := resolve(loc, cw)
		switch {
		case !ok && gapStart <= cw && cw < gapEnd:
			w = gapEnd // cw does not exist: go on from the first wall-clock time that does
		case !ok || u < s:
			w = cw + 1 // cannot happen in real time zones; progress anyway
		default:
			return time.Unix(u, 0).UTC(), true
		}
	}
	return time.Time{}, false
}

// Prev returns the latest occurrence of e in loc at or before the instant before, in UTC. It
// reports false if there is none within the bounded search (see the package documentation) or
// if e is the zero Expr. A nil loc means UTC.
func (e Expr) Prev(before time.Time, loc *time.Location) (time.Time, bool) {
	s := before.Unix() // the last whole second at or before `before`
	if !e.valid() || s < -maxUnix || s > maxUnix {
		return time.Time{}, false
	}
	if loc == nil {
		loc = time.UTC
	}
	// w is the greatest wall-clock time whose first instant is at or before s. That is s's own
	// wall clock, unless s repeats an earlier wall-clock time (the clocks were put back): then
	// every wall-clock time up to the one the clocks were put back from has been.
	w := s + offsetAt(loc, s)
	if end, ok := repeatedFrom(loc, s, w); ok {
		w = end - 1
	}
	limit := fromWall(w).y - searchYears
	for range maxCandidates {
		c, ok := e.prevCivil(fromWall(w), limit)
		if !ok {
			return time.Time{}, false
		}
		cw := c.wall()
		u, ok, gapStart, gapEnd := resolve(loc, cw)
		switch {
		case !ok && gapStart <= cw && cw < gapEnd:
			w = gapStart - 1 // cw does not exist: go on from the last wall-clock time that does
		case !ok || u > s:
			w = cw - 1 // cannot happen in real time zones; progress anyway
		default:
			return time.Unix(u, 0).UTC(), true
		}
	}
	return time.Time{}, false
}

// civil is a wall-clock date and time, with no time zone.
type civil struct{ y, mo, d, h, mi, s int }

// nextCivil returns the first wall-clock time at or after c that matches every field, giving up
// after the year limit. c need not be normalised: an hour of 24 means the next day, and so on.
func (e Expr) nextCivil(c civil, limit int) (civil, bool) {
	for c.y <= limit {
		mo, ok := nextBit(e.f[fMonth], c.mo)
		if !ok {
			c = civil{y: c.y + 1, mo: 1, d: 1}
			continue
		}
		if mo != c.mo {
			c = civil{y: c.y, mo: mo, d: 1}
		}
		d, ok := nextBit(e.f[fDay], c.d)
		if !ok || d > daysIn(c.y, c.mo) {
			c = civil{y: c.y, mo: c.mo + 1, d: 1}
			continue
		}
		if d != c.d {
			c = civil{y: c.y, mo: c.mo, d: d}
		}
		if !e.has(fDow, weekday(c.y, c.mo, c.d)) {
			c = civil{y: c.y, mo: c.mo, d: c.d + 1}
			continue
		}
		h, ok := nextBit(e.f[fHour], c.h)
		if !ok {
			c = civil{y: c.y, mo: c.mo, d: c.d + 1}
			continue
		}
		if h != c.h {
			c.h, c.mi, c.s = h, 0, 0
		}
		mi, ok := nextBit(e.f[fMinute], c.mi)
		if !ok {
			c.h, c.mi, c.s = c.h+1, 0, 0
			continue
		}
		if mi != c.mi {
			c.mi, c.s = mi, 0
		}
		s, ok := nextBit(e.f[fSecond], c.s)
		if !ok {
			c.mi, c.s = c.mi+1, 0
			continue
		}
		c.s = s
		return c, true
	}
	return civil{}, false
}

// prevCivil returns the last wall-clock time at or before c that matches every field, giving up
// before the year limit. c need not be normalised: an hour of -1 means the day before, and so on.
func (e Expr) prevCivil(c civil, limit int) (civil, bool) {
	for c.y >= limit {
		mo, ok := prevBit(e.f[fMonth], c.mo)
		if !ok {
			c = endOfDay(c.y-1, 12, 31)
			continue
		}
		if mo != c.mo {
			c = endOfDay(c.y, mo, 31)
		}
		if n := daysIn(c.y, c.mo); c.d > n {
			c = endOfDay(c.y, c.mo, n)
		}
		d, ok := prevBit(e.f[fDay], c.d)
		if !ok {
			c = endOfDay(c.y, c.mo-1, 31)
			continue
		}
		if d != c.d {
			c = endOfDay(c.y, c.mo, d)
		}
		if !e.has(fDow, weekday(c.y, c.mo, c.d)) {
			c = endOfDay(c.y, c.mo, c.d-1)
			continue
		}
		h, ok := prevBit(e.f[fHour], c.h)
		if !ok {
			c = endOfDay(c.y, c.mo, c.d-1)
			continue
		}
		if h != c.h {
			c.h, c.mi, c.s = h, 59, 59
		}
		mi, ok := prevBit(e.f[fMinute], c.mi)
		if !ok {
			c.h, c.mi, c.s = c.h-1, 59, 59
			continue
		}
		if mi != c.mi {
			c.mi, c.s = mi, 59
		}
		s, ok := prevBit(e.f[fSecond], c.s)
		if !ok {
			c.mi, c.s = c.mi-1, 59
			continue
		}
		c.s = s
		return c, true
	}
	return civil{}, false
}

func endOfDay(y, mo, d int) civil { return civil{y, mo, d, 23, 59, 59} }

// nextBit returns the least member of set that is at least v.
func nextBit(set uint64, v int) (int, bool) {
	if v >= 64 {
		return 0, false
	}
	set &= ^uint64(0) << max(v, 0)
	return bits.TrailingZeros64(set), set != 0
}

// prevBit returns the greatest member of set that is at most v.
func prevBit(set uint64, v int) (int, bool) {
	if v < 0 {
		return 0, false
	}
	set &= ^uint64(0) >> (63 - min(v, 63))
	return bits.Len64(set) - 1, set != 0
}

func isLeap(y int) bool { return y%4 == 0 && (y%100 != 0 || y%400 == 0) }

func daysIn(y, mo int) int {
	if mo == 2 && !isLeap(y) {
		return 28
	}
	return daysInMonth[mo]
}

// days returns the number of days from 1970-01-01 to the date y-mo-d of the proleptic
// Gregorian calendar (Howard Hinnant's days_from_civil).
func days(y, mo, d int) int64 {
	yy := int64(y)
	if mo <= 2 {
		yy--
	}
	era := floorDiv(yy, 400)
	yoe := yy - era*400
	doy := int64((153*((mo+9)%12)+2)/5 + d - 1)
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// date is the inverse of days (Howard Hinnant's civil_from_days).
func date(z int64) (y, mo, d int) {
	z += 719468
	era := floorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = int(doy - (153*mp+2)/5 + 1)
	mo = int(mp + 3)
	if mo > 12 {
		mo -= 12
	}
	y = int(yoe + era*400)
	if mo <= 2 {
		y++
	}
	return y, mo, d
}

// weekday returns the day of the week of y-mo-d, Sunday being 0.
func weekday(y, mo, d int) int { return int(floorMod(days(y, mo, d)+4, 7)) } // 1970-01-01 was a Thursday

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

func floorMod(a, b int64) int64 { return a - floorDiv(a, b)*b }

// A wall-clock time is also written as the number of seconds from 1970-01-01 00:00:00 on the
// same (zone-less) clock, so that the instant u shows the wall clock u+offset.

func (c civil) wall() int64 {
	return days(c.y, c.mo, c.d)*86400 + int64(c.h*3600+c.mi*60+c.s)
}

func fromWall(w int64) civil {
	y, mo, d := date(floorDiv(w, 86400))
	sec := int(floorMod(w, 86400))
	return civil{y, mo, d, sec / 3600, sec / 60 % 60, sec % 60}
}

// The functions below learn about a time zone only from the UTC offset it has at an instant:
// time.Time.ZoneBounds is not reliable enough (for years that Go computes from a zone's TZ rule
// string, it reports the periods' ends one day early in leap years).

// offsetAt returns the UTC offset of loc at the instant u.
func offsetAt(loc *time.Location, u int64) int64 {
	if loc == time.UTC {
		return 0
	}
	_, off := time.Unix(u, 0).In(loc).Zone()
	return int64(off)
}

// transition returns an instant T in (lo, hi] where the offset changes from lo's, given that the
// offsets at lo and hi differ: offsetAt(T-1) == offsetAt(lo) != offsetAt(T).
func transition(loc *time.Location, lo, hi int64) int64 {
	o := offsetAt(loc, lo)
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if offsetAt(loc, mid) == o {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// maxOffset bounds the UTC offsets of every time zone (they lie within ±16 hours, historical
// Local Mean Times included: Asia/Manila had -15:56 until 1844), so that the instants showing a wall-clock time w lie within
// w±maxOffset.
const maxOffset = 18 * 3600

// resolve returns the first instant u whose wall clock in loc is w. If w does not exist, ok is
// false and, when the clocks jumped over it, [gapStart, gapEnd) is the wall-clock range they
// jumped over. It assumes that the offset changes at most once within 2*maxOffset, as holds for
// every zone of the tz database (checked from 1700 through 2199): the instants showing w then have the offset in effect before the change
// or the one after it.
func resolve(loc *time.Location, w int64) (u int64, ok bool, gapStart, gapEnd int64) {
	lo, hi := w-maxOffset, w+maxOffset
	before, after := offsetAt(loc, lo), offsetAt(loc, hi)
	// With the clocks put back (before > after), the instant on the earlier offset comes first;
	// otherwise at most one of the two exists.
	if u := w - before; offsetAt(loc, u) == before {
		return u, true, 0, 0
	}
	if u := w - after; after != before && offsetAt(loc, u) == after {
		return u, true, 0, 0
	}
	if after > before {
		t := transition(loc, lo, hi)
		return 0, false, t + before, t + after
	}
	return 0, false, 0, 0
}

// repeatedFrom reports whether the instant s, which shows the wall-clock time w, is not the
// first to show it, because the clocks were put back. If so, end is the wall-clock time the
// clocks were put back from: the least one whose first instant is after s.
func repeatedFrom(loc *time.Location, s, w int64) (end int64, repeated bool) {
	u, ok, _, _ := resolve(loc, w)
	if !ok || u >= s {
		return 0, false
	}
	return transition(loc, u, s) + (w - u), true
}
