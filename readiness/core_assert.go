package readiness

import (
	"fmt"
	"log/slog"

	"github.com/kvready/kvready/fsm"
)

// The core asserts its invariants where they must hold, in TigerBeetle's
// sense: a broken one is a bug in the core (or corrupt memory), never bad
// input, and going on would risk handing out memory a backend or a copy may
// still touch. Each halts the engine as a breach — logged, counted in
// Stats.InvariantBreaches, every later call refused with ErrHalted — and
// frees nothing. docs/engine.md lists them with their places.

// checkState asserts, after every step through the door, that the lease is
// where the table can take it: its state in the table's domain.
func (c *Core) checkState(id uint32) {
	if l := &c.leases[id]; l.inUse && l.m.State >= fsm.NumStates && c.halted == nil {
		c.halt(fmt.Sprintf("a lease's state %v is outside the table's domain", l.m.State), id)
	}
}

// checkLatchOnce asserts that a move latches the lease's outcome only once
// (rule 3): the only outcome that replaces another is a violation found in
// rows already delivered, which are then never trusted.
func (c *Core) checkLatchOnce(id uint32, r fsm.Result) {
	if l := &c.leases[id]; l.result != fsm.NoResult && (r != fsm.Violation || !served(l.result)) {
		c.halt(fmt.Sprintf("outcome %v latched over %v: an outcome latches once", r, l.result), id)
	}
}

// halt stops the engine on a broken invariant: it is logged, counted, and
// every later call that would change anything is refused. Nothing is freed.
func (c *Core) halt(what string, id uint32) {
	c.haltWith(&InvariantError{What: what, Lease: c.handle(id)})
	c.stats.InvariantBreaches++
}

func (c *Core) haltWith(err error) {
	if c.halted != nil {
		return
	}
	c.halted = err
	c.claim.End() // a halted engine is abandoned: what it holds stays out for later engines
	c.cfg.Logger.Error("kvready: engine halted; it releases nothing any more", slog.Any("error", err))
}

// Halt stops the engine from outside the core: its runner found a safety
// invariant of its own broken (a bound it relies on). Nothing is freed; every
// later call that would change anything is refused with ErrHalted wrapping
// err. A second halt changes nothing.
func (c *Core) Halt(err error) {
	if c.halted != nil || err == nil {
		return
	}
	c.stats.InvariantBreaches++
	c.haltWith(&InvariantError{What: err.Error()})
}
