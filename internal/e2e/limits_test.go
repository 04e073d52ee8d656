package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue/queueerror"

	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/limit"
	"github.com/batonfn/baton/internal/engine/limit/limitblob"
	"github.com/batonfn/baton/internal/tools/devhost"
	"github.com/batonfn/baton/work/synthetic"
)

// The e2e app's limited job (internal/tools/e2eapp/limited.go) GETs the stub once per
// partition under the limit stubLimitName, in bundles of 32; the tests set the limit's numbers
// through BATON_LIMITS.
const (
	// limitBacklog is BATON_MAX_BACKLOG: 32 bundles of 32 (limitSettings says why).
	limitBacklog  = 1024
	stubLimitName = "stub"
	limitedJob    = "limited"
	// stubRetryAfter is the Retry-After of the stub's 429s, and how long it answers them.
	stubRetryAfter = 20 * time.Second
)

// stubReq is one request the stub served; began is when the job's Process began the call.
type stubReq struct {
	began, arrive, end time.Time
	status             int
	part, pid          int
}

// stub is the downstream the limited job calls: each request takes a random latency in
// [minLat, maxLat) (a 429 is answered at once). It records every request and counts how many
// were in progress at once (overlapAtPeak): a request counts from its arrival until its
// handler returns, which is before its response is flushed, so the count never includes a
// request whose caller has already moved on.
type stub struct {
	srv            *httptest.Server
	minLat, maxLat time.Duration

	mu   sync.Mutex
	reqs []stubReq
	// From throttleFrom to throttleUntil every request is answered 429 with Retry-After.
	throttleFrom, throttleUntil time.Time
}

func startStub(t *testing.T, minLat, maxLat time.Duration) *stub {
	t.Helper()
	s := &stub{minLat: minLat, maxLat: maxLat}
	s.srv = httptest.NewServer(s)
	t.Cleanup(s.srv.Close)
	return s
}

// url is the address the job calls.
func (s *stub) url() string { return s.srv.URL + "/call" }

func (s *stub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	part, _ := strconv.Atoi(r.URL.Query().Get("part"))
	pid, _ := strconv.Atoi(r.URL.Query().Get("pid"))
	began, _ := strconv.ParseInt(r.URL.Query().Get("began"), 10, 64)
	s.mu.Lock()
	throttled := !now.Before(s.throttleFrom) && now.Before(s.throttleUntil)
	k := len(s.reqs)
	s.reqs = append(s.reqs, stubReq{began: time.Unix(0, began), arrive: now, part: part, pid: pid})
	s.mu.Unlock()
	status := http.StatusOK
	if throttled {
		status = http.StatusTooManyRequests
		w.Header().Set("Retry-After", strconv.Itoa(int(stubRetryAfter/time.Second)))
	} else {
		// The downstream's own work: a latency, not a wait for a condition.
		lat := s.minLat + rand.N(s.maxLat-s.minLat)
		select {
		case <-time.After(lat):
		case <-r.Context().Done():
		}
	}
	w.WriteHeader(status)
	s.mu.Lock()
	s.reqs[k].end, s.reqs[k].status = time.Now(), status
	s.mu.Unlock()
}

// throttle answers 429 from now for d, and returns when that began.
func (s *stub) throttle(d time.Duration) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.throttleFrom = time.Now()
	s.throttleUntil = s.throttleFrom.Add(d)
	return s.throttleFrom
}

func (s *stub) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

// snapshot returns the requests so far.
func (s *stub) snapshot() []stubReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

// startStats are the requests' arrivals counted per calendar second and in every sliding
// window of a second.
type startStats struct {
	perSecond int       // the most arrivals in one calendar second
	secondAt  time.Time // that second
	sliding   int       // the most arrivals in any window [t, t+1s)
	slidingAt time.Time // that window's first arrival
}

