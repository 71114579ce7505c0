package sim_test

// The reference's acceptance ledger (TensorRT-LLM's
// tests/unittest/disaggregated/lifecycle_acceptance.md), the rows whose
// scenario is about the pages themselves, played over the simulated network:
// the bytes a late writer puts are the bytes in the buffer, and the
// network's own record (MayWrite) is the oracle. docs/testing.md ("The
// reference's acceptance ledger") maps every row.

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/sim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// side is one process of a ledger test: a node, a session table on a clock
// the test moves, and every piece of evidence its handler handed the table
// with the table's answer.
type side struct {
	t     *testing.T
	net   *sim.Network
	node  *sim.Node
	core  *transfer.Sessions
	now   time.Time
	heard []heard
}

type heard struct {
	ev  transfer.Evidence
	err error
}

func newSide(t *testing.T, net *sim.Network, name transfer.Peer) *side {
	t.Helper()
	node, err := net.Join(name)
	require.NoError(t, err)
	core, err := transfer.NewSessions(transfer.Limits{Sessions: 16, Tombstones: 16, Window: time.Hour})
	require.NoError(t, err)
	d := &side{t: t, net: net, node: node, core: core, now: epoch}
	node.SetHandlers(transfer.Handlers{
		Message: func(from transfer.Peer, inc transfer.Incarnation, msg []byte) {
			ev, err := transfer.DecodeEvidence(msg)
			if err != nil || ev.Accessor.Peer != from || ev.Incarnation != inc {
				t.Errorf("a message that does not speak for its endpoint %s#%d: %v %v", from, inc, ev, err)
				return
			}
			d.heard = append(d.heard, heard{ev, d.core.Step(d.now, ev)})
		},
		EndpointError: func(peer transfer.Peer, inc transfer.Incarnation, err error) {
			d.core.PeerLost(d.now, peer, inc, err.Error())
		},
	})
	return d
}

// agree negotiates with the current life of peer, for sessions needing req.
func (d *side) agree(peer *sim.Node, req transfer.CapabilitySet) transfer.Agreement {
	d.t.Helper()
	name, inc := d.node.Self()
	pname, pinc := peer.Self()
	local := transfer.Capabilities{Peer: name, Incarnation: inc, Version: transfer.ProtocolVersion, Supported: transfer.KnownCapabilities}
	remote := transfer.Capabilities{Peer: pname, Incarnation: pinc, Version: transfer.ProtocolVersion, Supported: transfer.KnownCapabilities}
	a, err := transfer.Negotiate(local, remote, req)
	require.NoError(d.t, err)
	return a
}

// run steps the network and this side's progress until nothing is left to
// do, or until after returns true; every wait is bounded by a step count.
func (d *side) run(after func() bool) {
	for range 100000 {
		stepped := d.net.Step()
		d.node.Progress()
		if after != nil && after() {
			return
		}
		if !stepped {
			return
		}
	}
	d.t.Fatalf("the network still had work after 100000 steps")
}

// refusals counts the evidence the table refused with target.
func (d *side) refusals(target error) int {
	n := 0
	for _, h := range d.heard {
		if errors.Is(h.err, target) {
			n++
		}
	}
	return n
}

// cohortConfig is a session of key over one 16-token piece per accessor.
func cohortConfig(key transfer.SessionKey, leased bool, at time.Time, specs ...transfer.AccessorSpec) transfer.CohortConfig {
	return transfer.CohortConfig{Session: key, Tokens: transfer.TokenRange{End: 16}, Leased: leased, Accessors: specs,
		Submitted: at, Deadline: at.Add(100 * time.Millisecond), Containment: at.Add(10 * time.Second)}
}

// oneSlot is the reference's one-slot allocator over one buffer: it lends the
// buffer to the next request only when the table reports the last holder's
// pages reusable, retiring it, and fills it with the new holder's sentinel.
type oneSlot struct {
	buf      []byte
	holder   transfer.SessionKey
	releases int
}

func (s *oneSlot) allocate(d *side, mem transfer.Memory, next transfer.SessionKey, sentinel byte) bool {
	if !d.core.Poll(d.now, s.holder).Reusable() || d.core.Retire(d.now, s.holder) != nil {
		return false
	}
	if d.net.MayWrite(mem) {
		d.t.Errorf("%s's pages were retired while, by the network's record, a writer may still write them", s.holder)
	}
	s.releases++
	s.holder = next
	copy(s.buf, bytes.Repeat([]byte{sentinel}, len(s.buf)))
	return true
}

