package readiness

import (
	"time"

	"github.com/kvready/kvready/fsm"
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

// NumCauses is the number of things that can cause a move: each event, then
// each guarded completion. Snapshot.Moves is indexed by cause.
const NumCauses = int(fsm.NumEvents) + int(fsm.NumGuards)

// Cause returns the index in Snapshot.Moves of what caused step: its event,
// or NumEvents plus its guard for a completion.
func Cause(step fsm.Step) int { return causeOf(step.Event, step.Completion, step.Guard) }

func causeOf(ev fsm.Event, completion bool, g fsm.Guard) int {
	if completion {
		return int(fsm.NumEvents) + int(g)
	}
	return int(ev)
}

// causeSlots is NumCauses rounded up to a power of two: the core indexes its
// counts by a mask rather than a checked index, cheaper on the hot path.
const causeSlots = 32

// The mask in countMove needs every cause to fit.
var _ [causeSlots - NumCauses]struct{}

// countMove counts a move by its cause, for an Observer. It reads the step's
// fields in place: copying the seven-byte Step (as Cause(*step) does) stalls
// on the copy and measured several times the cost.
func (c *Core) countMove(step *fsm.Step) {
	c.byCause[causeOf(step.Event, step.Completion, step.Guard)&(causeSlots-1)]++
}

// CauseName names cause i as fsm.Step.Cause does — the event's name, or the
// guard's in brackets — and returns "" for an index out of range.
func CauseName(i int) string {
	switch {
	case i < 0 || i >= NumCauses:
		return ""
	case i < int(fsm.NumEvents):
		return fsm.Event(i).String()
	default:
		return fsm.CompletionName(fsm.Guard(i - int(fsm.NumEvents)))
	}
}

// GroupSlots is where the slots of one pool group are.
type GroupSlots struct {
	// Free slots can be granted; Held ones are lent (granted and not yet
	// returned); Quarantined ones are out of circulation for ever.
	Free, Held, Quarantined int
}

// Snapshot is what an engine has counted, as of the end of a round.
type Snapshot struct {
	// Stats is what Engine.Stats returns.
	Stats Stats
	// Groups holds the slots of each pool group, by group index; their sums
	// are Stats.SlotsFree, SlotsHeld and SlotsQuarantined.
	Groups []GroupSlots
	// Moves counts the moves made since the engine was assembled, by cause
	// (see Cause and CauseName). Latched evidence is not a move.
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
}

// observing is the engine's part of being observed.
type observing struct {
	o    Observer
	snap Snapshot
}

// observeWith makes the engine count its moves by cause and show o a
// snapshot now.
func (e *Engine) observeWith(o Observer) {
	e.obs = &observing{o: o}
	e.obs.snap.Groups = make([]GroupSlots, e.cfg.Memory.NumGroups())
	e.core.counting = true
	e.obs.snap.At = time.Unix(0, e.core.now)
	e.observe()
}

// observed ends a round for the observer: it counts the round and shows a
// snapshot if one is due, or if the engine has just drained.
func (e *Engine) observed() {
	s := &e.obs.snap
	s.Rounds++
	s.At = time.Unix(0, e.core.now)
	if e.obs.o.Due() || (e.stopped && !s.Drained) {
		e.observe()
	}
}

// observe fills the snapshot and shows it to the observer.
func (e *Engine) observe() {
	s := &e.obs.snap
	s.Drained = e.stopped
	s.Moves = [NumCauses]uint64(e.core.byCause[:NumCauses])
	s.Stats = e.Stats()
	a := e.core.alloc
	for g := range s.Groups {
		free, q := a.FreeSlots(g), a.Quarantined(g)
		s.Groups[g] = GroupSlots{Free: free, Held: a.Capacity(g) - free - q, Quarantined: q}
	}
	e.obs.o.Observe(s)
}
