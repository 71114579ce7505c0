package sim_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/sim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const pieceLen = 16

// rx is a receiving node in the tests: one registered buffer, and a record
// of everything its handlers were given, with the buffer as it was at that
// moment.
type rx struct {
	node *sim.Node
	buf  []byte
	mem  transfer.Memory
	got  []arrival
	lost []transfer.Incarnation
}

type arrival struct {
	ev   transfer.Evidence
	seen []byte // the buffer when the message was handled
}

func newRx(t *testing.T, net *sim.Network, pieces int) *rx {
	t.Helper()
	node, err := net.Join("decode")
	require.NoError(t, err)
	r := &rx{node: node, buf: make([]byte, pieces*pieceLen)}
	r.mem, err = node.Register(r.buf)
	require.NoError(t, err)
	node.SetHandlers(transfer.Handlers{
		Message: func(_ transfer.Peer, _ transfer.Incarnation, msg []byte) {
			ev, err := transfer.DecodeEvidence(msg)
			require.NoError(t, err)
			r.got = append(r.got, arrival{ev: ev, seen: append([]byte(nil), r.buf...)})
		},
		EndpointError: func(_ transfer.Peer, inc transfer.Incarnation, _ error) { r.lost = append(r.lost, inc) },
	})
	return r
}

// drain runs the network and the receiver's progress until nothing is left.
func (r *rx) drain(net *sim.Network) {
	for range 100000 {
		stepped := net.Step()
		r.node.Progress()
		if !stepped {
			return
		}
	}
}

func (r *rx) kinds() []transfer.EvidenceKind {
	var ks []transfer.EvidenceKind
	for _, a := range r.got {
		ks = append(ks, a.ev.Kind)
	}
	return ks
}

// landed counts the pieces of buf that hold their writer's fill byte.
func landed(buf []byte, fill byte) int {
	n := 0
	for p := 0; p+pieceLen <= len(buf); p += pieceLen {
		if bytes.Equal(buf[p:p+pieceLen], bytes.Repeat([]byte{fill}, pieceLen)) {
			n++
		}
	}
	return n
}

var session = transfer.SessionKey{Request: 5, Attempt: 1}

func spawn(t *testing.T, net *sim.Network, r *rx, name transfer.Peer, b sim.Behaviour, reports bool, pieces int, fill byte) (*sim.Node, *sim.Writer) {
	t.Helper()
	node, err := net.Join(name)
	require.NoError(t, err)
	spec := sim.WriterSpec{
		Node: node, To: "decode", Session: session, Key: r.mem.PackedKey(),
		Accessor: transfer.AccessorID{Peer: name, Role: transfer.RoleKV},
		Tokens:   transfer.TokenRange{Start: 0, End: int64(pieces * 16)}, Reports: reports, Behaviour: b,
	}
	for p := range pieces {
		spec.Pieces = append(spec.Pieces, sim.Piece{Src: bytes.Repeat([]byte{fill}, pieceLen), Off: p * pieceLen})
	}
	w, err := net.Spawn(spec)
	require.NoError(t, err)
	return node, w
}

func network(t *testing.T, seed uint64, f sim.Faults) *sim.Network {
	t.Helper()
	net, err := sim.New(seed, f)
	require.NoError(t, err)
	return net
}

// An honest writer's DONE is sent after its flush, so it always arrives
// after its data, however the network orders things. Its progress reports
// arrive after their data too, unless reports may overtake data — and then,
// on some seed, one does.
func TestReportsAndData(t *testing.T) {
	for _, overtake := range []bool{false, true} {
		overtaken := 0
		for seed := range uint64(40) {
			net := network(t, seed, sim.Faults{ReportsOvertakeData: overtake})
			r := newRx(t, net, 4)
			spawn(t, net, r, "prefill", sim.Honest, true, 4, 0xAB)
			r.drain(net)
			require.Equal(t, []transfer.EvidenceKind{transfer.Report, transfer.Report, transfer.Report, transfer.Report, transfer.Done}, sortedKinds(r))
			for _, a := range r.got {
				reached := int(a.ev.TokenEnd / 16) // pieces the evidence claims
				switch {
				case a.ev.Kind == transfer.Done:
					assert.Equal(t, 4, landed(a.seen, 0xAB), "seed %d: DONE before its data", seed)
				case landed(a.seen, 0xAB) < reached:
					overtaken++
					assert.True(t, overtake, "seed %d: a report before its data with the knob off", seed)
				}
			}
		}
		if overtake {
			assert.Positive(t, overtaken, "no seed let a report overtake its data")
		}
	}
}

