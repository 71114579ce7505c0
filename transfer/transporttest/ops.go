package transporttest

import (
	"fmt"
	"slices"

	"github.com/kvready/kvready/transfer"
)

type opKind uint8

const (
	opPut opKind = iota + 1
	opGet
	opSend
	opFlush
	opClose
	opWorkerFlush
)

func (k opKind) String() string {
	return [...]string{opPut: "put", opGet: "get", opSend: "send", opFlush: "flush", opClose: "close", opWorkerFlush: "worker flush"}[k]
}

// pad is how many canary bytes surround a get's destination.
const pad = 8

// op is one operation the kit posted.
type op struct {
	kind   opKind
	seq    uint64
	from   *life
	ep     *endpoint // nil for a worker flush
	reg    *region   // a put's or get's target; nil when the key's memory is not known
	off, n int
	src    []byte // put: the source; get: the bytes the destination must receive
	orig   []byte // put: the source as posted
	buf    []byte // get: the destination, with pad canaries each side
	init   []byte // get: buf as posted
	rule   string // the rule it breaks by landing or completing without error; "" when it may
	req    transfer.Request
	done   bool
	err    error
	landed bool // proven landed (put) or read (get)
	loose  bool // a put that may have landed, and may still: failed after a death or revocation, or orphaned
	msg    *message
}

func (o *op) String() string {
	where := "by " + o.from.id.String()
	if o.ep != nil {
		where = "on " + o.ep.String()
	}
	switch {
	case o.kind != opPut && o.kind != opGet:
		return fmt.Sprintf("%s #%d %s", o.kind, o.seq, where)
	case o.reg == nil:
		return fmt.Sprintf("%s #%d %s at [%d,%d) with a key that must not work", o.kind, o.seq, where, o.off, o.off+o.n)
	}
	return fmt.Sprintf("%s #%d %s into %s at [%d,%d)", o.kind, o.seq, where, o.reg, o.off, o.off+o.n)
}

// holds says whether the op keeps its target range from other operations:
// its bytes may still move there.
func (o *op) holds() bool {
	switch {
	case o.rule != "" || o.from.dead && o.kind == opGet:
		return false
	case o.kind == opPut:
		return o.loose || !o.landed
	case o.kind == opGet:
		return !o.done && !o.landed
	}
	return false
}

// dst is a get's destination.
func (o *op) dst() []byte { return o.buf[pad : pad+o.n] }

// posted records what posting o answered: a refusal, or a request.
func (w *world) posted(o *op, req transfer.Request, err error) {
	switch {
	case err != nil && o.rule == "":
		w.fail(violation(RuleAccepted, "%s was refused: %v", o, err))
	case err != nil:
		o.done, o.err = true, err
		w.cfg.counts.add("refused: " + o.rule)
	case req == nil:
		w.fail(violation(RuleRequestOrError, "%s answered neither a request nor an error", o))
	default:
		o.req = req
	}
	switch o.kind {
	case opPut:
		w.puts = append(w.puts, o)
	case opGet:
		w.gets = append(w.gets, o)
	}
	w.ops = append(w.ops, o)
}

// putOn posts a put of n fresh bytes at off with key on e, into r when the
// key's memory is known.
func (w *world) putOn(e *endpoint, r *region, key transfer.RemoteKey, off, n int, rule string) {
	src := w.bytes(n)
	if r != nil {
		for i := range src { // every byte differs from what it replaces: a put that did not land shows
			if j := off + i; j >= 0 && j < len(r.want) && src[i] == r.want[j] {
				src[i] ^= 0xA5
			}
		}
	}
	o := &op{kind: opPut, seq: w.tick(), from: e.from, ep: e, reg: r, off: off, n: n, src: src, orig: slices.Clone(src), rule: rule}
	var req transfer.Request
	var err error
	w.call("posting "+o.String(), RulePostNeverBlocks, func() { req, err = e.ep.Put(src, key, off) })
	w.posted(o, req, err)
}

// getOn posts a get of n bytes at off with key on e, from r when the key's
// memory is known.
func (w *world) getOn(e *endpoint, r *region, key transfer.RemoteKey, off, n int, rule string) {
	buf := w.bytes(n + 2*pad)
	o := &op{kind: opGet, seq: w.tick(), from: e.from, ep: e, reg: r, off: off, n: n, buf: buf, init: slices.Clone(buf), rule: rule}
	if r != nil && rule == "" {
		o.src = slices.Clone(r.want[off : off+n])
	}
	var req transfer.Request
	var err error
	w.call("posting "+o.String(), RulePostNeverBlocks, func() { req, err = e.ep.Get(o.dst(), key, off) })
	w.posted(o, req, err)
}

