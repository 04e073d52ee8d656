package soak

import (
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/batonfn/baton/internal/devhost"
)

// LogTolerance is how far log timestamps may trail the storage calls they report.
const LogTolerance = time.Second

// Tenure is one leadership as the handlers' own log lines tell it.
type Tenure struct {
	Epoch    int64
	Holder   string // app/instance/pid
	Instance string
	PID      int
	Acquired time.Time
	// LastConfirm is the acquisition or the last logged renewal; Released a graceful release;
	// Lost is when the holder noticed it had lost the lease (LostMsg says how).
	LastConfirm time.Time
	Released    time.Time
	Lost        time.Time
	LostMsg     string
}

// ValidUntil is the latest time this tenure's lease can have been valid.
func (t Tenure) ValidUntil(lease time.Duration) time.Time {
	end := t.LastConfirm.Add(lease)
	if !t.Released.IsZero() && t.Released.Before(end) {
		end = t.Released
	}
	return end
}

// Tenures builds the leadership log from handler lines ("leadership acquired", "lease
// renewed", "leadership released", and the lines of a holder that lost its lease), in order of
// acquisition. dup lists epochs logged as
// acquired more than once (by any holder).
func Tenures(lines []devhost.LogLine) (ts []Tenure, dup []string) {
	byEpoch := map[int64]*Tenure{}
	for _, l := range lines {
		epoch, holder := l.Int("epoch"), l.Str("holder")
		if l.Msg == "leadership acquired" {
			if prev, ok := byEpoch[epoch]; ok {
				dup = append(dup, prev.Holder+" and "+holder)
				continue
			}
			byEpoch[epoch] = &Tenure{Epoch: epoch, Holder: holder, Instance: l.Instance, PID: l.PID, Acquired: l.Time, LastConfirm: l.Time}
			continue
		}
		tn := byEpoch[epoch]
		if tn == nil || tn.Holder != holder {
			continue
		}
		switch {
		case l.Msg == "lease renewed":
			if l.Time.After(tn.LastConfirm) {
				tn.LastConfirm = l.Time
			}
		case l.Msg == "leadership released":
			tn.Released = l.Time
		case l.Msg == "leadership ended: lease already gone at release",
			strings.HasPrefix(l.Msg, "lease renewal failed"), strings.HasPrefix(l.Msg, "leadership lost"),
			strings.HasPrefix(l.Msg, "leader task stalled"):
			if tn.Lost.IsZero() {
				tn.Lost, tn.LostMsg = l.Time, l.Msg
			}
		}
	}
	for _, tn := range byEpoch {
		ts = append(ts, *tn)
	}
	sort.Slice(ts, func(i, j int) bool {
		if !ts[i].Acquired.Equal(ts[j].Acquired) {
			return ts[i].Acquired.Before(ts[j].Acquired)
		}
		return ts[i].Epoch < ts[j].Epoch
	})
	return ts, dup
}

// leadership: epochs rise with acquisition time, no tenure is valid after the next one began,
// and the sampled lease blob never goes back and shows only holders that logged their epoch.
func (c *checker) leadership() {
	ts, dup := Tenures(c.h.Lines)
	c.fig.Epochs = len(ts)
	if len(dup) > 0 {
		c.add(VLeadership, "lease", "an epoch was acquired twice: %s", strings.Join(dup, "; "))
	}
	byEpoch := map[int64]Tenure{}
	for i, tn := range ts {
		byEpoch[tn.Epoch] = tn
		if i == 0 {
			continue
		}
		prev := ts[i-1]
		if tn.Epoch <= prev.Epoch {
			c.add(VLeadership, "epoch "+itoa(tn.Epoch), "acquired by %s at %s, after epoch %d (%s, %s): epochs must rise",
				tn.Holder, tn.Acquired.Format(time.StampMilli), prev.Epoch, prev.Holder, prev.Acquired.Format(time.StampMilli))
		}
		if end := prev.ValidUntil(c.h.LeaseDuration); end.After(tn.Acquired.Add(LogTolerance)) {
			if c.lostToEmulatorRestart(prev, tn) {
				// Azurite restarted (disk persistence) while the earlier lease was held, and
				// its lease did not survive the restart; its holder was dead, or stopped within
				// a renew interval as a deposed leader must (its writes are fenced by epoch).
				// Real storage does not lose leases.
				c.fig.LeasesLostToRestart++
				continue
			}
			c.add(VLeadership, "epoch "+itoa(tn.Epoch), "acquired by %s at %s while epoch %d (%s) was valid until %s: two leaders",
				tn.Holder, tn.Acquired.Format(time.StampMilli), prev.Epoch, prev.Holder, end.Format(time.StampMilli))
		}
	}
	var last int64
	for _, s := range c.h.Lease {
		if s.Epoch < last {
			c.add(VLeadership, "lease blob", "showed epoch %d at %s after epoch %d", s.Epoch, s.At.Format(time.StampMilli), last)
		}
		last = max(last, s.Epoch)
		if s.Epoch == 0 {
			continue
		}
		tn, ok := byEpoch[s.Epoch]
		switch {
		case !ok:
			c.add(VLeadership, "epoch "+itoa(s.Epoch), "lease blob shows it held by %s; no handler logged acquiring it", s.Holder)
		case tn.Holder != s.Holder:
			c.add(VLeadership, "epoch "+itoa(s.Epoch), "lease blob says holder %s, the log says %s", s.Holder, tn.Holder)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// lostToEmulatorRestart reports whether prev's lease was lost to an Azurite restart rather
// than overlapped by tn: storage was restarted between prev's acquisition and tn's, and prev's
// holder either had been killed (kill -9 or SIGTERM) before tn acquired, or noticed the loss
// and stopped within one renew interval of tn's acquisition (what a leader must do whenever
// it loses its lease).
func (c *checker) lostToEmulatorRestart(prev, tn Tenure) bool {
	// Stopped in time (within a renew interval of tn's acquisition): as good as gone.
	killed := !prev.Lost.IsZero() && !prev.Lost.After(tn.Acquired.Add(c.h.LeaseDuration/3+LogTolerance))
	restarted := false
	for _, f := range c.h.Faults {
		switch {
		case (f.Kind == FaultKillLeader || f.Kind == FaultKillOther || f.Kind == FaultTerm) &&
			f.Instance == prev.Instance && f.PID == prev.PID && f.At.Before(tn.Acquired):
			killed = true
		case f.Kind == FaultAzurite && f.At.After(prev.Acquired) && f.At.Before(tn.Acquired):
			restarted = true
		}
	}
	return killed && restarted
}
