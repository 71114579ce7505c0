package peer_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/peer"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/sim"
)

var kvP = transfer.AccessorID{Peer: "prefill", Rank: 0, Role: transfer.RoleKV}

// pair is a prefill process with a Sender and a decode process with a
// Receiver that sends its offers over the wire: the two sides of one
// transfer, each with its own staging slots.
type pair struct {
	t        *testing.T
	net      *sim.Network
	prefill  *sim.Node
	decode   *sim.Node
	clock    *clock
	src, dst [][]byte
	send     *peer.Sender
	recv     *peer.Receiver
}

func newPair(t *testing.T, seed uint64, f sim.Faults) *pair {
	t.Helper()
	net, err := sim.New(seed, f)
	require.NoError(t, err)
	c := &pair{t: t, net: net, clock: &clock{now: epoch}}
	c.decode, err = net.Join("decode")
	require.NoError(t, err)
	c.prefill, err = net.Join("prefill")
	require.NoError(t, err)
	for i := range 8 {
		c.src = append(c.src, bytes.Repeat([]byte{byte(0x10 + i)}, pageLen))
		c.dst = append(c.dst, bytes.Repeat([]byte{0xD0}, pageLen))
	}
	slot := func(rows [][]byte) func(contract.Unit) []byte {
		return func(u contract.Unit) []byte {
			if u.LocalGroup != 0 || u.Local < 0 || u.Local >= len(rows) {
				return nil
			}
			return rows[u.Local]
		}
	}
	limits := transfer.Limits{Sessions: 16, Tombstones: 4, Window: time.Hour}
	_, dinc := c.decode.Self()
	c.recv, err = peer.NewReceiver(peer.ReceiverConfig{Transport: c.decode, Capabilities: all("decode", dinc),
		Slot: slot(c.dst), Timeout: time.Second, Grace: time.Second, Clock: c.clock.Now, Limits: limits})
	require.NoError(t, err)
	_, pinc := c.prefill.Self()
	c.send, err = peer.NewSender(peer.SenderConfig{Transport: c.prefill, Capabilities: all("prefill", pinc),
		Slot: slot(c.src), Timeout: 500 * time.Millisecond, Clock: c.clock.Now, Limits: limits})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.recv.Close(); _ = c.send.Close() })
	_, err = c.recv.Connect(all("prefill", pinc))
	require.NoError(t, err)
	_, err = c.send.Connect(all("decode", dinc))
	require.NoError(t, err)
	return c
}

func (c *pair) plans(req transfer.RequestID, pages int) (peer.Plan, peer.SendPlan) {
	ch := chunk(c.t, pages, false)
	return peer.Plan{Request: req, Attempt: 1, Writers: []transfer.AccessorID{kvP}, Chunk: ch, BlockTokens: 16},
		peer.SendPlan{Request: req, Attempt: 1, To: "decode", As: kvP, Chunk: ch, BlockTokens: 16}
}

// publish expects the send plan and publishes it from slots first, …
func (c *pair) publish(sp peer.SendPlan, first int) contract.Attempt {
	c.t.Helper()
	pages, err := c.send.Expect(sp)
	require.NoError(c.t, err)
	a, err := c.send.Publish(extent(c.t, pages, first))
	require.NoError(c.t, err)
	return a
}

// run steps the network with both sides progressing, at most n steps, and
// stops when two steps in a row found nothing to do (progress between them
// may post more).
func (c *pair) run(n int) {
	idle := 0
	for range n {
		stepped := c.net.Step()
		c.recv.Progress()
		c.send.Progress()
		if idle = idle + 1; stepped {
			idle = 0
		}
		if idle == 2 {
			return
		}
	}
}

func (c *pair) proven(a contract.Attempt) bool {
	c.t.Helper()
	acc, err := c.send.TryQuiesce([]contract.Attempt{a})
	require.NoError(c.t, err)
	ok, err := c.send.Quiesce(c.t.Context(), []contract.Attempt{a})
	require.NoError(c.t, err)
	require.Equal(c.t, acc == contract.AccessEnded, ok)
	return ok
}

