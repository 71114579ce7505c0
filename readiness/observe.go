package readiness

import (
	"time"
)

// Observer is shown, on the owner goroutine, what an engine has counted: once
// when the engine is assembled, at the end of each round (Progress, and so Sync
// and Close) in which it says it is Due, and at the round in which a closed
// engine drains. It is how a metrics exporter such as package kvready/metrics
// watches an engine without the engine knowing about it, and without another
// goroutine ever reading the engine. An engine with no Observer pays nothing
// for the possibility; one with an Observer pays a call to Due each round, and
// a snapshot only when one is due.
type Observer interface {
	// Due reports whether the observer wants a snapshot now: for a metrics
	// exporter, whether a scrape is waiting. The engine asks at the end of
	// every round; it must be cheap, and safe to call while another
	// goroutine changes the answer.
	Due() bool
	// Observe is shown the snapshot. It must return quickly and must not
	// call the engine. The Snapshot is the engine's and is reused: copy
	// what you keep.
	Observe(*Snapshot)
}

// Snapshot is what an engine has counted, as of the end of a round.
type Snapshot struct {
	// Stats is what Engine.Stats returns.
	Stats Stats
	// Groups holds the slots of each pool group, by group index; their sums
	// are Stats.SlotsFree, SlotsHeld and SlotsQuarantined.
	Groups []GroupSlots
	// Moves counts the moves made since the engine was assembled, by cause
	// (see Transition.Cause and CauseName). Latched evidence is not a move.
	Moves [NumCauses]uint64
	// Rounds counts the rounds run: an owner loop that stopped calling
	// Progress shows as Rounds standing still.
	Rounds uint64
	// At is the engine's clock at the start of the latest round (at New,
	// before the first).
	At time.Time
	// Drained is set once a closed engine has drained (Engine.Report): no
	// lease can change any more and no further snapshot will follow.
	Drained bool
	// InFlight is what the backends may still be touching: its Oldest is on
	// the engine's clock, as At is.
	InFlight InFlight
}

// observing is the engine's part of being observed.
type observing struct {
	o      Observer
	snap   Snapshot
	groups []GroupSlots // the core's answer, before it is copied into snap
}

// observeWith makes the engine count its moves by cause and show o a
// snapshot now.
func (e *Engine) observeWith(o Observer) {
	e.obs = &observing{o: o}
	e.obs.snap.Groups = make([]GroupSlots, 0, e.cfg.Memory.NumGroups())
	e.core.CountMoves()
	e.obs.snap.At = e.core.Now()
	e.observe()
}

// observed ends a round for the observer: it counts the round and shows a
// snapshot if one is due, or if the engine has just drained.
func (e *Engine) observed() {
	s := &e.obs.snap
	s.Rounds++
	s.At = e.core.Now()
	if e.obs.o.Due() || (e.stopped && !s.Drained) {
		e.observe()
	}
}

// observe fills the snapshot and shows it to the observer.
func (e *Engine) observe() {
	s := &e.obs.snap
	s.Drained = e.stopped
	s.Moves = e.core.MovesByCause()
	s.Stats = e.stats()
	e.obs.groups = e.core.Groups(e.obs.groups)
	s.Groups = s.Groups[:0]
	for _, g := range e.obs.groups {
		s.Groups = append(s.Groups, GroupSlots(g))
	}
	s.InFlight = InFlight(e.core.InFlight())
	e.obs.o.Observe(s)
}
