package transporttest

import (
	"encoding/binary"
	"fmt"

	"github.com/kvready/kvready/transfer"
	"pgregory.net/rapid"
)

// maxOp is the longest put or get the kit draws.
const maxOp = 256

// actions are what a trial draws from, each as often as its weight.
var actions = []struct {
	name   string
	weight int
	do     func(*world)
}{
	{"put", 8, (*world).put},
	{"get", 4, (*world).get},
	{"send", 4, (*world).send},
	{"progress", 5, (*world).progress},
	{"flush", 3, func(w *world) { w.flush(false) }},
	{"close", 1, func(w *world) { w.flush(true) }},
	{"worker flush", 2, (*world).workerFlush},
	{"await", 2, (*world).awaitOne},
	{"revoke", 1, (*world).revoke},
	{"register", 1, func(w *world) { w.register(w.pickLive("register on")) }},
	{"foreign key", 1, (*world).foreignKey},
	{"out of bounds", 1, (*world).outOfBounds},
	{"kill", 2, (*world).kill},
	{"rejoin", 1, (*world).rejoin},
	{"old key", 3, (*world).oldKey},
}

var weighted = func() []int {
	var idx []int
	for i, a := range actions {
		for range a.weight {
			idx = append(idx, i)
		}
	}
	return idx
}()

func (w *world) act() {
	a := actions[rapid.SampledFrom(weighted).Draw(w.rt, "action")]
	w.rt.Logf("action: %s", a.name)
	a.do(w)
}

func (w *world) pickLive(label string) *life {
	live := w.liveLives()
	return live[w.draw(len(live), label)]
}