// The whole transfer, both sides in the engine's vocabulary: the sender
// waits for the offer, puts, flushes, then says DONE; the receiver's
// session delivers; every page landed.
func TestSenderDelivers(t *testing.T) {
	for _, generationFirst := range []bool{false, true} {
		c := newPair(t, 3, sim.Faults{ReportsOvertakeData: true})
		p, sp := c.plans(1, 3)
		var pub contract.Attempt
		if !generationFirst {
			pub = c.publish(sp, 0)
			c.run(100)
			assert.Nil(t, pub.Poll(), "nothing is sent before the receiver's offer")
			assert.True(t, c.proven(pub) == false, "pending: not proven")
		}
		fetch := c.fetch(p, 0)
		c.run(5) // the offer may arrive before the publish: it is held
		if generationFirst {
			pub = c.publish(sp, 0)
		}
		c.run(10000)
		require.NotNil(t, pub.Poll())
		assert.Equal(t, "delivered(3 served)", pub.Poll().String())
		require.NotNil(t, fetch.Poll())
		assert.Equal(t, "delivered(3 served)", fetch.Poll().String())
		assert.True(t, c.proven(pub))
		ok, err := c.recv.Quiesce(t.Context(), []contract.Attempt{fetch})
		require.NoError(t, err)
		assert.True(t, ok, "the sender's DONE came after its flush: it settles the writer")
		for i := range 3 {
			assert.Equal(t, c.src[i], c.dst[i], "page %d landed", i)
		}
		st := c.send.Stats()
		assert.Equal(t, uint64(1), st.Offers)
		assert.Equal(t, uint64(3), st.Puts)
	}
}

func (c *pair) fetch(p peer.Plan, first int) contract.Attempt {
	c.t.Helper()
	pages, err := c.recv.Expect(p)
	require.NoError(c.t, err)
	a, err := c.recv.Fetch(extent(c.t, pages, first), nil)
	require.NoError(c.t, err)
	return a
}

// A publication that ends before its offer came posted nothing: its slots
// are proven at once. One that ends with puts in flight is proven only once
// every one of them completed.
func TestSenderQuiesce(t *testing.T) {
	t.Run("timeout before the offer", func(t *testing.T) {
		c := newPair(t, 1, sim.Faults{})
		_, sp := c.plans(1, 2)
		pub := c.publish(sp, 0)
		c.clock.Advance(time.Second)
		c.send.Progress()
		require.NotNil(t, pub.Poll())
		assert.Contains(t, pub.Poll().String(), "timeout")
		assert.True(t, c.proven(pub))
	})
	t.Run("cancel before the offer", func(t *testing.T) {
		c := newPair(t, 1, sim.Faults{})
		p, sp := c.plans(1, 2)
		pub := c.publish(sp, 0)
		d, err := contract.RequestCancel(pub)
		require.NoError(t, err)
		assert.Equal(t, contract.CancelRequested, d)
		assert.Equal(t, "cancelled(local)", pub.Poll().String())
		assert.True(t, c.proven(pub))
		c.fetch(p, 0)
		c.run(10000)
		assert.Zero(t, c.send.Stats().Puts, "nothing is posted after the fence")
		assert.Equal(t, bytes.Repeat([]byte{0xD0}, pageLen), c.dst[0])
	})
	t.Run("cancelled with puts in flight", func(t *testing.T) {
		c := newPair(t, 1, sim.Faults{})
		p, sp := c.plans(1, 4)
		pub := c.publish(sp, 0)
		fetch := c.fetch(p, 0)
		for range 1000 {
			if c.send.Stats().Puts > 0 {
				break
			}
			c.net.Step()
			c.recv.Progress()
			c.send.Progress()
		}
		require.Equal(t, uint64(4), c.send.Stats().Puts, "the offer came and every put was posted")
		_, err := contract.RequestCancel(pub)
		require.NoError(t, err)
		assert.False(t, c.proven(pub), "posted puts still read the slots")
		c.run(10000)
		assert.True(t, c.proven(pub), "every put completed")
		require.NotNil(t, fetch.Poll())
		assert.Equal(t, "cancelled(by peer)", fetch.Poll().String(), "the receiver was told")
	})
	t.Run("the receiver dies", func(t *testing.T) {
		c := newPair(t, 1, sim.Faults{PutsOutliveSender: true})
		p, sp := c.plans(1, 2)
		pub := c.publish(sp, 0)
		c.fetch(p, 0)
		for range 1000 {
			if c.send.Stats().Puts > 0 {
				break
			}
			c.net.Step()
			c.recv.Progress()
			c.send.Progress()
		}
		require.NoError(t, c.net.Kill("decode"))
		c.send.Progress()
		require.NotNil(t, pub.Poll())
		assert.Contains(t, pub.Poll().String(), "lost")
		c.run(10000)
		assert.True(t, c.proven(pub), "the dead receiver's puts completed with an error")
	})
}

