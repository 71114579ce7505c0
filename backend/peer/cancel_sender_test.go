package peer_test

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/peer"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/sim"
)

// rig is a prefill process with a Sender, and a decode process that is no
// Receiver: the test speaks for it — offers and cancels crafted by hand,
// sent from its node — and it records every piece of evidence it hears,
// with what its pages held when it arrived.
type rig struct {
	t       *testing.T
	net     *sim.Network
	prefill *sim.Node
	decode  *sim.Node
	other   *sim.Node
	clock   *clock
	src     [][]byte
	dst     []byte // the decode side's pages, one registration
	key     []byte
	send    *peer.Sender

	mu    sync.Mutex
	heard []heard
}

type heard struct {
	ev     transfer.Evidence
	landed bool // every page held its source when the evidence arrived
}

const rigPages = 2

func newRig(t *testing.T) *rig { return newRigOn(t, 5, sim.Faults{}) }

func newRigOn(t *testing.T, seed uint64, f sim.Faults) *rig {
	t.Helper()
	net, err := sim.New(seed, f)
	require.NoError(t, err)
	r := &rig{t: t, net: net, clock: &clock{now: epoch}, dst: bytes.Repeat([]byte{untouched}, rigPages*pageLen)}
	r.decode, err = net.Join("decode")
	require.NoError(t, err)
	r.prefill, err = net.Join("prefill")
	require.NoError(t, err)
	r.other, err = net.Join("other")
	require.NoError(t, err)
	for i := range rigPages {
		r.src = append(r.src, bytes.Repeat([]byte{byte(0x30 + i)}, pageLen))
	}
	mem, err := r.decode.Register(r.dst)
	require.NoError(t, err)
	r.key = mem.PackedKey()
	r.decode.SetHandlers(transfer.Handlers{Message: func(_ transfer.Peer, _ transfer.Incarnation, msg []byte) {
		ev, err := transfer.DecodeEvidence(msg)
		require.NoError(t, err)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.heard = append(r.heard, heard{ev: ev, landed: bytes.Equal(r.dst, bytes.Join(r.src, nil))})
	}})
	_, pinc := r.prefill.Self()
	r.send, err = peer.NewSender(peer.SenderConfig{Transport: r.prefill, Capabilities: all("prefill", pinc),
		Slot: func(u contract.Unit) []byte {
			if u.Local < 0 || u.Local >= len(r.src) {
				return nil
			}
			return r.src[u.Local]
		},
		Timeout: time.Second, Clock: r.clock.Now, Limits: transfer.Limits{Sessions: 8, Tombstones: 1, Window: time.Hour}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.send.Close() })
	_, dinc := r.decode.Self()
	_, err = r.send.Connect(all("decode", dinc))
	require.NoError(t, err)
	return r
}

func (r *rig) sendPlan(req transfer.RequestID, att transfer.AttemptID) peer.SendPlan {
	return peer.SendPlan{Request: req, Attempt: att, To: "decode", As: kvP, Chunk: chunk(r.t, rigPages, false), BlockTokens: 16}
}

func (r *rig) publish(req transfer.RequestID, att transfer.AttemptID) contract.Attempt {
	r.t.Helper()
	pages, err := r.send.Expect(r.sendPlan(req, att))
	require.NoError(r.t, err)
	a, err := r.send.Publish(extent(r.t, pages, 0))
	require.NoError(r.t, err)
	return a
}

func (r *rig) offer(req transfer.RequestID, att transfer.AttemptID) []byte {
	_, dinc := r.decode.Self()
	_, pinc := r.prefill.Self()
	o := peer.Offer{Session: transfer.SessionKey{Request: req, Attempt: att}, Writer: kvP, Incarnation: pinc,
		Receiver: "decode", ReceiverInc: dinc, Tokens: transfer.TokenRange{End: rigPages * 16}}
	for i := range rigPages {
		o.Pages = append(o.Pages, peer.OfferPage{Group: 0, Index: i, Key: r.key, Offset: i * pageLen, Len: pageLen})
	}
	msg, err := peer.AppendOffer(nil, o)
	require.NoError(r.t, err)
	return msg
}

