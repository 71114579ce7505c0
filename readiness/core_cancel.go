package readiness

import (
	"errors"
	"fmt"

	"github.com/kvready/kvready/fsm"
)

// What the core answers about a cancel and about the memory as a whole, the
// logical and the physical result apart (SPEC §4 rule 19, the reference's
// CancelResult and ShutdownResult): read from the records, never kept apart
// from them.

// dispositionOf reads the physical disposition of the lease h names, live or
// released and kept; known is false for a handle the core cannot name, and
// the disposition is then IN_DOUBT: memory nobody can see is never claimed
// reusable. Unlike lookup it never halts: a record that carries the
// generation it retired is read as unknown, and the call that looked the
// handle up has already halted the core over it.
func (c *Core) dispositionOf(h Handle) (d Disposition, known bool) {
	if h.gen != 0 && int(h.id) < len(c.leases) {
		if l, gen := &c.leases[h.id], c.gens[h.id]; l.inUse && gen == h.gen && uint8(gen) != l.retired {
			return Disposition(c.table.PhysicalOf(l.m.State, l.m.Marks, l.result)), true
		}
	}
	if k, ok := c.released(h); ok {
		return Disposition(c.table.PhysicalOf(k.m.State, k.m.Marks, k.result)), true
	}
	return DispositionInDoubt, false
}

// cancelAccepted answers a cancel the table took, with the lease's
// disposition right after it.
func (c *Core) cancelAccepted(h Handle) CancelResult {
	d, known := c.dispositionOf(h)
	r := CancelResult{Logical: LogicalAccepted, Physical: d}
	switch {
	case !known:
		// A withdrawn lease is kept (KeepReleased is at least 1), so this
		// is not reached; were it, nothing is claimed of its memory.
		r.Reason = "cancelled locally by the owner; the lease is no longer readable, so its memory is not claimed reusable"
	case d == DispositionNotExposed:
		r.Reason = "cancelled locally by the owner before anything was exposed: withdrawn, its memory reusable at once"
	case d == DispositionInDoubt:
		r.Reason = "cancelled locally by the owner; its memory is IN_DOUBT: never reusable"
	default:
		r.Reason = fmt.Sprintf("cancelled locally by the owner; its memory is %v: reusable only once every accessor's access is proven over and every local copy landed", d)
	}
	return r
}

// cancelRefused answers a cancel the core refused with err. No refusal is
// retryable: the table never leads a lease that refuses a cancel back to a
// state that takes one, a retired handle never names a lease again, and a
// halted core never runs again.
func (c *Core) cancelRefused(h Handle, err error) CancelResult {
	d, known := c.dispositionOf(h)
	r := CancelResult{Physical: d, Reason: err.Error()}
	switch {
	case errors.Is(err, ErrHalted):
		r.Logical = LogicalRejected
	case errors.Is(err, ErrRefused):
		r.Logical = LogicalAlreadyTerminal
	case errors.Is(err, ErrStaleHandle) && known:
		// Released (or quarantined, then released) and still kept: the
		// lease is known, and terminal.
		r.Logical = LogicalAlreadyTerminal
	case errors.Is(err, ErrStaleHandle):
		r.Logical = LogicalNotFound
	default:
		// The core has no other refusal; one added later is a refusal of
		// the call as a whole, and the physical answer stands alone.
		r.Logical = LogicalRejected
	}
	return r
}

// doubtIn says, for each state, whether a lease in it is in doubt: one of
// the dispositions the table gives it there (PhysicalIn) is not reusable. In
// today's table no state has a reusable disposition beside an unreusable one
// (TestInDoubtIsAFunctionOfTheState keeps it so), so the count by state is
// exact; were one to, its leases would be counted in doubt — never claimed
// reusable.
var doubtIn = func() (d [fsm.NumStates]bool) {
	tab := fsm.Lifecycle()
	for s := range fsm.NumStates {
		for _, p := range tab.PhysicalIn(s) {
			d[s] = d[s] || !p.Reusable()
		}
	}
	return d
}()

// inDoubt counts the leases whose memory is not proven reusable now — their
// disposition ACTIVE, QUIESCING or IN_DOUBT — quarantined ones included
// (Stats.Leases counts them for ever). From the counts by state, in
// O(states): a runner asks it for every report, the C ABI every round.
func (c *Core) inDoubt() int {
	n := 0
	for s := range fsm.NumStates {
		if doubtIn[s] {
			n += c.stats.Leases[s]
		}
	}
	return n
}
