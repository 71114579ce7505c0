package readiness_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// Rule 13: the owner is woken, never made to poll. These tests run the
// shipped configuration — the runner with its goroutines, the wall clock, a
// backend delivering on goroutines of its own, a device whose copies complete
// by themselves — and an owner that only ever blocks on Wake or Wait. Every
// wait is bounded by a context; no test asserts a duration.

// silent hides a backend's Notify, so that its attempts are observed by the
// runner's watcher instead: the other way an owner is woken.
type silent struct{ *mem.Backend }

func (s silent) Fetch(ext contract.CacheExtent, r contract.Route) (contract.Attempt, error) {
	a, err := s.Backend.Fetch(ext, r)
	if a == nil {
		return nil, err
	}
	return quiet{a}, err
}

func (s silent) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	return s.Backend.Quiesce(ctx, unwrap(list))
}

func (s silent) TryQuiesce(list []contract.Attempt) (contract.Access, error) {
	return s.Backend.TryQuiesce(unwrap(list))
}

func unwrap(list []contract.Attempt) []contract.Attempt {
	inner := make([]contract.Attempt, len(list))
	for i, a := range list {
		inner[i] = a.(quiet).Attempt
	}
	return inner
}

// quiet is an attempt that only polls: no Notify, no RequestCancel.
type quiet struct{ contract.Attempt }

// wakeRig is an engine over a mem store holding blocks 0 and 1 of three.
type wakeRig struct {
	dev   *sim.Device
	store *mem.Backend
	eng   *readiness.Engine
	req   readiness.Request
}

func newWakeRig(t *testing.T, notify bool, opts ...mem.Option) *wakeRig {
	t.Helper()
	dev, err := sim.New(0, 1<<16, sim.WithLatency(sim.WallClock{}, 0))
	require.NoError(t, err)
	stream, err := dev.NewStream()
	require.NoError(t, err)
	staged, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 8, SlotBytes: 16})
	require.NoError(t, err)
	store, err := mem.New(staged, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	var fetcher contract.Fetcher = store
	if !notify {
		fetcher = silent{store}
	}
	eng, err := readiness.New(readiness.Config{
		Memory:         staged,
		TokensPerBlock: 32,
		RequestTimeout: time.Minute,
		DrainGrace:     time.Minute,
		Fetcher:        fetcher,
		Stream:         stream,
		Health:         dev,
	})
	require.NoError(t, err)
	r := &wakeRig{dev: dev, store: store, eng: eng, req: readiness.Request{Kind: readiness.Fetch}}
	for b := range 3 {
		var n contract.Name
		n[0] = byte(b + 1)
		if b < 2 {
			store.Put(staging.ExtentName, n, bytes.Repeat([]byte{byte('a' + b)}, 16))
		}
		p, err := dev.Alloc(16)
		require.NoError(t, err)
		r.req.Rows = append(r.req.Rows, staging.Row{Name: n, Block: b, Device: p})
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := eng.Shutdown(ctx)
		assert.NoError(t, err, "the engine drains")
	})
	return r
}

func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestRule13WaitIsWokenToReadinessAndRelease(t *testing.T) {
	for _, notify := range []bool{true, false} {
		name := "notifying backend"
		if !notify {
			name = "polled backend, watched"
		}
		t.Run(name, func(t *testing.T) {
			r := newWakeRig(t, notify)
			h, err := r.eng.Lend(r.req)
			require.NoError(t, err)
			info, err := r.eng.Wait(bounded(t), h, readiness.UntilSettled)
			require.NoError(t, err)
			assert.Equal(t, readiness.StateLogicallyComplete, info.State)
			assert.Equal(t, readiness.Partial, info.Outcome)
			iv, err := r.eng.Readiness(h)
			require.NoError(t, err)
			assert.Equal(t, staging.Interval{RestartFloor: 0, UsableUntil: 64}, iv)
			landed := make([]byte, 16)
			require.NoError(t, r.dev.Read(landed, r.req.Rows[1].Device))
			assert.Equal(t, bytes.Repeat([]byte{'b'}, 16), landed, "the served row is on the device")

			require.NoError(t, r.eng.Release(h))
			info, err = r.eng.Wait(bounded(t), h, readiness.UntilReleased)
			require.NoError(t, err)
			assert.Equal(t, readiness.StateReleased, info.State)
			assert.Equal(t, 8, r.eng.Stats().SlotsFree)
		})
	}
}

// An owner that runs rounds only when Wake fires sees every lease through:
// the wake-ups are enough, with no timer of its own.
func TestRule13AnOwnerRunOnWakeAloneFinishesEveryLease(t *testing.T) {
	for _, notify := range []bool{true, false} {
		t.Run(map[bool]string{true: "notifying backend", false: "polled backend, watched"}[notify], func(t *testing.T) {
			r := newWakeRig(t, notify, mem.WithPolicy(func(c mem.Call) mem.Mode {
				return []mem.Mode{mem.Normal, mem.Miss, mem.QuiesceNotYet, mem.Fail}[(c.Seq-1)%4]
			}))
			ctx := bounded(t)
			var hs []readiness.Handle
			for range 4 {
				h, err := r.eng.Lend(r.req)
				require.NoError(t, err)
				hs = append(hs, h)
			}
			released := map[readiness.Handle]bool{}
			r.eng.Progress()
			for len(released) < len(hs) {
				select {
				case <-r.eng.Wake():
				case <-ctx.Done():
					for _, h := range hs {
						info, _ := r.eng.Lease(h)
						t.Logf("%v: %v %v", h, info.State, info.Outcome)
					}
					t.Fatalf("the owner was not woken: %d of %d leases released", len(released), len(hs))
				}
				r.eng.Progress()
				for _, h := range hs {
					info, err := r.eng.Lease(h)
					require.NoError(t, err)
					if info.State == readiness.StateLogicallyComplete {
						require.NoError(t, r.eng.Release(h))
						info, err = r.eng.Lease(h)
						require.NoError(t, err)
					}
					if info.State == readiness.StateReleased {
						released[h] = true
					}
				}
			}
			st := r.eng.Stats()
			assert.Equal(t, uint64(0), st.Containments, "nothing contained")
			assert.Equal(t, 8, st.SlotsFree)
		})
	}
}