// cancel is the decode side's cancel of (req, att); edit changes it first.
func (r *rig) cancel(req transfer.RequestID, att transfer.AttemptID, edit func(*peer.Cancel)) []byte {
	_, dinc := r.decode.Self()
	_, pinc := r.prefill.Self()
	c := peer.Cancel{Session: transfer.SessionKey{Request: req, Attempt: att}, Writer: kvP, Incarnation: pinc,
		Receiver: "decode", ReceiverInc: dinc, Reason: "cancelled by the owner"}
	if edit != nil {
		edit(&c)
	}
	msg, err := peer.AppendCancel(nil, c)
	require.NoError(r.t, err)
	return msg
}

// arrive sends msg from a node to the prefill process and lets the network
// carry it to its inbox, without the sender's Progress: what arrives is
// handled at the next one, in order of arrival.
func (r *rig) arrive(from *sim.Node, msg []byte) {
	r.t.Helper()
	ep, err := from.Connect("prefill")
	require.NoError(r.t, err)
	_, err = ep.Send(msg)
	require.NoError(r.t, err)
	r.net.Run(1000)
}

// deliver is arrive, then the sender's Progress.
func (r *rig) deliver(from *sim.Node, msg []byte) {
	r.t.Helper()
	r.arrive(from, msg)
	r.send.Progress()
}

// run lets the network and both sides move until nothing is left.
func (r *rig) run() {
	idle := 0
	for range 10000 {
		stepped := r.net.Step()
		r.send.Progress()
		r.decode.Progress()
		if idle = idle + 1; stepped {
			idle = 0
		}
		if idle == 2 {
			return
		}
	}
	r.t.Fatal("the network did not go quiet")
}

func (r *rig) dones() (ends []int64, landed []bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range r.heard {
		if h.ev.Kind == transfer.Done {
			ends, landed = append(ends, h.ev.TokenEnd), append(landed, h.landed)
		}
	}
	return ends, landed
}