// An offer is taken only from the receiver it names, for this life of this
// process, once; the rest is dropped and counted.
func TestSenderOffers(t *testing.T) {
	c := newPair(t, 1, sim.Faults{})
	_, sp := c.plans(1, 1)
	_, dinc := c.decode.Self()
	_, pinc := c.prefill.Self()
	good := peer.Offer{Session: sp.Key(), Writer: kvP, Incarnation: pinc, Receiver: "decode", ReceiverInc: dinc,
		Tokens: sp.Chunk.Tokens(), Pages: []peer.OfferPage{{Key: []byte("k"), Len: pageLen}}}
	other, err := c.net.Join("other")
	require.NoError(t, err)
	send := func(from *sim.Node, o peer.Offer) {
		msg, err := peer.AppendOffer(nil, o)
		require.NoError(t, err)
		ep, err := from.Connect("prefill")
		require.NoError(t, err)
		_, err = ep.Send(msg)
		require.NoError(t, err)
		c.run(100)
	}
	stale := good
	stale.Incarnation = pinc + 7
	send(c.decode, stale) // for another life of this process
	send(other, good)     // from a process that is not the receiver it names
	assert.Equal(t, uint64(2), c.send.Stats().Dropped)
	send(c.decode, good) // before its publish: held
	send(c.decode, good) // again: dropped
	st := c.send.Stats()
	assert.Equal(t, uint64(1), st.Held)
	assert.Equal(t, uint64(3), st.Dropped)
	c.publish(sp, 0)
	assert.Equal(t, uint64(1), c.send.Stats().Offers, "the held offer is taken by its publish")
}

// A publish is refused, nothing posted, unless its extent names exactly one
// plan's pages and its receiver was agreed with and is alive.
func TestSenderRefusals(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(c *pair) contract.CacheExtent
		want    string
	}{
		{"a unit of no plan", func(c *pair) contract.CacheExtent {
			return extent(t, []peer.Page{{Name: peer.SourceName(1, 1, kvP, 0, 0)}}, 0)
		}, "no page of a plan"},
		{"some of a plan's pages", func(c *pair) contract.CacheExtent {
			_, sp := c.plans(1, 2)
			pages, err := c.send.Expect(sp)
			require.NoError(t, err)
			return extent(t, pages[:1], 0)
		}, "has 2 pages; the extent names 1"},
		{"a receiver never connected", func(c *pair) contract.CacheExtent {
			_, sp := c.plans(1, 1)
			sp.To = "decode-z"
			pages, err := c.send.Expect(sp)
			require.NoError(t, err)
			return extent(t, pages, 0)
		}, `no agreement with receiver "decode-z"`},
		{"a receiver lost", func(c *pair) contract.CacheExtent {
			_, sp := c.plans(1, 1)
			pages, err := c.send.Expect(sp)
			require.NoError(t, err)
			ep, err := c.prefill.Connect("decode")
			require.NoError(t, err)
			_ = ep
			_, err = c.net.Restart("decode")
			require.NoError(t, err)
			c.send.Progress()
			return extent(t, pages, 0)
		}, "was lost"},
		{"a unit with no staging slot", func(c *pair) contract.CacheExtent {
			_, sp := c.plans(1, 1)
			pages, err := c.send.Expect(sp)
			require.NoError(t, err)
			return extent(t, pages, 50)
		}, "no staging slot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newPair(t, 1, sim.Faults{})
			a, err := c.send.Publish(tt.prepare(c))
			require.ErrorIs(t, err, contract.ErrSubmissionRejected)
			assert.ErrorContains(t, err, tt.want)
			assert.Nil(t, a)
			assert.Zero(t, c.send.Stats().Puts)
		})
	}
	c := newPair(t, 1, sim.Faults{})
	_, err := c.send.Expect(peer.SendPlan{Request: 1, Attempt: 1, To: "decode", As: kvA, Chunk: chunk(t, 1, false), BlockTokens: 16})
	assert.ErrorContains(t, err, "this sender is prefill", "a plan written as another process")
}