// pickTarget draws a registration another process holds that from can
// still address: a live one's, or a dead one's it holds an endpoint to.
func (w *world) pickTarget(from *life) *region {
	var cands []*region
	for _, r := range w.regions {
		if r.owner != from && (!r.owner.dead || w.reaches(from, r.owner)) {
			cands = append(cands, r)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[w.draw(len(cands), "target")]
}

func (w *world) reaches(from, to *life) bool {
	for _, e := range from.eps {
		if e.to == to {
			return true
		}
	}
	return false
}

// pickEndpoint draws one of from's endpoints to the life to — closed ones
// too — or opens a new one while to lives.
func (w *world) pickEndpoint(from, to *life) *endpoint {
	var cands []*endpoint
	for _, e := range from.eps {
		if e.to == to {
			cands = append(cands, e)
		}
	}
	if !to.dead && (len(cands) == 0 || w.draw(4, "new endpoint") == 0) {
		return w.connect(from, to)
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[w.draw(len(cands), "endpoint")]
}

// openEndpoint is one of from's open endpoints to the live to, or a new one.
func (w *world) openEndpoint(from, to *life) *endpoint {
	if e := w.pickEndpoint(from, to); e != nil && e.open() {
		return e
	}
	return w.connect(from, to)
}

func (w *world) connect(from, to *life) *endpoint {
	var ep transfer.Endpoint
	var err error
	w.call(fmt.Sprintf("Connect(%q) on %s", to.id.name, from.id), RulePostNeverBlocks, func() { ep, err = from.tr.Connect(to.id.name) })
	if err != nil || ep == nil {
		w.fail(violation(RuleAccepted, "%s could not connect to the live %s: %v", from.id, to.id, err))
	}
	var peer transfer.Peer
	var inc transfer.Incarnation
	w.call("Endpoint.Peer", RulePostNeverBlocks, func() { peer, inc = ep.Peer() })
	if (lifeID{peer, inc}) != to.id {
		w.fail(violation(RuleEndpointPeer, "%s connected to %q, whose current life is %s; the endpoint names %s", from.id, to.id.name, to.id, lifeID{peer, inc}))
	}
	e := &endpoint{from: from, to: to, ep: ep, keys: map[*region]transfer.RemoteKey{}, n: len(from.eps)}
	from.eps = append(from.eps, e)
	return e
}

// refusal is the rule an operation on e into r breaks by working: none
// when it must work.
func refusal(e *endpoint, r *region) string {
	switch {
	case e.closed:
		return RuleClosedRefuses
	case e.to.dead:
		return RuleDeadPeer
	case r != nil && r.revoked:
		return RuleRevokedRefuses
	}
	return ""
}

// key is r's key unpacked on e, once per endpoint. A key that must unpack
// and does not fails the trial; one that may be refused answers false.
func (w *world) key(e *endpoint, r *region) (transfer.RemoteKey, bool) {
	if k, ok := e.keys[r]; ok {
		return k, true
	}
	k, err := w.unpack(e, r.packed)
	if err != nil {
		if refusal(e, r) == "" {
			w.fail(violation(RuleKeyUnpacks, "%s refused the key of %s: %v", e, r, err))
		}
		return nil, false
	}
	e.keys[r] = k
	return k, true
}

func (w *world) unpack(e *endpoint, packed []byte) (k transfer.RemoteKey, err error) {
	w.call("UnpackKey on "+e.String(), RulePostNeverBlocks, func() { k, err = e.ep.UnpackKey(packed) })
	if err == nil && k == nil {
		w.fail(violation(RuleRequestOrError, "UnpackKey on %s answered neither a key nor an error", e))
	}
	return k, err
}

// pickRange draws a range of r no operation holds.
func (w *world) pickRange(r *region) (off, n int, ok bool) {
	off = rapid.IntRange(0, len(r.buf)-1).Draw(w.rt, "offset")
	n = rapid.IntRange(1, min(len(r.buf)-off, maxOp)).Draw(w.rt, "length")
	return off, n, !w.held(r, off, n)
}

// held says whether an operation that may still move bytes holds any of
// r's bytes in [off, off+n).
func (w *world) held(r *region, off, n int) bool {
	for _, o := range w.ops {
		if o.reg == r && o.holds() && off < o.off+o.n && o.off < off+n {
			return true
		}
	}
	return false
}

// rma draws a put or a get between two processes, on any endpoint —
// closed, to a dead peer, into a revoked registration — and expects what
// the endpoint and the registration allow.
func (w *world) rma(kind opKind) {
	from := w.pickLive(kind.String() + " from")
	r := w.pickTarget(from)
	if r == nil {
		return
	}
	e := w.pickEndpoint(from, r.owner)
	if e == nil {
		return
	}
	off, n, ok := w.pickRange(r)
	if !ok {
		return
	}
	k, ok := w.key(e, r)
	if !ok {
		return
	}
	if kind == opPut {
		w.putOn(e, r, k, off, n, refusal(e, r))
	} else {
		w.getOn(e, r, k, off, n, refusal(e, r))
	}
}

func (w *world) put() { w.rma(opPut) }
func (w *world) get() { w.rma(opGet) }

// send draws a message on any endpoint; one the endpoint must refuse must
// never arrive.
func (w *world) send() {
	from := w.pickLive("send from")
	if len(from.eps) == 0 {
		if to := w.otherLive(from, "send to"); to != nil {
			w.connect(from, to)
		}
	}
	if len(from.eps) == 0 {
		return
	}
	e := from.eps[w.draw(len(from.eps), "endpoint")]
	m := &message{from: from, to: e.to, via: e, rule: refusal(e, nil)}
	msg := w.message(from, rapid.Bool().Draw(w.rt, "shaped as a DONE"))
	w.msgs[string(msg)] = m
	o := &op{kind: opSend, seq: w.tick(), from: from, ep: e, rule: m.rule, msg: m}
	var req transfer.Request
	var err error
	w.call("posting "+o.String(), RulePostNeverBlocks, func() { req, err = e.ep.Send(msg) })
	w.posted(o, req, err)
}

func (w *world) otherLive(l *life, label string) *life {
	var others []*life
	for _, o := range w.liveLives() {
		if o != l {
			others = append(others, o)
		}
	}
	if len(others) == 0 {
		return nil
	}
	return others[w.draw(len(others), label)]
}

// message makes a message no other message equals: a plain one, or a DONE
// in the wire format of transfer.Evidence (a transport may treat reports
// apart, as transfer/sim's DONE faults do).
func (w *world) message(from *life, done bool) []byte {
	id := w.tick()
	if done {
		msg, err := transfer.AppendEvidence(nil, transfer.Evidence{
			Kind: transfer.Done, Session: transfer.SessionKey{Request: transfer.RequestID(id), Attempt: 1},
			Accessor: transfer.AccessorID{Peer: from.id.name, Role: transfer.RoleKV}, Incarnation: from.id.inc, TokenEnd: 1,
		})
		if err != nil {
			panic(fmt.Sprintf("transporttest: the kit's own DONE does not encode: %v", err))
		}
		return msg
	}
	msg := binary.BigEndian.AppendUint64([]byte("KTTM"), id)
	return append(msg, w.bytes(rapid.IntRange(0, 256).Draw(w.rt, "message length"))...)
}

// flush draws an endpoint Flush, or a Close, on any endpoint, and sometimes
// waits for it.
func (w *world) flush(closing bool) {
	from := w.pickLive("flush on")
	if len(from.eps) == 0 {
		return
	}
	e := from.eps[w.draw(len(from.eps), "endpoint")]
	o := &op{kind: opFlush, seq: w.tick(), from: from, ep: e, rule: refusal(e, nil)}
	var req transfer.Request
	var err error
	if closing {
		o.kind = opClose
		w.call("Close of "+e.String(), RulePostNeverBlocks, func() { req, err = e.ep.Close() })
		e.closed = true
	} else {
		w.call("Flush of "+e.String(), RulePostNeverBlocks, func() { req, err = e.ep.Flush() })
	}
	w.posted(o, req, err)
	if rapid.Bool().Draw(w.rt, "wait for it") {
		w.awaitOp(o)
	}
}

func (w *world) workerFlush() {
	from := w.pickLive("worker flush on")
	o := &op{kind: opWorkerFlush, seq: w.tick(), from: from}
	var req transfer.Request
	w.call("Flush of "+from.id.String(), RulePostNeverBlocks, func() { req = from.tr.Flush() })
	w.posted(o, req, nil)
	if rapid.Bool().Draw(w.rt, "wait for it") {
		w.awaitOp(o)
	}
}

// revoke revokes a live registration, sometimes twice.
func (w *world) revoke() {
	var cands []*region
	for _, r := range w.regions {
		if !r.owner.dead && !r.revoked {
			cands = append(cands, r)
		}
	}
	if len(cands) == 0 {
		return
	}
	r := cands[w.draw(len(cands), "revoke")]
	how := w.revokeOnce(r)
	r.revoked, r.revokedAt = true, w.tick()
	w.cfg.counts.add("revoked: " + how.String())
	if how.Fences() {
		r.frozen = append([]byte(nil), r.buf...)
	}
	if rapid.Bool().Draw(w.rt, "revoke again") {
		if again := w.revokeOnce(r); again != how {
			w.fail(violation(RuleRevokeAnswer, "Revoke of %s answered %v, then %v", r, how, again))
		}
	}
}

func (w *world) revokeOnce(r *region) transfer.Revocation {
	var how transfer.Revocation
	var err error
	w.call("Revoke of "+r.String(), RulePostNeverBlocks, func() { how, err = r.mem.Revoke() })
	if err != nil || (how != transfer.RevokedFenced && how != transfer.RevokedNewOnly) {
		w.fail(violation(RuleRevokeAnswer, "Revoke of %s answered %v, %v", r, how, err))
	}
	return how
}
