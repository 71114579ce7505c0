package fsm

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"

	looplab "github.com/looplab/fsm"
)

// String returns the state's snake_case name, as used in the declaration, the
// diagrams and the docs.
func (s State) String() string {
	if s < NumStates {
		return stateInfo[s].name
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Meaning says what being in the state means for the lease.
func (s State) Meaning() string {
	if s < NumStates {
		return stateInfo[s].meaning
	}
	return ""
}

// Slots says what may happen to the lease's staging slots while it is in the state.
func (s State) Slots() string {
	if s < NumStates {
		return stateInfo[s].slots
	}
	return ""
}

// Terminal reports whether no event can move the lease out of the state.
func (s State) Terminal() bool { return s == Quarantined || s == Released }

// String returns the event's snake_case name.
func (e Event) String() string {
	if e < NumEvents {
		return eventInfo[e].name
	}
	return fmt.Sprintf("event(%d)", uint8(e))
}

// Meaning says what evidence the event carries.
func (e Event) Meaning() string {
	if e < NumEvents {
		return eventInfo[e].meaning
	}
	return ""
}

// ParseState returns the state named name (snake_case, as [State.String] spells it).
func ParseState(name string) (State, error) {
	for s := range NumStates {
		if stateInfo[s].name == name {
			return s, nil
		}
	}
	return 0, fmt.Errorf("fsm: unknown state %q: want one of waiting, granted, staged, requested, served, partial, missed, failed, logically_complete, access_fenced, quarantined, released", name)
}

// ParseEvent returns the event named name (snake_case, as [Event.String] spells it).
func ParseEvent(name string) (Event, error) {
	for e := range NumEvents {
		if eventInfo[e].name == name {
			return e, nil
		}
	}
	return 0, fmt.Errorf("fsm: unknown event %q: want a name such as slots_granted or access_proven (see docs/states.md)", name)
}

// Kind is what an event does in a state.
type Kind uint8

const (
	// Refuse changes nothing; the entry carries the declared reason.
	Refuse Kind = iota
	// Move changes the lease's state to the entry's Next.
	Move
	// Latch records the event in the lease's [Latches]; [Table.Redeliver] fires it
	// again after a later move.
	Latch
)

// String returns "refuse", "move" or "latch".
func (k Kind) String() string {
	switch k {
	case Refuse:
		return "refuse"
	case Move:
		return "move"
	case Latch:
		return "latch"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Entry is what one event does in one state.
type Entry struct {
	// Kind is what the event does.
	Kind Kind
	// Next is the state after the event: the target of a Move, the unchanged
	// state of a Latch or a Refuse.
	Next   State
	reason string
}

// Reason is the declared reason for a refusal, or "" for a move or a latch.
func (e Entry) Reason() string { return e.reason }

// Latches is a set of events, one bit per [Event]: the evidence a lease has
// received early and keeps until a state accepts it.
type Latches uint32

// Has reports whether e is in the set.
func (l Latches) Has(e Event) bool { return e < NumEvents && l&(1<<e) != 0 }

// With returns the set plus e; an out-of-range e leaves the set as it is.
func (l Latches) With(e Event) Latches {
	if e >= NumEvents {
		return l
	}
	return l | 1<<e
}

// Without returns the set less e.
func (l Latches) Without(e Event) Latches {
	if e >= NumEvents {
		return l
	}
	return l &^ (1 << e)
}

// Slot is the per-lease machine: its state and the evidence it has latched, eight
// bytes with padding. The zero Slot is a waiting lease with nothing latched.
type Slot struct {
	State   State
	Latched Latches
}

// Step records one applied event.
type Step struct {
	From, To State
	Event    Event
	Kind     Kind
}

// RefusedError reports an event that the lifecycle declares refused in a state.
// Tables hand out shared instances: treat one as read-only.
type RefusedError struct {
	State  State
	Event  Event
	Reason string
}

// Error names the event, the state and the declared reason.
func (e *RefusedError) Error() string {
	return fmt.Sprintf("fsm: %s refused in state %s: %s", e.Event, e.State, e.Reason)
}

// ErrOutOfRange is wrapped by the error for a state or event outside the declared
// sets (a corrupted slot or a bad cast), which the table refuses without change.
var ErrOutOfRange = errors.New("fsm: state or event out of range")

// Table is the compiled lifecycle: for every (state, event) pair, one [Entry].
// A compiled table never changes, so any number of goroutines may read it.
type Table struct {
	entries [NumStates][NumEvents]Entry
	// refused holds one prebuilt error per refused pair, so that a refusal costs
	// no allocation either.
	refused [NumStates][NumEvents]RefusedError
}

var lifecycle = mustCompile(declaration)

// Lifecycle returns the table compiled from the declared lifecycle. It is built
// once, when the package is initialised.
func Lifecycle() *Table { return lifecycle }

// Lookup returns what e does in s. A state or event out of range reads as a
// refusal.
func (t *Table) Lookup(s State, e Event) Entry {
	if s >= NumStates || e >= NumEvents {
		return Entry{Kind: Refuse, Next: s, reason: "state or event out of range"}
	}
	return t.entries[s][e]
}

// Fire applies e to the lease in s. A Move changes the state and clears e's latch
// bit; a Latch sets the bit; a Refuse changes nothing and returns a
// *[RefusedError]. After a Move the caller drains [Table.Redeliver].
func (t *Table) Fire(s *Slot, e Event) (Step, error) {
	if s == nil {
		return Step{Event: e}, fmt.Errorf("fsm: Fire(%s) on a nil slot: %w", e, ErrOutOfRange)
	}
	if s.State >= NumStates || e >= NumEvents {
		return Step{From: s.State, To: s.State, Event: e}, fmt.Errorf("fsm: Fire(%s) in %s: want a state below %d and an event below %d: %w", e, s.State, NumStates, NumEvents, ErrOutOfRange)
	}
	from := s.State
	en := t.entries[from][e]
	switch en.Kind {
	case Move:
		s.State = en.Next
		s.Latched &^= 1 << e
	case Latch:
		s.Latched |= 1 << e
	default:
		return Step{From: from, To: from, Event: e, Kind: Refuse}, &t.refused[from][e]
	}
	return Step{From: from, To: s.State, Event: e, Kind: en.Kind}, nil
}

// Redeliver applies the lowest-numbered latched event that is a Move in the
// lease's current state, clearing its bit, and returns the step; ok is false when
// no latched event applies. The engine calls it in a loop after every Move.
func (t *Table) Redeliver(s *Slot) (step Step, ok bool) {
	if s == nil || s.State >= NumStates {
		return Step{}, false
	}
	row := &t.entries[s.State]
	for pending := uint32(s.Latched) & (1<<NumEvents - 1); pending != 0; pending &= pending - 1 {
		e := Event(bits.TrailingZeros32(pending))
		if row[e].Kind == Move {
			from := s.State
			s.State = row[e].Next
			s.Latched &^= 1 << e
			return Step{From: from, To: s.State, Event: e, Kind: Move}, true
		}
	}
	return Step{}, false
}

// Declaration returns the lifecycle's moves and latches as looplab/fsm event
// descriptions, in declaration order: a latch is a self-loop (Dst equals its
// only Src). Refusals are every pair it leaves out; [Table.Lookup] gives their
// reasons. The result is a fresh copy.
func Declaration() []looplab.EventDesc {
	var out []looplab.EventDesc
	for _, b := range declaration {
		for _, d := range b.edges {
			out = append(out, looplab.EventDesc{Name: d.Name, Src: slices.Clone(d.Src), Dst: d.Dst})
		}
	}
	return out
}

func mustCompile(decl []block) *Table {
	t, err := compile(decl)
	if err != nil {
		// The declaration is code, not input: a broken one must stop every test
		// and every binary at once rather than run an ambiguous lifecycle.
		panic(err)
	}
	return t
}

// compile builds the dense table, refusing a declaration that leaves any
// (state, event) pair undeclared, declares one twice, or names an unknown state
// or event.
func compile(decl []block) (*Table, error) {
	t := new(Table)
	var declared [NumStates][NumEvents]bool
	set := func(s State, e Event, en Entry) error {
		if declared[s][e] {
			return fmt.Errorf("fsm: (%s, %s) declared twice: every pair needs exactly one move, latch or refusal", s, e)
		}
		declared[s][e] = true
		t.entries[s][e] = en
		return nil
	}
	for _, b := range decl {
		if b.state >= NumStates {
			return nil, fmt.Errorf("fsm: block for %s: %w", b.state, ErrOutOfRange)
		}
		for _, d := range b.edges {
			e, err := ParseEvent(d.Name)
			if err != nil {
				return nil, err
			}
			dst, err := ParseState(d.Dst)
			if err != nil {
				return nil, err
			}
			if len(d.Src) == 0 {
				return nil, fmt.Errorf("fsm: %s into %s has no source state", e, dst)
			}
			for _, name := range d.Src {
				src, err := ParseState(name)
				if err != nil {
					return nil, err
				}
				if src != b.state {
					return nil, fmt.Errorf("fsm: %s from %s is declared in the block of %s: declare it with its source state", e, src, b.state)
				}
				en := Entry{Kind: Move, Next: dst}
				if src == dst {
					en.Kind = Latch
				}
				if err := set(src, e, en); err != nil {
					return nil, err
				}
			}
		}
		for _, r := range b.refusals {
			if r.reason == "" {
				return nil, fmt.Errorf("fsm: refusal in %s of %v has no reason", b.state, r.events)
			}
			for _, e := range r.events {
				if e >= NumEvents {
					return nil, fmt.Errorf("fsm: refusal in %s of %s: %w", b.state, e, ErrOutOfRange)
				}
				if err := set(b.state, e, Entry{Kind: Refuse, Next: b.state, reason: r.reason}); err != nil {
					return nil, err
				}
			}
		}
	}
	for s := range NumStates {
		for e := range NumEvents {
			if !declared[s][e] {
				return nil, fmt.Errorf("fsm: (%s, %s) is not declared: add a move, a latch or a refusal with its reason", s, e)
			}
			if en := t.entries[s][e]; en.Kind == Refuse {
				t.refused[s][e] = RefusedError{State: s, Event: e, Reason: en.reason}
			}
		}
	}
	return t, nil
}
