package soak

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/tools/devhost"
)

// LogTolerance is how far log timestamps may trail the storage calls they report.
const LogTolerance = time.Second

// Tenure is one leadership of one lease as the handlers' own log lines tell it.
type Tenure struct {
	// Lease names the lease: "" for the scheduler lease (the leader's own lock), else the named
	// lease, e.g. "runs/<run>" for a run's planning. Epochs count per lease.
	Lease    string
	Epoch    int64
	Holder   string // app/instance/pid
	Instance string
	PID      int
	Acquired time.Time
	// LastConfirm is the acquisition or the last logged renewal; Released a graceful release;
	// Lost is when the holder noticed it had lost the lease, or stopped holding it without a
	// release storage confirmed (LostMsg says how).
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

// Name is the lease's name for people: "scheduler" or the named lease.
func (t Tenure) Name() string { return LeaseName(t.Lease) }

// LeaseName is a lease's name for people: "scheduler" for the leader's own lock.
func LeaseName(lease string) string {
	if lease == "" {
		return "scheduler"
	}
	return lease
}

type tenureKey struct {
	lease string
	epoch int64
}

// Tenures builds the leadership log from handler lines ("leadership acquired", "lease
// renewed", "leadership released", and the lines of a holder that lost its lease), of every
// lease, in order of acquisition. dup lists epochs of one lease logged as acquired more than
// once (by any holder).
func Tenures(lines []devhost.LogLine) (ts []Tenure, dup []string) {
	byKey := map[tenureKey]*Tenure{}
	// releasedBefore: an acquisition's record of the release of the epoch before it, which
	// storage shows even when its holder died before logging the release.
	type release struct {
		holder string
		at     time.Time
	}
	releasedBefore := map[tenureKey]release{}
	for _, l := range lines {
		k := tenureKey{lease: l.Str("lease"), epoch: l.Int("epoch")}
		holder := l.Str("holder")
		if l.Msg == "leadership acquired" {
			if at, err := time.Parse(time.RFC3339Nano, l.Str("previousReleasedAt")); err == nil && k.epoch > 1 {
				releasedBefore[tenureKey{k.lease, k.epoch - 1}] = release{l.Str("previousHolder"), at}
			}
			if prev, ok := byKey[k]; ok {
				dup = append(dup, LeaseName(k.lease)+" epoch "+itoa(k.epoch)+": "+prev.Holder+" and "+holder)
				continue
			}
			byKey[k] = &Tenure{Lease: k.lease, Epoch: k.epoch, Holder: holder, Instance: l.Instance, PID: l.PID, Acquired: l.Time, LastConfirm: l.Time}
			continue
		}
		tn := byKey[k]
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
			strings.HasPrefix(l.Msg, "leader task stalled"),
			// A release that storage did not answer (it was down) ends the holder's tenure as a
			// release does: it does nothing more under the lease, which lapses, unless storage
			// lost it meanwhile.
			strings.HasPrefix(l.Msg, "lease release failed"):
			if tn.Lost.IsZero() {
				tn.Lost, tn.LostMsg = l.Time, l.Msg
			}
			// A holder whose deadline passed names its last successful renewal: its lease was
			// valid until that plus a lease, even when it logged its acquisition later (it was
			// stopped between the two).
			if at, err := time.Parse(time.RFC3339Nano, l.Str("lastRenewal")); err == nil && at.Before(tn.LastConfirm) {
				tn.LastConfirm = at
			}
		}
	}
	for k, r := range releasedBefore {
		// The release mark is written by the holder's Release after its task returned, and
		// only then is the lease released; a later acquisition found it, so the tenure ended
		// there even if its holder was killed before it could log "leadership released".
		if tn := byKey[k]; tn != nil && tn.Holder == r.holder && tn.Released.IsZero() {
			tn.Released = r.at
		}
	}
	for _, tn := range byKey {
		ts = append(ts, *tn)
	}
	slices.SortFunc(ts, func(a, b Tenure) int {
		return cmp.Or(a.Acquired.Compare(b.Acquired), cmp.Compare(a.Lease, b.Lease), cmp.Compare(a.Epoch, b.Epoch))
	})
	slices.Sort(dup)
	return ts, dup
}

// Acquisition names one epoch of a lease taken by a holder (app/instance/pid); Lease as in
// Tenure.
type Acquisition struct {
	Lease  string
	Epoch  int64
	Holder string
}

