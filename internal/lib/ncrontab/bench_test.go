package ncrontab

import (
	"testing"
	"time"
)

func benchmarkNext(b *testing.B, expr, zone string) {
	e := MustParse(expr)
	loc := load(b, zone)
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for b.Loop() {
		n, ok := e.Next(t, loc)
		if !ok {
			b.Fatal("no occurrence")
		}
		t = n
		if t.Year() > 2400 {
			t = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		}
	}
}

func BenchmarkNext(b *testing.B) {
	for _, bc := range []struct{ name, expr string }{
		{"EverySecond", "* * * * * *"},
		{"Every15Minutes", "0 */15 * * * *"},
		{"Daily", "0 30 2 * * *"},
		{"Yearly", "0 0 0 1 1 *"},
		{"LeapDay", "0 0 0 29 2 *"},
		{"LeapDayMonday", "0 0 0 29 2 MON"},
	} {
		for _, zone := range []string{"UTC", "Europe/Berlin"} {
			b.Run(bc.name+"/"+zone, func(b *testing.B) { benchmarkNext(b, bc.expr, zone) })
		}
	}
}

func BenchmarkPrev(b *testing.B) {
	e := MustParse("0 0 0 29 2 MON")
	loc := load(b, "Europe/Berlin")
	t := time.Date(2400, 1, 1, 0, 0, 0, 0, time.UTC)
	for b.Loop() {
		p, ok := e.Prev(t, loc)
		if !ok {
			b.Fatal("no occurrence")
		}
		t = p.Add(-time.Second)
		if t.Year() < 2000 {
			t = time.Date(2400, 1, 1, 0, 0, 0, 0, time.UTC)
		}
	}
}

func BenchmarkParse(b *testing.B) {
	for b.Loop() {
		if _, err := Parse("0 */15 9-17 * JAN-MAR MON-FRI"); err != nil {
			b.Fatal(err)
		}
	}
}
