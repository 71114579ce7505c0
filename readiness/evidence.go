package readiness

import (
	"fmt"
	"log/slog"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/staging"
)

// The evidence a Core's caller reports. Each method names the lease by its
// handle; evidence about a retired lease is refused with ErrStaleHandle and
// counted, evidence the lifecycle refuses in the lease's state returns the
// declared *fsm.RefusedError and is counted. Neither changes anything.

// Submitted reports that the backend accepted a submission from Ready and
// returned an attempt; keep the attempt until the lease is forgotten.
func (c *Core) Submitted(h Handle) error {
	return c.report(h, func(id uint32) error {
		err := c.fire(id, fsm.Submitted)
		if err == nil {
			c.leases[id].flags |= submitted
		}
		return err
	})
}

// Rejected reports that the backend refused a submission with an error
// wrapping contract.ErrSubmissionRejected: nothing escaped, so nothing needs
// proving.
func (c *Core) Rejected(h Handle, reason string) error {
	return c.report(h, func(id uint32) error {
		l := &c.leases[id]
		if l.m.State != fsm.Staged {
			return c.fire(id, fsm.Rejected) // refused, saying why
		}
		l.flags &^= exposed
		l.body.reason = "submission rejected: " + reason
		return c.fire(id, fsm.Rejected)
	})
}

// Escaped reports that a submission failed without an attempt — any error
// but a rejection, or a panic: something may have escaped and nothing can
// prove it ended, so the lease is contained at its containment deadline.
func (c *Core) Escaped(h Handle, reason string) error {
	return c.report(h, func(id uint32) error {
		if c.leases[id].m.State == fsm.Staged {
			c.leases[id].body.reason = "submission escaped without an attempt: " + reason
		}
		return c.fire(id, fsm.SubmitEscaped)
	})
}

// Answer reports what the lease's attempt answered to Poll: nil while it is
// pending. The first answer is latched, classified against what was asked —
// names that were never asked for, or an answer that is no outcome, are a
// contract violation, never data. A later answer that differs from the first
// (a re-poll after the access proof; nil included) is a contract violation.
func (c *Core) Answer(h Handle, o contract.Outcome) error {
	return c.report(h, func(id uint32) error {
		l := &c.leases[id]
		b := l.body
		if b.first == nil {
			if o == nil {
				return nil
			}
			b.first = o
			ev := c.classify(l, o)
			if mutant("late-outcome-wins") && l.result == fsm.Timeout && l.m.State == fsm.Failed {
				if r := c.table.Lookup(fsm.Requested, ev).Result; r != fsm.NoResult {
					l.result = r // the late answer overwrites the timeout
				}
			}
			return c.fire(id, ev)
		}
		if sameOutcome(b.first, o) || mutant("no-stability-check") {
			return nil
		}
		return c.violation(id, fmt.Sprintf("contract violation: the outcome changed from %v to %v", b.first, o))
	})
}

// Violation reports a contract violation the caller saw itself, such as a
// Poll that panicked.
func (c *Core) Violation(h Handle, reason string) error {
	return c.report(h, func(id uint32) error { return c.violation(id, "contract violation: "+reason) })
}

func (c *Core) violation(id uint32, reason string) error {
	l := &c.leases[id]
	c.stats.Violations++
	c.cfg.Logger.Warn("kvready: backend contract violation", slog.String("lease", c.handle(id).String()), slog.String("reason", reason))
	switch l.m.State {
	case fsm.Requested, fsm.Served, fsm.Partial:
		l.body.reason = reason
	}
	return c.fire(id, fsm.ContractViolation)
}