func arrivalStats(reqs []stubReq) startStats {
	var st startStats
	at := make([]time.Time, len(reqs))
	buckets := map[int64]int{}
	for i, r := range reqs {
		at[i] = r.arrive
		buckets[r.arrive.Unix()]++
	}
	for sec, n := range buckets {
		if n > st.perSecond {
			st.perSecond, st.secondAt = n, time.Unix(sec, 0)
		}
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	j := 0
	for i := range at {
		for at[i].Sub(at[j]) >= time.Second {
			j++
		}
		if n := i - j + 1; n > st.sliding {
			st.sliding, st.slidingAt = n, at[j]
		}
	}
	return st
}

// overlapAtPeak is the most requests in progress at once, from the records (an arrival
// counts before an end at the same instant).
func overlapAtPeak(reqs []stubReq) []stubReq {
	type ev struct {
		at    time.Time
		delta int
		k     int
	}
	var evs []ev
	for k, r := range reqs {
		if r.end.IsZero() {
			continue
		}
		evs = append(evs, ev{r.arrive, 1, k}, ev{r.end, -1, k})
	}
	slices.SortFunc(evs, func(a, b ev) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return b.delta - a.delta
	})
	open := map[int]bool{}
	var best []stubReq
	for _, e := range evs {
		if e.delta > 0 {
			open[e.k] = true
		} else {
			delete(open, e.k)
		}
		if len(open) > len(best) {
			best = best[:0]
			for k := range open {
				best = append(best, reqs[k])
			}
		}
	}
	return best
}

// limitSettings are the cluster's settings for the limited job: its run of n partitions
// calling s, the limit's numbers, a run timeout that the limit's pace fits in, the e2e app's
// own schedules paused (they would only add load), and a backlog of limitBacklog partitions.
//
// The backlog bounds the bundles that wait for the limit on the queue: each refused bundle
// comes back to ask the limit's one blob again, so with the default backlog (every bundle of
// a 20,000-partition run enqueued at once: 2,500 in bundles of 8) the acquires' conditional
// writes conflict until some give up after limitblob.DefaultRetries, failing their
// invocations.
func limitSettings(t *testing.T, s *stub, n int, spec limit.Spec) (string, map[string]string) {
	t.Helper()
	params := fmt.Sprintf(`{"partitions":%d,"url":%q}`, n, s.url())
	limits := fmt.Sprintf(`{%q:{"maxInFlight":%d}}`, spec.Name, spec.MaxInFlight)
	if spec.Rate > 0 {
		limits = fmt.Sprintf(`{%q:{"maxInFlight":%d,"rate":%d,"per":%q,"burst":%d}}`, spec.Name, spec.MaxInFlight, spec.Rate, spec.Per, spec.Burst)
	}
	paused := map[string]any{}
	for _, d := range appSchedules(t) {
		paused[d.Name] = map[string]bool{"paused": true}
	}
	schedules, _ := json.Marshal(paused)
	return params, map[string]string{
		config.SettingJob:        limitedJob,
		config.SettingLimits:     limits,
		config.SettingRunTimeout: "15m",
		config.SettingSchedules:  string(schedules),
		config.SettingMaxBacklog: strconv.Itoa(limitBacklog),
	}
}

