package readiness

import (
	"fmt"

	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/staging"
)

// This file is the pump: the allocator's grants, the admissions the backend's
// bound allows and the leases quarantine made hopeless go through the door as
// evidence the pump made, like any other.

// pump takes the allocator's grants and then the admissions the backend's
// bound allows. It runs only in rounds (Tick and evidence), after the clock
// was read: a lease is staged, and its deadline judged, on the clock of the
// round that submits it.
func (c *Core) pump() {
	c.grant()
	c.admit()
}

// admit lets staged leases through to their submission, in arrival order,
// while the backend's bound on outstanding submissions has room.
func (c *Core) admit() {
	for c.admitHead < len(c.admitLine) && c.halted == nil &&
		(c.cfg.MaxOutstanding == 0 || c.outstanding < c.cfg.MaxOutstanding) {
		h := c.admitLine[c.admitHead]
		c.admitLine[c.admitHead] = Handle{}
		c.admitHead++
		id, err := c.lookup(h)
		if err != nil {
			continue // retired while it waited
		}
		l := &c.leases[id]
		if c.table.Lookup(l.m.State, fsm.AdmissionGranted).Action != fsm.Move {
			continue // withdrawn, timed out or closed while it waited
		}
		_ = c.enter(id, &Evidence{What: admissionGranted, Lease: h})
	}
	if c.cfg.MaxOutstanding > 0 && c.outstanding > c.cfg.MaxOutstanding && c.halted == nil {
		c.haltWith(&InvariantError{What: fmt.Sprintf("%d submissions outstanding past the backend's bound of %d", c.outstanding, c.cfg.MaxOutstanding)})
		c.stats.InvariantBreaches++
		return
	}
	if c.admitHead == len(c.admitLine) {
		c.admitLine, c.admitHead = c.admitLine[:0], 0
	} else if c.admitHead > len(c.admitLine)/2 {
		n := copy(c.admitLine, c.admitLine[c.admitHead:])
		clear(c.admitLine[n:])
		c.admitLine, c.admitHead = c.admitLine[:n], 0
	}
}

// grant takes the allocator's grants.
func (c *Core) grant() {
	for c.halted == nil {
		c.grants = c.alloc.TakeGrants(c.grants[:0])
		if err := c.alloc.Err(); err != nil {
			c.haltWith(&InvariantError{What: err.Error()})
			c.stats.InvariantBreaches++
			return
		}
		if len(c.grants) == 0 || !c.checkClaimed(c.grants) {
			return
		}
		for _, t := range c.grants {
			if id, ok := c.byTicket(t); ok {
				_ = c.enter(id, &Evidence{What: slotsGranted, Lease: c.handle(id)})
			}
		}
	}
}

// findHopeless marks every waiting lease that quarantine has made impossible
// to grant: left in line it would block every lease behind it for ever.
func (c *Core) findHopeless() {
	c.hopeless = c.alloc.HopelessTickets(c.hopeless[:0])
	for _, t := range c.hopeless {
		if id, ok := c.byTicket(t); ok {
			_ = c.enter(id, &Evidence{What: slotsHopeless, Lease: c.handle(id)})
		}
	}
}

// byTicket finds the live lease whose ticket t is: its record is t's index
// (the core names its tickets), at t's generation.
func (c *Core) byTicket(t staging.Ticket) (uint32, bool) {
	id := uint32(t.Index())
	if int(id) >= len(c.leases) || !c.leases[id].inUse || c.ticket(id) != t {
		return 0, false
	}
	return id, true
}