// classify turns a first answer into the table's event. A served name not
// asked for is a violation, never data.
func (c *Core) classify(l *lease, o contract.Outcome) fsm.Event {
	b := l.body
	switch o := o.(type) {
	case contract.Delivered:
		masks, err := staging.ServedMasksInto(b.masks, &b.view, o.Served)
		if err != nil && !mutant("accept-unasked") {
			c.stats.Violations++
			if l.m.State == fsm.Requested {
				b.reason = "contract violation: " + err.Error()
			}
			return fsm.ContractViolation
		}
		if err != nil { // the mutant trusts every row
			masks, _ = staging.ServedMasksInto(b.masks, &b.view, contract.NameSet{})
			for _, m := range masks {
				for k := range m {
					m[k] = true
				}
			}
			b.masks = masks
			return fsm.OutcomeServed
		}
		b.masks = masks
		switch n := o.Served.Len(); {
		case n == 0 && mutant("miss-as-failure"):
			return fsm.OutcomeFailed
		case n == 0:
			return fsm.OutcomeMissed
		case n == b.view.Rows():
			return fsm.OutcomeServed
		default:
			return fsm.OutcomePartial
		}
	case contract.Failed:
		if l.m.State == fsm.Requested {
			b.reason = "failed: " + o.Reason
		}
		return fsm.OutcomeFailed
	case contract.Cancelled:
		if l.m.State == fsm.Requested {
			b.reason, b.byPeer = o.String(), o.ByPeer
		}
		return fsm.OutcomeCancelled
	default:
		c.stats.Violations++
		if l.m.State == fsm.Requested {
			b.reason = fmt.Sprintf("contract violation: outcome of unknown type %T", o)
		}
		return fsm.ContractViolation
	}
}

// sameOutcome compares two answers whole: a changed served set is a changed
// answer even when both are Delivered.
func sameOutcome(a, b contract.Outcome) bool {
	switch x := a.(type) {
	case contract.Delivered:
		y, ok := b.(contract.Delivered)
		if mutant("stability-kind-only") {
			return ok
		}
		return ok && x.Served.Equal(y.Served)
	case contract.Failed:
		y, ok := b.(contract.Failed)
		return ok && x == y
	case contract.Cancelled:
		y, ok := b.(contract.Cancelled)
		return ok && x == y
	}
	return false
}

// Proven reports that Quiesce answered true for the lease's attempt: the
// backend will never touch its slots again. Report a re-poll of the attempt
// with Answer first, so that an answer changed before the proof is caught
// before anything is copied.
func (c *Core) Proven(h Handle) error {
	return c.report(h, func(id uint32) error {
		c.leases[id].flags &^= quiescing
		return c.fire(id, fsm.AccessProven)
	})
}

// Unproven reports that Quiesce answered false, failed or timed out: the
// drain starts (if it had not), and the proof must be asked for again later.
func (c *Core) Unproven(h Handle, reason string) error {
	return c.report(h, func(id uint32) error {
		l := &c.leases[id]
		l.flags &^= quiescing
		if mutant("trust-quiesce-false") {
			return c.fire(id, fsm.AccessProven)
		}
		c.stats.Unproven++
		if l.body.reason == "" || l.result == fsm.Delivered || l.result == fsm.Partly || l.result == fsm.Miss {
			l.body.reason = "access unproven: " + reason
		}
		return c.fire(id, fsm.AccessUnproven)
	})
}

// AwaitingProof reports whether the lease still needs its access proven: the
// caller keeps asking Quiesce while it does.
func (c *Core) AwaitingProof(h Handle) bool {
	id, err := c.lookup(h)
	return err == nil && c.leases[id].flags&submitted != 0 && c.table.Exposed(c.leases[id].m.State)
}

// CopiesLanded reports that the event recorded after the lease's copies
// completed.
func (c *Core) CopiesLanded(h Handle) error {
	return c.report(h, func(id uint32) error {
		c.leases[id].flags &^= copying
		return c.fire(id, fsm.CopiesLanded)
	})
}

// CopyRefused reports that the device refused the copy of row (the row's
// index in the request) before it started: nothing touches its memory. A
// fetch's row then does not count as arrived; a publish is not submitted.
func (c *Core) CopyRefused(h Handle, row int, reason string) error {
	return c.report(h, func(id uint32) error {
		b := c.leases[id].body
		if row < 0 || row >= len(b.rows) {
			return fmt.Errorf("%w: row %d of a lease of %d rows", ErrInvalidRequest, row, len(b.rows))
		}
		if err := c.fire(id, fsm.CopyRefused); err != nil {
			return err
		}
		l := &c.leases[id]
		if l.kind == Publish {
			l.flags |= incomplete
		} else if m := b.mask(row); m != nil {
			*m = false
		}
		b.reason = fmt.Sprintf("copy of row %d refused by the device: %s", row, reason)
		return nil
	})
}