func sortedKinds(r *rx) []transfer.EvidenceKind {
	var reports, others []transfer.EvidenceKind
	for _, k := range r.kinds() {
		if k == transfer.Report {
			reports = append(reports, k)
		} else {
			others = append(others, k)
		}
	}
	return append(reports, others...)
}

// The DONE faults, each at certainty: lost, masked (late, once), duplicated,
// replayed long after.
func TestDoneFaults(t *testing.T) {
	for _, tc := range []struct {
		name  string
		f     sim.Faults
		dones int
		stat  func(sim.Stats) int
	}{
		{"lost", sim.Faults{LoseDone: 1}, 0, func(s sim.Stats) int { return s.LostDone }},
		{"masked", sim.Faults{MaskDone: 1}, 1, func(s sim.Stats) int { return s.MaskedDone }},
		{"duplicated", sim.Faults{DuplicateDone: 1}, 2, func(s sim.Stats) int { return s.DuplicatedDone }},
		{"replayed", sim.Faults{ReplayDone: 1}, 2, func(s sim.Stats) int { return s.ReplayedDone }},
		{"none", sim.Faults{}, 1, func(s sim.Stats) int { return 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			net := network(t, 3, tc.f)
			r := newRx(t, net, 2)
			spawn(t, net, r, "prefill", sim.Honest, false, 2, 0x11)
			r.drain(net)
			assert.Equal(t, tc.dones, len(r.got), "%v", r.kinds())
			for _, a := range r.got {
				assert.Equal(t, transfer.Done, a.ev.Kind)
				assert.Equal(t, 2, landed(a.seen, 0x11))
			}
			assert.Equal(t, 1, tc.stat(net.Stats()))
		})
	}
}

// A masked DONE is withheld: the writer is finished and its data landed,
// yet the receiver has heard nothing until the mask lifts (ReleaseAll).
func TestMaskedDoneIsWithheld(t *testing.T) {
	net := network(t, 1, sim.Faults{MaskDone: 1})
	r := newRx(t, net, 2)
	_, w := spawn(t, net, r, "prefill", sim.Honest, false, 2, 0x22)
	for !w.Finished() {
		require.True(t, net.Step())
		r.node.Progress()
	}
	assert.Empty(t, r.got, "the DONE is masked")
	assert.Equal(t, 2, landed(r.buf, 0x22))
	assert.Equal(t, 1, net.ReleaseAll())
	r.drain(net)
	assert.Equal(t, []transfer.EvidenceKind{transfer.Done}, r.kinds())
}

// Puts a dead node posted still land under PutsOutliveSender, and are
// dropped with it otherwise.
func TestPutsOutliveSender(t *testing.T) {
	for _, outlive := range []bool{false, true} {
		net := network(t, 9, sim.Faults{PutsOutliveSender: outlive})
		r := newRx(t, net, 2)
		tx, err := net.Join("prefill")
		require.NoError(t, err)
		ep, err := tx.Connect("decode")
		require.NoError(t, err)
		key, err := ep.UnpackKey(r.mem.PackedKey())
		require.NoError(t, err)
		req, err := ep.Put(bytes.Repeat([]byte{0x33}, 2*pieceLen), key, 0)
		require.NoError(t, err)
		assert.True(t, net.MayWrite(r.mem))
		require.NoError(t, net.Kill("prefill"))
		r.drain(net)
		assert.Equal(t, []transfer.Incarnation{2}, r.lost, "the receiver hears of the death")
		assert.Error(t, ep.Err())
		done, err := req.Test()
		assert.True(t, done)
		if outlive {
			assert.NoError(t, err)
			assert.Equal(t, 2, landed(r.buf, 0x33), "a dead sender's posted put still lands")
		} else {
			assert.ErrorIs(t, err, sim.ErrPeerDead)
			assert.Zero(t, landed(r.buf, 0x33))
			assert.Equal(t, 1, net.Stats().Dropped)
		}
		assert.False(t, net.MayWrite(r.mem))
	}
}

