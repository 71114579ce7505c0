package transporttest

import "fmt"

// checkMemory reads every byte the kit lent or owns: each registration of a
// live process, each get's destination, each put's source.
func (w *world) checkMemory() {
	for _, r := range w.regions {
		if !r.owner.dead {
			w.checkRegion(r)
		}
	}
	for _, o := range w.gets {
		if !o.from.dead {
			w.checkDestination(o)
		}
	}
	for _, o := range w.puts {
		if !o.from.dead {
			w.checkSource(o)
		}
	}
}

// checkRegion: a byte differs from the kit's record only where a put that
// may still land wrote its own byte; after a fencing revocation, no byte
// changes at all.
func (w *world) checkRegion(r *region) {
	if r.frozen != nil {
		for i, v := range r.buf {
			if v != r.frozen[i] {
				w.fail(w.explain(r, i, RuleRevokeFences, "byte %d of %s changed from %#x to %#x after Revoke answered fenced", i, r, r.frozen[i], v))
			}
		}
		return
	}
	for i, v := range r.buf {
		if v != r.want[i] && !w.mayWrite(r, i, v) {
			w.fail(w.explain(r, i, RuleUntouched, "byte %d of %s is %#x: neither what it held (%#x) nor the byte of a put that may still land there", i, r, v, r.want[i]))
		}
	}
}

// mayWrite says whether a legitimate put not yet proven landed, or one that
// may have landed, covers byte i of r with the value v.
func (w *world) mayWrite(r *region, i int, v byte) bool {
	for _, o := range w.ops {
		if o.kind == opPut && o.reg == r && o.rule == "" && (o.loose || !o.landed) &&
			i >= o.off && i < o.off+o.n && o.src[i-o.off] == v {
			return true
		}
	}
	return false
}

// explain names the rule a changed byte of r breaks: an operation that had
// to be refused, if its bytes are the ones found there, or else rule.
func (w *world) explain(r *region, i int, rule, format string, args ...any) *Violation {
	for _, o := range w.ops {
		if o.kind == opPut && o.rule != "" && (o.reg == nil || o.reg == r) && wrote(o, r, i) {
			return violation(o.rule, "%s landed: byte %d of %s holds its bytes (%s)", o, i, r, fmt.Sprintf(format, args...))
		}
	}
	return violation(rule, format, args...)
}

// wrote says whether put o's bytes are in r around byte i: i is in o's
// range, and o's source matches r on at least four bytes of it (or on all
// of a shorter overlap), so a chance match names nothing.
func wrote(o *op, r *region, i int) bool {
	if i < o.off || i >= o.off+o.n || r.buf[i] != o.src[i-o.off] {
		return false
	}
	lo, hi := max(o.off, 0), min(o.off+o.n, len(r.buf))
	same := 0
	for j := lo; j < hi; j++ {
		if r.buf[j] == o.src[j-o.off] && r.buf[j] != r.want[j] {
			same++
		}
	}
	return same >= min(4, hi-lo)
}

// checkDestination: a get writes only its destination, a refused one never,
// and none after it completed.
func (w *world) checkDestination(o *op) {
	for i, v := range o.buf {
		if (i < pad || i >= pad+o.n) && v != o.init[i] {
			w.fail(violation(RuleUntouched, "%s wrote byte %d of the destination's buffer, %d bytes outside the destination", o, i, distance(i, o.n)))
		}
	}
	dst := o.dst()
	switch {
	case o.rule != "":
		if i := firstDiff(dst, o.init[pad:pad+o.n]); i >= 0 {
			w.fail(violation(o.rule, "%s landed: byte %d of its destination changed", o, i))
		}
	case o.landed && o.src != nil && !o.reg.owner.dead:
		if i := firstDiff(dst, o.src); i >= 0 {
			w.fail(violation(RuleGetCompletion, "%s completed, and then byte %d of its destination changed to %#x", o, i, dst[i]))
		}
	}
}

func distance(i, n int) int {
	if i < pad {
		return pad - i
	}
	return i - (pad + n) + 1
}