// CopyFailed reports that the lease's copies failed without a completion
// record, or that a copy of it failed in a way that may have queued work:
// they may still touch its slots, which are contained at the containment
// deadline.
func (c *Core) CopyFailed(h Handle, reason string) error {
	return c.report(h, func(id uint32) error {
		l := &c.leases[id]
		if l.m.State == fsm.Granted || l.m.State == fsm.AccessFenced {
			l.body.reason = "local copy failed without a completion record: " + reason
		}
		l.flags &^= copying
		return c.fire(id, fsm.CopyFailed)
	})
}

// DeviceLost reports that the device is lost: every lease with local copies
// in flight has them unproven, and no new lease is lent.
func (c *Core) DeviceLost(reason string) {
	if c.lost {
		return
	}
	c.lost = true
	c.cfg.Logger.Error("kvready: device lost; its in-flight copies can never be proven finished", slog.String("reason", reason))
	for i := range c.leases {
		id := uint32(i)
		if l := &c.leases[id]; l.flags&inUse != 0 && l.flags&copying != 0 {
			l.flags &^= copying
			l.body.reason = "device lost with a copy in flight: " + reason
			_ = c.fire(id, fsm.CopyFailed)
		}
	}
	c.pump()
}

// Lost reports whether DeviceLost was reported.
func (c *Core) Lost() bool { return c.lost }

// report resolves h, applies the evidence, fires any deadline it armed that
// is already due (a lease submitted after its deadline passed times out in
// the same round), and takes the grants it caused.
func (c *Core) report(h Handle, apply func(id uint32) error) error {
	id, err := c.evidence(h)
	if err != nil {
		return err
	}
	err = apply(id)
	c.expire()
	c.pump()
	return err
}

// expire fires the deadlines and containment deadlines that are due.
func (c *Core) expire() {
	for {
		id, ok := c.timers.popExpired(c.now)
		if !ok {
			return
		}
		l := &c.leases[id]
		if l.flags&inUse == 0 {
			continue
		}
		b := l.body
		switch {
		case l.m.State == fsm.Requested && c.now >= b.deadline:
			b.reason = "deadline passed with no outcome: timeout"
			_ = c.fire(id, fsm.Deadline)
		case c.table.Containable(l.m.State) && b.containAt != 0 && c.now >= b.containAt:
			c.contain(id)
		default:
			c.rearm(id)
		}
	}
}

// contain fires the containment of a lease whose containment deadline passed.
func (c *Core) contain(id uint32) {
	l := &c.leases[id]
	b := l.body
	from := l.m.State
	what := "backend access"
	if from == fsm.AccessFenced || from == fsm.CopyUnproven || from == fsm.Granted {
		what = "a local copy"
	}
	why := b.reason
	b.reason = fmt.Sprintf("containment deadline passed in %v with %s unproven", from, what)
	if why != "" {
		b.reason += " (" + why + ")"
	}
	_ = c.fire(id, fsm.Containment)
}

// rearm makes the lease's one timer fire by what it waits for in its state:
// its deadline while the outcome is pending, then its containment deadline
// while something may stay unproven. A timer armed earlier is left alone:
// when it fires, expire finds nothing due and calls rearm again, so a lease
// that completes before its deadline never moves its timer at all.
func (c *Core) rearm(id uint32) {
	l := &c.leases[id]
	b := l.body
	switch {
	case l.m.State == fsm.Requested:
		c.timers.armBy(id, min(b.deadline, b.containAt))
	case c.table.Containable(l.m.State) && b.containAt != 0:
		c.timers.armBy(id, b.containAt)
	default:
		c.timers.disarm(id)
	}
}

// drain starts the drain at the time given, if it starts earlier than the
// containment deadline fixed so far: later triggers never extend the grace.
func (c *Core) drain(id uint32, at int64) {
	b := c.leases[id].body
	due := at + int64(c.cfg.DrainGrace)
	if mutant("containment-from-notice") {
		due = c.now + int64(c.cfg.DrainGrace)
		b.containAt = due
		return
	}
	if b.containAt == 0 || due < b.containAt {
		b.containAt = due
	}
}

func (c *Core) handle(id uint32) Handle { return Handle{id: id, gen: c.leases[id].gen} }
