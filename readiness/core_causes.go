package readiness

import "github.com/kvready/kvready/fsm"

// NumCauses is the number of things that can cause a move: each event, then
// each guarded completion. MovesByCause is indexed by cause.
const NumCauses = int(fsm.NumEvents) + int(fsm.NumGuards)

// Cause returns the index in MovesByCause of what caused step: its event, or
// NumEvents plus its guard for a completion.
func causeOfStep(step fsm.Step) int { return causeOf(step.Event, step.Completion, step.Guard) }

func causeOf(ev fsm.Event, completion bool, g fsm.Guard) int {
	if completion {
		return int(fsm.NumEvents) + int(g)
	}
	return int(ev)
}

// causeSlots is NumCauses rounded up to a power of two: the core indexes its
// counts by a mask rather than a checked index, cheaper on the hot path.
const causeSlots = 64

// The mask in countMove needs every cause to fit.
var _ [causeSlots - NumCauses]struct{}

// countMove counts a move by its cause. It reads the step's fields in place:
// copying the Step stalls on the copy and measured several times the cost.
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

// CountMoves makes the core count its moves by cause from now on (an
// observer wants them); counting costs a little on every move, so it is off
// until asked for.
func (c *Core) CountMoves() { c.counting = true }

// MovesByCause returns the moves counted since CountMoves, by cause.
func (c *Core) MovesByCause() [NumCauses]uint64 { return [NumCauses]uint64(c.byCause[:NumCauses]) }
