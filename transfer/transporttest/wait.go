package transporttest

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"pgregory.net/rapid"
)

// settleRounds is how many rounds the kit runs after the last expectation
// is met, so that a late copy of a message or a late write shows.
const settleRounds = 64

// round is one Net.Step, then one Progress of every live transport, then
// what their handlers were given. It answers what Step answered.
func (w *world) round() bool {
	var stepped bool
	w.call("Net.Step", RuleHarness, func() { stepped = w.net.Step() })
	for _, l := range w.liveLives() {
		w.call("Progress of "+l.id.String(), RuleProgressNeverBlocks, func() {
			w.progressing.Store(l)
			defer w.progressing.Store(nil)
			l.tr.Progress()
		})
	}
	w.handleEvents()
	return stepped
}

// observe tests every request of a live process that has not completed,
// judging each completion, and forgets what is settled. Flushes go first,
// as a caller that waits only on a flush would: what a flush claims is then
// read before the puts' own completions are.
func (w *world) observe() {
	ops := slices.Clone(w.ops)
	slices.SortStableFunc(ops, func(a, b *op) int { return cmp.Compare(rank(a), rank(b)) })
	for _, o := range ops {
		if o.req != nil && !o.done && !o.from.dead {
			w.testOp(o)
		}
	}
	w.ops = slices.DeleteFunc(w.ops, func(o *op) bool {
		return o.done && o.rule == "" && !o.loose || o.from.dead && !o.loose && o.rule == ""
	})
}

func rank(o *op) int {
	switch o.kind {
	case opFlush, opClose, opWorkerFlush:
		return 0
	}
	return 1
}

// await runs rounds until cond holds, at most the kit's bound, and answers
// whether it held. It stops early when the network says nothing more can
// happen. cond asks the transport what it needs: a caller waiting on one
// request tests only that one.
func (w *world) await(cond func() bool) bool {
	for range w.cfg.rounds {
		if cond() {
			return true
		}
		if !w.round() {
			break
		}
	}
	return cond()
}

// awaitOp waits for o alone, testing no other request: for a flush, what
// it claims is then read before the covered requests say anything.
func (w *world) awaitOp(o *op) {
	if o.req == nil || o.done {
		return
	}
	if !w.await(func() bool { return o.done || w.testOp(o) }) {
		w.fail(violation(RuleCompletes, "%s did not complete within %d rounds", o, w.cfg.rounds))
	}
}

// progress lets the network move for a few rounds.
func (w *world) progress() {
	for range rapid.IntRange(1, 16).Draw(w.rt, "rounds") {
		w.round()
	}
	w.observe()
}

// awaitOne waits for one request drawn among those not yet complete.
func (w *world) awaitOne() {
	pending := w.pending()
	if len(pending) > 0 {
		w.awaitOp(pending[w.draw(len(pending), "await")])
	}
}

// pending are the requests of live processes not yet complete.
func (w *world) pending() []*op {
	var ps []*op
	for _, o := range w.ops {
		if o.req != nil && !o.done && !o.from.dead {
			ps = append(ps, o)
		}
	}
	return ps
}

// missing are the messages that must arrive and have not: sent between
// processes alive since, on an endpoint that had to carry them.
func (w *world) missing() []*message {
	var ms []*message
	for _, m := range w.msgs {
		if m.rule == "" && !m.failed && m.arrived == 0 && !m.from.dead && !m.to.dead {
			ms = append(ms, m)
		}
	}
	return ms
}

// drain waits for every request to complete and every message to arrive,
// then lets the network settle.
func (w *world) drain() {
	if !w.await(func() bool { w.observe(); return len(w.pending()) == 0 && len(w.missing()) == 0 }) {
		if ps := w.pending(); len(ps) > 0 {
			w.fail(violation(RuleCompletes, "%d requests did not complete within %d rounds: %s", len(ps), w.cfg.rounds, list(ps)))
		}
		ms := w.missing()
		w.fail(violation(RuleMessageArrives, "%d messages did not arrive within %d rounds; the first, from %s on %s", len(ms), w.cfg.rounds, ms[0].from.id, ms[0].via))
	}
	for range settleRounds {
		if !w.round() {
			break
		}
	}
	w.observe()
}

func list[T fmt.Stringer](xs []T) string {
	var s []string
	for i, x := range xs {
		if i == 3 {
			s = append(s, fmt.Sprintf("and %d more", len(xs)-3))
			break
		}
		s = append(s, x.String())
	}
	return strings.Join(s, "; ")
}
