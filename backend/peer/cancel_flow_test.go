package peer_test

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/peer"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/sim"
)

// regsOf is a transport that records every registration made through it:
// the pages the oracle (sim.Network.MayWrite) is asked about.
type regsOf struct {
	transfer.Transport
	regs *[]transfer.Memory
}

func (t regsOf) Register(mem []byte) (transfer.Memory, error) {
	m, err := t.Transport.Register(mem)
	if err == nil {
		*t.regs = append(*t.regs, m)
	}
	return m, err
}

// flow is a decode process whose Receiver (not leased: only the writers'
// own evidence can settle its pages) sends its cancels over the wire, and a
// prefill process with a Sender. offer, when set, replaces the receiver's
// offers (the test holds or scripts them).
type flow struct {
	*pair
	regs []transfer.Memory
}

const (
	flowTimeout = time.Second
	flowGrace   = time.Second
)

func newFlow(t *testing.T, seed uint64, f sim.Faults, offer func(fl *flow) func(peer.Offer) error) *flow {
	t.Helper()
	fl := &flow{pair: newPair(t, seed, f)}
	_ = fl.recv.Close()
	cfg := peer.ReceiverConfig{Transport: regsOf{fl.decode, &fl.regs}, Capabilities: all("decode", func() transfer.Incarnation { _, i := fl.decode.Self(); return i }()),
		Slot: func(u contract.Unit) []byte {
			if u.LocalGroup != 0 || u.Local < 0 || u.Local >= len(fl.dst) {
				return nil
			}
			return fl.dst[u.Local]
		},
		Timeout: flowTimeout, Grace: flowGrace, Clock: fl.clock.Now, Limits: transfer.Limits{Sessions: 16, Tombstones: 4, Window: time.Hour}}
	if offer != nil {
		cfg.Offer = offer(fl)
	}
	var err error
	fl.recv, err = peer.NewReceiver(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = fl.recv.Close() })
	_, pinc := fl.prefill.Self()
	_, err = fl.recv.Connect(all("prefill", pinc))
	require.NoError(t, err)
	return fl
}

// mayWrite asks the network's own record whether anything may still write
// a page of the receiver.
func (fl *flow) mayWrite() bool {
	return slices.ContainsFunc(fl.regs, fl.net.MayWrite)
}

// tick is one network step and both sides' progress; it answers whether
// the fetch's pages are proven reusable now, and checks, when they are,
// that by the network's record nothing may still write them.
func (fl *flow) tick(fetch contract.Attempt) bool {
	fl.t.Helper()
	fl.net.Step()
	fl.recv.Progress()
	fl.send.Progress()
	acc, err := fl.recv.TryQuiesce([]contract.Attempt{fetch})
	require.NoError(fl.t, err)
	if acc == contract.AccessEnded {
		assert.False(fl.t, fl.mayWrite(), "the pages returned while a put may still land")
		return true
	}
	return false
}

// A fetch the owner cancels while the Sender's puts fly returns its pages
// once the Sender — asked to stop — posted nothing more, flushed, and sent
// its final report: long before containment, and only once nothing may
// still write them. (The receiver is not leased, so nothing but that report
// could settle the writer.) Over seeds, some cancels must come while puts
// fly; one that comes after the Sender's DONE finds nothing to stop.
func TestCancelledFetchReturnsOnTheSendersFinalReport(t *testing.T) {
	stopped := 0
	for seed := range uint64(12) {
		fl := newFlow(t, seed, sim.Faults{ReportsOvertakeData: true}, nil)
		p, sp := fl.plans(1, 3)
		pub := fl.publish(sp, 0)
		fetch := fl.fetch(p, 0)
		for range 1000 {
			if fl.send.Stats().Puts > 0 {
				break
			}
			require.False(t, fl.tick(fetch))
		}
		require.Equal(t, uint64(3), fl.send.Stats().Puts, "seed %d: the offer came and every put was posted", seed)
		_, err := contract.RequestCancel(fetch)
		require.NoError(t, err)
		assert.Equal(t, "cancelled(local)", fetch.Poll().String())
		returned := false
		for range 10000 {
			if returned = fl.tick(fetch); returned {
				break
			}
		}
		require.True(t, returned, "seed %d: the pages never returned", seed)
		info, ok := fl.recv.Info(p.Key())
		require.True(t, ok)
		assert.Equal(t, transfer.QuiescedFailure, info.Physical, "seed %d: settled, not contained", seed)
		assert.Equal(t, uint64(1), fl.recv.Stats().Cancels, "seed %d: the writer was asked to stop", seed)
		st := fl.send.Stats()
		assert.Equal(t, uint64(3), st.Puts, "seed %d: nothing posted after the cancel", seed)
		if st.Cancels == 1 {
			stopped++
			assert.Equal(t, "cancelled(by peer)", pub.Poll().String())
			assert.Equal(t, uint64(1), st.Finals, "seed %d: one final report", seed)
		} else {
			assert.Equal(t, "delivered(3 served)", pub.Poll().String(), "seed %d: the cancel came after the Sender's DONE", seed)
		}
		fl.run(10000)
		assert.True(t, fl.proven(pub), "seed %d", seed)
	}
	require.Positive(t, stopped, "no cancel stopped a publication")
}