// Revocation refuses every later put; it drops puts already posted when it
// fences, and lets them land late when it leaks.
func TestRevocation(t *testing.T) {
	for _, leaks := range []bool{false, true} {
		net := network(t, 4, sim.Faults{RevocationLeaks: leaks})
		r := newRx(t, net, 1)
		tx, err := net.Join("prefill")
		require.NoError(t, err)
		ep, err := tx.Connect("decode")
		require.NoError(t, err)
		key, err := ep.UnpackKey(r.mem.PackedKey())
		require.NoError(t, err)
		req, err := ep.Put(bytes.Repeat([]byte{0x44}, pieceLen), key, 0)
		require.NoError(t, err)
		how, err := r.mem.Revoke()
		require.NoError(t, err)
		again, err := r.mem.Revoke()
		require.NoError(t, err)
		assert.Equal(t, how, again, "idempotent")
		assert.Equal(t, !leaks, how.Fences())
		assert.Equal(t, leaks, net.MayWrite(r.mem), "a posted put may still land only when revocation leaks")
		_, err = ep.Put(bytes.Repeat([]byte{0x55}, pieceLen), key, 0)
		require.ErrorIs(t, err, sim.ErrRevoked)
		r.drain(net)
		done, perr := req.Test()
		require.True(t, done)
		s := net.Stats()
		assert.Equal(t, 1, s.Refused)
		if leaks {
			require.NoError(t, perr)
			assert.Equal(t, 1, landed(r.buf, 0x44))
			assert.Equal(t, 1, s.LateLandings)
		} else {
			require.ErrorIs(t, perr, sim.ErrRevoked)
			assert.Zero(t, landed(r.buf, 0x44))
			assert.Equal(t, 1, s.Dropped)
		}
	}
}

// A restart is a new incarnation: the receiver is told of the old one's
// death, the old endpoint refuses everything, a key packed by a receiver
// that restarted cannot be unpacked on an endpoint to its new life.
func TestRestart(t *testing.T) {
	net := network(t, 2, sim.Faults{})
	r := newRx(t, net, 1)
	old, err := net.Join("prefill")
	require.NoError(t, err)
	ep, err := old.Connect("decode")
	require.NoError(t, err)
	_, oldInc := old.Self()
	_, err = net.Join("prefill")
	require.Error(t, err, "a live process of that name exists")
	fresh, err := net.Restart("prefill")
	require.NoError(t, err)
	_, freshInc := fresh.Self()
	assert.Greater(t, freshInc, oldInc)
	r.node.Progress()
	assert.Equal(t, []transfer.Incarnation{oldInc}, r.lost)
	_, err = ep.Send([]byte("x"))
	require.ErrorIs(t, err, sim.ErrPeerDead)
	_, err = old.Connect("decode")
	require.ErrorIs(t, err, sim.ErrPeerDead)

	packed := r.mem.PackedKey()
	rx2, err := net.Restart("decode")
	require.NoError(t, err)
	ep2, err := fresh.Connect("decode")
	require.NoError(t, err)
	_, err = ep2.UnpackKey(packed)
	require.Error(t, err, "a key of the receiver's previous life")
	mem2, err := rx2.Register(make([]byte, pieceLen))
	require.NoError(t, err)
	_, err = ep2.UnpackKey(mem2.PackedKey())
	require.NoError(t, err)
}

// The writers' behaviours.
func TestWriterBehaviours(t *testing.T) {
	t.Run("never reports", func(t *testing.T) {
		net := network(t, 5, sim.Faults{})
		r := newRx(t, net, 3)
		_, w := spawn(t, net, r, "prefill", sim.NeverReports, false, 3, 0x66)
		r.drain(net)
		assert.Empty(t, r.got)
		assert.Equal(t, 3, landed(r.buf, 0x66))
		assert.True(t, w.Finished())
	})
	t.Run("fails and writes on", func(t *testing.T) {
		after := 0
		for seed := range uint64(20) {
			net := network(t, seed, sim.Faults{})
			r := newRx(t, net, 4)
			spawn(t, net, r, "prefill", sim.FailsMidway, false, 4, 0x77)
			r.drain(net)
			require.Equal(t, []transfer.EvidenceKind{transfer.Failure}, r.kinds())
			assert.Equal(t, 4, landed(r.buf, 0x77), "every put lands, failure or not")
			if landed(r.got[0].seen, 0x77) < 4 {
				after++
			}
		}
		assert.Positive(t, after, "on some seed, writes land after the failure was heard")
	})
	t.Run("submits after its DONE", func(t *testing.T) {
		net := network(t, 6, sim.Faults{})
		r := newRx(t, net, 2)
		_, w := spawn(t, net, r, "prefill", sim.SubmitsLate, false, 2, 0x12)
		for len(r.got) == 0 {
			require.True(t, net.Step())
			r.node.Progress()
		}
		require.Equal(t, transfer.Done, r.got[0].ev.Kind)
		assert.True(t, net.MayWrite(r.mem), "the writer still holds a live key and will use it")
		copy(r.buf, bytes.Repeat([]byte{0xEE}, pieceLen)) // the pages, re-lent with a sentinel
		r.drain(net)
		assert.Equal(t, 3, w.Posted())
		assert.Equal(t, 1, net.Stats().LateSubmits)
		assert.Equal(t, bytes.Repeat([]byte{0x12}, pieceLen), r.buf[:pieceLen], "the late write overwrote the sentinel")
		assert.False(t, net.MayWrite(r.mem))
	})
}

