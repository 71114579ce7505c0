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
// server, its breaker open (one failed call opens it). Each row is one lease
// through the shipped runner: the local tier still serves its hits without
// the shared tier being asked; a lease that needs the shared tier — to fetch
// a unit, or to write one through — fails at once naming it (a failure, never
// a miss), copying nothing, not even the local tier's hits; and nothing
// waits for the dead store beyond its own bound: every slot is free after
// each lease, none contained.
func TestSharedTierDown(t *testing.T) {
	tests := []struct {
		name      string
		kind      readiness.Kind
		blocks    []int
		outcome   readiness.OutcomeKind
		reason    string
		copied    []int // device rows that hold their block afterwards
		untouched []int // device rows nothing was copied into
		asked     bool  // the dead store was asked (and refused at once)
		inLocal   []int // blocks the local tier holds afterwards
	}{
		{name: "a lease the local tier serves whole never asks the shared tier",
			kind: readiness.Fetch, blocks: []int{0}, outcome: readiness.Served, copied: []int{0}},
		{name: "a lease that needs the shared tier fails, and nothing is copied, not even the local hit",
			kind: readiness.Fetch, blocks: []int{0, 2}, outcome: readiness.Failed, reason: `tier 1 "redis" rejected the fetch`,
			untouched: []int{0, 2}, asked: true},
		{name: "a lease no tier holds fails: the dead store's units are never a miss",
			kind: readiness.Fetch, blocks: []int{3}, outcome: readiness.Failed, reason: `tier 1 "redis" rejected the fetch`,
			untouched: []int{3}, asked: true},
		{name: "a publication is written through to the local tier and fails naming the shared one",
			kind: readiness.Publish, blocks: []int{4}, outcome: readiness.Failed, reason: `tier 1 "redis" rejected the publish`,
			asked: true, inLocal: []int{4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.Start(t)
			var local *mem.Backend
			var store *kvredis.Backend
			var stack *tiers.Backend
			r := newRig(t, func(m *staging.Memory) *tiers.Backend {
				var err error
				local, err = mem.New(m)
				require.NoError(t, err)
				store, err = kvredis.Open(bounded(t), srv.URL(), m, kvredis.WithPrefix(t.Name()+":"),
					kvredis.WithAttemptTimeout(2*time.Second), kvredis.WithBreaker(1), kvredis.WithBreakerProbe(time.Hour, time.Hour))
				require.NoError(t, err)
				t.Cleanup(func() { _ = local.Close(); _ = store.Close() })
				stack, err = tiers.New([]tiers.Tier{{Name: "local", Fetcher: local, Publisher: local}, {Name: "redis", Fetcher: store, Publisher: store}})
				require.NoError(t, err)
				t.Cleanup(func() { _ = stack.Close() })
				return stack
			})
			local.Put(staging.ExtentName, name(0), block(0))
			srv.Stop()
			// One fetch against the dead store opens its breaker.
			info := r.lend(t, readiness.Fetch, 7)
			require.Equal(t, readiness.Failed, info.Outcome)
			require.Eventually(t, func() bool { return !store.Health().Reachable }, bound, time.Millisecond, "the breaker opens")
			for _, i := range tt.blocks {
				if tt.kind == readiness.Publish {
					require.NoError(t, r.dev.Write(r.blocks[i], block(i)))
				}
			}
			before := stack.Stats()[1]

			info = r.lend(t, tt.kind, tt.blocks...)
			assert.Equal(t, tt.outcome, info.Outcome, "%s", info.Reason)
			if tt.reason != "" {
				assert.Contains(t, info.Reason, tt.reason)
			}
			for _, i := range tt.copied {
				assert.Equal(t, block(i), r.device(t, i), "block %d on the device", i)
			}
			for _, i := range tt.untouched {
				assert.Equal(t, make([]byte, slotBytes), r.device(t, i), "nothing copied into device row %d", i)
			}
			after := stack.Stats()[1]
			if tt.asked {
				assert.Equal(t, before.Rejected+1, after.Rejected, "the dead store refused at once")
			} else {
				assert.Equal(t, before, after, "the shared tier was asked about a lease the local tier served whole")
			}
			for _, i := range tt.inLocal {
				got, ok := local.Get(staging.ExtentName, name(i))
				assert.True(t, ok, "block %d written through to the local tier", i)
				assert.Equal(t, block(i), got)
			}
			r.allFree(t)
			assert.Zero(t, r.eng.Stats().Containments, "nothing waited for the dead store past its bound")
		})
	}
}

