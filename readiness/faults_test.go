package readiness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/staging"
)

// rogueFault is what one attempt of the rogue backend does wrong.
type rogueFault uint8

const (
	rogueStorm        rogueFault = iota // its completion is called 2–300 times, from several goroutines
	rogueEarly                          // completions before the outcome, and again after it
	rogueSilent                         // a Notifier that never calls its completion
	roguePanicSubmit                    // Fetch or Publish panics
	roguePanicPoll                      // Poll panics
	roguePanicQuiesce                   // Quiesce and TryQuiesce panic
	roguePanicCancel                    // silent, and RequestCancel panics
	roguePanicNotify                    // Notify panics
	rogueChanges                        // Poll's answer changes after the first, within its kind or to another
	rogueBlocks                         // Quiesce blocks until the test ends, ignoring its context
	rogueNeverProves                    // Quiesce false, TryQuiesce unproven, for ever
	rogueUnknownProbe                   // TryQuiesce always unknown: its proof goes to a worker
	numRogueFaults
)

var rogueNames = [numRogueFaults]string{"storm", "early", "silent", "panic-submit", "panic-poll",
	"panic-quiesce", "panic-cancel", "panic-notify", "changes", "blocks", "never-proves", "unknown-probe"}

func (f rogueFault) String() string { return rogueNames[f] }

// provable reports whether an attempt with this fault can ever be proven
// over: the others must end contained.
func (f rogueFault) provable() bool {
	return f != roguePanicSubmit && f != roguePanicQuiesce && f != rogueBlocks && f != rogueNeverProves
}

// quick reports whether a lease with this fault settles without the clock
// moving (no deadline needed).
func (f rogueFault) quick() bool {
	return f.provable() && f != rogueSilent && f != roguePanicCancel
}

// rogue is a backend that does everything a backend must not: it calls its
// completion callback again and again, before its outcome and after its
// fence, from several goroutines; panics in every call; changes its answers;
// blocks in Quiesce for ever, ignoring its context; never proves anything. It
// records what it did, so that the test judges the engine by the backend's
// own account.
type rogue struct {
	mem    *staging.Memory
	faults map[string]rogueFault // by the first unit's name
	stop   chan struct{}         // closed when the test ends: blocked calls return
	wg     sync.WaitGroup

	mu       sync.Mutex
	attempts []*rogueAttempt
	panics   atomic.Int64 // panics thrown in calls the engine made
	extra    atomic.Int64 // completion calls beyond each attempt's first
}

type rogueAttempt struct {
	r          *rogue
	fault      rogueFault
	names      []contract.Name
	registered chan struct{} // closed once Notify registered the callback

	mu      sync.Mutex
	outcome contract.Outcome
	polls   int
	ended   bool // Quiesce or TryQuiesce answered that access ended
	notify  func()
	calls   int // completion calls made
}

func (r *rogue) boom(where string) {
	r.panics.Add(1)
	panic("rogue: " + where)
}

func (r *rogue) submit(ext contract.CacheExtent) (contract.Attempt, error) {
	first := ext.Unit(0).Name
	f := r.faults[string(first[:])]
	if f == roguePanicSubmit {
		r.boom("submit")
	}
	a := &rogueAttempt{r: r, fault: f, registered: make(chan struct{})}
	for _, u := range ext.All() {
		a.names = append(a.names, u.Name)
	}
	r.mu.Lock()
	r.attempts = append(r.attempts, a)
	r.mu.Unlock()
	if f != rogueSilent && f != roguePanicCancel {
		r.wg.Add(1)
		go a.deliver()
	}
	return a, nil
}

func (r *rogue) Fetch(ext contract.CacheExtent, _ contract.Route) (contract.Attempt, error) {
	return r.submit(ext)
}
func (r *rogue) Publish(ext contract.CacheExtent) (contract.Attempt, error) { return r.submit(ext) }

// deliver answers, and calls the completion as its fault says.
func (a *rogueAttempt) deliver() {
	defer a.r.wg.Done()
	if a.fault != roguePanicNotify {
		select { // the engine registers it right after the submission returns
		case <-a.registered:
		case <-a.r.stop:
		case <-time.After(5 * time.Second):
		}
	}
	times := 1
	switch a.fault {
	case rogueStorm:
		times = 2 + int(a.names[0][40])*37%299 // up to 300: past the mailbox bound of a small engine if each were a letter
	case rogueEarly:
		a.complete(1 + int(a.names[0][40])%3)
	}
	a.mu.Lock()
	a.outcome = contract.Delivered{Served: contract.NewNameSet(a.names...)}
	a.mu.Unlock()
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); a.complete(times/3 + btoi(g < times%3)) }()
	}
	wg.Wait()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// complete calls the completion n times.