const newData = 0xEE // the next request's sentinel

// A-CANCEL-REUSE, the reference's runnable acceptance scenario
// (test_cancelled_receive_retains_destinations_until_all_accessors_settle,
// four cases: a user's cancel or the request's deadline, with the KV or the
// auxiliary writer completing last). A receive with a KV and an aux writer,
// both handed the address, is cancelled (or times out). The owner polls and
// tries to give the slot to a new request after every network step; the cancel
// is answered ACCEPTED once and ALREADY_TERMINAL after. The slot must not
// move while either writer is out — had it moved, the late writer's bytes
// would land over the new request's sentinel. Once both have written and
// reported, the outcome is still the one latched, the slot moves exactly
// once, and every report replayed after that changes neither the sentinel
// nor the release count.
func TestLedgerACancelReuseRetainsUntilEveryWriterSettles(t *testing.T) {
	for _, cause := range []string{"user", "timeout"} {
		for _, last := range []transfer.Role{transfer.RoleKV, transfer.RoleAux} {
			for seed := range uint64(4) {
				t.Run(fmt.Sprintf("%s, %s last, seed %d", cause, last, seed), func(t *testing.T) {
					playCancelReuse(t, cause, last, seed)
				})
			}
		}
	}
}

func playCancelReuse(t *testing.T, cause string, last transfer.Role, seed uint64) {
	net := network(t, seed, sim.Faults{ReportsOvertakeData: true, DuplicateDone: 1})
	d := newSide(t, net, "decode")
	prefill, err := net.Join("prefill-a")
	require.NoError(t, err)
	old, next := transfer.SessionKey{Request: 41, Attempt: 1}, transfer.SessionKey{Request: 42, Attempt: 1}
	kv := transfer.AccessorID{Peer: "prefill-a", Role: transfer.RoleKV}
	aux := transfer.AccessorID{Peer: "prefill-a", Role: transfer.RoleAux}
	cfg := cohortConfig(old, false, d.now)
	for _, id := range []transfer.AccessorID{kv, aux} {
		cfg.Accessors = append(cfg.Accessors, transfer.AccessorSpec{ID: id, Agreement: d.agree(prefill, cfg.Requires()|transfer.Caps(transfer.MultiWriter))})
	}
	slot := &oneSlot{buf: make([]byte, 2*pieceLen), holder: old}
	mem, err := d.node.Register(slot.buf)
	require.NoError(t, err)
	require.NoError(t, d.core.Create(d.now, cfg))
	require.NoError(t, d.core.Expose(d.now, old), "the address is published to both writers")

	if cause == "user" {
		r := d.core.Cancel(d.now, old, "user")
		assert.Equal(t, transfer.Accepted, r.Logical)
		assert.False(t, r.SafeToReuse())
	} else {
		d.now = cfg.Deadline
	}
	latched := d.core.Cancel(d.now, old, "again") // the timeout's cleanup, or a repeated cancel
	assert.Equal(t, transfer.AlreadyTerminal, latched.Logical, "the cancel takes effect once")
	want, _ := d.core.Outcome(old)

	write := func(id transfer.AccessorID, fill byte) {
		spec := sim.WriterSpec{Node: prefill, To: "decode", Session: old, Accessor: id, Key: mem.PackedKey(),
			Tokens: cfg.Tokens, Reports: true, Behaviour: sim.Honest}
		off := map[transfer.Role]int{transfer.RoleKV: 0, transfer.RoleAux: pieceLen}[id.Role]
		spec.Pieces = []sim.Piece{{Src: bytes.Repeat([]byte{fill}, pieceLen), Off: off}}
		_, err := net.Spawn(spec)
		require.NoError(t, err)
	}
	first, final := kv, aux
	if last == transfer.RoleKV {
		first, final = aux, kv
	}
	tryReuse := func() bool { return slot.allocate(d, mem, next, newData) }
	write(first, 0x01)
	d.run(tryReuse)
	require.Equal(t, old, slot.holder, "the slot moved while %s had not written", final)
	assert.Equal(t, transfer.Quiescing, d.core.Poll(d.now, old))
	write(final, 0x02)
	d.run(func() bool { tryReuse(); return false })

	require.Equal(t, next, slot.holder, "the slot never moved once both writers settled")
	assert.Equal(t, 1, slot.releases)
	o, _ := d.core.Outcome(old)
	assert.Equal(t, fmt.Sprintf("%T", want), fmt.Sprintf("%T", o), "the outcome stays the one latched: %v", o)

	for _, h := range append([]heard(nil), d.heard...) { // replay every report after the reuse
		require.ErrorIs(t, d.core.Step(d.now, h.ev), transfer.ErrRetired)
	}
	assert.False(t, tryReuse(), "released once")
	assert.Equal(t, 1, slot.releases)
	assert.Equal(t, bytes.Repeat([]byte{newData}, len(slot.buf)), slot.buf, "the new request's sentinel is intact")
	assert.Positive(t, d.refusals(transfer.ErrDuplicate)+d.refusals(transfer.ErrRetired), "the duplicated DONEs arrived and were refused")
}

