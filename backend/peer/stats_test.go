package peer_test

import (
	"math/bits"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/peer"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/sim"
)

// settled returns how many sessions a Settle histogram counts, and the
// bucket the duration d falls in (bucket i holds [2^(i-1), 2^i) ns).
func settled(h [peer.LatencyBuckets]uint64) (n uint64) {
	for _, c := range h {
		n += c
	}
	return n
}

func bucketOf(d time.Duration) int {
	return min(bits.Len64(uint64(d.Nanoseconds())), peer.LatencyBuckets-1)
}

// A receiver's Stats follow its sessions: in flight from Fetch until
// Quiesce proves the pages reusable, in doubt for ever once the writers
// never settle, each outcome counted once by kind, and each session proven
// over counted once in the submit-to-settled histogram at the time the
// receiver's clock says it took.
func TestReceiverStatsFollowTheSessions(t *testing.T) {
	tests := []struct {
		name   string
		leased bool
		// act drives the session.
		act        func(t *testing.T, w *world, p peer.Plan, a contract.Attempt)
		want       peer.ReceiverStats // the counts compared: in flight, in doubt, outcomes
		settleTook time.Duration
	}{
		{"delivered, proven 3ms after submission", false, func(t *testing.T, w *world, p peer.Plan, a contract.Attempt) {
			w.clock.Advance(time.Millisecond)
			w.say(transfer.Done, p.Key(), kvA, 16, 0)
			require.NotNil(t, a.Poll())
			w.clock.Advance(2 * time.Millisecond)
			require.True(t, w.quiesce(a))
			require.True(t, w.quiesce(a), "asked again: counted once")
		}, peer.ReceiverStats{Delivered: 1}, 3 * time.Millisecond},
		{"failed by its writer, leased: the revocation fences it at once", true, func(t *testing.T, w *world, p peer.Plan, a contract.Attempt) {
			w.clock.Advance(40 * time.Microsecond)
			w.say(transfer.Failure, p.Key(), kvA, 0, 0)
			w.recv.Progress()
			require.True(t, w.quiesce(a))
		}, peer.ReceiverStats{Failed: 1}, 40 * time.Microsecond},
		{"cancelled, its writer settles after", false, func(t *testing.T, w *world, p peer.Plan, a contract.Attempt) {
			_, err := a.(contract.Cancellable).RequestCancel()
			require.NoError(t, err)
			assert.False(t, w.quiesce(a), "the writer may still write")
			w.clock.Advance(70 * time.Millisecond)
			w.say(transfer.Done, p.Key(), kvA, 16, 0)
			require.True(t, w.quiesce(a))
		}, peer.ReceiverStats{Cancelled: 1}, 70 * time.Millisecond},
		{"a writer that never reports: in doubt for ever", false, func(t *testing.T, w *world, _ peer.Plan, a contract.Attempt) {
			w.clock.Advance(time.Second) // past Timeout + Grace
			w.recv.Progress()
			assert.False(t, w.quiesce(a))
			w.recv.Progress()
		}, peer.ReceiverStats{InDoubt: 1, Failed: 1}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, worldOpt{leased: tt.leased})
			w.connect()
			p := plan(t, 1, 1, 1, kvA)
			a := w.fetch(p, 0)
			st := w.recv.Stats()
			assert.Equal(t, uint64(1), st.InFlight, "fetched: in flight")
			assert.Zero(t, settled(st.Settle))
			tt.act(t, w, p, a)
			st = w.recv.Stats()
			got := peer.ReceiverStats{InFlight: st.InFlight, InDoubt: st.InDoubt, Delivered: st.Delivered, Failed: st.Failed, Cancelled: st.Cancelled}
			assert.Equal(t, tt.want, got)
			if tt.settleTook == 0 {
				assert.Zero(t, settled(st.Settle), "never proven over: no latency")
				assert.Zero(t, st.SettleSum)
				return
			}
			assert.Equal(t, uint64(1), settled(st.Settle))
			assert.Equal(t, uint64(1), st.Settle[bucketOf(tt.settleTook)], "in the bucket of %s", tt.settleTook)
			assert.Equal(t, tt.settleTook, st.SettleSum)
		})
	}
}

// A sender's Stats follow its publications: in flight from Publish until
// every put it posted completed, each outcome counted once, and the
// submit-to-settled time on the sender's clock.
func TestSenderStatsFollowThePublications(t *testing.T) {
	t.Run("delivered", func(t *testing.T) {
		c := newPair(t, 3, sim.Faults{})
		p, sp := c.plans(1, 2)
		pub := c.publish(sp, 0)
		assert.Equal(t, uint64(1), c.send.Stats().InFlight)
		c.fetch(p, 0)
		c.clock.Advance(5 * time.Millisecond)
		c.run(10000)
		require.NotNil(t, pub.Poll())
		require.True(t, c.proven(pub))
		require.True(t, c.proven(pub), "asked again: counted once")
		st := c.send.Stats()
		assert.Equal(t, [4]uint64{0, 1, 0, 0}, [4]uint64{st.InFlight, st.Delivered, st.Failed, st.Cancelled})
		assert.Equal(t, uint64(1), settled(st.Settle))
		assert.Equal(t, uint64(1), st.Settle[bucketOf(5*time.Millisecond)])
		assert.Equal(t, 5*time.Millisecond, st.SettleSum)
	})
	t.Run("cancelled before the offer, timed out: counted once", func(t *testing.T) {
		c := newPair(t, 3, sim.Faults{})
		_, sp := c.plans(1, 1)
		pub := c.publish(sp, 0)
		_, err := pub.(contract.Cancellable).RequestCancel()
		require.NoError(t, err)
		c.clock.Advance(time.Second) // past the deadline: the latched outcome stays
		c.run(100)
		st := c.send.Stats()
		assert.Equal(t, [4]uint64{1, 0, 0, 1}, [4]uint64{st.InFlight, st.Delivered, st.Failed, st.Cancelled}, "not proven yet")
		require.True(t, c.proven(pub), "nothing was posted")
		st = c.send.Stats()
		assert.Zero(t, st.InFlight)
		assert.Equal(t, uint64(1), st.Settle[bucketOf(time.Second)])
	})
	t.Run("timed out", func(t *testing.T) {
		c := newPair(t, 3, sim.Faults{})
		_, sp := c.plans(1, 1)
		pub := c.publish(sp, 0)
		c.clock.Advance(time.Second)
		c.run(100)
		require.NotNil(t, pub.Poll())
		st := c.send.Stats()
		assert.Equal(t, [4]uint64{1, 0, 1, 0}, [4]uint64{st.InFlight, st.Delivered, st.Failed, st.Cancelled})
	})
}