func (a *rogueAttempt) complete(n int) {
	for range n {
		a.mu.Lock()
		f := a.notify
		if f != nil {
			a.calls++
			if a.calls > 1 {
				a.r.extra.Add(1)
			}
		}
		a.mu.Unlock()
		if f != nil {
			f()
		}
	}
}

func (a *rogueAttempt) Poll() contract.Outcome {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fault == roguePanicPoll && a.outcome != nil {
		a.r.boom("poll")
	}
	if a.outcome == nil {
		return nil
	}
	a.polls++
	if a.fault == rogueChanges && a.polls > 1 {
		if len(a.names) > 1 && a.polls%2 == 0 {
			return contract.Delivered{Served: contract.NewNameSet(a.names[1:]...)}
		}
		return contract.Failed{Reason: "rogue: changed its mind"}
	}
	return a.outcome
}

func (a *rogueAttempt) Notify(f func()) {
	if a.fault == roguePanicNotify {
		a.r.boom("notify")
	}
	a.mu.Lock()
	a.notify = f
	a.mu.Unlock()
	close(a.registered)
}

func (a *rogueAttempt) RequestCancel() (contract.CancelDisposition, error) {
	if a.fault == roguePanicCancel {
		a.r.boom("cancel")
	}
	return contract.CancelRequested, nil
}

// answer decides a proof for list: how it ends, or blocks.
func (r *rogue) answer(list []contract.Attempt, probe bool) (contract.Access, error) {
	var blocks bool
	access := contract.AccessEnded
	for _, x := range list {
		a, ok := x.(*rogueAttempt)
		if !ok {
			return contract.AccessUnproven, fmt.Errorf("rogue: attempt %T is not mine", x)
		}
		switch a.fault {
		case roguePanicQuiesce:
			r.boom("quiesce")
		case rogueBlocks:
			blocks = true
		case rogueNeverProves:
			access = contract.AccessUnproven
		case rogueUnknownProbe:
			if probe {
				return contract.AccessUnknown, nil
			}
		}
	}
	if blocks {
		if probe {
			return contract.AccessUnknown, nil
		}
		<-r.stop // for ever, whatever the context says
		return contract.AccessUnproven, errors.New("rogue: released at the end of the test")
	}
	if access == contract.AccessEnded {
		for _, x := range list {
			a := x.(*rogueAttempt)
			a.mu.Lock()
			a.ended = true
			a.mu.Unlock()
		}
	}
	return access, nil
}

func (r *rogue) TryQuiesce(list []contract.Attempt) (contract.Access, error) {
	return r.answer(list, true)
}

func (r *rogue) Quiesce(_ context.Context, list []contract.Attempt) (bool, error) {
	a, err := r.answer(list, false)
	return a == contract.AccessEnded, err
}

func (r *rogue) Settle(context.Context, []contract.Attempt) error { return nil }
func (r *rogue) Probe(context.Context, []byte, []contract.Name) (contract.NameSet, bool, error) {
	return contract.NameSet{}, false, nil
}
func (r *rogue) OpenRoute(map[string]string) (contract.Route, error) {
	return nil, errors.ErrUnsupported
}

// blockingMem is backend/mem without its probe: every proof a worker's
// blocking Quiesce.
type blockingMem struct{ *mem.Backend }

func (blockingMem) TryQuiesce() {} // shadows mem's, so blockingMem is no QuiesceProber

// faultLease is one lease of the property: which backend it went to, what
// that backend does wrong, and what the test expects of it.
type faultLease struct {
	h     Handle
	rogue bool
	fault rogueFault
	rows  []staging.Row
}