// A-SOURCE over real bytes (test_sender_retires_only_after_backend_done,
// test_ambiguous_sender_result_retains_source_and_reports_in_doubt): the
// sender's puts read their source when they land, so a source reused before
// its put is proven over shows in the receiver's pages. The sender's table
// takes a put request completing as its DONE (a flush-backed local
// completion) and one completing with an error as a failure, which proves
// nothing. After every step the owner reuses the source if, and only if, the
// table says so.
func TestLedgerASourceIsReadUntilItsPutIsProven(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(*testing.T, *side, *sim.Network, transfer.SessionKey)
		reused  bool
		arrived bool // the source's bytes reached the receiver
	}{
		{"every put completes", func(*testing.T, *side, *sim.Network, transfer.SessionKey) {}, true, true},
		{"the owner cancels while the puts are in flight", func(t *testing.T, d *side, _ *sim.Network, key transfer.SessionKey) {
			assert.False(t, d.core.Cancel(d.now, key, "user").SafeToReuse())
		}, true, true},
		{"the receiver dies: the puts end in an error", func(t *testing.T, _ *side, net *sim.Network, _ transfer.SessionKey) {
			require.NoError(t, net.Kill("decode"))
		}, false, false},
	} {
		for seed := range uint64(4) {
			t.Run(fmt.Sprintf("%s, seed %d", tc.name, seed), func(t *testing.T) {
				net := network(t, seed, sim.Faults{})
				dst := newRx(t, net, 2)
				tx := newSide(t, net, "prefill")
				key := transfer.SessionKey{Request: 7, Attempt: 1}
				kv := transfer.AccessorID{Peer: "decode", Role: transfer.RoleKV}
				aux := transfer.AccessorID{Peer: "decode", Role: transfer.RoleAux}
				cfg := cohortConfig(key, false, tx.now)
				for _, id := range []transfer.AccessorID{kv, aux} {
					cfg.Accessors = append(cfg.Accessors, transfer.AccessorSpec{ID: id, Agreement: tx.agree(dst.node, 0)})
				}
				require.NoError(t, tx.core.Create(tx.now, cfg))
				src := bytes.Repeat([]byte{0xA5}, 2*pieceLen)
				ep, err := tx.node.Connect("decode")
				require.NoError(t, err)
				rkey, err := ep.UnpackKey(dst.mem.PackedKey())
				require.NoError(t, err)
				require.NoError(t, tx.core.Expose(tx.now, key), "the puts are posted")
				puts := map[transfer.AccessorID]transfer.Request{}
				for i, id := range []transfer.AccessorID{kv, aux} {
					puts[id], err = ep.Put(src[i*pieceLen:(i+1)*pieceLen], rkey, i*pieceLen)
					require.NoError(t, err)
				}
				tc.setup(t, tx, net, key)
				reused := false
				tx.run(func() bool {
					for id, req := range puts {
						if done, err := req.Test(); done {
							delete(puts, id)
							e := transfer.Evidence{Kind: transfer.Done, Session: key, Accessor: id, Incarnation: cfg.Accessors[0].Agreement.Incarnation(), TokenEnd: 16}
							if err != nil {
								e = transfer.Evidence{Kind: transfer.Failure, Session: key, Accessor: id, Incarnation: e.Incarnation, Reason: err.Error()}
							}
							require.NoError(t, tx.core.Step(tx.now, e))
						}
					}
					if !reused && tx.core.Retire(tx.now, key) == nil {
						reused = true
						copy(src, bytes.Repeat([]byte{0x00}, len(src))) // the manager hands the source pages to another request
					}
					return false
				})
				assert.Equal(t, tc.reused, reused)
				if tc.arrived {
					assert.Equal(t, bytes.Repeat([]byte{0xA5}, 2*pieceLen), dst.buf, "the receiver got the source's bytes, not the next request's")
					return
				}
				assert.Equal(t, transfer.InDoubt, tx.core.Poll(cfg.Containment, key), "an ambiguous end is contained, never reused")
				assert.True(t, tx.core.Report(cfg.Containment).Fatal)
			})
		}
	}
}