// TestALateWriterHoldsOnlyTheLeasesItWasHanded (rule 19), through the
// shipped runner: one tier keeps rewriting the rows it served
// (TornUntilQuiesce) and cannot prove its access over until the test lets
// it, the other proves at once. A lease the late tier was never handed is
// served, copied and released meanwhile, its slots back; a lease it was
// handed — served by it, or missed by it and served by the other tier —
// stays QUIESCING with its slots held, copies nothing while the late tier
// writes, and is served with the stored bytes once the late tier proved.
func TestALateWriterHoldsOnlyTheLeasesItWasHanded(t *testing.T) {
	type lease struct {
		blocks []int
		early  bool // settles and returns while the late tier still writes
	}
	tests := []struct {
		name   string
		late   int   // the tier that writes late: 0 local, 1 shared
		local  []int // blocks each tier holds
		shared []int
		leases []lease
		opts   []tiers.Option
	}{
		{name: "a late shared tier behind a fast local one: the local tier's lease goes",
			late: 1, local: []int{0, 1}, shared: []int{2},
			leases: []lease{{blocks: []int{0}, early: true}, {blocks: []int{1, 2}}}},
		{name: "the same without promotion: only the late tier's own proof holds its lease",
			late: 1, local: []int{0, 1}, shared: []int{2}, opts: []tiers.Option{tiers.WithoutPromotion()},
			leases: []lease{{blocks: []int{0}, early: true}, {blocks: []int{1, 2}}}},
		{name: "a late local tier in front of a fast shared one: it was handed every lease, a miss included",
			late: 0, local: []int{1}, shared: []int{3},
			leases: []lease{{blocks: []int{3}}, {blocks: []int{1}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var late *gated
			var lateMem *mem.Backend
			r := newRig(t, func(m *staging.Memory) *tiers.Backend {
				var ts []tiers.Tier
				for i, nm := range []string{"local", "shared"} {
					var st storeAPI
					if i == tt.late {
						var err error
						lateMem, err = mem.New(m, mem.WithMode(mem.TornUntilQuiesce), mem.WithTornInterval(0))
						require.NoError(t, err)
						late = &gated{Backend: lateMem, gate: make(chan struct{})}
						st = late
					} else {
						b, err := mem.New(m)
						require.NoError(t, err)
						st = b
					}
					t.Cleanup(func() { _ = st.Close() })
					for _, blk := range [][]int{tt.local, tt.shared}[i] {
						st.Put(staging.ExtentName, name(blk), block(blk))
					}
					ts = append(ts, tiers.Tier{Name: nm, Fetcher: st, Publisher: st})
				}
				b, err := tiers.New(ts, tt.opts...)
				require.NoError(t, err)
				t.Cleanup(func() { _ = b.Close() })
				return b
			})
			defer late.open()
			hs := make([]readiness.Handle, len(tt.leases))
			for k, l := range tt.leases {
				req := readiness.Request{Kind: readiness.Fetch}
				for j, i := range l.blocks {
					req.Rows = append(req.Rows, staging.Row{Name: name(i), Group: 0, Block: j, Device: r.blocks[i]})
				}
				h, err := r.eng.Lend(req)
				require.NoError(t, err)
				hs[k] = h
			}
			held := 0
			for k, l := range tt.leases {
				if !l.early {
					held += len(l.blocks)
					continue
				}
				info, err := r.eng.Wait(bounded(t), hs[k], readiness.UntilSettled)
				require.NoError(t, err)
				assert.Equal(t, readiness.Served, info.Outcome)
				for _, i := range l.blocks {
					assert.Equal(t, block(i), r.device(t, i), "block %d on the device", i)
				}
				require.NoError(t, r.eng.Release(hs[k]))
				_, err = r.eng.Wait(bounded(t), hs[k], readiness.UntilReleased)
				require.NoError(t, err)
			}
			passes := lateMem.TornPasses()
			require.Eventually(t, func() bool {
				r.eng.Progress()
				for k, l := range tt.leases {
					if info, err := r.eng.Lease(hs[k]); !l.early && (err != nil || info.Outcome == readiness.NoOutcome) {
						return false
					}
				}
				return lateMem.TornPasses() > passes
			}, bound, time.Millisecond, "every lease answered, and the late tier is still writing")
			for k, l := range tt.leases {
				if l.early {
					continue
				}
				info, err := r.eng.Lease(hs[k])
				require.NoError(t, err)
				assert.False(t, info.Fenced, "lease %d fenced while the late tier writes", k)
				assert.Equal(t, readiness.DispositionQuiescing, info.Disposition, "lease %d", k)
				for _, i := range l.blocks {
					assert.Equal(t, make([]byte, slotBytes), r.device(t, i), "block %d copied while the late tier writes", i)
				}
			}
			st := r.eng.Stats()
			assert.Equal(t, held, st.SlotsHeld, "only the late tier's leases hold slots")
			assert.Equal(t, slots-held, st.SlotsFree)

			late.open()
			for k, l := range tt.leases {
				if l.early {
					continue
				}
				info, err := r.eng.Wait(bounded(t), hs[k], readiness.UntilSettled)
				require.NoError(t, err)
				assert.Equal(t, readiness.Served, info.Outcome)
				for _, i := range l.blocks {
					assert.Equal(t, block(i), r.device(t, i), "block %d on the device, never torn", i)
				}
				require.NoError(t, r.eng.Release(hs[k]))
				_, err = r.eng.Wait(bounded(t), hs[k], readiness.UntilReleased)
				require.NoError(t, err)
			}
			r.allFree(t)
		})
	}
}
