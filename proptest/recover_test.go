package proptest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// The recover policy's exclusions (SPEC §4 rule 5), on the shipped runner:
// a submission that escaped without an attempt, a local copy that failed
// without a completion record, and a lost device are quarantined at their
// containment deadline and stay so however many Quiesce trues arrive later,
// while a lease beside them whose backend returned an attempt is recovered by
// the same trues (so the trues do arrive: the property is not vacuous).

// recoverExclusion is what makes the lease under test unrecoverable.
type recoverExclusion uint8

const (
	escapedSubmission recoverExclusion = iota // Fetch failed without an attempt
	copyFailed                                // its staging→device copy failed without a completion record
	deviceLost                                // the device was lost with a copy in flight
)

func (e recoverExclusion) String() string {
	return [...]string{"escaped submission", "copy failed", "device lost"}[e]
}

// provable is a backend whose Quiesce answers true for a batch only once the
// test has let every attempt in it be proven; every submission is served at
// once, unless the test makes the next one escape.
type provable struct {
	mu      sync.Mutex
	escape  bool // the next Fetch fails without an attempt
	proven  map[*provableAttempt]bool
	all     bool // every attempt may be proven
	trues   int  // Quiesce calls answered true
	fetched []*provableAttempt
}

type provableAttempt struct {
	o contract.Outcome
}

func (a *provableAttempt) Poll() contract.Outcome { return a.o }

func (b *provable) Fetch(ext contract.CacheExtent, _ contract.Route) (contract.Attempt, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.escape {
		b.escape = false
		return nil, errors.New("provable: the connection reset mid-request (something may have escaped)")
	}
	names := make([]contract.Name, ext.Len())
	for i := range names {
		names[i] = ext.Unit(i).Name
	}
	a := &provableAttempt{o: contract.Delivered{Served: contract.NewNameSet(names...)}}
	b.fetched = append(b.fetched, a)
	return a, nil
}

func (b *provable) Quiesce(_ context.Context, list []contract.Attempt) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, a := range list {
		if !b.all && !b.proven[a.(*provableAttempt)] {
			return false, nil
		}
	}
	b.trues++
	return true, nil
}

func (b *provable) prove(a *provableAttempt) {
	b.mu.Lock()
	b.proven[a] = true
	b.mu.Unlock()
}

func (b *provable) last() *provableAttempt {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fetched[len(b.fetched)-1]
}

func (b *provable) Settle(context.Context, []contract.Attempt) error { return nil }
func (b *provable) Probe(context.Context, []byte, []contract.Name) (contract.NameSet, bool, error) {
	return contract.NameSet{}, false, nil
}
func (b *provable) OpenRoute(map[string]string) (contract.Route, error) {
	return nil, fmt.Errorf("provable: %w", errors.ErrUnsupported)
}

