package readiness

import (
	"github.com/kvready/kvready/fsm"
)

// Report says what a closed engine still holds.
type Report struct {
	// Held counts leases not yet released, by state; quarantined ones stay
	// until the manager releases their handles, and their slots never return.
	Held [fsm.NumStates]int
	// SlotsHeld are slots still lent (not free, not quarantined).
	SlotsHeld int
	// SlotsQuarantined are slots out of circulation for ever.
	SlotsQuarantined int
	// Drained reports that no lease still waits for backend or device evidence
	// and the background goroutines have stopped.
	Drained bool
}

// Close stops admission: Lend then fails with ErrClosed. Waiting leases are
// cancelled, leases not yet submitted are withdrawn, and every other lease
// latches the close and is released once fenced. Exposed leases not yet proven
// get a Quiesce call and a drain period, after which they are quarantined with a
// containment signal. Close runs one round without blocking and reports what is
// still held; call Progress until the report says Drained. Close never frees
// quarantined or unproven memory. Calling it again only reports.
func (e *Engine) Close() Report {
	if !e.closed {
		e.closed = true
		e.now = e.cfg.Clock.Now().UnixNano()
		for i := range e.leases {
			id := uint32(i)
			l := &e.leases[id]
			if l.flags&inUse == 0 {
				continue
			}
			switch l.m.State {
			case fsm.Waiting, fsm.Granted, fsm.Staged:
				_ = e.fire(id, fsm.Withdrawn)
			}
			if l.flags&inUse == 0 {
				continue
			}
			_ = e.fire(id, fsm.Close)
			if mutant("close-fences") && l.flags&inUse != 0 {
				_ = e.fire(id, fsm.AccessProven)
			}
			if l.flags&inUse != 0 && l.attempt != nil {
				switch l.m.State {
				case fsm.AccessFenced, fsm.Quarantined:
				default:
					e.needQuiesce(id)
					e.armDrain(id)
				}
			}
		}
	}
	e.Progress()
	return e.report()
}

// Report describes what the engine holds now.
func (e *Engine) Report() Report { return e.report() }

func (e *Engine) report() Report {
	s := e.Stats()
	return Report{Held: s.Leases, SlotsHeld: s.SlotsHeld, SlotsQuarantined: s.SlotsQuarantined, Drained: e.stopped}
}

// stopIfDrained stops the background goroutines once a closed engine has no
// lease that still needs them.
func (e *Engine) stopIfDrained() {
	if !e.closed || e.stopped || e.quiescing > 0 {
		return
	}
	for _, s := range []fsm.State{fsm.Granted, fsm.Staged, fsm.Requested, fsm.Served, fsm.Partial, fsm.Missed, fsm.Failed, fsm.LogicallyComplete} {
		if e.stats.Leases[s] > 0 {
			return
		}
	}
	e.stopped = true
	if !e.cfg.Inline {
		e.watch.close()
	}
	e.quiet.close()
}