// limitStore reads the cluster's limit blobs (runs/_limits/<name>.json).
func (c *cluster) limitStore() *limitblob.Store {
	c.t.Helper()
	blobs, err := azclient.Blob(c.h.Config().Storage, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	return limitblob.New(blobs.ServiceClient().NewContainerClient(c.h.Config().RunsContainer), nil)
}

// slotHolder is a slot of the limit held by a live handler process.
type slotHolder struct {
	instance string
	pid      int
	slot     limit.Slot
}

// holderOf maps a slot's Holder ("<instance>/<pid>", the handler's BATON_INSTANCE_ID and PID)
// to the devhost instance, when that process is still the instance's.
func (c *cluster) holderOf(s limit.Slot) (slotHolder, bool) {
	name, pidStr, ok := strings.Cut(s.Holder, "/")
	pid, err := strconv.Atoi(pidStr)
	if !ok || err != nil {
		return slotHolder{}, false
	}
	in := c.h.Instance(name)
	if in == nil {
		return slotHolder{}, false
	}
	if state, cur := in.State(); state != devhost.StateRunning || cur != pid {
		return slotHolder{}, false
	}
	return slotHolder{instance: name, pid: pid, slot: s}, true
}

// waitHolder waits until a running instance other than those in skip holds at least min
// unexpired slots of the limit, and returns the one that holds the most, with its latest slot.
func (c *cluster) waitHolder(ctx context.Context, ls *limitblob.Store, skip map[string]bool, least int) (slotHolder, error) {
	var h slotHolder
	err := waitFor(ctx, 20*time.Millisecond, fmt.Sprintf("an instance holding %d slots of the limit", least), func() (bool, error) {
		st, err := ls.Read(ctx, stubLimitName)
		if err != nil {
			return false, err
		}
		now := time.Now()
		held := map[string]int{}
		var best slotHolder
		for _, s := range st.Slots {
			if s.Slots == 0 || !now.Before(s.Expires) {
				continue
			}
			got, ok := c.holderOf(s)
			if !ok || skip[got.instance] {
				continue
			}
			held[s.Holder] += s.Slots
			if held[s.Holder] > best.slot.Slots {
				best = got
				best.slot.Slots = held[s.Holder] // the holder's slots over all its grants
			}
		}
		h = best
		return best.slot.Slots >= least, nil
	})
	return h, err
}

// strikeHolder kills or pauses (strike) an instance, not in skip, that holds at least
// holderSlots slots of the limit and still holds some once struck; it returns the instance
// with the slots it held then, and when it was struck. It strikes only while the instance runs
// no invocation but the work function's: the scheduler's and runs' leases are taken in the
// others, and a process stopped between taking a lease and logging it would log the
// acquisition after its SIGCONT, out of order for the leadership check. A holder whose slots
// were all given back before the strike landed is let go (undo; a killed one is skipped) and
// another is struck.
func (c *cluster) strikeHolder(ctx context.Context, t *testing.T, ls *limitblob.Store, skip map[string]bool,
	strike, undo func(*devhost.Instance) error) (slotHolder, time.Time) {
	t.Helper()
	for {
		h, err := c.waitHolder(ctx, ls, skip, holderSlots)
		if err != nil {
			t.Fatal(err)
		}
		in := c.h.Instance(h.instance)
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = waitFor(qctx, 2*time.Millisecond, h.instance+" running only work", func() (bool, error) {
			for _, inv := range c.h.InFlight() {
				if inv.Instance == h.instance && inv.Function != c.workFunction() {
					return false, nil
				}
			}
			return true, nil
		})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := strike(in); err != nil {
			t.Fatal(err)
		}
		at := time.Now()
		st, err := ls.Read(ctx, stubLimitName)
		if err != nil {
			t.Fatal(err)
		}
		held := 0
		for _, s := range st.Slots {
			if s.Holder == fmt.Sprintf("%s/%d", h.instance, h.pid) && at.Before(s.Expires) {
				held += s.Slots
			}
		}
		if held > 0 {
			h.slot.Slots = held
			return h, at
		}
		if undo == nil {
			skip[h.instance] = true
			continue
		}
		if err := undo(in); err != nil {
			t.Fatal(err)
		}
	}
}

// waitSlotsTaken waits until the holder's slots have all expired and another holder was
// granted or renewed slots after the last of them expired: its slots were given to others
// while it could not run.
func waitSlotsTaken(ctx context.Context, ls *limitblob.Store, holder string, lease time.Duration) (time.Time, error) {
	var lastExpiry time.Time
	err := waitFor(ctx, 50*time.Millisecond, "slots of "+holder+" expired and granted to others", func() (bool, error) {
		st, err := ls.Read(ctx, stubLimitName)
		if err != nil {
			return false, err
		}
		now := time.Now()
		others := false
		for _, s := range st.Slots {
			if s.Holder == holder {
				lastExpiry = later(lastExpiry, s.Expires)
				continue
			}
			// A grant or renewal at Expires − lease.
			if !lastExpiry.IsZero() && s.Expires.Add(-lease).After(lastExpiry) {
				others = true
			}
		}
		return !lastExpiry.IsZero() && now.After(lastExpiry) && others, nil
	})
	return lastExpiry, err
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// limitTenures is the leadership log checkRun reads the run's segments against. The limits
// tests leave invariant 1 to the chaos tests and the soak (checkLeadership): under the load
// of four five-instance clusters Azurite stalls for seconds, and a scheduler lease taken by a
// write whose reply timed out is held, unlogged, until it lapses, which checkLeadership
// reports though no second holder acted.
func limitTenures(t *testing.T, c *cluster) []tenure {
	t.Helper()
	ts, err := tenures(c.h.Lines())
	if err != nil {
		t.Fatalf("leadership log: %v", err)
	}
	return ts
}

// checkPoisonEmpty fails the test when the work queue's poison (dead-letter) queue holds a
// message.
func checkPoisonEmpty(ctx context.Context, t *testing.T, c *cluster) {
	t.Helper()
	resp, err := c.poison.PeekMessages(ctx, &azqueue.PeekMessagesOptions{NumberOfMessages: to.Ptr(int32(32))})
	if queueerror.HasCode(err, queueerror.QueueNotFound) {
		return
	}
	if err != nil {
		t.Fatalf("peek the poison queue: %v", err)
	}
	if n := len(resp.Messages); n > 0 {
		t.Errorf("the poison (dead-letter) queue holds %d message(s), want none: %s", n, *resp.Messages[0].MessageText)
	}
}

// readLimitedAggregate is the run's report aggregate: the synthetic job's summary, with the
// tries every partition took (Attempts) and how many took more than one (Retried).
func readLimitedAggregate(ctx context.Context, t *testing.T, c *cluster, run string) synthetic.Summary {
	t.Helper()
	rep, _, err := c.store.ReadReport(ctx, run)
	if err != nil {
		t.Fatalf("run %s report: %v", run, err)
	}
	var s synthetic.Summary
	if err := json.Unmarshal(rep.Aggregate, &s); err != nil {
		t.Fatalf("run %s aggregate %s: %v", run, rep.Aggregate, err)
	}
	return s
}

// checkStubBounds fails the test when the stub saw more than the limit allows, apart from
// the requests in beyond: more than MaxInFlight requests at once, more than Rate+Burst
// arrivals in a calendar second, or more than that and Rate·arrivalLag in any sliding window
// of a second. GCRA reserves at most Burst + Rate·T − 1 starts in a window T; a call reaches
// the stub a little after its reserved start, by however long the handler took to wake and
// send it, so starts reserved just before a window can arrive inside it: Rate·arrivalLag
// more in the worst window.
func checkStubBounds(t *testing.T, s *stub, spec limit.Spec, beyond func(stubReq) bool) (peak int, st startStats) {
	t.Helper()
	reqs := slices.DeleteFunc(s.snapshot(), beyond)
	st = arrivalStats(reqs)
	at := overlapAtPeak(reqs)
	if peak = len(at); spec.MaxInFlight > 0 && peak > spec.MaxInFlight {
		var who []string
		for _, r := range at {
			who = append(who, fmt.Sprintf("p%d(pid %d, %s–%s)", r.part, r.pid, r.arrive.Format("15:04:05.000"), r.end.Format("15:04:05.000")))
		}
		t.Errorf("the stub served %d requests at once, over the limit's maxInFlight %d: %s", peak, spec.MaxInFlight, strings.Join(who, " "))
	}
	if spec.Rate > 0 && spec.Per == time.Second {
		bound := spec.Rate + spec.Burst
		if st.perSecond > bound {
			t.Errorf("%d requests arrived in the second %s, over rate+burst %d", st.perSecond, st.secondAt.Format("15:04:05"), bound)
		}
		if slack := spec.Rate * int(arrivalLag) / int(time.Second); st.sliding > bound+slack {
			perPID := map[int]int{}
			for _, r := range reqs {
				if !r.arrive.Before(st.slidingAt) && r.arrive.Before(st.slidingAt.Add(time.Second)) {
					perPID[r.pid]++
				}
			}
			t.Errorf("%d requests arrived in the second from %s (per pid %v), over rate+burst %d and %d for the calls' way to the stub",
				st.sliding, st.slidingAt.Format("15:04:05.000"), perPID, bound, slack)
		}
	}
	return peak, st
}

// arrivalLag bounds how much longer the way from one call's reserved start to the stub takes
// than another's, on a loaded machine.
const arrivalLag = 50 * time.Millisecond

// limitFaults is the limit of the tests: 128 at once (four bundles' worth), at most 120
// starts a second in bursts of 12. With the stub's latency (0.8–1.2 s) both bounds bite: at
// 120 starts a second about 120 calls are in progress at once.
var limitFaults = limit.Spec{Name: stubLimitName, MaxInFlight: 128, Rate: 120, Per: time.Second, Burst: 12}

// limitInFlight is limitFaults' in-flight bound alone.
var limitInFlight = limit.Spec{Name: stubLimitName, MaxInFlight: 128}

// The stub's latency.
const stubMinLat, stubMaxLat = 800 * time.Millisecond, 1200 * time.Millisecond

// limitPartitions is the size of TestLimits_HoldUnderFaults's run: E2E_LIMIT_PARTITIONS, else
// 10,000 (about 3 minutes here: the run goes at 50–60 partitions a second, below the rate,
// as refused bundles wait on the queue for a share of the limit).
func limitPartitions(t *testing.T) int {
	v := os.Getenv("E2E_LIMIT_PARTITIONS")
	if v == "" {
		return 10_000
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 3000 {
		t.Fatalf("E2E_LIMIT_PARTITIONS=%q: want a number of partitions, at least 3000", v)
	}
	return n
}

// holderSlots is how many slots an instance must hold to be killed or paused: a bundle's
// worth, so the fault takes a good share of the limit with it.
const holderSlots = 16

// TestLimits_HoldUnderFaults runs 10,000 partitions (limitPartitions) of a job that calls a stub downstream
// under a limit (maxInFlight 128, rate 120/s, burst 12) on 5 instances, kills (-9) an instance
// while it holds slots and SIGSTOPs another that holds slots for longer than the lease: the
// stub never serves more than maxInFlight at once nor more than rate+burst arrivals in any
// second, the dead and the paused holders' slots go to others once their lease ends, and the
// run succeeds with every partition. It runs over both deliveries (deliveries), and again
// on half the partitions under an in-flight bound alone (limitInFlight), whose slots a
// process hands from bundle to bundle without asking the limit.
func TestLimits_HoldUnderFaults(t *testing.T) {
	t.Parallel()
	for _, d := range deliveries() {
		t.Run(string(d), func(t *testing.T) { limitsUnderFaults(t, d, limitFaults, limitPartitions(t)) })
		t.Run(string(d)+"-inflight", func(t *testing.T) { limitsUnderFaults(t, d, limitInFlight, limitPartitions(t)/2) })
	}
}

func limitsUnderFaults(t *testing.T, d devhost.Delivery, limitFaults limit.Spec, n int) {
	t.Parallel()
	s := startStub(t, stubMinLat, stubMaxLat)
	params, extra := limitSettings(t, s, n, limitFaults)
	c := startCluster(t, clusterOpts{exe: appBin, instances: 5, params: params, extra: extra, delivery: d})
	ctx := testCtx(t, 3*time.Minute+time.Duration(n)*time.Second/30) // 30 partitions a second and the faults
	ls := c.limitStore()
	began := time.Now()
	run := c.startRun(ctx)

	// Well under way: every instance has had its chance at the limit.
	if err := waitFor(ctx, 50*time.Millisecond, "2,000 calls to the stub", func() (bool, error) { return s.count() >= 2000, nil }); err != nil {
		t.Fatal(err)
	}
	killed, killedAt := c.strikeHolder(ctx, t, ls, map[string]bool{}, (*devhost.Instance).Kill, nil)
	killedHolder := fmt.Sprintf("%s/%d", killed.instance, killed.pid)
	killExpiry, err := waitSlotsTaken(ctx, ls, killedHolder, leaseDuration)
	if err != nil {
		t.Fatal(err)
	}
	retaken := time.Since(killedAt)

	paused, pausedAt := c.strikeHolder(ctx, t, ls, map[string]bool{killed.instance: true}, (*devhost.Instance).Pause, (*devhost.Instance).Resume)
	pausedHolder := fmt.Sprintf("%s/%d", paused.instance, paused.pid)
	pauseExpiry, err := waitSlotsTaken(ctx, ls, pausedHolder, leaseDuration)
	if err != nil {
		t.Fatal(err)
	}
	// Paused past its lease: its slots expired and went to others.
	if err := waitFor(ctx, 50*time.Millisecond, "the pause outlasting the lease", func() (bool, error) {
		return time.Since(pausedAt) > leaseDuration+time.Second, nil
	}); err != nil {
		t.Fatal(err)
	}
	resumedAt := time.Now()
	if err := c.h.Instance(paused.instance).Resume(); err != nil {
		t.Fatal(err)
	}
	pause := time.Since(pausedAt)
	callsAtResume := s.count()

	m, err := c.waitFinal(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	// Calls the paused instance began before its pause reach the stub after it, when their
	// slots have gone to others: no lease fences a call already under way (docs/jobs.md,
	// Limits). Each held a slot of the instance's; they are counted, not held to the bounds.
	late := func(r stubReq) bool {
		return r.pid == paused.pid && r.began.Before(pausedAt) && r.arrive.After(resumedAt)
	}
	peak, st := checkStubBounds(t, s, limitFaults, late)
	lateCalls := 0
	for _, r := range s.snapshot() {
		if late(r) {
			lateCalls++
		}
	}
	if lateCalls > paused.slot.Slots {
		t.Errorf("%d calls the paused instance began before its pause reached the stub after it, more than the %d slots it held", lateCalls, paused.slot.Slots)
	}
	ts := limitTenures(t, c)
	fig := checkRun(t, c, run, runWant{partitions: n, state: ledger.StateSucceeded}, ts)
	agg := readLimitedAggregate(ctx, t, c, run)
	if agg.OK != n || agg.Failed != 0 {
		t.Errorf("aggregate %+v, want %d partitions ok", agg, n)
	}
	checkPoisonEmpty(ctx, t, c)
	reqs := s.snapshot()
	if len(reqs) < n {
		t.Errorf("the stub served %d requests for %d partitions", len(reqs), n)
	}
	if s.count() <= callsAtResume {
		t.Errorf("no call after the paused instance resumed")
	}
	figures(t, "delivery=%s run=%s partitions=%d state=%s took %s (%.0f/s); limit %s; stub: %d requests, most at once %d (max %d), most per calendar second %d, in a sliding second %d (rate+burst %d); killed %s holding %d slot(s), its slots expired %s after the kill and were retaken %s after it; paused %s holding %d slot(s) for %s, slots expired %s after the pause, %d call(s) begun before it arrived after it; retried partitions=%d attempts=%d duplicates=%d redeliveries=%d",
		d, run, n, m.State, took.Round(time.Millisecond), float64(n)/m.Finished.Sub(m.Created).Seconds(), limitFaults,
		len(reqs), peak, limitFaults.MaxInFlight, st.perSecond, st.sliding, limitFaults.Rate+limitFaults.Burst,
		killedHolder, killed.slot.Slots, killExpiry.Sub(killedAt).Round(time.Millisecond), retaken.Round(time.Millisecond),
		pausedHolder, paused.slot.Slots, pause.Round(time.Millisecond), pauseExpiry.Sub(pausedAt).Round(time.Millisecond), lateCalls,
		agg.Retried, agg.Attempts, fig.Duplicates, fig.Redelivered)
}

const limitSlowParts = 4_000

// TestLimits_SlowDownBacksOff runs 4,000 partitions under the same limit on 5 instances and
// switches the stub to answer 429 with Retry-After 20 for 20 s once the run is under way.
// Every instance backs off: in the 20 s from the first 429 the stub sees no more than the
// bound slowDownBound explains; no partition spends a try on the 429s (every result took
// one try), nothing reaches the dead-letter (poison) queue, and the run succeeds with every
// partition. It runs over both deliveries (deliveries).
func TestLimits_SlowDownBacksOff(t *testing.T) {
	t.Parallel()
	for _, d := range deliveries() {
		t.Run(string(d), func(t *testing.T) { limitsSlowDown(t, d) })
	}
}

// slowDownBound is the most requests that may reach the stub in the stubRetryAfter from its
// first 429, for a limit of maxInFlight m under which slots partitions were granted in that
// window. Every request in the window is answered 429, and a partition's 429 stops its
// grant's starts before its slot is given back (work.limited calls Hold.SlowDown before the
// partition's Done), so each slot of a grant makes at most one request in the window: the
// grants alive at the first 429 hold at most m slots; the grants made after it, before the
// slow-down is in the limit's blob, add their own slots; after that no grant is made until
// the slow-down has passed (checked on its own from the log).
func slowDownBound(m, granted int) int { return m + granted }

func limitsSlowDown(t *testing.T, d devhost.Delivery) {
	t.Parallel()
	spec := limitFaults
	s := startStub(t, stubMinLat, stubMaxLat)
	params, extra := limitSettings(t, s, limitSlowParts, spec)
	c := startCluster(t, clusterOpts{exe: appBin, instances: 5, params: params, extra: extra, delivery: d})
	ctx := testCtx(t, 6*time.Minute)
	ls := c.limitStore()
	began := time.Now()
	run := c.startRun(ctx)
	if err := waitFor(ctx, 20*time.Millisecond, "800 calls to the stub", func() (bool, error) { return s.count() >= 800, nil }); err != nil {
		t.Fatal(err)
	}
	switched := s.throttle(stubRetryAfter)
	var first stubReq
	if err := waitFor(ctx, 10*time.Millisecond, "the stub's first 429", func() (bool, error) {
		reqs := s.snapshot()
		for _, r := range reqs {
			if !r.arrive.Before(switched) {
				first = r
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
	t429 := first.arrive
	windowEnd := t429.Add(stubRetryAfter)
	m, err := c.waitFinal(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)

	reqs := s.snapshot()
	inWindow, throttled, lateOK := 0, 0, 0
	perPID := map[int]int{}
	for _, r := range reqs {
		if r.status == http.StatusTooManyRequests {
			throttled++
		}
		if r.arrive.Before(t429) || !r.arrive.Before(windowEnd) {
			continue
		}
		inWindow++
		perPID[r.pid]++
		if r.status != http.StatusTooManyRequests {
			lateOK++ // arrived after the stub's 20 s ended but before the window's end
		}
	}
	// Grants in the window, and the first slow-down written (its line follows the write).
	var granted int
	var slowWritten time.Time
	var lateGrants []string
	for _, l := range c.h.Lines() {
		if l.Str("limit") != stubLimitName && l.Msg != "the downstream asked to slow down" {
			continue
		}
		switch {
		case l.Msg == "the downstream asked to slow down" && slowWritten.IsZero() && l.Time.After(t429):
			slowWritten = l.Time
		case l.Msg == "limit granted" && !l.Time.Before(t429) && l.Time.Before(windowEnd):
			granted += int(l.Int("slots"))
		}
	}
	if slowWritten.IsZero() {
		t.Fatal("no instance logged that the downstream asked to slow down")
	}
	for _, l := range c.h.Lines() {
		// A grant decided before the slow-down reached the blob is logged once its write
		// returns: a second is ample for that on a loaded machine.
		if l.Msg == "limit granted" && l.Time.After(slowWritten.Add(time.Second)) && l.Time.Before(windowEnd.Add(-time.Second)) {
			lateGrants = append(lateGrants, fmt.Sprintf("%s %s slots=%d", l.Time.Format("15:04:05.000"), l.Instance, l.Int("slots")))
		}
	}
	if len(lateGrants) > 0 {
		t.Errorf("slots granted after the slow-down was written (%s) and before it passed (%s): %s",
			slowWritten.Format("15:04:05.000"), windowEnd.Format("15:04:05.000"), strings.Join(lateGrants, "; "))
	}
	bound := slowDownBound(spec.MaxInFlight, granted)
	if inWindow > bound {
		t.Errorf("%d requests reached the stub in the %s from its first 429 (per pid %v), want at most %d (maxInFlight %d + %d slots granted in the window)",
			inWindow, stubRetryAfter, perPID, bound, spec.MaxInFlight, granted)
	}
	st, err := ls.Read(ctx, stubLimitName)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(st.SlowReason, "429") || st.SlowUntil.Before(windowEnd) {
		t.Errorf("the limit's slow-down: until %s, reason %q; want until at least %s for a 429", st.SlowUntil, st.SlowReason, windowEnd)
	}

	peak, stats := checkStubBounds(t, s, spec, func(stubReq) bool { return false })
	ts := limitTenures(t, c)
	fig := checkRun(t, c, run, runWant{partitions: limitSlowParts, state: ledger.StateSucceeded}, ts)
	agg := readLimitedAggregate(ctx, t, c, run)
	if agg.OK != limitSlowParts || agg.Failed != 0 || agg.Retried != 0 || agg.Attempts != limitSlowParts {
		t.Errorf("aggregate %+v, want %d partitions ok, each on its first try (attempts %d, retried 0)", agg, limitSlowParts, limitSlowParts)
	}
	checkPoisonEmpty(ctx, t, c)
	var sentBack int
	for _, l := range c.h.Lines() {
		if l.Msg == "partition sent back to wait for its limit" && l.Str("run") == run {
			sentBack++
		}
	}
	figures(t, "delivery=%s run=%s partitions=%d state=%s took %s; limit %s; stub: %d requests, %d answered 429; in the %s from the first 429 (%s after the switch): %d requests (bound %d: maxInFlight %d + %d slots granted in the window), per pid %v, %d answered 200 after the stub's 20 s; slow-down first logged %s after the first 429; partitions sent back=%d; most at once %d, most per calendar second %d, sliding %d; attempts=%d retried=%d duplicates=%d redeliveries=%d",
		d, run, limitSlowParts, m.State, took.Round(time.Millisecond), spec, len(reqs), throttled, stubRetryAfter, t429.Sub(switched).Round(time.Millisecond),
		inWindow, bound, spec.MaxInFlight, granted, perPID, lateOK, slowWritten.Sub(t429).Round(time.Millisecond), sentBack,
		peak, stats.perSecond, stats.sliding, agg.Attempts, agg.Retried, fig.Duplicates, fig.Redelivered)
}