// The source of a put is read when it lands, not when it is posted; a get
// reads the remote memory when it lands.
func TestBuffersAreReadLate(t *testing.T) {
	net := network(t, 8, sim.Faults{})
	r := newRx(t, net, 1)
	tx, err := net.Join("prefill")
	require.NoError(t, err)
	ep, err := tx.Connect("decode")
	require.NoError(t, err)
	key, err := ep.UnpackKey(r.mem.PackedKey())
	require.NoError(t, err)
	src := bytes.Repeat([]byte{1}, pieceLen)
	_, err = ep.Put(src, key, 0)
	require.NoError(t, err)
	src[0] = 9
	r.drain(net)
	assert.Equal(t, byte(9), r.buf[0], "the put read its source when it landed")
	dst := make([]byte, 4)
	get, err := ep.Get(dst, key, 4)
	require.NoError(t, err)
	r.buf[4] = 42
	r.drain(net)
	done, err := get.Test()
	require.True(t, done)
	require.NoError(t, err)
	assert.Equal(t, []byte{42, 1, 1, 1}, dst)
	_, err = ep.Put(make([]byte, pieceLen), key, 1)
	require.Error(t, err, "beyond the region")
}

// A flush completes only after every put before it landed; so does a worker
// flush, and a close — after which the endpoint refuses everything.
func TestFlushes(t *testing.T) {
	for seed := range uint64(20) {
		net := network(t, seed, sim.Faults{ReportsOvertakeData: true})
		r := newRx(t, net, 4)
		tx, err := net.Join("prefill")
		require.NoError(t, err)
		ep, err := tx.Connect("decode")
		require.NoError(t, err)
		key, err := ep.UnpackKey(r.mem.PackedKey())
		require.NoError(t, err)
		for p := range 3 {
			_, err := ep.Put(bytes.Repeat([]byte{0x5A}, pieceLen), key, p*pieceLen)
			require.NoError(t, err)
		}
		flush, err := ep.Flush()
		require.NoError(t, err)
		worker := tx.Flush()
		closing, err := ep.Close()
		require.NoError(t, err)
		for _, req := range []transfer.Request{flush, worker, closing} {
			for done, _ := req.Test(); !done; done, _ = req.Test() {
				require.True(t, net.Step(), "seed %d: the flush never completed", seed)
			}
			_, ferr := req.Test()
			require.NoError(t, ferr)
			assert.Equal(t, 3, landed(r.buf, 0x5A), "seed %d: a flush completed before the data", seed)
		}
		_, err = ep.Put(make([]byte, pieceLen), key, 0)
		require.Error(t, err, "closed")
	}
}

// The same seed and calls give the same run, byte for byte.
func TestDeterministic(t *testing.T) {
	run := func() ([]transfer.EvidenceKind, []byte, sim.Stats) {
		net := network(t, 77, sim.Faults{ReportsOvertakeData: true, DuplicateDone: 0.5, MaskDone: 0.5, ReplayDone: 0.5})
		r := newRx(t, net, 4)
		spawn(t, net, r, "a", sim.Honest, true, 2, 0xA1)
		spawn(t, net, r, "b", sim.SubmitsLate, true, 2, 0xB2)
		r.drain(net)
		var trace []byte
		for _, a := range r.got {
			trace = append(trace, a.seen...)
		}
		return r.kinds(), trace, net.Stats()
	}
	k1, b1, s1 := run()
	k2, b2, s2 := run()
	assert.Equal(t, k1, k2)
	assert.Equal(t, b1, b2)
	assert.Equal(t, s1, s2)
}