// C-IDENTITY, pending in the reference: old evidence cannot settle new
// attempt memory, including retries. Attempt 1 of a request is cancelled for
// a retry; once its pages are proven free they are re-lent to attempt 2
// (through the same registration, or a fresh one after attempt 1's was
// revoked) before attempt 2's writer has started. Attempt 1's DONE, replayed
// by the network, then arrives: it is refused as an older attempt, attempt
// 2's pages stay lent and untouched, and only attempt 2's own writer settles
// them.
func TestLedgerCIdentityOldAttemptCannotSettleItsRetry(t *testing.T) {
	for _, leased := range []bool{false, true} {
		t.Run(map[bool]string{false: "the same registration", true: "a fresh registration per attempt"}[leased], func(t *testing.T) {
			net := network(t, 21, sim.Faults{ReplayDone: 1})
			d := newSide(t, net, "decode")
			prefill, err := net.Join("prefill-a")
			require.NoError(t, err)
			id := transfer.AccessorID{Peer: "prefill-a", Role: transfer.RoleKV}
			buf := make([]byte, pieceLen)
			first, retry := transfer.SessionKey{Request: 9, Attempt: 1}, transfer.SessionKey{Request: 9, Attempt: 2}
			lend := func(key transfer.SessionKey, mem transfer.Memory) transfer.CohortConfig {
				cfg := cohortConfig(key, leased, d.now)
				cfg.Accessors = []transfer.AccessorSpec{{ID: id, Agreement: d.agree(prefill, cfg.Requires())}}
				require.NoError(t, d.core.Create(d.now, cfg))
				require.NoError(t, d.core.Expose(d.now, key))
				return cfg
			}
			writer := func(key transfer.SessionKey, mem transfer.Memory, fill byte) {
				_, err := net.Spawn(sim.WriterSpec{Node: prefill, To: "decode", Session: key, Accessor: id, Key: mem.PackedKey(),
					Tokens: transfer.TokenRange{End: 16}, Behaviour: sim.Honest, Pieces: []sim.Piece{{Src: bytes.Repeat([]byte{fill}, pieceLen)}}})
				require.NoError(t, err)
			}
			mem, err := d.node.Register(buf)
			require.NoError(t, err)
			lend(first, mem)
			writer(first, mem, 0x11)
			d.core.Cancel(d.now, first, "retrying")
			d.run(func() bool { return len(d.heard) > 0 }) // its DONE; the network will replay it later
			if leased {
				how, err := mem.Revoke()
				require.NoError(t, err)
				require.NoError(t, d.core.Revoked(d.now, first, how.Fences()))
			}
			require.True(t, d.core.Poll(d.now, first).Reusable())
			require.NoError(t, d.core.Retire(d.now, first))
			copy(buf, bytes.Repeat([]byte{newData}, pieceLen))
			if leased {
				mem, err = d.node.Register(buf)
				require.NoError(t, err)
			}
			lend(retry, mem)
			require.Positive(t, net.ReleaseAll(), "attempt 1's replayed DONE is pending")
			d.run(nil)
			// Refused as retired while attempt 1's key is remembered, as an
			// older attempt of a live request once it is forgotten.
			assert.Equal(t, 1, d.refusals(transfer.ErrRetired)+d.refusals(transfer.ErrStaleAttempt), "attempt 1's replayed DONE was heard and refused: %v", d.heard)
			assert.Equal(t, transfer.Active, d.core.Poll(d.now, retry), "the retry's pages stay lent")
			assert.Equal(t, bytes.Repeat([]byte{newData}, pieceLen), buf)
			writer(retry, mem, 0x22)
			d.run(nil)
			if leased {
				assert.Equal(t, transfer.Quiescing, d.core.Poll(d.now, retry), "a leased session waits for its revocation")
				how, err := mem.Revoke()
				require.NoError(t, err)
				require.NoError(t, d.core.Revoked(d.now, retry, how.Fences()))
			}
			assert.Equal(t, transfer.QuiescedSuccess, d.core.Poll(d.now, retry))
			assert.Equal(t, bytes.Repeat([]byte{0x22}, pieceLen), buf)
		})
	}
}
