package bloblease

import (
	"errors"
	"maps"
	"net/http"
	"net/http/httptrace"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/election/electiontest"
)

// Orders in which an orderedPipeline lets storage serve a lease acquire and the holder record
// written beside it.
const (
	acquireFirst = iota // the acquire, then the record: the acquire's answer is held until the record is sent
	recordFirst         // the record, then the acquire: the acquire is held until the record is answered
)

// orderedPipeline forwards requests to next. While armed, it makes storage serve the next
// lease acquire and the next holder record in the order it is set to, whatever order the
// network would have given them, and notes whether the record was sent before the acquire's
// answer reached the lock. A lock that waits for the acquire's answer before it writes the
// record never sends it while armed: the acquire's answer is then held until holdFor passes.
type orderedPipeline struct {
	next    policy.Transporter
	holdFor time.Duration

	mu        sync.Mutex
	armed     bool
	order     int
	recSent   chan struct{} // closed when the record is sent
	acqServed chan struct{} // closed when storage has served the acquire
	recServed chan struct{} // closed when storage has answered the record
	overlap   bool          // the record was sent before the acquire's answer came back
}

// arm makes the next acquire and record go through in order.
func (p *orderedPipeline) arm(order int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed, p.order, p.overlap = true, order, false
	p.recSent, p.acqServed, p.recServed = make(chan struct{}), make(chan struct{}), make(chan struct{})
}

// overlapped reports whether the record was sent while the acquire awaited its answer, and disarms.
func (p *orderedPipeline) overlapped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = false
	return p.overlap
}

func (p *orderedPipeline) Do(req *http.Request) (*http.Response, error) {
	p.mu.Lock()
	armed, order, recSent, acqServed, recServed := p.armed, p.order, p.recSent, p.acqServed, p.recServed
	p.mu.Unlock()
	isRecord := req.Method == http.MethodPut && req.URL.Query().Get("comp") == "metadata"
	switch {
	case !armed:
		return p.next.Do(req)
	case testLeaseAction(req) == "acquire":
		if order == recordFirst {
			// The acquire is on the wire, and reaches storage after the record.
			if trace := httptrace.ContextClientTrace(req.Context()); trace != nil && trace.WroteRequest != nil {
				trace.WroteRequest(httptrace.WroteRequestInfo{})
			}
			p.await(recServed)
		}
		resp, err := p.next.Do(req)
		close(acqServed)
		if order == acquireFirst {
			sent := p.await(recSent)
			p.mu.Lock()
			p.overlap = sent
			p.mu.Unlock()
		}
		return resp, err
	case isRecord:
		p.mu.Lock()
		first := p.recSent != nil
		if first {
			close(p.recSent)
			p.recSent = nil
		}
		p.mu.Unlock()
		if !first {
			return p.next.Do(req)
		}
		if order == acquireFirst {
			p.await(acqServed)
		}
		resp, err := p.next.Do(req)
		close(recServed)
		return resp, err
	}
	return p.next.Do(req)
}

// await waits for ch to close, at most holdFor; it reports whether ch closed.
func (p *orderedPipeline) await(ch chan struct{}) bool {
	t := time.NewTimer(p.holdFor)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// A lock that knows the record it left sends the next record while its acquire is still
// awaiting its answer: two calls in about one round trip. When storage serves them in that
// order, the record takes effect (two calls); when the record overtakes the acquire, storage
// refuses it (no lease yet) and it is written again after the acquire's answer, with the same
// epoch (three calls). Either way the epoch is the next one and the lease is held.
func TestBlobLock_Acquire_SendsTheRecordBesideTheAcquire(t *testing.T) {
	t.Parallel()
	ft := newTestFaultTransport()
	calls := &callKinds{n: map[string]int{}}
	ft.setRule(calls.rule)
	pipe := &orderedPipeline{next: ft, holdFor: 3 * time.Second}
	lk := newTestBlobLockOn(t, newTestContainer(t, pipe, nil))
	ctx := t.Context()

	l, err := lk.Acquire(ctx, electiontest.Holder(1)) // creates the blob: the read-first path
	if err != nil {
		t.Fatal(err)
	}
	for round, order := range []int{acquireFirst, recordFirst, acquireFirst} {
		if err := lk.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
		calls.take()
		pipe.arm(order)
		prev := l.Epoch
		if l, err = lk.Acquire(ctx, electiontest.Holder(1)); err != nil {
			t.Fatalf("round %d: Acquire: %v", round, err)
		}
		overlapped := pipe.overlapped()
		got := calls.take()
		if l.Epoch != prev+1 || l.PreviousHolder != electiontest.Holder(1) || l.PreviousReleasedAt.IsZero() {
			t.Errorf("round %d: lease %+v, want epoch %d after holder 1's release", round, l, prev+1)
		}
		switch order {
		case acquireFirst:
			if !overlapped {
				t.Errorf("round %d: the record was not sent while the acquire awaited its answer", round)
			}
			if want := map[string]int{"acquire": 1, "record": 1}; !maps.Equal(got, want) {
				t.Errorf("round %d: calls %v, want %v", round, got, want)
			}
		case recordFirst:
			if want := map[string]int{"acquire": 1, "record": 2}; !maps.Equal(got, want) {
				t.Errorf("round %d (record overtook the acquire): calls %v, want %v", round, got, want)
			}
		}
		st, err := lk.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Held || st.Holder != electiontest.Holder(1) || st.Epoch != l.Epoch {
			t.Errorf("round %d: state %+v, want held by holder 1 at epoch %d", round, st, l.Epoch)
		}
		if err := lk.Renew(ctx, l); err != nil {
			t.Errorf("round %d: Renew: %v", round, err)
		}
	}

	// A contender that also remembers the lease free sends its record beside its acquire too;
	// it loses the acquire, its record is refused, and it names the winner.
	other := newTestBlobLockOn(t, newTestContainerAlias(t, lk.container))
	if err := lk.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	if _, err := other.State(ctx); err != nil { // other now knows the released record
		t.Fatal(err)
	}
	won, err := lk.Acquire(ctx, electiontest.Holder(1))
	if err != nil {
		t.Fatal(err)
	}
	var held *election.HeldError
	if _, err := other.Acquire(ctx, electiontest.Holder(2)); !errors.As(err, &held) || held.Holder != electiontest.Holder(1) || held.Epoch != won.Epoch {
		t.Fatalf("the loser's Acquire: %v, want HeldError naming holder 1 at epoch %d", err, won.Epoch)
	}
	if st, err := lk.State(ctx); err != nil || st.Epoch != won.Epoch || st.Holder != electiontest.Holder(1) {
		t.Errorf("after the loser's try: state %+v (%v), want holder 1 at epoch %d", st, err, won.Epoch)
	}
}