// SPEC §4 rule 15: a backend's fault is the backend's. On the shipped runner,
// one backend (the rogue, as Fetcher or Publisher) does everything the
// contract forbids while a polite backend (backend/mem, its proofs inline or
// on its own workers) serves the other kind of lease in the same engine. The
// engine must never halt; every polite lease must be served as if nothing
// happened; the rogue's leases end as rules 3 and 5 say — a changed answer or
// a panic in Poll is a violation, what is never proven is contained and never
// released — and every fault is counted against the rogue, as the rogue
// itself counted it.
func TestBackendFaultsAreTheBackends(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		rogueKind := rapid.SampledFrom([]Kind{Fetch, Publish}).Draw(rt, "rogue")
		politeProbe := rapid.Bool().Draw(rt, "polite probes")
		nRogue := rapid.IntRange(1, 8).Draw(rt, "rogue leases")
		nPolite := rapid.IntRange(1, 6).Draw(rt, "polite leases")
		const rowsPer, slotBytes = 2, 64
		m, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: (nRogue + nPolite) * rowsPer, SlotBytes: slotBytes})
		require.NoError(rt, err)
		dev, err := sim.New(0, 1<<20, sim.WithLatency(sim.WallClock{}, 0))
		require.NoError(rt, err)
		stream, err := dev.NewStream()
		require.NoError(rt, err)
		r := &rogue{mem: m, faults: map[string]rogueFault{}, stop: make(chan struct{})}
		polite, err := mem.New(m)
		require.NoError(rt, err)
		var politeFetcher contract.Fetcher = polite
		var politePublisher contract.Publisher = polite
		if !politeProbe {
			politeFetcher, politePublisher = blockingMem{polite}, blockingMem{polite}
		}
		clk := sim.NewManualClock(time.Unix(100, 0))
		cfg := Config{
			Memory: m, TokensPerBlock: rigTPB, RequestTimeout: time.Second, DrainGrace: time.Second,
			QuiesceTimeout: 100 * time.Millisecond, Logger: coreConfig(m).Logger,
			Stream: stream, Clock: clk,
			// One worker a backend: a rogue whose Quiesce blocks pins it, and
			// must pin no other backend's.
			QuiesceWorkers: 1,
		}
		politeKind := Publish
		if rogueKind == Fetch {
			cfg.Fetcher, cfg.Publisher = r, politePublisher
		} else {
			cfg.Fetcher, cfg.Publisher, politeKind = politeFetcher, r, Fetch
		}
		eng, err := New(cfg)
		require.NoError(rt, err)
		defer func() {
			close(r.stop)
			r.wg.Wait()
			rep := eng.Close()
			for i := 0; !rep.Drained && i < 200; i++ {
				clk.Advance(time.Second)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := eng.Sync(ctx)
				cancel()
				require.NoError(rt, err)
				rep = eng.Report()
			}
			require.True(rt, rep.Drained, "the engine drains once the rogue lets go: %+v", rep)
			require.NoError(rt, polite.Close())
		}()

		var leases []*faultLease
		lend := func(l *faultLease, kind Kind) {
			rows := make([]staging.Row, rowsPer)
			for b := range rowsPer {
				ptr, err := dev.Alloc(slotBytes)
				require.NoError(rt, err)
				var n contract.Name
				copy(n[:], fmt.Sprintf("lease-%d-row-%d", len(leases), b))
				n[40] = byte(len(leases))
				rows[b] = staging.Row{Name: n, Group: 0, Block: b, Device: ptr}
				content := bytes.Repeat([]byte{byte(0x10 + len(leases))}, slotBytes)
				if !l.rogue && kind == Fetch {
					polite.Put(staging.ExtentName, n, content)
				}
				if !l.rogue && kind == Publish {
					require.NoError(rt, dev.Write(ptr, content))
				}
			}
			l.rows = rows
			if l.rogue {
				r.faults[string(rows[0].Name[:])] = l.fault
			}
			h, err := eng.Lend(Request{Kind: kind, Rows: rows})
			require.NoError(rt, err)
			l.h = h
			leases = append(leases, l)
		}
		order := rapid.Permutation(append(make([]bool, nPolite), trues(nRogue)...)).Draw(rt, "order")
		for _, isRogue := range order {
			if isRogue {
				lend(&faultLease{rogue: true, fault: rogueFault(rapid.IntRange(0, int(numRogueFaults)-1).Draw(rt, "fault"))}, rogueKind)
			} else {
				lend(&faultLease{}, politeKind)
			}
			if rapid.Bool().Draw(rt, "round") {
				eng.Progress()
			}
		}

		settled := func(l *faultLease) bool {
			info, err := eng.Lease(l.h)
			require.NoError(rt, err)
			return info.State.Terminal() || info.State == State(StateLogicallyComplete)
		}
		released := map[Handle]bool{}
		release := func(l *faultLease) {
			if info, _ := eng.Lease(l.h); info.State == State(StateLogicallyComplete) && !released[l.h] {
				require.NoError(rt, eng.Release(l.h))
				released[l.h] = true
			}
		}
		// A Quiesce that blocks pins the rogue's one worker: the rogue's
		// other proofs that need a worker wait behind it (its own leases,
		// which it may cost).
		pinned := false
		for _, l := range leases {
			pinned = pinned || l.rogue && l.fault == rogueBlocks
		}
		quick := func(l *faultLease) bool {
			return !l.rogue || l.fault.quick() && !(pinned && l.fault == rogueUnknownProbe)
		}
		// Phase 1, the clock standing still: every polite lease, and every
		// rogue lease whose fault needs no deadline, settles.
		deadline := time.Now().Add(30 * time.Second)
		for {
			eng.Progress()
			waiting := 0
			for _, l := range leases {
				if quick(l) && !settled(l) {
					waiting++
				}
			}
			if waiting == 0 {
				break
			}
			if time.Now().After(deadline) {
				rt.Fatalf("%d leases did not settle with the clock standing still: %v", waiting, describeLeases(eng, leases))
			}
			select {
			case <-eng.Wake():
			case <-time.After(5 * time.Millisecond):
			}
		}
		for _, l := range leases {
			if l.rogue {
				continue
			}
			info, err := eng.Lease(l.h)
			require.NoError(rt, err)
			require.Equal(rt, Served, info.Outcome, "polite lease %v: %v", l.h, info)
			require.Equal(rt, State(StateLogicallyComplete), info.State, "polite lease %v", l.h)
			want := bytes.Repeat([]byte{l.rows[0].Name[40] + 0x10}, slotBytes)
			for _, row := range l.rows {
				got := make([]byte, slotBytes)
				if politeKind == Fetch {
					require.NoError(rt, dev.Read(got, row.Device))
				} else {
					stored, ok := polite.Get(staging.ExtentName, row.Name)
					require.True(rt, ok, "polite publish %v stored row %d", l.h, row.Block)
					got = stored
				}
				require.Equal(rt, want, got, "polite lease %v row %d: the content it moved", l.h, row.Block)
			}
		}
		for _, l := range leases {
			release(l)
		}
		// Every answer the rogue gives is given, and taken in, before any
		// deadline can pass: what the test then expects of a lease follows
		// from its fault alone.
		r.wg.Wait()
		for {
			eng.Progress()
			waiting := 0
			for _, l := range leases {
				info, err := eng.Lease(l.h)
				require.NoError(rt, err)
				if l.rogue && l.fault != rogueSilent && l.fault != roguePanicCancel && l.fault != roguePanicSubmit && info.Outcome == NoOutcome {
					waiting++
				}
			}
			if waiting == 0 {
				break
			}
			if time.Now().After(deadline) {
				rt.Fatalf("%d rogue answers were not taken in: %v", waiting, describeLeases(eng, leases))
			}
			select {
			case <-eng.Wake():
			case <-time.After(5 * time.Millisecond):
			}
		}
		// Phase 2: the clock runs past every deadline.
		for step := 0; step < 60; step++ {
			clk.Advance(250 * time.Millisecond)
			for i := 0; i < 50 && eng.Progress() > 0; i++ {
			}
			select {
			case <-eng.Wake():
			case <-time.After(time.Millisecond):
			}
			eng.Progress()
			done := true
			for _, l := range leases {
				release(l)
				info, err := eng.Lease(l.h)
				require.NoError(rt, err)
				done = done && info.State.Terminal()
			}
			if done {
				break
			}
		}
		r.wg.Wait() // every completion the rogue makes has been made

		require.NoError(rt, eng.Err(), "a backend's fault never halts the engine")
		st := eng.Stats()
		require.Zero(rt, st.InvariantBreaches)
		rf, pf := st.Faults(rogueKind), st.Faults(politeKind)
		require.Zero(rt, pf.Total(), "nothing is counted against the polite backend: %+v", *pf)
		require.Equal(rt, uint64(r.panics.Load()), rf.Panics, "every panic the rogue threw is counted against it")
		require.Equal(rt, uint64(r.extra.Load()), rf.RepeatedCompletions, "every repeated completion is counted against it")
		early := 0
		for _, l := range leases {
			info, err := eng.Lease(l.h)
			require.NoError(rt, err)
			if !l.rogue {
				require.Equal(rt, State(StateReleased), info.State, "polite lease %v", l.h)
				continue
			}
			if l.fault == rogueEarly {
				early++
			}
			switch {
			case !l.fault.provable():
				require.Equal(rt, State(StateQuarantined), info.State, "rogue lease %v (%v) was never proven: contained", l.h, l.fault)
			case quick(l):
				require.Equal(rt, State(StateReleased), info.State, "rogue lease %v (%v) was proven: released", l.h, l.fault)
			}
			if info.State == State(StateReleased) {
				require.True(rt, r.ended(l.rows[0].Name), "rogue lease %v (%v) released, but the rogue never said its access ended", l.h, l.fault)
			}
			switch l.fault {
			case rogueChanges, roguePanicPoll:
				require.Equal(rt, Violation, info.Outcome, "rogue lease %v (%v)", l.h, l.fault)
			case rogueStorm, rogueEarly, roguePanicNotify, rogueUnknownProbe, rogueBlocks, rogueNeverProves, roguePanicQuiesce:
				require.Equal(rt, Served, info.Outcome, "rogue lease %v (%v): the first answer latched", l.h, l.fault)
			case rogueSilent, roguePanicCancel:
				require.Equal(rt, TimedOut, info.Outcome, "rogue lease %v (%v)", l.h, l.fault)
			}
		}
		require.LessOrEqual(rt, rf.EarlyCompletions, uint64(early))
	})
}