// Abandoned are the acquisitions a lock abandoned because their holder record was not
// confirmed ("lease acquisition abandoned"): the record may have taken effect with its answer
// lost, so the lease blob can show the epoch and holder although nobody led under it (the
// lease was given back). The lock logs them under its blob's name, "<container>/<name>": the
// scheduler lease is the default lease name, a run's lease "runs/<run>".
func Abandoned(lines []devhost.LogLine) map[Acquisition]bool {
	out := map[Acquisition]bool{}
	for _, l := range lines {
		if !strings.HasPrefix(l.Msg, "lease acquisition abandoned") {
			continue
		}
		_, lease, _ := strings.Cut(l.Str("lease"), "/")
		if lease == config.DefaultLeaseName {
			lease = ""
		}
		out[Acquisition{Lease: lease, Epoch: l.Int("epoch"), Holder: l.Str("holder")}] = true
	}
	return out
}

// ByLease groups tenures by lease, each group in order of acquisition.
func ByLease(ts []Tenure) map[string][]Tenure {
	out := map[string][]Tenure{}
	for _, tn := range ts {
		out[tn.Lease] = append(out[tn.Lease], tn)
	}
	return out
}

// leadership: per lease, epochs rise with acquisition time and no tenure is valid after the
// next one began; the sampled scheduler lease blob never goes back and shows only holders that
// logged their epoch; each run's lease blob, read at the end, shows the last epoch logged.
func (c *checker) leadership() {
	reissued := c.reissuedAfterRestart()
	c.fig.EpochsLostToRestart = len(reissued)
	reissuedTo := map[Acquisition]bool{}
	for _, a := range reissued {
		reissuedTo[a] = true
	}
	if dup := slices.DeleteFunc(slices.Clone(c.dupEpochs), func(d string) bool { _, ok := reissued[d]; return ok }); len(dup) > 0 {
		c.add(VLeadership, "lease", "an epoch was acquired twice: %s", strings.Join(dup, "; "))
	}
	groups := ByLease(c.ts)
	for _, lease := range slices.Sorted(maps.Keys(groups)) {
		ts := groups[lease]
		if lease == "" {
			c.fig.SchedulerEpochs = len(ts)
		} else {
			c.fig.RunLeaderships += len(ts)
			c.fig.RunLeases++
		}
		for i := 1; i < len(ts); i++ {
			prev, tn := ts[i-1], ts[i]
			subject := tn.Name() + " epoch " + itoa(tn.Epoch)
			if tn.Epoch <= prev.Epoch {
				c.add(VLeadership, subject, "acquired by %s at %s, after epoch %d (%s, %s): epochs must rise",
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
				c.add(VLeadership, subject, "acquired by %s at %s while epoch %d (%s) was valid until %s: two leaders",
					tn.Holder, tn.Acquired.Format(time.StampMilli), prev.Epoch, prev.Holder, end.Format(time.StampMilli))
			}
		}
	}
	byEpoch := map[int64]Tenure{}
	for _, tn := range groups[""] {
		byEpoch[tn.Epoch] = tn
	}
	abandoned := Abandoned(c.h.Lines)
	var last int64
	for _, s := range c.h.Lease {
		if s.Epoch < last {
			c.add(VLeadership, "scheduler lease blob", "showed epoch %d at %s after epoch %d", s.Epoch, s.At.Format(time.StampMilli), last)
		}
		last = max(last, s.Epoch)
		if s.Epoch == 0 {
			continue
		}
		tn, ok := byEpoch[s.Epoch]
		switch {
		case !ok && !c.killedHolder(s.Holder) && !abandoned[Acquisition{"", s.Epoch, s.Holder}]:
			c.add(VLeadership, "scheduler epoch "+itoa(s.Epoch), "lease blob shows it held by %s; no handler logged acquiring it", s.Holder)
		case !ok:
			// A process the driver killed may have taken the lease and died before logging it;
			// or a holder record's answer was lost, and the lock gave the lease back.
		case tn.Holder != s.Holder && !reissuedTo[Acquisition{"", s.Epoch, s.Holder}]:
			c.add(VLeadership, "scheduler epoch "+itoa(s.Epoch), "lease blob says holder %s, the log says %s", s.Holder, tn.Holder)
		}
	}
	for _, lease := range slices.Sorted(maps.Keys(c.h.RunLeases)) {
		s := c.h.RunLeases[lease]
		ts := groups[lease]
		var logged Tenure
		for _, tn := range ts {
			if tn.Epoch > logged.Epoch {
				logged = tn
			}
		}
		switch {
		case s.Epoch < logged.Epoch:
			c.add(VLeadership, lease, "lease blob shows epoch %d at the end, below epoch %d logged acquired by %s", s.Epoch, logged.Epoch, logged.Holder)
		case s.Epoch > logged.Epoch && !c.killedHolder(s.Holder) && !abandoned[Acquisition{lease, s.Epoch, s.Holder}]:
			c.add(VLeadership, lease, "lease blob shows epoch %d held by %s; no handler logged acquiring it", s.Epoch, s.Holder)
		case s.Epoch == logged.Epoch && s.Epoch > 0 && s.Holder != logged.Holder:
			c.add(VLeadership, lease, "lease blob says epoch %d's holder is %s, the log says %s", s.Epoch, s.Holder, logged.Holder)
		}
	}
}

// killedHolder reports whether holder (app/instance/pid) is a process the driver killed: it may
// have taken a lease and died before logging it.
func (c *checker) killedHolder(holder string) bool {
	parts := strings.Split(holder, "/")
	if len(parts) < 3 {
		return false
	}
	pid, err := strconv.Atoi(parts[len(parts)-1])
	return err == nil && c.killed(parts[len(parts)-2], pid)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// lostToEmulatorRestart reports whether prev's lease was lost to an Azurite restart rather
// than overlapped by tn: storage was restarted between prev's acquisition and tn's, and prev's
// holder either was killed (kill -9 or SIGTERM) or noticed the loss and stopped, within one
// renew interval of tn's acquisition (what a leader must do whenever it loses its lease), or
// was SIGSTOPped before then and noticed within a renew interval of its SIGCONT.
func (c *checker) lostToEmulatorRestart(prev, tn Tenure) bool {
	// Stopped in time (within a renew interval of tn's acquisition): as good as gone.
	renew := c.h.LeaseDuration/3 + LogTolerance
	killed := !prev.Lost.IsZero() && !prev.Lost.After(tn.Acquired.Add(renew))
	if at, ok := c.killedAt(prev.Instance, prev.PID); ok && !at.After(tn.Acquired.Add(renew)) {
		// Killed before tn acquired, or within the interval in which a leader that lost its
		// lease must notice and stop: gone as soon as one that noticed.
		killed = true
	}
	restarted := false
	for _, f := range c.h.Faults {
		switch {
		case f.Kind == FaultPause && f.Instance == prev.Instance && f.PID == prev.PID && !f.At.After(tn.Acquired.Add(renew)) &&
			!prev.Lost.IsZero() && !f.Until.IsZero() && !prev.Lost.After(f.Until.Add(renew)):
			// SIGSTOPped before its next renewal could show the loss, and noticed within a
			// renew interval of its SIGCONT: it did nothing in between.
			killed = true
		case f.Kind == FaultAzurite && f.At.Before(tn.Acquired) && f.At.Add(LogTolerance).After(prev.Acquired) &&
			(f.Until.IsZero() || prev.Acquired.Before(f.Until)):
			// prev's acquisition may be logged after Azurite went down (a log line trails its
			// call); logged before storage was back, it landed before the outage.
			restarted = true
		}
	}
	return killed && restarted
}

// reissuedAfterRestart finds the epochs acquired twice (Tenures' dup, by its text) because an
// Azurite restart lost the first acquisition's holder record: the first was logged while the
// driver was restarting Azurite (between the fault's start and its end: the dying process
// still answered a connection kept alive, after it had saved its data for the last time), the
// second came after the restart, and the first holder had stopped holding before it (killed,
// or it noticed the loss). Real storage never forgets a write it acknowledged; Azurite then
// shows the epoch before, and the next acquisition records the same epoch again. Each maps to
// the second acquisition, whose holder the lease blob then names.
func (c *checker) reissuedAfterRestart() map[string]Acquisition {
	type acq struct {
		holder, instance string
		pid              int
		at               time.Time
	}
	byKey := map[tenureKey][]acq{}
	for _, l := range c.h.Lines {
		if l.Msg == "leadership acquired" {
			k := tenureKey{l.Str("lease"), l.Int("epoch")}
			byKey[k] = append(byKey[k], acq{l.Str("holder"), l.Instance, l.PID, l.Time})
		}
	}
	out := map[string]Acquisition{}
	for k, as := range byKey {
		if len(as) != 2 {
			continue
		}
		first, second := as[0], as[1]
		at, killed := c.killedAt(first.instance, first.pid)
		stopped := killed && at.Before(second.at)
		for _, tn := range c.ts {
			if tn.Lease == k.lease && tn.Epoch == k.epoch && tn.Holder == first.holder && !tn.Lost.IsZero() && tn.Lost.Before(second.at) {
				stopped = true
			}
		}
		for _, f := range c.h.Faults {
			if stopped && f.Kind == FaultAzurite && !first.at.Before(f.At) && !first.at.After(f.Until.Add(LogTolerance)) && second.at.After(f.Until) {
				out[LeaseName(k.lease)+" epoch "+itoa(k.epoch)+": "+first.holder+" and "+second.holder] = Acquisition{k.lease, k.epoch, second.holder}
				break
			}
		}
	}
	return out
}
