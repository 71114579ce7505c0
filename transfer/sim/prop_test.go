package sim_test

import (
	"bytes"
	"cmp"
	"errors"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/sim"
	"pgregory.net/rapid"
)

const (
	buffers      = 4 // the receiver's pool: one buffer of pages per session
	piecesPerBuf = 4
)

var (
	epoch    = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	self     = transfer.Capabilities{Peer: "decode", Incarnation: 1, Version: transfer.ProtocolVersion, Supported: transfer.KnownCapabilities}
	prefills = []transfer.Peer{"prefill-a", "prefill-b"}
	// the accessors a session may expect: a KV and an aux writer on one
	// peer, a KV writer of another rank on the other
	accessors = []transfer.AccessorID{
		{Peer: "prefill-a", Rank: 0, Role: transfer.RoleKV},
		{Peer: "prefill-a", Rank: 0, Role: transfer.RoleAux},
		{Peer: "prefill-b", Rank: 1, Role: transfer.RoleKV},
	}
)

// receiver is the decode side the property drives: a pool of page buffers,
// a transfer.Sessions table on a virtual clock, and the owner's policy —
// revoke a leased session's registration once its outcome is latched, retire
// a session the moment it is reported reusable, and re-lend its buffer with a
// fresh sentinel. It never reads the network's record except as the oracle.
type receiver struct {
	rt        *rapid.T
	net       *sim.Network
	node      *sim.Node
	core      *transfer.Sessions
	leased    bool
	lateOK    bool // writers that submit after their lease may be drawn
	now       time.Time
	pool      [][]byte
	sentinel  []byte // per buffer: what a free buffer holds, and a lent one held when lent
	free      []int
	live      map[transfer.SessionKey]*lent
	contained int
	nextReq   transfer.RequestID
	nextTag   byte
	nextSent  byte
	retired   int
	peers     map[transfer.Peer]*sim.Node // each prefill's current incarnation
}

type lent struct {
	buf  int
	mem  transfer.Memory
	tag  byte // the byte its writers write
	cfg  transfer.CohortConfig
	sets [][]sim.Piece // each accessor's pieces, in cfg.Accessors order
}

// oracleChecks counts, over every run, the times a reusable session was
// checked against the oracle: a property never consulted proves nothing.
var oracleChecks atomic.Int64

func newReceiver(rt *rapid.T, leased bool, f sim.Faults, seed uint64) *receiver {
	net, err := sim.New(seed, f)
	if err != nil {
		rt.Fatalf("network: %v", err)
	}
	node, err := net.Join("decode")
	if err != nil {
		rt.Fatalf("join: %v", err)
	}
	core, err := transfer.NewSessions(transfer.Limits{Sessions: 1024, Tombstones: 64, Window: time.Hour})
	if err != nil {
		rt.Fatalf("sessions: %v", err)
	}
	r := &receiver{rt: rt, net: net, node: node, core: core, leased: leased, now: epoch,
		sentinel: make([]byte, buffers), live: map[transfer.SessionKey]*lent{}, nextSent: 0xE0}
	r.lateOK = leased && !f.RevocationLeaks
	for b := range buffers {
		r.pool = append(r.pool, make([]byte, piecesPerBuf*pieceLen))
		r.free = append(r.free, b)
	}
	r.peers = map[transfer.Peer]*sim.Node{}
	for _, p := range prefills {
		if r.peers[p], err = net.Join(p); err != nil {
			rt.Fatalf("join %s: %v", p, err)
		}
	}
	node.SetHandlers(transfer.Handlers{Message: r.message, EndpointError: r.endpointError})
	return r
}

// message is the adapter's door: decode, check that the evidence speaks for
// the endpoint it came on, and step the table. Refusals are ordinary here.
func (r *receiver) message(from transfer.Peer, inc transfer.Incarnation, msg []byte) {
	ev, err := transfer.DecodeEvidence(msg)
	if err != nil || ev.Accessor.Peer != from || ev.Incarnation != inc {
		return // malformed, or claiming another peer's identity
	}
	_ = r.core.Step(r.now, ev)
}

