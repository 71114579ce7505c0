package tiers_test

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/mem"
	kvredis "github.com/kvready/kvready/backend/redis"
	"github.com/kvready/kvready/backend/tiers"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/internal/redistest"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

const slots, slotBytes = 8, 16

// rig is the shipped runner over a stack: readiness.New with the stack as
// Fetcher and Publisher, on a simulated device.
type rig struct {
	eng    *readiness.Engine
	dev    *sim.Device
	staged *staging.Memory
	blocks []gpu.DevicePtr
}

func newRig(t *testing.T, stack func(m *staging.Memory) *tiers.Backend) *rig {
	t.Helper()
	dev, err := sim.New(0, 1<<16, sim.WithLatency(sim.WallClock{}, 0))
	require.NoError(t, err)
	stream, err := dev.NewStream()
	require.NoError(t, err)
	staged, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: slots, SlotBytes: slotBytes})
	require.NoError(t, err)
	b := stack(staged)
	eng, err := readiness.New(readiness.Config{Memory: staged, TokensPerBlock: 16, Fetcher: b, Publisher: b, Stream: stream})
	require.NoError(t, err)
	r := &rig{eng: eng, dev: dev, staged: staged}
	for range slots {
		p, err := dev.Alloc(slotBytes)
		require.NoError(t, err)
		r.blocks = append(r.blocks, p)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		_, _ = eng.Shutdown(ctx)
	})
	return r
}

func block(i int) []byte { return bytes.Repeat([]byte{byte('A' + i)}, slotBytes) }

// lend runs one request of blocks idx to its end: settled, released, slots
// back. It returns what the lease reported.
func (r *rig) lend(t *testing.T, kind readiness.Kind, idx ...int) readiness.LeaseInfo {
	t.Helper()
	req := readiness.Request{Kind: kind}
	for j, i := range idx {
		req.Rows = append(req.Rows, staging.Row{Name: name(i), Group: 0, Block: j, Device: r.blocks[i]})
	}
	h, err := r.eng.Lend(req)
	require.NoError(t, err)
	info, err := r.eng.Wait(bounded(t), h, readiness.UntilSettled)
	require.NoError(t, err)
	require.NoError(t, r.eng.Release(h))
	_, err = r.eng.Wait(bounded(t), h, readiness.UntilReleased)
	require.NoError(t, err)
	return info
}

func (r *rig) device(t *testing.T, i int) []byte {
	got := make([]byte, slotBytes)
	require.NoError(t, r.dev.Read(got, r.blocks[i]))
	return got
}

func (r *rig) allFree(t *testing.T) {
	t.Helper()
	st := r.eng.Stats()
	assert.Equal(t, slots, st.SlotsFree, "every slot is back")
	assert.Zero(t, st.SlotsQuarantined)
}