// The sender's half of coordinated cancellation, one story per row: a
// receiver's cancel stops a publication it serves — nothing posted after it
// arrived — and its final report (a DONE: the chunk's end once every put
// landed, its start when nothing was posted) goes only once nothing more of
// it can land; a cancel before the offer leaves a tombstone that refuses
// and answers the late offer; a cancel of another attempt, of another life,
// from another process, a duplicate or a late one is ignored.
func TestSenderTakesACancel(t *testing.T) {
	type want struct {
		outcome                              string
		puts                                 uint64
		dones                                []int64 // token_end of every DONE the decode side heard
		cancels, tombstones, ignored, finals uint64
		dropped                              uint64 // offers refused
	}
	tests := []struct {
		name string
		act  func(r *rig) contract.Attempt
		want want
	}{
		{"before the offer and the publish: a tombstone", func(r *rig) contract.Attempt {
			r.deliver(r.decode, r.cancel(1, 1, nil))
			pub := r.publish(1, 1)
			require.True(t, r.proven(pub), "cancelled before anything was posted: proven at once")
			r.deliver(r.decode, r.offer(1, 1))
			return pub
		}, want{outcome: "cancelled(by peer)", dones: []int64{0}, cancels: 1, tombstones: 1, finals: 1, dropped: 1}},
		{"before the offer, after the publish", func(r *rig) contract.Attempt {
			pub := r.publish(1, 1)
			r.deliver(r.decode, r.cancel(1, 1, nil))
			require.Equal(t, "cancelled(by peer)", pub.Poll().String())
			r.deliver(r.decode, r.offer(1, 1))
			return pub
		}, want{outcome: "cancelled(by peer)", dones: []int64{0}, cancels: 1, tombstones: 1, finals: 1, dropped: 1}},
		{"the offer held before the publish: answered at once", func(r *rig) contract.Attempt {
			r.deliver(r.decode, r.offer(1, 1))
			r.deliver(r.decode, r.cancel(1, 1, nil))
			return r.publish(1, 1)
		}, want{outcome: "cancelled(by peer)", dones: []int64{0}, cancels: 1, tombstones: 1, finals: 1}},
		{"the offer taken, nothing posted yet", func(r *rig) contract.Attempt {
			pub := r.publish(1, 1)
			r.arrive(r.decode, r.offer(1, 1))
			r.arrive(r.decode, r.cancel(1, 1, nil))
			r.send.Progress() // the offer, then the cancel, then the posting that no longer happens
			return pub
		}, want{outcome: "cancelled(by peer)", dones: []int64{0}, cancels: 1, finals: 1}},
		{"the puts posted: DONE once the flush completed", func(r *rig) contract.Attempt {
			pub := r.publish(1, 1)
			r.deliver(r.decode, r.offer(1, 1))
			require.Equal(t, uint64(rigPages), r.send.Stats().Puts)
			r.arrive(r.decode, r.cancel(1, 1, nil))
			return pub
		}, want{outcome: "cancelled(by peer)", puts: rigPages, dones: []int64{rigPages * 16}, cancels: 1, finals: 1}},
		{"twice: the second is ignored", func(r *rig) contract.Attempt {
			pub := r.publish(1, 1)
			r.deliver(r.decode, r.offer(1, 1))
			r.deliver(r.decode, r.cancel(1, 1, nil))
			r.deliver(r.decode, r.cancel(1, 1, nil))
			return pub
		}, want{outcome: "cancelled(by peer)", puts: rigPages, dones: []int64{rigPages * 16}, cancels: 1, ignored: 1, finals: 1}},
		{"an older attempt's: ignored, the retry delivers", func(r *rig) contract.Attempt {
			pub := r.publish(1, 2)
			r.deliver(r.decode, r.cancel(1, 1, nil))
			r.deliver(r.decode, r.offer(1, 2))
			return pub
		}, want{outcome: "delivered(2 served)", puts: rigPages, dones: []int64{rigPages * 16}, ignored: 1}},
		{"for another life of this process: ignored", func(r *rig) contract.Attempt {
			pub := r.publish(1, 1)
			r.deliver(r.decode, r.cancel(1, 1, func(c *peer.Cancel) { c.Incarnation += 7 }))
			r.deliver(r.decode, r.offer(1, 1))
			return pub
		}, want{outcome: "delivered(2 served)", puts: rigPages, dones: []int64{rigPages * 16}, ignored: 1}},
		{"naming another life of the receiver: ignored", func(r *rig) contract.Attempt {
			pub := r.publish(1, 1)
			r.deliver(r.decode, r.cancel(1, 1, func(c *peer.Cancel) { c.ReceiverInc += 7 }))
			r.deliver(r.decode, r.offer(1, 1))
			return pub
		}, want{outcome: "delivered(2 served)", puts: rigPages, dones: []int64{rigPages * 16}, ignored: 1}},
		{"from a process that is not the receiver it names: ignored", func(r *rig) contract.Attempt {
			pub := r.publish(1, 1)
			r.deliver(r.other, r.cancel(1, 1, nil))
			r.deliver(r.decode, r.offer(1, 1))
			return pub
		}, want{outcome: "delivered(2 served)", puts: rigPages, dones: []int64{rigPages * 16}, ignored: 1}},
		{"malformed: ignored", func(r *rig) contract.Attempt {
			pub := r.publish(1, 1)
			r.deliver(r.decode, []byte("KVTX\x01 not a cancel"))
			r.deliver(r.decode, r.offer(1, 1))
			return pub
		}, want{outcome: "delivered(2 served)", puts: rigPages, dones: []int64{rigPages * 16}, ignored: 1}},
		{"after the delivery: ignored, no second report", func(r *rig) contract.Attempt {
			pub := r.publish(1, 1)
			r.deliver(r.decode, r.offer(1, 1))
			r.run()
			r.deliver(r.decode, r.cancel(1, 1, nil))
			return pub
		}, want{outcome: "delivered(2 served)", puts: rigPages, dones: []int64{rigPages * 16}, ignored: 1}},
		{"no room for a tombstone: the cancel is lost, and the offer is served", func(r *rig) contract.Attempt {
			r.deliver(r.decode, r.cancel(9, 1, nil)) // the rig's one tombstone
			pub := r.publish(1, 1)
			r.deliver(r.decode, r.offer(1, 1))
			r.deliver(r.decode, r.cancel(1, 1, nil)) // taken: the publication is live
			r.deliver(r.decode, r.cancel(2, 1, nil)) // no room
			return pub
		}, want{outcome: "cancelled(by peer)", puts: rigPages, dones: []int64{rigPages * 16}, cancels: 2, tombstones: 1, ignored: 1, finals: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			pub := tt.act(r)
			r.run()
			require.NotNil(t, pub.Poll())
			assert.Equal(t, tt.want.outcome, pub.Poll().String())
			assert.True(t, r.proven(pub), "every put completed")
			ends, landed := r.dones()
			assert.Equal(t, tt.want.dones, ends, "the DONEs the receiver heard")
			for i, end := range ends {
				if end > 0 {
					assert.True(t, landed[i], "DONE %d reaching %d arrived before every put landed", i, end)
				}
			}
			if tt.want.puts == 0 {
				assert.Equal(t, bytes.Repeat([]byte{untouched}, rigPages*pageLen), r.dst, "nothing was posted")
			}
			st := r.send.Stats()
			assert.Equal(t, tt.want, want{outcome: tt.want.outcome, puts: st.Puts, dones: tt.want.dones, cancels: st.Cancels,
				tombstones: st.Tombstones, ignored: st.Ignored, finals: st.Finals, dropped: st.Dropped})
		})
	}
}

