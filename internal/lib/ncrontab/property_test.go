package ncrontab

import (
	"flag"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

var seedFlag = flag.Uint64("ncrontab.seed", 0, "seed of the property tests (0: a random seed, logged)")

// newRand returns the property tests' source of randomness, seeded from -ncrontab.seed or at
// random, and logs the seed so that a failure can be replayed.
func newRand(t *testing.T) *rand.Rand {
	seed := *seedFlag
	if seed == 0 {
		seed = rand.Uint64()
	}
	fmt.Fprintf(os.Stderr, "%s: seed %d: rerun with go test -run '^%s$' -ncrontab.seed=%d\n", t.Name(), seed, t.Name(), seed)
	return rand.New(rand.NewPCG(seed, 0))
}

// propertyZones are time zones with awkward transitions: 30-minute DST (Lord_Howe), 45-minute
// offsets (Chatham), DST at midnight (Sao_Paulo until 2019), negative DST (Dublin), a 2-hour
// shift (Troll), several transitions a year (Casablanca around Ramadan), a skipped day (Apia,
// 2011-12-30) and none at all (UTC, Kolkata).
var propertyZones = []string{
	"UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Chatham",
	"America/Sao_Paulo", "Europe/Dublin", "Antarctica/Troll", "Africa/Casablanca", "Pacific/Apia",
	"Asia/Kolkata", "America/St_Johns",
}

// randExpr returns a random expression. Dense ones restrict only the second, minute and hour
// (so that they fire often enough for a brute-force comparison over a few hours).
func randExpr(r *rand.Rand, dense bool) string {
	parts := make([]string, nFields)
	for i := range nFields {
		f := &fieldInfo[i]
		if dense && i >= fDay || dense && i == fHour && r.IntN(3) > 0 || r.IntN(4) == 0 {
			parts[i] = "*"
			continue
		}
		items := make([]string, 1+r.IntN(3))
		for j := range items {
			items[j] = randItem(r, f)
		}
		parts[i] = strings.Join(items, ",")
	}
	return strings.Join(parts, " ")
}

func randItem(r *rand.Rand, f *field) string {
	val := func(v int) string {
		if f.names != nil && r.IntN(3) == 0 {
			return f.names[v-f.min][:3+r.IntN(len(f.names[v-f.min])-2)]
		}
		return fmt.Sprint(v)
	}
	n := f.max - f.min + 1
	a := f.min + r.IntN(n)
	b := a + r.IntN(f.max-a+1)
	step := 1 + r.IntN(n/2)
	switch r.IntN(6) {
	case 0:
		return "*/" + fmt.Sprint(step)
	case 1:
		return val(a) + "-" + val(b)
	case 2:
		return val(a) + "-" + val(b) + "/" + fmt.Sprint(step)
	case 3:
		return val(a) + "/" + fmt.Sprint(step)
	default:
		return val(a)
	}
}

// randTime returns a random instant in 1970-2100, half the time within three hours of one of
// loc's transitions, sometimes with a fraction of a second.
func randTime(r *rand.Rand, loc *time.Location) time.Time {
	lo, hi := time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	t := time.Unix(lo+r.Int64N(hi-lo), 0)
	if r.IntN(2) == 0 {
		if _, end := t.In(loc).ZoneBounds(); !end.IsZero() {
			t = end.Add(time.Duration(r.Int64N(6*3600)-3*3600) * time.Second)
		}
	}
	if r.IntN(4) == 0 {
		t = t.Add(time.Duration(r.Int64N(int64(time.Second))))
	}
	return t
}

// matches reports whether the wall clock of u in loc matches every field of e, computed with the
// time package rather than the package's own calendar.
func matches(e Expr, u time.Time, loc *time.Location) bool {
	w := u.In(loc)
	return e.has(fSecond, w.Second()) && e.has(fMinute, w.Minute()) && e.has(fHour, w.Hour()) &&
		e.has(fDay, w.Day()) && e.has(fMonth, int(w.Month())) && e.has(fDow, int(w.Weekday()))
}

// firstInstant reports whether no earlier instant shows the same wall clock in loc as u. An
// earlier instant u' showing the same wall clock has a larger offset o' (u' = wall - o'), in
// effect within a day before u; it is found by sampling the offsets of the day before.
func firstInstant(u time.Time, loc *time.Location) bool {
	_, off := u.In(loc).Zone()
	wall := u.Unix() + int64(off)
	for k := range int64(26*4 + 1) {
		_, o := time.Unix(u.Unix()-k*900, 0).In(loc).Zone()
		if o <= off {
			continue
		}
		if _, o2 := time.Unix(wall-int64(o), 0).In(loc).Zone(); o2 == o {
			return false
		}
	}
	return true
}

// TestProperties checks Next and Prev against their definition for random expressions, times
// and time zones: Next(t) is the least occurrence after t, Prev(t) the greatest at or before
// it, where an occurrence is the first instant of a matching wall-clock time.
func TestProperties(t *testing.T) {
	r := newRand(t)
	n := 3000
	if testing.Short() {
		n = 300
	}
	checked := 0
	defer func() { t.Logf("%d random cases", checked) }()
	for range n {
		zone := propertyZones[r.IntN(len(propertyZones))]
		loc := load(t, zone)
		s := randExpr(r, r.IntN(2) == 0)
		e, err := Parse(s)
		if err != nil {
			continue // e.g. day 31 of April
		}
		checked++
		tm := randTime(r, loc)
		if !checkProperties(t, e, loc, tm) {
			t.Fatalf("%s %q from %s (%s): see above", zone, s, tm.In(loc).Format(time.RFC3339Nano), tm.UTC().Format(time.RFC3339Nano))
		}
	}
}

func checkProperties(t *testing.T, e Expr, loc *time.Location, tm time.Time) bool {
	t.Helper()
	ok := true
	fail := func(format string, args ...any) {
		t.Errorf(format, args...)
		ok = false
	}
	isOccurrence := func(what string, u time.Time) {
		if u.Nanosecond() != 0 || u.Location() != time.UTC {
			fail("%s = %v is not a whole second in UTC", what, u)
		}
		if !matches(e, u, loc) {
			fail("%s = %s does not match %q", what, u.In(loc), e)
		}
		if !firstInstant(u, loc) {
			fail("%s = %s is not the first instant of its wall-clock time", what, u.In(loc))
		}
	}
	next, okN := e.Next(tm, loc)
	prev, okP := e.Prev(tm, loc)
	if !okN || !okP {
		fail("Next = %v, %v; Prev = %v, %v: want occurrences within 400 years", next, okN, prev, okP)
		return false
	}
	isOccurrence("Next", next)
	isOccurrence("Prev", prev)
	if !next.After(tm) {
		fail("Next = %s is not after %s", next, tm)
	}
	if prev.After(tm) {
		fail("Prev = %s is after %s", prev, tm)
	}
	// Nothing in between: the second before Next still has prev as its Prev, and Next of prev
	// is next again.
	if p, _ := e.Prev(next.Add(-time.Second), loc); !p.Equal(prev) {
		fail("Prev(Next - 1s) = %s, want Prev = %s", p.In(loc), prev.In(loc))
	}
	if n, _ := e.Next(prev, loc); !n.Equal(next) {
		fail("Next(Prev) = %s, want Next = %s", n.In(loc), next.In(loc))
	}
	if p, _ := e.Prev(next, loc); !p.Equal(next) {
		fail("Prev(Next) = %s, want Next = %s itself", p.In(loc), next.In(loc))
	}
	// A few more steps each way: strictly monotonic, consistent with each other.
	cur := next
	for range 5 {
		n, ok := e.Next(cur, loc)
		if !ok || !n.After(cur) {
			fail("Next(%s) = %s, %v: not after it", cur.In(loc), n.In(loc), ok)
			break
		}
		isOccurrence("Next", n)
		if p, _ := e.Prev(n.Add(-time.Second), loc); !p.Equal(cur) {
			fail("Prev(%s - 1s) = %s, want %s", n.In(loc), p.In(loc), cur.In(loc))
		}
		cur = n
	}
	cur = prev
	for range 5 {
		p, ok := e.Prev(cur.Add(-time.Second), loc)
		if !ok || !p.Before(cur) {
			fail("Prev(%s - 1s) = %s, %v: not before it", cur.In(loc), p.In(loc), ok)
			break
		}
		isOccurrence("Prev", p)
		if n, _ := e.Next(p, loc); !n.Equal(cur) {
			fail("Next(%s) = %s, want %s", p.In(loc), n.In(loc), cur.In(loc))
		}
		cur = p
	}
	return ok
}

// bruteForce lists the occurrences of e in loc within [from, to] by looking at every second
// (or, when the second field has one value, at that second of every minute; every offset the
// tests meet is whole minutes) and keeping those whose wall clock matches and was not shown
// before: the walk starts a day early to know which wall-clock times were.
func bruteForce(e Expr, loc *time.Location, from, to time.Time) []time.Time {
	step, start := int64(1), from.Unix()-86400
	if bits.OnesCount64(e.f[fSecond]) == 1 {
		step = 60
		start = start - start%60 + int64(bits.TrailingZeros64(e.f[fSecond]))
	}
	seen := make(map[int64]bool)
	var out []time.Time
	for u := start; u <= to.Unix(); u += step {
		ut := time.Unix(u, 0)
		_, off := ut.In(loc).Zone()
		w := u + int64(off)
		if !seen[w] && u >= from.Unix() && matches(e, ut, loc) {
			out = append(out, ut.UTC())
		}
		seen[w] = true
	}
	return out
}

// TestBruteForce compares Next and Prev with a walk over every second (or minute) of short
// windows, mostly around transitions, for random expressions that fire often.
func TestBruteForce(t *testing.T) {
	r := newRand(t)
	n := 60
	if testing.Short() {
		n = 10
	}
	windows, occurrences := 0, 0
	defer func() { t.Logf("%d windows, %d occurrences", windows, occurrences) }()
	for range n {
		zone := propertyZones[r.IntN(len(propertyZones))]
		loc := load(t, zone)
		s := randExpr(r, true)
		if r.IntN(3) == 0 {
			s = "0 " + randExpr(r, true)[2:] // one second a minute: a window of days
		}
		e, err := Parse(s)
		if err != nil {
			continue
		}
		span := 4 * time.Hour
		if bits.OnesCount64(e.f[fSecond]) == 1 {
			span = 3 * 24 * time.Hour
		}
		from := randTime(r, loc).Add(-span / 2).Truncate(time.Second)
		to := from.Add(span)
		want := bruteForce(e, loc, from, to)
		windows++
		occurrences += len(want)

		var got []time.Time
		for cur := from.Add(-time.Second); ; {
			n, ok := e.Next(cur, loc)
			if !ok || n.After(to) {
				break
			}
			got = append(got, n)
			cur = n
		}
		var gotBack []time.Time
		for cur := to; ; {
			p, ok := e.Prev(cur, loc)
			if !ok || p.Before(from) {
				break
			}
			gotBack = append(gotBack, p)
			cur = p.Add(-time.Second)
		}
		slices.Reverse(gotBack)
		if !slices.EqualFunc(got, want, time.Time.Equal) || !slices.EqualFunc(gotBack, want, time.Time.Equal) {
			t.Fatalf("%s %q in [%s, %s]: brute force finds %d occurrences, Next %d, Prev %d; first difference:\n%s",
				zone, s, from.In(loc).Format(time.RFC3339), to.In(loc).Format(time.RFC3339), len(want), len(got), len(gotBack),
				firstDiff(want, got, gotBack, loc))
		}
	}
}

func firstDiff(want, got, gotBack []time.Time, loc *time.Location) string {
	at := func(ts []time.Time, i int) string {
		if i < len(ts) {
			return ts[i].In(loc).Format(time.RFC3339)
		}
		return "none"
	}
	for i := range max(len(want), len(got), len(gotBack)) {
		if at(want, i) != at(got, i) || at(want, i) != at(gotBack, i) {
			return fmt.Sprintf("#%d: brute force %s, Next %s, Prev %s", i, at(want, i), at(got, i), at(gotBack, i))
		}
	}
	return "none"
}