func (r *receiver) endpointError(peer transfer.Peer, inc transfer.Incarnation, err error) {
	r.core.PeerLost(r.now, peer, inc, err.Error())
}

// start creates, publishes and hands to writers one session, if a buffer is
// free.
func (r *receiver) start() {
	if len(r.free) == 0 {
		return
	}
	rt := r.rt
	n := rapid.IntRange(1, 3).Draw(rt, "writers")
	ids := rapid.Permutation(accessors).Draw(rt, "writers drawn")[:n]
	r.nextReq++
	cfg := transfer.CohortConfig{
		Session: transfer.SessionKey{Request: r.nextReq, Attempt: transfer.AttemptID(rapid.IntRange(1, 3).Draw(rt, "attempt"))},
		Tokens:  transfer.TokenRange{Start: 0, End: piecesPerBuf * 16}, Leased: r.leased,
		Submitted: r.now, Deadline: r.now.Add(200 * time.Millisecond), Containment: r.now.Add(400 * time.Millisecond),
	}
	for _, id := range ids {
		_, inc := r.peers[id.Peer].Self()
		remote := transfer.Capabilities{Peer: id.Peer, Incarnation: inc, Version: transfer.ProtocolVersion, Supported: transfer.KnownCapabilities}
		a, err := transfer.Negotiate(self, remote, cfg.Requires()|transfer.Caps(transfer.MultiWriter))
		if err != nil {
			rt.Fatalf("negotiate: %v", err)
		}
		cfg.Accessors = append(cfg.Accessors, transfer.AccessorSpec{ID: id, Agreement: a})
	}
	if rapid.IntRange(0, 9).Draw(rt, "cancel overtakes creation") == 0 {
		r.core.Cancel(r.now, cfg.Session, "user")
		if err := r.core.Create(r.now, cfg); !errors.Is(err, transfer.ErrTombstoned) {
			rt.Fatalf("a creation overtaken by its cancel answered %v, not ErrTombstoned", err)
		}
		return // nothing was registered, published or lent
	}
	if err := r.core.Create(r.now, cfg); err != nil {
		rt.Fatalf("create: %v", err)
	}
	buf := r.free[0]
	r.free = r.free[1:]
	mem, err := r.node.Register(r.pool[buf])
	if err != nil {
		rt.Fatalf("register: %v", err)
	}
	if err := r.core.Expose(r.now, cfg.Session); err != nil {
		rt.Fatalf("expose: %v", err)
	}
	r.nextTag = r.nextTag%0xDF + 1
	l := &lent{buf: buf, mem: mem, tag: r.nextTag, cfg: cfg}
	r.live[cfg.Session] = l
	for i, id := range ids {
		r.spawn(cfg, l, r.peers[id.Peer], id, i, n)
	}
}

// spawn starts writer i of n: it writes pieces i, i+n, … of the buffer.
func (r *receiver) spawn(cfg transfer.CohortConfig, l *lent, node *sim.Node, id transfer.AccessorID, i, n int) {
	behaviours := []sim.Behaviour{sim.Honest, sim.Honest, sim.NeverReports, sim.FailsMidway}
	if r.lateOK {
		behaviours = append(behaviours, sim.SubmitsLate)
	}
	spec := sim.WriterSpec{
		Node: node, To: "decode", Session: cfg.Session, Accessor: id, Key: l.mem.PackedKey(), Tokens: cfg.Tokens,
		Reports: rapid.Bool().Draw(r.rt, "reports"), Behaviour: rapid.SampledFrom(behaviours).Draw(r.rt, "behaviour"),
	}
	for p := i; p < piecesPerBuf; p += n {
		spec.Pieces = append(spec.Pieces, sim.Piece{Src: bytes.Repeat([]byte{l.tag}, pieceLen), Off: p * pieceLen})
	}
	l.sets = append(l.sets, spec.Pieces)
	if _, err := r.net.Spawn(spec); err != nil {
		r.rt.Fatalf("spawn: %v", err)
	}
}