func TestRefusals(t *testing.T) {
	_, err := sim.New(1, sim.Faults{LoseDone: 1.5})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "LoseDone")
	net := network(t, 1, sim.Faults{})
	_, err = net.Join("")
	require.Error(t, err)
	require.Error(t, net.Kill("nobody"))
	r := newRx(t, net, 1)
	node, err := net.Join("prefill")
	require.NoError(t, err)
	good := sim.WriterSpec{Node: node, To: "decode", Session: session, Key: r.mem.PackedKey(),
		Accessor: transfer.AccessorID{Peer: "prefill", Role: transfer.RoleKV}, Behaviour: sim.Honest}
	for name, mutate := range map[string]func(*sim.WriterSpec){
		"no node":             func(s *sim.WriterSpec) { s.Node = nil },
		"another node's name": func(s *sim.WriterSpec) { s.Accessor.Peer = "other" },
		"no behaviour":        func(s *sim.WriterSpec) { s.Behaviour = 0 },
		"inverted tokens":     func(s *sim.WriterSpec) { s.Tokens = transfer.TokenRange{Start: 5, End: 1} },
		"attempt zero":        func(s *sim.WriterSpec) { s.Session.Attempt = 0 },
		"a bad key":           func(s *sim.WriterSpec) { s.Key = []byte("nope") },
		"no such receiver":    func(s *sim.WriterSpec) { s.To = "nobody" },
	} {
		spec := good
		mutate(&spec)
		_, err := net.Spawn(spec)
		assert.Error(t, err, name)
	}
	_, err = net.Spawn(good)
	require.NoError(t, err)
}

// FuzzUnpackKey: a packed key comes from a peer; no bytes make unpacking
// panic, and only a key the endpoint's peer packed is accepted.
func FuzzUnpackKey(f *testing.F) {
	net, err := sim.New(1, sim.Faults{})
	require.NoError(f, err)
	rxNode, err := net.Join("decode")
	require.NoError(f, err)
	mem, err := rxNode.Register(make([]byte, 64))
	require.NoError(f, err)
	tx, err := net.Join("prefill")
	require.NoError(f, err)
	ep, err := tx.Connect("decode")
	require.NoError(f, err)
	f.Add(mem.PackedKey())
	f.Add([]byte("SIMK"))
	f.Fuzz(func(t *testing.T, packed []byte) {
		key, err := ep.UnpackKey(packed)
		if err != nil {
			return
		}
		require.Equal(t, mem.PackedKey(), packed, "only the one key packed on decode is accepted")
		require.Equal(t, 64, key.Len())
	})
}

