package readiness

import (
	"context"
	"fmt"

	"github.com/kvready/kvready/fsm"
)

// undrained says why a shutdown stopped waiting: the leases it leaves in
// doubt, the slots still held, how many leases hold them with access or a
// copy still unproven, the slots quarantined, and the Quiesce calls still
// out — a drain also waits for those to answer, so a Quiesce that never
// returns keeps an engine whose slots are all quarantined from draining.
func undrained(rep Report, unanswered int64) string {
	tab := fsm.Lifecycle()
	unproven := 0
	for s, n := range rep.Held {
		if st := fsm.State(s); tab.Containable(st) || st == fsm.Contained {
			unproven += n
		}
	}
	return fmt.Sprintf("shutdown did not drain: %d leases left in doubt (memory %v: not safe to release), %d slots still held (%d leases with access or a copy still unproven), %d slots quarantined, %d Quiesce calls still unanswered",
		rep.InDoubt, rep.Physical, rep.SlotsHeld, unproven, rep.SlotsQuarantined, unanswered)
}

// noticeHalt tells the owner, once, that the engine halted.
func (e *Engine) noticeHalt() {
	if e.haltSeen {
		return
	}
	if err := e.core.Err(); err != nil {
		e.haltSeen = true
		if e.cfg.OnHalt != nil {
			e.cfg.OnHalt(err)
		}
		e.mail.ring()
	}
}

// Close stops admission (Lend then fails with ErrClosed) and tells every
// lease: waiting ones are released at once, those still waiting for an
// outcome are cancelled locally, and every other one is released once it is
// fenced and its copies landed, or contained at its containment deadline.
// Then it runs one round without blocking and reports what is still held:
// Report.InDoubt counts the leases whose memory is not yet proven reusable,
// and SafeToRelease says whether the memory may be handed back. Run rounds
// (Progress on Wake, or Sync) until the report says Drained; with a clock
// that moves every close drains. Calling it again only runs a round and
// reports. The engine's claim on its memory ends as Close returns (claim.go):
// slots still held stay out of circulation for later engines; Shutdown to hand
// over every slot.
func (e *Engine) Close() Report {
	e.mu.Lock()
	defer e.mu.Unlock()
	defer e.core.HandOver()
	return e.close()
}

func (e *Engine) close() Report {
	e.closing = true
	e.core.Close()
	e.progress()
	return e.report()
}

// Report describes what the engine holds now.
func (e *Engine) Report() Report {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.report()
}

func (e *Engine) report() Report {
	s := e.core.Stats()
	halted := e.core.Err()
	r := Report{Held: s.Leases, SlotsHeld: s.SlotsHeld, SlotsQuarantined: s.SlotsQuarantined, Drained: e.stopped && halted == nil, Halted: halted,
		InDoubt: e.core.inDoubt(), Physical: DispositionNotExposed}
	switch {
	case r.InDoubt > 0 || r.SlotsQuarantined > 0:
		r.Physical = DispositionInDoubt
	case e.core.exposed:
		r.Physical = DispositionQuiescedSuccess
	}
	return r
}

// stopIfDrained stops the background goroutines once a closed engine has no
// lease that can still change and no Quiesce call outstanding. A closed
// engine that halted takes nothing in any more, so there is nothing left to
// observe: its outstanding Quiesce calls are cancelled, and its goroutines
// stop once they have answered (it never reports Drained: its slots stay).
func (e *Engine) stopIfDrained() {
	if e.stopped {
		return
	}
	halted := e.closing && e.core.Err() != nil
	if halted {
		for _, sd := range e.sides {
			if sd != nil {
				sd.workers.cancelAll()
			}
		}
	}
	// Drained first: it is false at once on an engine that was not closed,
	// which is every round's case; the calls outstanding are atomics read per
	// backend.
	if !(halted || e.core.Drained()) || e.outstandingCalls() > 0 {
		return
	}
	e.stopped = true
	if e.tm.timer != nil {
		e.tm.timer.Stop()
	}
	e.watch.close()
	for _, sd := range e.sides {
		if sd != nil {
			sd.workers.close()
		}
	}
}

// Shutdown closes the engine (Close) and runs rounds, woken as they have
// work, until its goroutines have stopped: it drained, or it halted and its
// outstanding Quiesce calls, cancelled, have answered. Leases whose access is
// never proven are contained at their containment deadline, so with a clock
// that moves every shutdown drains. It returns the final report, and ctx's
// error (wrapped) if ctx ended first, or the halt. A report that is not
// SafeToRelease says how many leases the shutdown leaves in doubt (InDoubt),
// and so does the error. Other calls go on while it waits. The claim on the
// memory ends as it returns (claim.go).
func (e *Engine) Shutdown(ctx context.Context) (Report, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	defer e.core.HandOver()
	rep := e.close()
	for !e.stopped {
		if err := e.sleep(ctx); err != nil {
			return rep, fmt.Errorf("readiness: %s: %w", undrained(rep, e.outstandingCalls()), err)
		}
		e.progress()
		rep = e.report()
	}
	if rep.Halted != nil {
		return rep, rep.Halted
	}
	return rep, nil
}
