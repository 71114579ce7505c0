package readiness

import "fmt"

// This file is the core's clock: what comes due on it — request deadlines,
// containment deadlines, Quiesce calls that outlived their timeout, the
// back-off before asking again — goes through the door as evidence the clock
// made, like any other; and each lease's one timer is re-armed for the
// earliest thing its state waits on.

// expire fires what is due on the core's clock.
func (c *Core) expire() {
	for c.halted == nil {
		id, ok := c.timers.popExpired(c.now)
		if !ok {
			return
		}
		if c.leases[id].inUse {
			c.due(id)
		}
	}
}

// due reports, in order, what is due for one lease whose timer expired. The
// request and containment deadlines are reported only where the table still
// moves on them; a Quiesce timeout or a back-off is armed only where a proof
// is awaited, so the table refusing one is a broken invariant.
func (c *Core) due(id uint32) {
	l := &c.leases[id]
	gen := c.gens[id]
	live := func() bool { return l.inUse && c.gens[id] == gen && c.halted == nil }
	b := c.body(id)
	if c.table.Pending(l.m.State) && b.deadline != 0 && c.now >= b.deadline {
		c.clock(id, deadlineDue)
	}
	if live() && c.table.Containable(l.m.State) && b.containAt != 0 && c.now >= b.containAt {
		c.clock(id, containmentDue)
	}
	if live() && b.proofDue != 0 && c.now >= b.proofDue {
		c.clock(id, quiesceOverdue)
	}
	if live() && b.askAt != 0 && c.now >= b.askAt {
		c.clock(id, backoffDue)
	}
	if live() {
		c.rearm(id)
	}
}

// clock reports what came due for a lease through the door. The clock only
// reports what the lease's state waits on: a refusal would leave the timer
// due for ever, so it halts the engine instead.
func (c *Core) clock(id uint32, what Observed) {
	if err := c.enter(id, &Evidence{What: what, Lease: c.handle(id)}); err != nil && c.halted == nil {
		c.halt(fmt.Sprintf("the clock's %s was refused: %v", clockName(what), err), id)
	}
}

func clockName(what Observed) string {
	switch what {
	case deadlineDue:
		return "request deadline"
	case containmentDue:
		return "containment deadline"
	case quiesceOverdue:
		return "Quiesce timeout"
	case backoffDue:
		return "retry back-off"
	}
	return what.String()
}

// containmentReason says what stayed unproven, and why.
func (c *Core) containmentReason(id uint32) string {
	l, b := &c.leases[id], c.body(id)
	what := "a local copy"
	if c.table.Exposed(l.m.State) {
		what = "backend access"
	}
	reason := fmt.Sprintf("containment deadline passed in %v with %s unproven", l.m.State, what)
	why := b.reason
	if why == "" {
		why = b.unproven
	}
	if why != "" {
		reason += " (" + why + ")"
	}
	return reason
}

// rearm arms the lease's one timer for the earliest thing its state waits on:
// its request deadline while the outcome is pending, its containment deadline
// while something may stay unproven, its outstanding Quiesce call's timeout,
// its next retry. A timer armed earlier is left alone: when it fires, due
// finds nothing and calls rearm again, so a lease that completes before its
// deadline never moves its timer at all.
func (c *Core) rearm(id uint32) {
	l := &c.leases[id]
	b := c.body(id)
	if b.proofDue != 0 && !b.proofOut {
		c.halt("a Quiesce timeout is armed with no Quiesce call outstanding", id)
		return
	}
	var at int64
	earliest := func(t int64) {
		if t != 0 && (at == 0 || t < at) {
			at = t
		}
	}
	if c.table.Pending(l.m.State) {
		earliest(b.deadline)
	}
	if c.table.Containable(l.m.State) {
		earliest(b.containAt)
	}
	earliest(b.proofDue)
	if c.awaitingProof(l) {
		earliest(b.askAt)
	}
	if at == 0 {
		c.timers.disarm(id)
		return
	}
	c.timers.armBy(id, at)
}
