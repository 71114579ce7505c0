package readiness

import (
	"fmt"

	"github.com/kvready/kvready/fsm"
)

// Assertions that pair (TigerBeetle): each invariant is asserted where it is
// decided and again where it takes effect, so that a bug trips one before it
// spreads. The checks here are the longer ones, called from their places;
// docs/engine.md lists every assertion with its place and its partner. Each
// reports whether the invariant holds; where it does not, the core has halted.

// withdrawn reports whether the owner withdrew the lease: released, closed or
// cancelled it. A withdrawn lease is never submitted and takes no more layers.
func withdrawn(m fsm.Slot) bool {
	return m.Latched.Has(fsm.ReleaseRequested) || m.Latched.Has(fsm.Close) || m.Latched.Has(fsm.CancelRequested)
}

// checkFenceEntered asserts where the fence is decided — entering
// access_fenced (endAccess) — that the lease carries the fence mark and that a
// lease its backend was handed is fenced only by an access proof. Its partners
// are free and retire, where the fence takes effect.
func (c *Core) checkFenceEntered(id uint32, step *fsm.Step) bool {
	l := &c.leases[id]
	switch {
	case !l.m.Marks.Has(fsm.Fenced):
		c.halt(fmt.Sprintf("access ended in %v without the fence mark", l.m.State), id)
		return false
	case l.m.Marks.Has(fsm.Exposed) && (step.Completion || step.Event != fsm.AccessProven):
		how := step.Event.String()
		if step.Completion {
			how = fsm.CompletionName(step.Guard)
		}
		c.halt(fmt.Sprintf("a lease its backend was handed was fenced by %s, not by an access proof", how), id)
		return false
	}
	return true
}

// checkLanding asserts, where a landing is stored, that the layers landed
// never pass the layers queued nor the layers the lease's copies go in:
// landed ≤ queued ≤ layers. A whole landing (copies_landed) of a layerwise
// publish needs every layer queued. Its partners are copyLayer (queued <
// layers) and checkAnswerable (every layer landed).
func (c *Core) checkLanding(id uint32, landed int32, whole bool) bool {
	b := c.body(id)
	switch {
	case whole && b.byLayer && b.queued != b.layers:
		c.halt(fmt.Sprintf("a layerwise publish landed whole with %d of its %d layers queued", b.queued, b.layers), id)
		return false
	case landed > b.layers || b.byLayer && landed > b.queued:
		c.halt(fmt.Sprintf("%d layers landed of a lease that queued %d of %d", landed, b.queued, b.layers), id)
		return false
	}
	return true
}

// checkAnswerable asserts where readiness becomes answerable (answer, on
// entering logically_complete) that every local copy landed, every layer of
// them. Its partner is Readiness, where the answer is read.
func (c *Core) checkAnswerable(id uint32) bool {
	b := c.body(id)
	switch {
	case b.copiesOut != 0:
		c.halt(fmt.Sprintf("readiness about to be answered with %d local copies not landed", b.copiesOut), id)
		return false
	case b.landed != b.layers:
		c.halt(fmt.Sprintf("readiness about to be answered with %d of %d layers landed", b.landed, b.layers), id)
		return false
	}
	return true
}

// checkRetire asserts where a record is reused (retire) that nothing of it
// is still the backend's or the bound's: its extent is never reused while
// the backend may read it, a quarantined lease's never (park keeps its record
// for ever), a record retires once, and no admission slot leaves with it.
// Its partners are endAccess (the fence decided), park and unadmit.
func (c *Core) checkRetire(id uint32) bool {
	l := &c.leases[id]
	switch {
	case l.m.Marks.Has(fsm.Exposed) && !l.m.Marks.Has(fsm.Fenced):
		// The extent is rebuilt in place by the next lease: never while a
		// backend may still read it.
		c.halt("a lease's extent, which its backend may still read, was about to be reused", id)
		return false
	case !l.inUse || l.m.State != fsm.Released:
		c.halt(fmt.Sprintf("a record in %v (carrying a lease: %v) was about to be retired: only a released lease's record is reused, once", l.m.State, l.inUse), id)
		return false
	case c.body(id).outstanding:
		c.halt("a lease was about to be retired holding its admission slot", id)
		return false
	}
	return true
}

// checkQuarantine asserts where slots leave circulation for ever
// (quarantine) that the lease was contained — its containment deadline passed
// — and has given its admission slot back. Its partners are contain (the
// decision, at the deadline) and park (the record kept for ever).
func (c *Core) checkQuarantine(id uint32) bool {
	l := &c.leases[id]
	switch {
	case !l.m.Marks.Has(fsm.WasContained):
		c.halt("a lease's slots were about to be quarantined without its containment", id)
		return false
	case c.body(id).outstanding:
		c.halt("a lease was about to be quarantined holding its admission slot: the backend's bound would shrink for good", id)
		return false
	}
	return true
}