func trues(n int) []bool {
	b := make([]bool, n)
	for i := range b {
		b[i] = true
	}
	return b
}

// ended reports whether the rogue said the access of the attempt whose first
// unit is named n ended.
func (r *rogue) ended(n contract.Name) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.attempts {
		if a.names[0] == n {
			a.mu.Lock()
			defer a.mu.Unlock()
			return a.ended
		}
	}
	return false
}

func describeLeases(eng *Engine, leases []*faultLease) string {
	var b bytes.Buffer
	for _, l := range leases {
		info, _ := eng.Lease(l.h)
		fmt.Fprintf(&b, "\n  %v rogue=%v fault=%v: %v %v", l.h, l.rogue, l.fault, info.State, info.Outcome)
	}
	return b.String()
}

// SPEC §4 rule 15, the case that halted the engine: a backend that calls its
// completion 500 times for one attempt. The first is taken; the 499 others
// are dropped and counted against the backend; the lease is served and the
// engine, with 4 slots, runs on.
func TestRegressionCompletionStormIsTheBackendsFault(t *testing.T) {
	m, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 4, SlotBytes: 64})
	require.NoError(t, err)
	dev, err := sim.New(0, 1<<16, sim.WithLatency(sim.WallClock{}, 0))
	require.NoError(t, err)
	stream, err := dev.NewStream()
	require.NoError(t, err)
	r := &rogue{mem: m, faults: map[string]rogueFault{}, stop: make(chan struct{})}
	cfg := coreConfig(m)
	cfg.Fetcher, cfg.Stream = r, stream
	eng, err := New(cfg)
	require.NoError(t, err)
	ptr, err := dev.Alloc(64)
	require.NoError(t, err)
	var n contract.Name
	copy(n[:], "storm")
	r.faults[string(n[:])] = rogueStorm
	h, err := eng.Lend(Request{Kind: Fetch, Rows: []staging.Row{{Name: n, Group: 0, Block: 0, Device: ptr}}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eng.Progress() // grants and submits it, and registers its completion
	r.mu.Lock()
	require.Len(t, r.attempts, 1)
	att := r.attempts[0]
	r.mu.Unlock()
	select {
	case <-att.registered:
	case <-ctx.Done():
		t.Fatal("the engine never registered the attempt's completion")
	}
	// 500 completions from five goroutines, beside the rogue's own.
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() { defer wg.Done(); att.complete(100) }()
	}
	wg.Wait()
	r.wg.Wait()
	info, err := eng.Wait(ctx, h, UntilSettled)
	require.NoError(t, err)
	assert.Equal(t, Served, info.Outcome)
	require.NoError(t, eng.Release(h))
	close(r.stop)
	_, err = eng.Shutdown(ctx)
	require.NoError(t, err)
	st := eng.Stats()
	assert.Zero(t, st.InvariantBreaches, "a storm of completions is no bug of kvready's")
	assert.False(t, st.Halted)
	assert.Equal(t, uint64(r.extra.Load()), st.FetcherFaults.RepeatedCompletions)
	assert.GreaterOrEqual(t, st.FetcherFaults.RepeatedCompletions, uint64(499))
}
