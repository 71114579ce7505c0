package readiness_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// recorder is an Observer that keeps every snapshot it is shown; the test
// says when one is due.
type recorder struct {
	due   atomic.Bool
	shown []readiness.Snapshot
}

func (r *recorder) Due() bool { return r.due.Load() }

func (r *recorder) Observe(s *readiness.Snapshot) {
	c := *s
	c.Groups = slices.Clone(s.Groups)
	r.shown = append(r.shown, c)
	r.due.Store(false)
}

func TestObserverIsShownSnapshotsWhenDue(t *testing.T) {
	dev, err := sim.New(0, 1<<16)
	require.NoError(t, err)
	stream, err := dev.NewStream()
	require.NoError(t, err)
	staged, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 4, SlotBytes: 16}, staging.Group{Slots: 6, SlotBytes: 16})
	require.NoError(t, err)
	store, err := mem.New(staged, mem.WithPolicy(func(c mem.Call) mem.Mode {
		return []mem.Mode{mem.Normal, mem.Miss, mem.Fail}[(c.Seq-1)%3]
	}))
	require.NoError(t, err)
	defer store.Close()
	var byCause [readiness.NumCauses]uint64 // the oracle: every move as OnTransition sees it
	obs := &recorder{}
	eng, err := readiness.New(readiness.Config{
		Memory:         staged,
		TokensPerBlock: 32,
		OnTransition:   func(tr readiness.Transition) { byCause[tr.Cause]++ },
		Fetcher:        store,
		Stream:         stream,
		Observer:       obs,
	})
	require.NoError(t, err)

	require.Len(t, obs.shown, 1, "a snapshot at New")
	assert.Equal(t, []readiness.GroupSlots{{Free: 4, SlotBytes: 16}, {Free: 6, SlotBytes: 16}}, obs.shown[0].Groups)
	assert.Zero(t, obs.shown[0].Rounds)

	var hs []readiness.Handle
	for k := range 3 {
		req := readiness.Request{Kind: readiness.Fetch}
		for g := range 2 {
			var name contract.Name
			name[0], name[1] = byte(k), byte(g)
			store.Put(staging.ExtentName, name, make([]byte, 16))
			p, err := dev.Alloc(16)
			require.NoError(t, err)
			req.Rows = append(req.Rows, staging.Row{Name: name, Group: g, Device: p})
		}
		h, err := eng.Lend(req)
		require.NoError(t, err)
		hs = append(hs, h)
	}
	rounds := uint64(0)
	for _, h := range hs {
		for {
			dev.CompleteAll()
			eng.Progress()
			rounds++
			if info, err := eng.Lease(h); err == nil && info.State == readiness.StateLogicallyComplete {
				break
			}
			require.Less(t, rounds, uint64(1_000_000), "the lease never completed")
		}
	}
	assert.Len(t, obs.shown, 1, "no snapshot while none is due")

	obs.due.Store(true)
	eng.Progress()
	rounds++
	require.Len(t, obs.shown, 2, "one snapshot once one is due")
	s := obs.shown[1]
	assert.Equal(t, withoutHandoffs(eng.Stats()), withoutHandoffs(s.Stats))
	assert.Equal(t, rounds, s.Rounds)
	assert.Equal(t, byCause, s.Moves, "moves by cause, as OnTransition saw them")
	for _, name := range []string{"slots_granted", "[fetch]", "submitted", "outcome_served", "outcome_missed", "outcome_failed", "access_proven", "copies_landed"} {
		i := -1
		for c := range readiness.NumCauses {
			if readiness.CauseName(c) == name {
				i = c
			}
		}
		require.GreaterOrEqual(t, i, 0, "a cause named %s", name)
		assert.NotZero(t, s.Moves[i], "moves caused by %s", name)
	}
	var free, held, quarantined int
	for _, g := range s.Groups {
		free, held, quarantined = free+g.Free, held+g.Held, quarantined+g.Quarantined
	}
	assert.Equal(t, [3]int{s.Stats.SlotsFree, s.Stats.SlotsHeld, s.Stats.SlotsQuarantined}, [3]int{free, held, quarantined})
	assert.Positive(t, held, "the completed leases still hold their slots")
	assert.False(t, s.Drained)

	for _, h := range hs {
		require.NoError(t, eng.Release(h))
	}
	drain(eng)
	last := obs.shown[len(obs.shown)-1]
	assert.True(t, last.Drained, "the round that drains shows a final snapshot, due or not")
	assert.Equal(t, withoutHandoffs(eng.Stats()), withoutHandoffs(last.Stats))
	n := len(obs.shown)
	eng.Progress()
	assert.Len(t, obs.shown, n, "nothing more after the final snapshot unless due")
}

func TestCauseNames(t *testing.T) {
	seen := map[string]bool{}
	for i := range readiness.NumCauses {
		name := readiness.CauseName(i)
		require.NotEmpty(t, name, "cause %d", i)
		assert.False(t, seen[name], "cause %q named twice", name)
		seen[name] = true
	}
	assert.Empty(t, readiness.CauseName(-1))
	assert.Empty(t, readiness.CauseName(readiness.NumCauses))
	step := fsm.Step{Event: fsm.Deadline}
	assert.Equal(t, step.Cause(), readiness.CauseName(readiness.CauseOf(step)))
	step = fsm.Step{Completion: true, Guard: fsm.NothingToCopy}
	assert.Equal(t, step.Cause(), readiness.CauseName(readiness.CauseOf(step)))
}