// resume is a restarted peer taking up a session its previous life was
// writing: same session, same accessor, a new incarnation. It reports
// honestly, but its evidence must never settle what the old life posted.
// It writes again, with the key its old life was given, only where a late
// submitter may be drawn: writing with a key published to another life is a
// submission after the lease, which only a fencing revocation stops.
func (r *receiver) resume() {
	var cands []*lent
	for _, key := range r.keys() {
		cands = append(cands, r.live[key])
	}
	if len(cands) == 0 {
		return
	}
	l := rapid.SampledFrom(cands).Draw(r.rt, "resume session")
	i := rapid.IntRange(0, len(l.cfg.Accessors)-1).Draw(r.rt, "resume accessor")
	id := l.cfg.Accessors[i].ID
	node := r.peers[id.Peer]
	if _, inc := node.Self(); inc == l.cfg.Accessors[i].Agreement.Incarnation() {
		return // the same life: nothing to resume
	}
	spec := sim.WriterSpec{Node: node, To: "decode", Session: l.cfg.Session, Accessor: id, Key: l.mem.PackedKey(),
		Tokens: l.cfg.Tokens, Behaviour: sim.Honest}
	if r.lateOK {
		spec.Pieces = l.sets[i]
	}
	if _, err := r.net.Spawn(spec); err != nil {
		r.rt.Fatalf("spawn: %v", err)
	}
}

// restart kills a prefill process and starts its next incarnation: its
// writers die with it, and later sessions negotiate with the new life.
func (r *receiver) restart() {
	p := rapid.SampledFrom(prefills).Draw(r.rt, "restart")
	node, err := r.net.Restart(p)
	if err != nil {
		r.rt.Fatalf("restart: %v", err)
	}
	r.peers[p] = node
}

// cancel cancels a live session, as a user or a request timeout would.
func (r *receiver) cancel() {
	keys := r.keys()
	if len(keys) == 0 {
		return
	}
	r.core.Cancel(r.now, rapid.SampledFrom(keys).Draw(r.rt, "cancel"), "user")
}

func (r *receiver) keys() []transfer.SessionKey {
	return slices.SortedFunc(maps.Keys(r.live), func(a, b transfer.SessionKey) int {
		return cmp.Or(cmp.Compare(a.Request, b.Request), cmp.Compare(a.Attempt, b.Attempt))
	})
}

// round is the owner's turn after every action: deadlines, revocations, and
// the pages of every session reported reusable checked against the oracle,
// retired and re-lent; then the bytes of every buffer are checked.
func (r *receiver) round() {
	r.core.Tick(r.now)
	for _, key := range r.keys() {
		l := r.live[key]
		info, _ := r.core.Info(key)
		if r.leased && info.Outcome != nil && !info.Revoked && info.Physical != transfer.InDoubt {
			how, err := l.mem.Revoke()
			if err != nil {
				r.rt.Fatalf("revoke: %v", err)
			}
			if err := r.core.Revoked(r.now, key, how.Fences()); err != nil {
				r.rt.Fatalf("revoked %s: %v", key, err)
			}
		}
		switch p := r.core.Poll(r.now, key); {
		case p.Reusable():
			oracleChecks.Add(1)
			if r.net.MayWrite(l.mem) {
				info, _ = r.core.Info(key)
				r.rt.Fatalf("session %s reported %v while, by the network's record, a writer may still write its pages: %+v", key, p, info)
			}
			if err := r.core.Retire(r.now, key); err != nil {
				r.rt.Fatalf("retire %s: %v", key, err)
			}
			r.relend(l.buf)
			delete(r.live, key)
			r.retired++
		case p == transfer.InDoubt:
			delete(r.live, key) // contained: its buffer never returns
			r.contained++
		}
	}
	r.checkBytes()
}

// relend fills a returned buffer with a fresh sentinel: any byte that
// changes while it is free, or that a later session's writers did not
// write, landed late.
func (r *receiver) relend(buf int) {
	r.nextSent = 0xE0 + (r.nextSent-0xE0+1)%0x20
	r.sentinel[buf] = r.nextSent
	for i := range r.pool[buf] {
		r.pool[buf][i] = r.nextSent
	}
	r.free = append(r.free, buf)
}

