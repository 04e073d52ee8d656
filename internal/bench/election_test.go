package bench

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/election/bloblease"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/google/uuid"
)

// electionRounds is the number of contested rounds per contender count.
const electionRounds = 100

// roundTripCalls is the number of plain GetProperties round trips in each baseline.
const roundTripCalls = 200

// BenchmarkElection measures a contested election the way a tick causes one: N instances,
// each with its own BlobLock (and its own HTTP connections) over the same lease blob, call
// Acquire at the same instant on a free lease; one wins, the others get *HeldError naming it.
// The winner releases before the next round. Each iteration runs electionRounds rounds and a
// baseline of roundTripCalls plain GetProperties calls on the same blob (half before, half
// after the rounds), plus the same number of calls issued N at a time.
//
// A lock remembers the last record it saw: the winner of a round, which released the lease
// itself, acquires first in the next and skips the read (two calls) when no one wrote since.
// So each iteration runs the rounds twice: with the same locks throughout (a process's
// scheduler lock, which lives as long as the process), and with fresh locks in every round
// (remembering nothing, as a run's lock made per use: the read-first path, three calls).
//
// Metrics: winner-p50/p99-ns (Acquire → leader), loser-p50/p99-ns (Acquire → HeldError),
// roundtrip-p50/p99-ns (one GetProperties alone), roundtrip-concurrent-p50-ns (N at once),
// and winner/loser p50 as a ratio of the round trip; winner-calls and loser-calls are the
// storage requests one Acquire made (mean; the winner's release is not counted).
// solo-acquire-p50-ns and solo-record-p50-ns are the two writes any winner makes (take the
// lease, write the holder and epoch under it), each timed alone on a blob no contender uses,
// and two-call-floor-ratio is their sum over the round trip: what the fastest possible
// winner's path (those two calls, nothing else, no contender in the way) costs.
// solo-winner-p50-ns and solo-winner-ratio-vs-roundtrip time the last holder's whole
// Acquire with no contender (its own lease blob): the path as built, alone.
// fresh-winner-p50-ns, fresh-winner-ratio-vs-roundtrip and fresh-winner-calls are the
// winner's figures in the rounds with fresh locks; repeat-winner-share is the share of the
// remembering rounds won by the previous round's winner.
func BenchmarkElection(b *testing.B) {
	for _, n := range sizes(2, 8, 32) {
		b.Run(fmt.Sprintf("contenders=%d", n), func(b *testing.B) {
			var winners, losers, fresh, freshLosers, rtt, rttConc, soloAcq, soloRec, soloWin Samples
			var st, fst roundStats
			for b.Loop() {
				e := newElection(b, n)
				e.round(b, nil) // warm-up: creates the container and the blob, opens connections
				e.roundTrips(b, &rtt, roundTripCalls/2)
				e.concurrentRoundTrips(b, &rttConc, roundTripCalls/n+1)
				st = roundStats{winners: &winners, losers: &losers}
				for range electionRounds {
					e.round(b, &st)
				}
				fst = roundStats{winners: &fresh, losers: &freshLosers}
				for range electionRounds {
					e.forget(b)
					e.round(b, &fst)
				}
				e.roundTrips(b, &rtt, roundTripCalls/2)
				e.soloWrites(b, &soloAcq, &soloRec, roundTripCalls/2)
				e.soloElections(b, &soloWin, roundTripCalls/2)
			}
			b.ReportMetric(float64(st.winnerCalls)/float64(electionRounds), "winner-calls")
			b.ReportMetric(float64(st.repeats)/float64(electionRounds), "repeat-winner-share")
			b.ReportMetric(float64(fst.winnerCalls)/float64(electionRounds), "fresh-winner-calls")
			b.ReportMetric(float64(fresh.Percentile(50)), "fresh-winner-p50-ns")
			b.ReportMetric(Ratio(fresh.Percentile(50), rtt.Percentile(50)), "fresh-winner-ratio-vs-roundtrip")
			b.ReportMetric(float64(st.loserCalls)/float64(electionRounds*(n-1)), "loser-calls")
			rt := rtt.Percentile(50)
			b.ReportMetric(float64(winners.Percentile(50)), "winner-p50-ns")
			b.ReportMetric(float64(winners.Percentile(99)), "winner-p99-ns")
			b.ReportMetric(float64(losers.Percentile(50)), "loser-p50-ns")
			b.ReportMetric(float64(losers.Percentile(99)), "loser-p99-ns")
			b.ReportMetric(float64(rt), "roundtrip-p50-ns")
			b.ReportMetric(float64(rtt.Percentile(99)), "roundtrip-p99-ns")
			b.ReportMetric(float64(rttConc.Percentile(50)), "roundtrip-concurrent-p50-ns")
			b.ReportMetric(Ratio(winners.Percentile(50), rt), "winner-ratio-vs-roundtrip")
			b.ReportMetric(Ratio(losers.Percentile(50), rt), "loser-ratio-vs-roundtrip")
			b.ReportMetric(float64(soloAcq.Percentile(50)), "solo-acquire-p50-ns")
			b.ReportMetric(float64(soloRec.Percentile(50)), "solo-record-p50-ns")
			b.ReportMetric(Ratio(soloAcq.Percentile(50)+soloRec.Percentile(50), rt), "two-call-floor-ratio")
			b.ReportMetric(float64(soloWin.Percentile(50)), "solo-winner-p50-ns")
			b.ReportMetric(Ratio(soloWin.Percentile(50), rt), "solo-winner-ratio-vs-roundtrip")
		})
	}
}