// The snapshot's InFlight is the leases whose slots a backend was handed
// and whose access is not yet proven over: counted with their bytes and the
// submission time of the oldest, on the engine's clock; fenced leases leave
// it, and a contained one does too (its slots count as quarantined).
func TestSnapshotInFlight(t *testing.T) {
	dev, err := sim.New(0, 1<<16)
	require.NoError(t, err)
	stream, err := dev.NewStream()
	require.NoError(t, err)
	staged, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 4, SlotBytes: 16}, staging.Group{Slots: 4, SlotBytes: 64})
	require.NoError(t, err)
	gate, second := make(chan struct{}), make(chan struct{})
	store, err := mem.New(staged,
		mem.WithPolicy(func(c mem.Call) mem.Mode {
			return []mem.Mode{mem.Normal, mem.Normal, mem.QuiesceFalse}[(c.Seq-1)%3]
		}),
		mem.WithGate(func(c mem.Call) <-chan struct{} {
			switch c.Seq {
			case 1:
				return gate // the first delivery is held: a transfer that takes its time
			case 2:
				return second // held until the snapshot of three in flight was taken
			}
			return nil
		}))
	require.NoError(t, err)
	defer store.Close()
	clk := sim.NewManualClock(time.Unix(5_000, 0))
	obs := &recorder{}
	eng, err := readiness.New(readiness.Config{
		Memory: staged, TokensPerBlock: 32, RequestTimeout: time.Second, DrainGrace: time.Second,
		Fetcher:  store,
		Stream:   stream,
		Clock:    clk,
		Observer: obs,
	})
	require.NoError(t, err)
	snap := func() readiness.Snapshot {
		obs.due.Store(true)
		eng.Progress()
		return obs.shown[len(obs.shown)-1]
	}
	assert.Equal(t, readiness.InFlight{}, snap().InFlight, "nothing lent")

	lend := func(k int) readiness.Handle {
		req := readiness.Request{Kind: readiness.Fetch}
		for g := range 2 {
			var name contract.Name
			name[0], name[1] = byte(k), byte(g)
			store.Put(staging.ExtentName, name, make([]byte, []int{16, 64}[g]))
			p, err := dev.Alloc(64)
			require.NoError(t, err)
			req.Rows = append(req.Rows, staging.Row{Name: name, Group: g, Device: p})
		}
		h, err := eng.Lend(req)
		require.NoError(t, err)
		return h
	}
	first := lend(0)
	eng.Progress()
	clk.Advance(100 * time.Millisecond)
	secondLease, third := lend(1), lend(2)
	s := snap()
	assert.Equal(t, readiness.InFlight{Leases: 3, Bytes: 3 * (16 + 64), Oldest: time.Unix(5_000, 0)}, s.InFlight)
	close(second)

	// The second is served and proven over; the third's Quiesce never proves
	// anything; the first is still held.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		dev.CompleteAll()
		_, err := eng.Sync(ctx)
		require.NoError(t, err)
		if info, err := eng.Lease(secondLease); err == nil && info.Fenced {
			break
		}
		require.NoError(t, ctx.Err(), "the second lease was never fenced")
		time.Sleep(time.Millisecond)
	}
	assert.Equal(t, readiness.InFlight{Leases: 2, Bytes: 2 * (16 + 64), Oldest: time.Unix(5_000, 0)}, snap().InFlight)

	// Past every containment deadline: the first (held) and the third (never
	// proven) are contained, and nothing is in flight any more.
	for {
		dev.CompleteAll() // the second's local copies land: it completes
		_, err := eng.Sync(ctx)
		require.NoError(t, err)
		if info, err := eng.Lease(secondLease); err == nil && info.State == readiness.StateLogicallyComplete {
			break
		}
		require.NoError(t, ctx.Err(), "the second lease never completed")
		time.Sleep(time.Millisecond)
	}
	clk.Advance(3 * time.Second)
	for {
		_, err := eng.Sync(ctx)
		require.NoError(t, err)
		i1, _ := eng.Lease(first)
		i3, _ := eng.Lease(third)
		if i1.Contained && i3.Contained {
			break
		}
		require.NoError(t, ctx.Err(), "the leases were never contained")
		time.Sleep(time.Millisecond)
	}
	s = snap()
	assert.Equal(t, readiness.InFlight{}, s.InFlight)
	assert.Equal(t, [2]int{2, 2}, [2]int{s.Groups[0].Quarantined, s.Groups[1].Quarantined}, "two leases of a row in each group quarantined")
	close(gate)
	require.NoError(t, eng.Release(secondLease))
	drain(eng)
}

// withoutHandoffs drops the one count the engine's goroutines move on their
// own, between a snapshot and a later read.
func withoutHandoffs(s readiness.Stats) readiness.Stats {
	s.Handoffs = 0
	return s
}