func (r *receiver) checkBytes() {
	owner := map[int]*lent{}
	for _, l := range r.live {
		owner[l.buf] = l
	}
	for _, b := range r.free {
		for i, v := range r.pool[b] {
			if v != r.sentinel[b] {
				r.rt.Fatalf("buffer %d is free, but byte %d is %#x, not its sentinel %#x: a write landed after the pages returned", b, i, v, r.sentinel[b])
			}
		}
	}
	for b, l := range owner {
		for i, v := range r.pool[b] {
			if v != r.sentinel[b] && v != l.tag {
				r.rt.Fatalf("buffer %d, lent with sentinel %#x to writers of %#x, has %#x at byte %d: an earlier session's write", b, r.sentinel[b], l.tag, v, i)
			}
		}
	}
}

// run performs the drawn actions, then lets every deadline pass and the
// network finish, with the owner's round after each.
func (r *receiver) run() {
	for range rapid.IntRange(1, 120).Draw(r.rt, "actions") {
		switch rapid.IntRange(0, 10).Draw(r.rt, "action") {
		case 0, 1:
			r.start()
		case 2, 3, 4, 5:
			for range rapid.IntRange(1, 12).Draw(r.rt, "steps") {
				r.net.Step()
				r.node.Progress()
			}
		case 6:
			r.now = r.now.Add(time.Duration(rapid.IntRange(1, 80).Draw(r.rt, "ms")) * time.Millisecond)
		case 7:
			r.cancel()
		case 8:
			r.restart()
		case 9:
			r.net.ReleaseAll()
		case 10:
			r.resume()
		}
		r.round()
	}
	r.now = r.now.Add(time.Second)
	for range 100000 {
		stepped := r.net.Step()
		r.node.Progress()
		r.round()
		if !stepped {
			break
		}
	}
	r.round()
	if len(r.live) != 0 {
		r.rt.Fatalf("after every deadline, %d sessions are neither retired nor contained", len(r.live))
	}
	if got := len(r.free) + r.contained; got < buffers {
		r.rt.Fatalf("%d buffers free and %d contained: %d lost", len(r.free), r.contained, buffers-got)
	}
}

func drawFaults(rt *rapid.T) sim.Faults {
	chance := func(label string) float64 { return rapid.SampledFrom([]float64{0, 0.2, 1}).Draw(rt, label) }
	return sim.Faults{
		ReportsOvertakeData: rapid.Bool().Draw(rt, "reports overtake data"),
		LoseDone:            chance("lose"),
		MaskDone:            chance("mask"),
		DuplicateDone:       chance("duplicate"),
		ReplayDone:          chance("replay"),
		PutsOutliveSender:   rapid.Bool().Draw(rt, "puts outlive sender"),
		RevocationLeaks:     rapid.Bool().Draw(rt, "revocation leaks"),
	}
}

// TestPagesNeverReusableWhileAWriterMayWrite is the property of issue #41's
// item 4: for any interleaving of the simulated network's deliveries with
// its faults, of cancels, peer restarts and time, a session's pages are
// never reported reusable while, by the network's own record, a writer of
// that session may still write them; and no byte of a returned or re-lent
// buffer is written by an earlier session.
//
// Leased: the owner revokes each session's registration once its outcome is
// latched. Every fault is drawn, and so are writers that submit after their
// lease (vLLM #55470) and restarted peers that write again with the key
// their previous life was given — except over a revocation that leaks
// (shared memory): there nothing local can stop a peer that breaks the
// submission fence it advertised, and the docs say so. Not leased: the
// registration is never revoked, each writer settles on its own DONE, and
// no writer submits late (the session requires the peer's SUBMISSION_FENCE
// for that); a restarted peer only reports, in its new life.
func TestPagesNeverReusableWhileAWriterMayWrite(t *testing.T) {
	for _, leased := range []bool{true, false} {
		name := "not leased"
		if leased {
			name = "leased"
		}
		t.Run(name, func(t *testing.T) {
			before := oracleChecks.Load()
			rapid.Check(t, func(rt *rapid.T) {
				f := drawFaults(rt)
				newReceiver(rt, leased, f, rapid.Uint64().Draw(rt, "seed")).run()
			})
			if oracleChecks.Load() == before {
				t.Fatal("no session was ever reported reusable: the property was never exercised")
			}
		})
	}
}