// testOp asks o's request whether it completed, and judges the completion.
func (w *world) testOp(o *op) bool {
	var done, again bool
	var err, errAgain error
	w.call("Test of "+o.String(), RuleTestNeverBlocks, func() { done, err = o.req.Test() })
	if !done {
		return false
	}
	w.call("Test of "+o.String(), RuleTestNeverBlocks, func() { again, errAgain = o.req.Test() })
	if !again || (errAgain == nil) != (err == nil) {
		w.fail(violation(RuleTestStable, "%s answered done (error %v), then done=%v (error %v)", o, err, again, errAgain))
	}
	o.done, o.err = true, err
	w.completed(o)
	return true
}

// completed judges what o's completion claims.
func (w *world) completed(o *op) {
	switch {
	case o.rule != "" && o.err == nil:
		w.fail(violation(o.rule, "%s completed without an error", o))
	case o.rule != "":
		w.cfg.counts.add("refused: " + o.rule)
		return
	case o.err != nil:
		w.failed(o)
		return
	}
	switch o.kind {
	case opPut:
		w.checkSource(o)
		if !o.landed {
			w.verify(o, RulePutCompletion, "its request completed")
		}
	case opGet:
		if !o.landed {
			w.verify(o, RuleGetCompletion, "its request completed")
		}
	case opFlush, opClose, opWorkerFlush:
		w.flushed(o)
	}
}

// failed judges a legitimate operation that completed with an error: only
// a death or a revocation since it was posted excuses it, and a put so cut
// short may have landed, or may still.
func (w *world) failed(o *op) {
	if !w.disturbed(o) {
		w.fail(violation(RuleAccepted, "%s failed: %v", o, o.err))
	}
	switch o.kind {
	case opPut:
		o.loose = o.loose || !o.landed
	case opSend:
		o.msg.failed = true
	}
}

// disturbed says whether a death or a revocation since o was posted may
// have cut it short.
func (w *world) disturbed(o *op) bool {
	if o.ep != nil && o.ep.to.dead {
		return true
	}
	if r := o.reg; r != nil && (r.owner.dead || r.revoked && r.revokedAt > o.seq) {
		return true
	}
	if o.kind != opFlush && o.kind != opClose && o.kind != opWorkerFlush {
		return false
	}
	if o.kind == opWorkerFlush {
		for _, e := range o.from.eps {
			if e.to.dead {
				return true
			}
		}
	}
	for _, p := range w.covered(o) {
		if w.disturbed(p) {
			return true
		}
	}
	return false
}

// covered are the puts and gets a flush's completion speaks for: posted
// before it, on its endpoint (or, for a worker flush, by its transport).
func (w *world) covered(f *op) []*op {
	var ps []*op
	for _, p := range w.ops {
		if p.seq >= f.seq || p.rule != "" || (p.kind != opPut && p.kind != opGet) {
			continue
		}
		if (f.ep != nil && p.ep == f.ep) || (f.ep == nil && p.from == f.from) {
			ps = append(ps, p)
		}
	}
	return ps
}

// flushed judges a flush that completed without an error: every put and get
// it covers landed, unless its own request failed or a death or revocation
// may have cut it short. The covered requests are not asked first: the
// flush alone is the proof, as for a caller that waits only on it.
func (w *world) flushed(f *op) {
	rule := RuleEndpointFlush
	if f.kind == opWorkerFlush {
		rule = RuleWorkerFlush
	}
	for _, p := range w.covered(f) {
		if p.landed || p.done && p.err != nil || w.disturbed(p) {
			continue
		}
		w.verify(p, rule, fmt.Sprintf("%s posted after it completed", f))
	}
}

// verify checks that p landed — a put's bytes in its target, a get's in its
// destination — as the completion named by why claims, and records it.
func (w *world) verify(p *op, rule, why string) {
	p.landed = true
	if p.reg == nil || p.reg.owner.dead {
		return // the memory is gone with its process: nothing to read
	}
	r := p.reg
	w.cfg.counts.add("landed: " + rule)
	if p.kind == opGet {
		for i, v := range p.dst() {
			if v != p.src[i] {
				w.fail(violation(rule, "%s: %s, but byte %d of the destination is %#x, not the source's %#x", p, why, i, v, p.src[i]))
			}
		}
		return
	}
	for i := range p.n {
		if v := r.buf[p.off+i]; v != p.src[i] {
			w.fail(w.explain(r, p.off+i, rule, "%s: %s, but byte %d of the target is %#x, not the source's %#x", p, why, p.off+i, v, p.src[i]))
		}
	}
	copy(r.want[p.off:], p.src)
}

// checkSource: a put never writes its source.
func (w *world) checkSource(p *op) {
	if i := firstDiff(p.src, p.orig); i >= 0 {
		w.fail(violation(RuleUntouched, "%s wrote its own source: byte %d is %#x, posted as %#x", p, i, p.src[i], p.orig[i]))
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}