// C-IDENTITY, the restart story: a prefill process posts a put into a
// session's pages and dies; its put is still in flight (an RDMA NIC finishes
// what was posted). Its next life, answering for the same session and
// accessor, reports DONE. The session must not take the new life's word for
// the old life's writes: the pages stay lent while, by the network's own
// record, the old put may still land — until the old life's own evidence
// (here, none) or the deadline, which contains them.
func TestRestartedPeerCannotSettleItsOldLife(t *testing.T) {
	net := network(t, 11, sim.Faults{PutsOutliveSender: true})
	r := newRx(t, net, 1)
	old, err := net.Join("prefill")
	require.NoError(t, err)
	self := transfer.Capabilities{Peer: "decode", Incarnation: 1, Version: transfer.ProtocolVersion, Supported: transfer.KnownCapabilities}
	name, oldInc := old.Self()
	agreement, err := transfer.Negotiate(self, transfer.Capabilities{Peer: name, Incarnation: oldInc, Version: 1, Supported: transfer.KnownCapabilities}, 0)
	require.NoError(t, err)
	id := transfer.AccessorID{Peer: name, Role: transfer.RoleKV}
	core, err := transfer.NewSessions(transfer.Limits{Sessions: 4, Tombstones: 4, Window: time.Hour})
	require.NoError(t, err)
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	cfg := transfer.CohortConfig{Session: session, Tokens: transfer.TokenRange{End: 16},
		Accessors: []transfer.AccessorSpec{{ID: id, Agreement: agreement}},
		Submitted: now, Deadline: now.Add(time.Second), Containment: now.Add(2 * time.Second)}
	require.NoError(t, core.Create(now, cfg))
	require.NoError(t, core.Expose(now, session))

	ep, err := old.Connect("decode")
	require.NoError(t, err)
	key, err := ep.UnpackKey(r.mem.PackedKey())
	require.NoError(t, err)
	_, err = ep.Put(bytes.Repeat([]byte{0x99}, pieceLen), key, 0)
	require.NoError(t, err)
	fresh, err := net.Restart("prefill")
	require.NoError(t, err)
	r.node.Progress()
	require.Equal(t, []transfer.Incarnation{oldInc}, r.lost)
	assert.Equal(t, 1, core.PeerLost(now, name, oldInc, "endpoint error"))

	_, freshInc := fresh.Self()
	done := transfer.Evidence{Kind: transfer.Done, Session: session, Accessor: id, Incarnation: freshInc, TokenEnd: 16}
	require.ErrorIs(t, core.Step(now, done), transfer.ErrStaleIncarnation)
	assert.True(t, net.MayWrite(r.mem), "the old life's put is in flight")
	assert.Equal(t, transfer.Quiescing, core.Poll(now, session), "nothing settled the old life")
	r.drain(net)
	assert.Equal(t, 1, landed(r.buf, 0x99), "and it lands")
	assert.Equal(t, transfer.InDoubt, core.Poll(now.Add(2*time.Second), session), "no evidence from the old life ever came: contained")
}

// A writer may hold one key per piece (a receiver that registers each page
// on its own): the oracle then says, per registration, whether this writer
// will still post into it — a region whose pieces are all posted and landed
// is no longer written, while its sibling still is.
func TestPerPieceKeys(t *testing.T) {
	net := network(t, 9, sim.Faults{})
	decode, err := net.Join("decode")
	require.NoError(t, err)
	pages := [][]byte{make([]byte, pieceLen), make([]byte, pieceLen)}
	var mems []transfer.Memory
	for _, p := range pages {
		m, err := decode.Register(p)
		require.NoError(t, err)
		mems = append(mems, m)
	}
	prefill, err := net.Join("prefill")
	require.NoError(t, err)
	w, err := net.Spawn(sim.WriterSpec{
		Node: prefill, To: "decode", Session: session,
		Accessor: transfer.AccessorID{Peer: "prefill", Role: transfer.RoleKV},
		Tokens:   transfer.TokenRange{End: 32}, Behaviour: sim.Honest,
		Pieces: []sim.Piece{
			{Src: bytes.Repeat([]byte{0x11}, pieceLen), Key: mems[0].PackedKey()},
			{Src: bytes.Repeat([]byte{0x22}, pieceLen), Key: mems[1].PackedKey()},
		},
	})
	require.NoError(t, err)
	assert.True(t, net.MayWrite(mems[0]))
	assert.True(t, net.MayWrite(mems[1]))
	for range 1000 {
		if pages[0][0] == 0x11 {
			break
		}
		net.Step()
	}
	require.Equal(t, byte(0x11), pages[0][0], "the first piece landed")
	assert.False(t, net.MayWrite(mems[0]), "the first page's only piece landed: nothing more goes there")
	assert.Equal(t, pages[1][0] != 0x22, net.MayWrite(mems[1]), "the second page is written until its piece landed")
	assert.Positive(t, w.Posted())
	for net.Step() {
		decode.Progress()
	}
	assert.Equal(t, bytes.Repeat([]byte{0x11}, pieceLen), pages[0])
	assert.Equal(t, bytes.Repeat([]byte{0x22}, pieceLen), pages[1])
	assert.False(t, net.MayWrite(mems[0]))
	assert.False(t, net.MayWrite(mems[1]))

	_, err = net.Spawn(sim.WriterSpec{
		Node: prefill, To: "decode", Session: session,
		Accessor: transfer.AccessorID{Peer: "prefill", Role: transfer.RoleKV},
		Tokens:   transfer.TokenRange{End: 16}, Behaviour: sim.Honest,
		Pieces: []sim.Piece{{Src: make([]byte, pieceLen), Key: []byte("not a key")}},
	})
	require.Error(t, err, "a piece's key is unpacked at Spawn")
}