func (r *rig) proven(a contract.Attempt) bool {
	r.t.Helper()
	ok, err := r.send.Quiesce(r.t.Context(), []contract.Attempt{a})
	require.NoError(r.t, err)
	return ok
}

// A cancel that arrives while the puts fly: the final report waits for the
// flush, so even where reports may overtake data it never arrives before
// the last put landed. Over seeds, some cancels must meet puts in flight,
// or the test shows nothing; a cancel that comes after the publication
// delivered is ignored, and its own DONE is the one report.
func TestSenderFinalReportWaitsForTheFlush(t *testing.T) {
	inFlight := 0
	for seed := range uint64(16) {
		r := newRigOn(t, seed, sim.Faults{ReportsOvertakeData: true})
		pub := r.publish(1, 1)
		r.deliver(r.decode, r.offer(1, 1))
		require.Equal(t, uint64(rigPages), r.send.Stats().Puts, "seed %d", seed)
		ep, err := r.decode.Connect("prefill")
		require.NoError(t, err)
		_, err = ep.Send(r.cancel(1, 1, nil))
		require.NoError(t, err)
		for range 1000 {
			r.net.Step()
			r.send.Progress()
			if st := r.send.Stats(); st.Cancels+st.Ignored == 1 {
				break
			}
		}
		st := r.send.Stats()
		require.Equal(t, uint64(1), st.Cancels+st.Ignored, "seed %d: the cancel arrived", seed)
		want := "delivered(2 served)"
		if st.Cancels == 1 {
			want = "cancelled(by peer)"
			if r.net.Stats().Landed < rigPages {
				inFlight++
			}
		}
		r.run()
		assert.Equal(t, want, pub.Poll().String(), "seed %d", seed)
		ends, landed := r.dones()
		assert.Equal(t, []int64{rigPages * 16}, ends, "seed %d", seed)
		assert.Equal(t, []bool{true}, landed, "seed %d: the DONE arrived after every put landed", seed)
		assert.Equal(t, uint64(rigPages), r.send.Stats().Puts, "seed %d: nothing posted after the cancel", seed)
	}
	require.Positive(t, inFlight, "no cancel met a put in flight")
	t.Logf("%d of 16 cancels met a put in flight", inFlight)
}