func TestModelRecoverExclusions(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		exclusion := recoverExclusion(rapid.IntRange(0, 2).Draw(t, "exclusion"))
		rows := rapid.IntRange(1, 4).Draw(t, "rows")
		const slots, grace = 16, time.Second
		clock := newClock()
		dev, err := sim.New(0, 1<<20)
		must(t, err)
		stream, err := dev.NewStream()
		must(t, err)
		mem, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: slots, SlotBytes: 16})
		must(t, err)
		be := &provable{proven: map[*provableAttempt]bool{}}
		eng, err := readiness.New(readiness.Config{
			Memory: mem, TokensPerBlock: tpb, Containment: readiness.Recover, Logger: discardLogger(),
			RequestTimeout: grace, DrainGrace: grace, QuiesceTimeout: time.Hour, RecoverEvery: grace,
			RetryBackoff: 10 * time.Millisecond, MaxRetryBackoff: 100 * time.Millisecond,
			Fetcher: be, Stream: stream, Health: dev, Clock: clock,
		})
		must(t, err)
		settle := func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := eng.Sync(ctx); err != nil {
				t.Fatalf("Sync: %v", err)
			}
		}
		serial := 0
		lend := func(n int) readiness.Handle {
			serial++
			req := readiness.Request{Kind: readiness.Fetch}
			for b := range n {
				p, err := dev.Alloc(16)
				must(t, err)
				req.Rows = append(req.Rows, staging.Row{Name: nameOf(serial, 0, b), Group: 0, Block: b, Device: p})
			}
			h, err := eng.Lend(req)
			must(t, err)
			settle()
			return h
		}
		state := func(h readiness.Handle) readiness.LeaseInfo {
			info, err := eng.Lease(h)
			must(t, err)
			return info
		}

		// The lease under test, x; beside it, y, which a later true recovers
		// (none on a lost device: nothing is recovered there).
		var x, y readiness.Handle
		recoverable := exclusion != deviceLost
		switch exclusion {
		case escapedSubmission:
			be.mu.Lock()
			be.escape = true
			be.mu.Unlock()
			x = lend(rows)
		case copyFailed, deviceLost:
			x = lend(rows)
			be.prove(be.last()) // fenced at the retry: its staging→device copies are queued
			clock.Advance(200 * time.Millisecond)
			settle()
			if got := state(x).State; got != readiness.StateAccessFenced {
				t.Fatalf("x is %v; want access_fenced with its copies in flight", got)
			}
		}
		y = lend(rows) // served, its access not yet proven
		switch exclusion {
		case copyFailed:
			// One event covers x's copies: fail it.
			if _, err := dev.FailNext(stream, 1); err != nil {
				t.Fatalf("FailNext: %v", err)
			}
		case deviceLost:
			dev.Lose("Xid 79: GPU has fallen off the bus")
		}
		settle()
		clock.Advance(2*grace + time.Millisecond) // past every containment deadline
		settle()
		if info := state(x); info.State != readiness.StateQuarantined || !info.Contained {
			t.Fatalf("%v: x is %v (contained %v) at its containment deadline under recover; want quarantined", exclusion, info.State, info.Contained)
		}
		if info := state(y); info.State != readiness.StateContained && recoverable {
			t.Fatalf("y is %v at its containment deadline; want contained (recover policy)", info.State)
		}

		// Quiesce answers true for everything from now on, round after round.
		be.mu.Lock()
		be.all = true
		be.mu.Unlock()
		held := eng.Stats().SlotsQuarantined
		for i := range rapid.IntRange(1, 12).Draw(t, "rounds") {
			clock.Advance(time.Duration(rapid.IntRange(1, 3).Draw(t, fmt.Sprintf("advance%d", i))) * grace)
			settle()
			dev.CompleteAll()
			settle()
			if info := state(x); info.State != readiness.StateQuarantined {
				t.Fatalf("%v: after %d rounds of Quiesce true, x is %v; want quarantined for ever", exclusion, i+1, info.State)
			}
			st := eng.Stats()
			if st.SlotsQuarantined < held || st.SlotsQuarantined < rows {
				t.Fatalf("%v: slots quarantined went from %d to %d (x has %d rows): quarantined slots never return", exclusion, held, st.SlotsQuarantined, rows)
			}
		}
		st := eng.Stats()
		if recoverable {
			if info := state(y); st.Recovered != 1 || info.State != readiness.StateLogicallyComplete {
				t.Fatalf("y, with an attempt, is %v after Quiesce true (recovered %d): the trues were not taken", info.State, st.Recovered)
			}
			if st.SlotsQuarantined != rows {
				t.Fatalf("%d slots quarantined; want x's %d", st.SlotsQuarantined, rows)
			}
		} else if st.Recovered != 0 {
			t.Fatalf("%d leases recovered after the device was lost: never for a lost device", st.Recovered)
		}
		be.mu.Lock()
		trues := be.trues
		be.mu.Unlock()
		if recoverable && trues == 0 {
			t.Fatalf("Quiesce never answered true: the property checked nothing")
		}
		eng.Close()
		for range 10 {
			clock.Advance(10 * grace)
			settle()
			if eng.Report().Drained {
				return
			}
		}
		t.Fatalf("the engine did not drain: %+v", eng.Report())
	})
}