// contest is N contenders over one lease blob in a fresh container.
type contest struct {
	locks      []*bloblease.BlobLock
	containers []*container.Client // each contender's client, for fresh locks
	lastWinner int                 // -1 before the first round
	ids        []ledger.Holder
	calls      []*counter // each contender's storage requests
	// probes make one plain GetProperties on the lease blob, each through a contender's client.
	probes []func() error
	// solo is a blob beside the lease blob, through the first contender's client.
	solo *blockblob.Client
}

func newElection(b *testing.B, n int) *contest {
	b.Helper()
	name := azurite.UniqueName(b, "elect")
	e := &contest{lastWinner: -1}
	for i := range n {
		// Each contender is a separate "process": its own client and connections.
		calls := &counter{}
		e.calls = append(e.calls, calls)
		c := blobClient(b, azurite.Shared(b), calls, true).ServiceClient().NewContainerClient(name)
		e.containers = append(e.containers, c)
		blob := c.NewBlobClient("leader")
		e.probes = append(e.probes, func() error {
			_, err := blob.GetProperties(b.Context(), nil)
			return err
		})
		e.locks = append(e.locks, newBenchLock(b, c))
		if i == 0 {
			e.solo = c.NewBlockBlobClient("solo")
		}
		e.ids = append(e.ids, ledger.Holder{App: "bench", Instance: fmt.Sprintf("contender-%d", i), PID: os.Getpid()})
	}
	b.Cleanup(func() {
		_, _ = blobClient(b, azurite.Shared(b), nil, false).ServiceClient().NewContainerClient(name).Delete(ctxFor(b, 30*time.Second), nil)
	})
	return e
}