func TestRule13WaitEndsWithItsContextAndChangesNothing(t *testing.T) {
	gate := make(chan struct{})
	r := newWakeRig(t, true, mem.WithGate(func(mem.Call) <-chan struct{} { return gate }))
	defer close(gate)
	h, err := r.eng.Lend(r.req)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	info, err := r.eng.Wait(ctx, h, readiness.UntilSettled)
	require.Error(t, err)
	assert.ErrorIs(t, err, context.Canceled)
	after, err2 := r.eng.Lease(h)
	require.NoError(t, err2)
	assert.Equal(t, after.State, info.State, "the description Wait returned is the lease's")
	assert.NotEqual(t, readiness.StateReleased, after.State)
}

func TestRule13WaitRefusesBadInput(t *testing.T) {
	r := newWakeRig(t, true)
	h, err := r.eng.Lend(r.req)
	require.NoError(t, err)
	before := r.eng.Stats()

	_, err = r.eng.Wait(bounded(t), h, readiness.Until(9))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "want UntilSettled, UntilReleased or UntilGranted")

	_, err = r.eng.Wait(bounded(t), readiness.Handle{}, readiness.UntilSettled)
	assert.True(t, errors.Is(err, readiness.ErrStaleHandle), "the zero handle: %v", err)
	after := r.eng.Stats()
	after.Handoffs, before.Handoffs = 0, 0 // the engine's goroutines hand off whenever they run
	assert.Equal(t, before, after, "a refused Wait changes nothing")

	_, err = r.eng.Wait(bounded(t), h, readiness.UntilSettled)
	require.NoError(t, err)
	require.NoError(t, r.eng.Release(h))
}

// Under the fatal policy the first containment halts the engine. Shutdown
// then reports the halt, frees nothing, and stops the engine's goroutines
// (TestMain checks that none is left) instead of waiting for a drain that
// can never come.
func TestFatalHaltShutsDownWithoutDraining(t *testing.T) {
	clk := sim.NewManualClock(time.Unix(10, 0))
	dev, err := sim.New(0, 1<<16, sim.WithLatency(sim.WallClock{}, 0))
	require.NoError(t, err)
	stream, err := dev.NewStream()
	require.NoError(t, err)
	staged, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 4, SlotBytes: 16})
	require.NoError(t, err)
	store, err := mem.New(staged, mem.WithMode(mem.QuiesceFalse))
	require.NoError(t, err)
	defer store.Close()
	halts := 0
	var halted error
	eng, err := readiness.New(readiness.Config{
		Memory: staged, TokensPerBlock: 32, RequestTimeout: time.Second, DrainGrace: time.Second,
		Containment: readiness.Fatal,
		Fetcher:     store, Stream: stream, Clock: clk,
		OnHalt: func(err error) { halts++; halted = err },
	})
	require.NoError(t, err)
	p, err := dev.Alloc(16)
	require.NoError(t, err)
	var n contract.Name
	n[0] = 1
	h, err := eng.Lend(readiness.Request{Kind: readiness.Fetch, Rows: []staging.Row{{Name: n, Device: p}}})
	require.NoError(t, err)
	ctx := bounded(t)
	_, err = eng.Sync(ctx)
	require.NoError(t, err)
	clk.Advance(time.Minute) // past the deadline and the grace: access never proven
	_, err = eng.Sync(ctx)
	require.NoError(t, err)
	require.ErrorIs(t, eng.Err(), readiness.ErrHalted)
	assert.Equal(t, 1, halts, "OnHalt once")
	info, err := eng.Lease(h)
	require.NoError(t, err)
	assert.Equal(t, readiness.StateQuarantined, info.State)
	// The embedder names why in the engine's own terms: every error that
	// reports the halt is a *readiness.FatalError naming the contained lease.
	fatal := func(what string, err error) {
		t.Helper()
		require.ErrorIs(t, err, readiness.ErrHalted, what)
		var fe *readiness.FatalError
		if assert.ErrorAs(t, err, &fe, what) {
			assert.Equal(t, h, fe.Containment.Lease, what)
			assert.Equal(t, 1, fe.Containment.Slots, what)
		}
	}
	fatal("Err", eng.Err())
	fatal("OnHalt", halted)
	fatal("Release", eng.Release(h))

	rep, err := eng.Shutdown(ctx)
	fatal("Shutdown", err)
	fatal("Report.Halted", rep.Halted)
	assert.False(t, rep.Drained, "a halted engine never reports a drain")
	assert.Equal(t, 1, rep.SlotsQuarantined)
	_, err = eng.Lend(readiness.Request{Kind: readiness.Fetch, Rows: []staging.Row{{Name: n, Device: p}}})
	fatal("Lend", err)
}