// A cancel that overtakes its offer leaves a tombstone at the Sender: the
// late offer is refused, nothing is posted, and the final report it answers
// with settles the writer. The receiver's offer is held back by the test
// and sent by hand once the cancel arrived.
func TestCancelOvertakesItsOffer(t *testing.T) {
	var held []peer.Offer
	fl := newFlow(t, 1, sim.Faults{}, func(*flow) func(peer.Offer) error {
		return func(o peer.Offer) error { held = append(held, o); return nil }
	})
	p, sp := fl.plans(1, 2)
	fetch := fl.fetch(p, 0)
	require.Len(t, held, 1)
	_, err := contract.RequestCancel(fetch)
	require.NoError(t, err)
	for range 1000 {
		if fl.send.Stats().Tombstones == 1 {
			break
		}
		require.False(t, fl.tick(fetch), "no evidence yet: the pages stay lent")
	}
	require.Equal(t, uint64(1), fl.send.Stats().Tombstones)
	pub := fl.publish(sp, 0)
	assert.Equal(t, "cancelled(by peer)", pub.Poll().String(), "its receiver cancelled it before its publish")
	msg, err := peer.AppendOffer(nil, held[0])
	require.NoError(t, err)
	ep, err := fl.decode.Connect("prefill")
	require.NoError(t, err)
	_, err = ep.Send(msg)
	require.NoError(t, err)
	returned := false
	for range 1000 {
		if returned = fl.tick(fetch); returned {
			break
		}
	}
	require.True(t, returned, "the final report answering the late offer settled the writer")
	st := fl.send.Stats()
	assert.Equal(t, uint64(1), st.Dropped, "the late offer was refused")
	assert.Zero(t, st.Puts)
	assert.Equal(t, uint64(1), st.Finals)
	for i := range 2 {
		assert.Equal(t, bytes.Repeat([]byte{0xD0}, pageLen), fl.dst[i], "page %d was never written", i)
	}
	assert.True(t, fl.proven(pub))
}

// A writer that ignores the cancel — a scripted one, whose process hears
// nothing — settles only on its own evidence: one that finishes returns the
// pages on its DONE, after its last put landed; one that never reports
// keeps them lent until containment, and IN_DOUBT after. The cancel was
// sent in both: it is a request, never evidence.
func TestAWriterIgnoringTheCancel(t *testing.T) {
	for _, tc := range []struct {
		behaviour sim.Behaviour
		returns   bool
	}{{sim.Honest, true}, {sim.NeverReports, false}} {
		t.Run(tc.behaviour.String(), func(t *testing.T) {
			deaf := transfer.AccessorID{Peer: "prefill-x", Rank: 0, Role: transfer.RoleKV}
			var node *sim.Node
			fl := newFlow(t, 3, sim.Faults{ReportsOvertakeData: true}, func(fl *flow) func(peer.Offer) error {
				return func(o peer.Offer) error {
					spec := sim.WriterSpec{Node: node, To: "decode", Session: o.Session, Accessor: o.Writer, Tokens: o.Tokens, Behaviour: tc.behaviour}
					for i, pg := range o.Pages {
						spec.Pieces = append(spec.Pieces, sim.Piece{Src: bytes.Repeat([]byte{byte(0x60 + i)}, pageLen), Off: pg.Offset, Key: pg.Key})
					}
					_, err := fl.net.Spawn(spec)
					return err
				}
			})
			var err error
			node, err = fl.net.Join("prefill-x")
			require.NoError(t, err)
			_, inc := node.Self()
			_, err = fl.recv.Connect(all("prefill-x", inc))
			require.NoError(t, err)
			ch := chunk(t, 3, false)
			fetch := fl.fetch(peer.Plan{Request: 1, Attempt: 1, Writers: []transfer.AccessorID{deaf}, Chunk: ch, BlockTokens: 16}, 0)
			_, err = contract.RequestCancel(fetch)
			require.NoError(t, err)
			returned := false
			for range 10000 {
				if returned = fl.tick(fetch); returned {
					break
				}
			}
			assert.Equal(t, uint64(1), fl.recv.Stats().Cancels, "the writer was asked to stop")
			assert.Equal(t, tc.returns, returned)
			if tc.returns {
				assert.Equal(t, bytes.Repeat([]byte{0x60}, pageLen), fl.dst[0], "it wrote on, ignoring the cancel")
				return
			}
			fl.clock.Advance(flowTimeout + flowGrace - time.Nanosecond)
			assert.False(t, fl.tick(fetch), "unsettled: lent until containment")
			fl.clock.Advance(time.Nanosecond)
			assert.False(t, fl.tick(fetch))
			info, _ := fl.recv.Info(transfer.SessionKey{Request: 1, Attempt: 1})
			assert.Equal(t, transfer.InDoubt, info.Physical, "contained")
		})
	}
}