// newBenchLock is a contender's lock over the lease blob "leader" in c.
func newBenchLock(b *testing.B, c *container.Client) *bloblease.BlobLock {
	b.Helper()
	lk, err := bloblease.NewBlobLock(c, "leader", bloblease.BlobLockOptions{
		Duration: 15 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	return lk
}

// forget gives every contender a fresh lock (same client and connections) that remembers no
// record.
func (e *contest) forget(b *testing.B) {
	b.Helper()
	for i, c := range e.containers {
		e.locks[i] = newBenchLock(b, c)
	}
}

// roundStats accumulates what the measured rounds saw.
type roundStats struct {
	winners, losers         *Samples
	winnerCalls, loserCalls int64
	repeats                 int // rounds won by the previous round's winner
}

// round starts every contender's Acquire at once, checks that exactly one won, records the
// latencies and storage calls of winner and losers (when st is given) and releases.
func (e *contest) round(b *testing.B, st *roundStats) {
	b.Helper()
	ctx := ctxFor(b, time.Minute)
	type result struct {
		lease election.Lease
		err   error
		took  time.Duration
	}
	res := make([]result, len(e.locks))
	before := make([]int64, len(e.calls))
	for i, c := range e.calls {
		before[i] = c.n.Load()
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, lk := range e.locks {
		wg.Go(func() {
			<-start
			t0 := time.Now()
			l, err := lk.Acquire(ctx, e.ids[i])
			res[i] = result{l, err, time.Since(t0)}
		})
	}
	close(start)
	wg.Wait()
	won := -1
	for i, r := range res {
		var held *election.HeldError
		switch {
		case r.err == nil && won >= 0:
			b.Fatalf("two winners in one round: %s and %s", e.ids[won].Instance, e.ids[i].Instance)
		case r.err == nil:
			won = i
			if st != nil {
				st.winners.Add(r.took)
				st.winnerCalls += e.calls[i].n.Load() - before[i]
				if i == e.lastWinner {
					st.repeats++
				}
			}
		case errors.As(r.err, &held):
			if st != nil {
				st.losers.Add(r.took)
				st.loserCalls += e.calls[i].n.Load() - before[i]
			}
		default:
			b.Fatalf("%s: Acquire: %v", e.ids[i].Instance, r.err)
		}
	}
	if won < 0 {
		// Possible in principle (every attempt timed out); it would make the figures wrong.
		b.Fatalf("no winner in a round of %d", len(e.locks))
	}
	if err := e.locks[won].Release(ctx, res[won].lease); err != nil {
		b.Fatalf("release: %v", err)
	}
	e.lastWinner = won
}

// roundTrips records calls sequential GetProperties round trips.
func (e *contest) roundTrips(b *testing.B, s *Samples, calls int) {
	b.Helper()
	for range calls {
		t0 := time.Now()
		if err := e.probes[0](); err != nil {
			b.Fatalf("GetProperties: %v", err)
		}
		s.Add(time.Since(t0))
	}
}

// concurrentRoundTrips records rounds of N GetProperties calls issued at once: the round trip
// under the same queueing the contenders meet in a single-threaded Azurite.
func (e *contest) concurrentRoundTrips(b *testing.B, s *Samples, rounds int) {
	b.Helper()
	for range rounds {
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, probe := range e.probes {
			wg.Go(func() {
				<-start
				t0 := time.Now()
				if err := probe(); err != nil {
					b.Errorf("GetProperties: %v", err)
				}
				s.Add(time.Since(t0))
			})
		}
		close(start)
		wg.Wait()
	}
}

// soloElections records rounds of the last holder's Acquire with no other contender: one
// lock over a lease blob of its own, through the first contender's client, released after
// each round (untimed).
func (e *contest) soloElections(b *testing.B, s *Samples, rounds int) {
	b.Helper()
	ctx := ctxFor(b, time.Minute)
	lk, err := bloblease.NewBlobLock(e.containers[0], "solo-lock", bloblease.BlobLockOptions{
		Duration: 15 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	for i := range rounds + 1 { // the first round creates the blob, untimed
		t0 := time.Now()
		l, err := lk.Acquire(ctx, e.ids[0])
		if err != nil {
			b.Fatalf("solo Acquire: %v", err)
		}
		if i > 0 {
			s.Add(time.Since(t0))
		}
		if err := lk.Release(ctx, l); err != nil {
			b.Fatalf("solo Release: %v", err)
		}
	}
}

// soloWrites records rounds of a winner's two writes made alone on the solo blob: acquire a
// fresh lease, then write holder-like metadata under it (the lease is released after each,
// untimed).
func (e *contest) soloWrites(b *testing.B, acq, rec *Samples, rounds int) {
	b.Helper()
	ctx := ctxFor(b, time.Minute)
	if _, err := e.solo.UploadBuffer(ctx, nil, nil); err != nil {
		b.Fatalf("create the solo blob: %v", err)
	}
	md := map[string]*string{"epoch": to.Ptr("1"), "holderinstance": to.Ptr("contender-0")}
	for range rounds {
		id := uuid.NewString()
		lc, err := lease.NewBlobClient(e.solo, &lease.BlobClientOptions{LeaseID: &id})
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if _, err := lc.AcquireLease(ctx, 15, nil); err != nil {
			b.Fatalf("acquire: %v", err)
		}
		acq.Add(time.Since(t0))
		t0 = time.Now()
		if _, err := e.solo.SetMetadata(ctx, md, &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{
			LeaseAccessConditions: &blob.LeaseAccessConditions{LeaseID: &id}}}); err != nil {
			b.Fatalf("record: %v", err)
		}
		rec.Add(time.Since(t0))
		if _, err := lc.ReleaseLease(ctx, nil); err != nil {
			b.Fatalf("release: %v", err)
		}
	}
}