// TestThroughTheRunner: a manager publishes through the stack (write-through
// into both tiers), a second fetch is served by the local tier alone once
// warm, a local miss is served by the shared tier and promoted, and a
// shared-tier failure after a local hit fails the lease (nothing copied);
// the device rows hold the stored bytes, and every slot is free at the end.
func TestThroughTheRunner(t *testing.T) {
	var local, shared *mem.Backend
	var failing atomic.Bool
	r := newRig(t, func(m *staging.Memory) *tiers.Backend {
		var err error
		local, err = mem.New(m, mem.WithCapacityBytes(4*slotBytes))
		require.NoError(t, err)
		shared, err = mem.New(m, mem.WithPolicy(func(c mem.Call) mem.Mode {
			if failing.Load() && c.Op == mem.OpFetch {
				return mem.Fail
			}
			return mem.Normal
		}))
		require.NoError(t, err)
		t.Cleanup(func() { _ = local.Close(); _ = shared.Close() })
		b, err := tiers.New([]tiers.Tier{{Name: "local", Fetcher: local, Publisher: local}, {Name: "shared", Fetcher: shared, Publisher: shared}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Close() })
		return b
	})
	stack := r.eng // the engine is the only caller of the stack from here on
	for i := range 3 {
		require.NoError(t, r.dev.Write(r.blocks[i], block(i)))
	}
	info := r.lend(t, readiness.Publish, 0, 1, 2)
	assert.Equal(t, readiness.Served, info.Outcome)
	for i := range 3 {
		_, inLocal := local.Get(staging.ExtentName, name(i))
		_, inShared := shared.Get(staging.ExtentName, name(i))
		assert.True(t, inLocal && inShared, "block %d written through to both tiers", i)
		require.NoError(t, r.dev.Write(r.blocks[i], make([]byte, slotBytes))) // the device forgets them
	}

	info = r.lend(t, readiness.Fetch, 0, 1, 2)
	assert.Equal(t, readiness.Served, info.Outcome)
	for i := range 3 {
		assert.Equal(t, block(i), r.device(t, i), "block %d on the device", i)
	}

	shared.Put(staging.ExtentName, name(3), block(3)) // only the shared tier has block 3
	info = r.lend(t, readiness.Fetch, 0, 3)
	assert.Equal(t, readiness.Served, info.Outcome)
	assert.Equal(t, block(3), r.device(t, 3))
	row, ok := local.Get(staging.ExtentName, name(3))
	assert.True(t, ok, "block 3 promoted into the local tier")
	assert.Equal(t, block(3), row)

	failing.Store(true)
	shared.Put(staging.ExtentName, name(4), block(4))
	require.NoError(t, r.dev.Write(r.blocks[0], make([]byte, slotBytes)))
	info = r.lend(t, readiness.Fetch, 0, 4)
	assert.Equal(t, readiness.Failed, info.Outcome, "a tier that failed after another served fails the lease")
	assert.Contains(t, info.Reason, `tier 1 "shared"`)
	assert.Equal(t, make([]byte, slotBytes), r.device(t, 0), "nothing copied from a failed lease, not even the local hit")
	assert.Equal(t, make([]byte, slotBytes), r.device(t, 4))
	r.allFree(t)

	st := stack.Stats()
	assert.Zero(t, st.FetcherFaults.Total()+st.PublisherFaults.Total(), "the stack keeps the contract")
}

// TestSharedTierDown: the shared tier is backend/redis against a stopped
// server with its breaker open. The local tier still serves its hits, a
// lease that needs the shared tier fails at once (a failure, never a miss),
// and nothing waits for the dead store beyond its own bound: every slot is
// free.
func TestSharedTierDown(t *testing.T) {
	srv := redistest.Start(t)
	var local *mem.Backend
	var store *kvredis.Backend
	r := newRig(t, func(m *staging.Memory) *tiers.Backend {
		var err error
		local, err = mem.New(m)
		require.NoError(t, err)
		store, err = kvredis.Open(bounded(t), srv.URL(), m, kvredis.WithPrefix(t.Name()+":"),
			kvredis.WithAttemptTimeout(2*time.Second), kvredis.WithBreaker(1), kvredis.WithBreakerProbe(time.Hour, time.Hour))
		require.NoError(t, err)
		t.Cleanup(func() { _ = local.Close(); _ = store.Close() })
		b, err := tiers.New([]tiers.Tier{{Name: "local", Fetcher: local, Publisher: local}, {Name: "redis", Fetcher: store, Publisher: store}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Close() })
		return b
	})
	local.Put(staging.ExtentName, name(0), block(0))
	srv.Stop()
	// One fetch against the dead store opens its breaker.
	info := r.lend(t, readiness.Fetch, 1)
	assert.Equal(t, readiness.Failed, info.Outcome)
	require.Eventually(t, func() bool { return !store.Health().Reachable }, bound, time.Millisecond, "the breaker opens")

	info = r.lend(t, readiness.Fetch, 0)
	assert.Equal(t, readiness.Served, info.Outcome, "the local tier still serves")
	assert.Equal(t, block(0), r.device(t, 0))

	info = r.lend(t, readiness.Fetch, 0, 2)
	assert.Equal(t, readiness.Failed, info.Outcome, "the dead store's units are a failure, never a miss")
	assert.Contains(t, info.Reason, `tier 1 "redis" rejected the fetch`)
	r.allFree(t)
}
