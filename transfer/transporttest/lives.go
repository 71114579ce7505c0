package transporttest

import (
	"fmt"
	"slices"

	"github.com/kvready/kvready/transfer"
	"pgregory.net/rapid"
)

// kill kills a live process (where the Net can) and waits until every
// survivor holding an open endpoint to it has heard: its EndpointError
// handler named the dead life, and each such endpoint's Err reports it.
func (w *world) kill() {
	live := w.liveLives()
	if w.killer == nil || len(live) < 2 {
		return
	}
	l := live[w.draw(len(live), "kill")]
	var err error
	w.call(fmt.Sprintf("Kill(%q)", l.id.name), RuleHarness, func() { err = w.killer.Kill(l.id.name) })
	if err != nil {
		w.fail(violation(RuleHarness, "Kill(%q): %v", l.id.name, err))
	}
	l.dead = true
	delete(w.live, l.id.name)
	for _, o := range w.ops {
		if o.from == l && o.kind == opPut && o.rule == "" && !o.landed {
			o.loose = true // a dead process's posted puts may still land (an RDMA NIC finishes them)
		}
	}
	w.awaitDeathHeard(l)
	if rapid.Bool().Draw(w.rt, "restart at once") {
		w.join(l.id.name)
	}
}

func (w *world) awaitDeathHeard(l *life) {
	var deaf *life
	var ok *endpoint
	heard := func() bool {
		deaf, ok = nil, nil
		for _, s := range w.liveLives() {
			for _, e := range s.eps {
				if e.to != l || e.closed {
					continue
				}
				if s.errs[l.id] == 0 {
					deaf = s
					return false
				}
				var err error
				w.call("Err of "+e.String(), RulePostNeverBlocks, func() { err = e.ep.Err() })
				if err == nil {
					ok = e
					return false
				}
			}
		}
		return true
	}
	if w.await(heard) {
		w.cfg.counts.add("death heard")
		return
	}
	if deaf != nil {
		w.fail(violation(RuleEndpointError, "%s died; %s holds an open endpoint to it, and its EndpointError handler was not called within %d rounds", l.id, deaf.id, w.cfg.rounds))
	}
	w.fail(violation(RuleDeadPeer, "%s died, and %s's Err is nil %d rounds after its EndpointError", l.id, ok, w.cfg.rounds))
}

// rejoin starts a new life of a process that is dead.
func (w *world) rejoin() {
	var dead []transfer.Peer
	for name := range w.incs {
		if w.live[name] == nil {
			dead = append(dead, name)
		}
	}
	if len(dead) == 0 {
		return
	}
	slices.Sort(dead)
	w.join(dead[w.draw(len(dead), "rejoin")])
}

// oldKey tries, from another process, a key of a dead life on an endpoint
// to its name's new life: it must not unpack, or every operation with it
// must fail.
func (w *world) oldKey() {
	var olds []*region
	for _, r := range w.regions {
		if r.owner.dead && w.live[r.owner.id.name] != nil {
			olds = append(olds, r)
		}
	}
	if len(olds) == 0 {
		return
	}
	r := olds[w.draw(len(olds), "old key")]
	now := w.live[r.owner.id.name]
	from := w.otherLive(now, "old key from")
	if from == nil {
		return
	}
	w.badKeyOn(w.openEndpoint(from, now), r.packed, len(r.buf), RuleOldKey)
}

// foreignKey tries a key that is not the peer's on an open endpoint:
// another process's key, or bytes no process packed.
func (w *world) foreignKey() {
	from := w.pickLive("foreign key from")
	to := w.otherLive(from, "foreign key to")
	if to == nil {
		return
	}
	var others []*region
	for _, r := range w.regions {
		if r.owner != to && !r.owner.dead {
			others = append(others, r)
		}
	}
	e := w.openEndpoint(from, to)
	if len(others) == 0 || rapid.Bool().Draw(w.rt, "garbage key") {
		w.badKeyOn(e, w.bytes(rapid.IntRange(0, 48).Draw(w.rt, "garbage length")), 64, RuleForeignKey)
		return
	}
	r := others[w.draw(len(others), "foreign key")]
	w.badKeyOn(e, r.packed, len(r.buf), RuleForeignKey)
}

// badKeyOn unpacks a key that must not work on e; if it unpacks, a put or
// a get with it, within both the memory it named and the key's Len, must
// fail and never land.
func (w *world) badKeyOn(e *endpoint, packed []byte, size int, rule string) {
	k, err := w.unpack(e, packed)
	if err != nil {
		w.cfg.counts.add("refused: " + rule)
		return
	}
	var keyLen int
	w.call("RemoteKey.Len", RulePostNeverBlocks, func() { keyLen = k.Len() })
	size = min(size, keyLen)
	if size <= 0 {
		size = 1 // out of bounds as well: still never lands
	}
	n := rapid.IntRange(1, min(size, maxOp)).Draw(w.rt, "length")
	off := rapid.IntRange(0, size-n).Draw(w.rt, "offset")
	if rapid.Bool().Draw(w.rt, "put") {
		w.putOn(e, nil, k, off, n, rule)
	} else {
		w.getOn(e, nil, k, off, n, rule)
	}
}

// outOfBounds posts a put or get that runs past either end of a live
// registration: it must be refused, and touch nothing.
func (w *world) outOfBounds() {
	from := w.pickLive("out of bounds from")
	r := w.pickTarget(from)
	if r == nil || r.owner.dead || r.revoked {
		return
	}
	e := w.openEndpoint(from, r.owner)
	k, ok := w.key(e, r)
	if !ok {
		return
	}
	n := rapid.IntRange(1, 64).Draw(w.rt, "length")
	off := -rapid.IntRange(1, n).Draw(w.rt, "before the start by")
	if rapid.Bool().Draw(w.rt, "past the end") {
		off = len(r.buf) - n + rapid.IntRange(1, n).Draw(w.rt, "past the end by")
	}
	if w.held(r, max(off, 0), min(off+n, len(r.buf))-max(off, 0)) {
		return
	}
	if rapid.Bool().Draw(w.rt, "put") {
		w.putOn(e, r, k, off, n, RuleBounds)
	} else {
		w.getOn(e, r, k, off, n, RuleBounds)
	}
}
