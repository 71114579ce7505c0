package fsm

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"
)

// describedState says what a state means and what may happen to its slots; the
// docs generator prints both.
type describedState struct {
	name, meaning, slots string
}

// String returns the state's snake_case name, as the diagrams and docs spell it.
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

// Slots says what may happen to the lease's staging slots in the state.
func (s State) Slots() string {
	if s < NumStates {
		return stateInfo[s].slots
	}
	return ""
}

// Terminal reports whether no event can move the lease out of the state.
func (s State) Terminal() bool {
	if s >= NumStates {
		return false
	}
	return lifecycle.terminal[s]
}

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

// String returns the guard's snake_case name, as the diagrams print it.
func (g Guard) String() string {
	if g < NumGuards {
		return guardInfo[g].name
	}
	return fmt.Sprintf("guard(%d)", uint8(g))
}

// Meaning says what the guard tests.
func (g Guard) Meaning() string {
	if g < NumGuards {
		return guardInfo[g].meaning
	}
	return ""
}

// String returns the effect's snake_case name, as the diagrams print it.
func (e Effect) String() string {
	if e < NumEffects {
		return effectInfo[e].name
	}
	return fmt.Sprintf("effect(%d)", uint8(e))
}

// Meaning says what the effect does.
func (e Effect) Meaning() string {
	if e < NumEffects {
		return effectInfo[e].meaning
	}
	return ""
}

// String returns the store's snake_case name, as the docs and traces print it.
func (s Store) String() string {
	if s < NumStores {
		return storeInfo[s].name
	}
	return fmt.Sprintf("store(%d)", uint8(s))
}

// Meaning says what the store keeps.
func (s Store) Meaning() string {
	if s < NumStores {
		return storeInfo[s].meaning
	}
	return ""
}

// Stores is a set of stores, one bit per [Store]. Performed in the order of
// the stores' values, before the step's effects.
type Stores uint16

// Has reports whether s is in the set.
func (f Stores) Has(s Store) bool { return s < NumStores && f&(1<<s) != 0 }

// With returns the set plus s; an out-of-range s leaves it as it is.
func (f Stores) With(s Store) Stores {
	if s >= NumStores {
		return f
	}
	return f | 1<<s
}

// List returns the stores in the order they are performed.
func (f Stores) List() []Store {
	var out []Store
	for s := range NumStores {
		if f.Has(s) {
			out = append(out, s)
		}
	}
	return out
}

// String joins the stores' names with ", ".
func (f Stores) String() string {
	var names []string
	for _, s := range f.List() {
		names = append(names, s.String())
	}
	return strings.Join(names, ", ")
}

// Needs returns the marks effect e needs: for a lease without all of them the
// effect is passed by (only an attempt is cancelled, asked about or
// forgotten).
func (e Effect) Needs() Marks {
	if e < NumEffects {
		return effectNeeds[e]
	}
	return 0
}

// String returns the mark's snake_case name.
func (m Mark) String() string {
	if m < NumMarks {
		return markInfo[m].name
	}
	return fmt.Sprintf("mark(%d)", uint8(m))
}

// Meaning says what having the mark means.
func (m Mark) Meaning() string {
	if m < NumMarks {
		return markInfo[m].meaning
	}
	return ""
}

// Effects is a set of effects, one bit per [Effect]. Performed in the order of
// the effects' values.
type Effects uint32

// Has reports whether e is in the set.
func (f Effects) Has(e Effect) bool { return e < NumEffects && f&(1<<e) != 0 }

// With returns the set plus e; an out-of-range e leaves it as it is.
func (f Effects) With(e Effect) Effects {
	if e >= NumEffects {
		return f
	}
	return f | 1<<e
}

// List returns the effects in the order they are performed.
func (f Effects) List() []Effect {
	var out []Effect
	for e := range NumEffects {
		if f.Has(e) {
			out = append(out, e)
		}
	}
	return out
}

// String joins the effects' names with ", ".
func (f Effects) String() string {
	var names []string
	for _, e := range f.List() {
		names = append(names, e.String())
	}
	return strings.Join(names, ", ")
}

// Marks is a set of marks, one bit per [Mark]. A lease's marks only grow.
type Marks uint8

// Has reports whether m is in the set.
func (s Marks) Has(m Mark) bool { return m < NumMarks && s&(1<<m) != 0 }

// With returns the set plus m.
func (s Marks) With(m Mark) Marks {
	if m >= NumMarks {
		return s
	}
	return s | 1<<m
}

// List returns the marks in order.
func (s Marks) List() []Mark {
	var out []Mark
	for m := range NumMarks {
		if s.Has(m) {
			out = append(out, m)
		}
	}
	return out
}

// String returns the result's name: served, partial, missed, failed,
// cancelled, rejected, timeout, violation, or none.
func (r Result) String() string {
	if r < NumResults {
		return resultNames[r]
	}
	return fmt.Sprintf("result(%d)", uint8(r))
}

// Failure reports whether the result is a failure of the request: failed,
// cancelled, rejected, timed out or a violation. A miss is not a failure.
func (r Result) Failure() bool {
	switch r {
	case Failure, Cancel, Rejection, Timeout, Violation:
		return true
	}
	return false
}

// ParseState returns the state named name (snake_case, as [State.String] spells it).
func ParseState(name string) (State, error) {
	for s := range NumStates {
		if stateInfo[s].name == name {
			return s, nil
		}
	}
	all := make([]string, NumStates)
	for s := range NumStates {
		all[s] = s.String()
	}
	return 0, fmt.Errorf("fsm: unknown state %q: want one of %s", name, strings.Join(all, ", "))
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

// Action is what an event does in a state: refuse it, move the lease, or
// latch the evidence for a later state. (A lease's Kind — fetch or publish —
// is package readiness's: one meaning per type name.)
type Action uint8

const (
	// Refuse changes nothing; the entry carries the declared reason.
	Refuse Action = iota
	// Move changes the lease's state to the entry's Next.
	Move
	// Latch records the event in the lease's [Latches]; [Table.Redeliver]
	// fires it again after a later move.
	Latch
)

// String returns "refuse", "move" or "latch".
func (k Action) String() string {
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
	// Action is what the event does.
	Action Action
	// Next is the state after the event: the target of a Move, the unchanged
	// state of a Latch or a Refuse.
	Next State
	// Result is the outcome a Move latches for the lease (NoResult: the
	// latched outcome does not change).
	Result Result
	// Marks are the marks a Move gives the lease (beside those of the state
	// it enters).
	Marks Marks
	// Keep is set on a Move that also keeps its event latched for a later
	// state (engine shutdown cancels a pending lease and is kept until the
	// lease can be released).
	Keep bool
	// Effects are what keeping a Latch does, or what a Move does besides the
	// effects of the state it enters ([Table.OnEntry], [Table.AtRest]).
	Effects Effects
	// Stores are what an accepted Move or Latch takes from its evidence and
	// keeps on the lease, before any effect.
	Stores Stores
	why    string
}

// Reason is the declared reason of a refusal, or what a latch means; "" for a
// move.
func (e Entry) Reason() string { return e.why }

// Completion is a guarded move a state takes the moment a lease enters it,
// after its entry effects and before its rest effects, when its guard holds
// (UML's completion transition). A state's completions are tried in
// declaration order.
type Completion struct {
	Guard  Guard
	Next   State
	Result Result
	Marks  Marks
}

// Facts is the set of guards that hold for a lease, one bit per [Guard].
type Facts uint8

// Has reports whether g holds.
func (f Facts) Has(g Guard) bool { return g < NumGuards && f&(1<<g) != 0 }

// With returns the set plus g.
func (f Facts) With(g Guard) Facts {
	if g >= NumGuards {
		return f
	}
	return f | 1<<g
}

// Latches is a set of events, one bit per [Event]: the evidence a lease
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

// Slot is the per-lease machine: its state, its marks and the evidence it has
// latched, eight bytes with padding. The zero Slot is a waiting lease with
// nothing marked or latched.
type Slot struct {
	State   State
	Marks   Marks
	Latched Latches
}

// Step records one applied move or latch.
type Step struct {
	From, To State
	// Event caused the step, unless Completion is set.
	Event Event
	// Completion is set when a guarded completion moved the lease; Guard is
	// the guard that held.
	Completion bool
	Guard      Guard
	Action     Action
	// Result is the outcome the move latched (NoResult: unchanged).
	Result Result
	// Effects are what the step does: a latch's effects, or the entered
	// state's entry effects for a move (its rest effects are separate:
	// [Table.AtRest], performed only where the lease comes to rest).
	Effects Effects
	// Stores are what the step takes from its evidence: set only on the step
	// [Table.Fire] made; a completion or a re-delivered latch has no evidence
	// to take anything from.
	Stores Stores
}

// Cause names what caused the step: its event, or its guard in brackets.
func (s Step) Cause() string {
	if s.Completion {
		return "[" + s.Guard.String() + "]"
	}
	return s.Event.String()
}

// RefusedError reports an event that the lifecycle declares refused in a
// state. Tables hand out shared instances: treat one as read-only.
type RefusedError struct {
	State  State
	Event  Event
	Reason string
}

// Error names the event, the state and the declared reason.
func (e *RefusedError) Error() string {
	return fmt.Sprintf("fsm: %s refused in state %s: %s", e.Event, e.State, e.Reason)
}

// ErrOutOfRange is wrapped by the error for a state or event outside the
// declared sets (a corrupted slot or a bad cast), which the table refuses
// without change.
var ErrOutOfRange = errors.New("fsm: state or event out of range")

// Table is the compiled lifecycle: for every (state, event) pair one [Entry],
// and for every state its completions. A compiled table never changes, so any
// number of goroutines may read it.
type Table struct {
	entries     [NumStates][NumEvents]Entry
	completions [NumStates][]Completion
	entry, rest [NumStates]Effects
	marks       [NumStates]Marks
	// refused holds one prebuilt error per refused pair, so that a refusal
	// costs no allocation either.
	refused  [NumStates][NumEvents]RefusedError
	terminal [NumStates]bool
	groups   groups
}

var lifecycle = mustCompile(declaration)

// Lifecycle returns the table compiled from the declared lifecycle. It is built
// once, when the package is initialised.
func Lifecycle() *Table { return lifecycle }

// Lookup returns what e does in s. A state or event out of range reads as a
// refusal.
func (t *Table) Lookup(s State, e Event) Entry {
	if s >= NumStates || e >= NumEvents {
		return Entry{Action: Refuse, Next: s, why: "state or event out of range"}
	}
	return t.entries[s][e]
}

// Completions returns s's completion moves in the order they are tried. The
// slice is shared: do not modify it.
func (t *Table) Completions(s State) []Completion {
	if s >= NumStates {
		return nil
	}
	return t.completions[s]
}

// OnEntry returns what entering s does, whether or not the lease comes to
// rest there (a completion may move it on at once).
func (t *Table) OnEntry(s State) Effects {
	if s >= NumStates {
		return 0
	}
	return t.entry[s]
}

// AtRest returns what a lease that comes to rest in s does: the work the
// state asks for, which a lease only passing through never starts.
func (t *Table) AtRest(s State) Effects {
	if s >= NumStates {
		return 0
	}
	return t.rest[s]
}

// MarksOf returns the marks entering s gives a lease.
func (t *Table) MarksOf(s State) Marks {
	if s >= NumStates {
		return 0
	}
	return t.marks[s]
}

// Refusal returns the prebuilt error for a refused pair, nil for a move or a
// latch (or a pair out of range, which [Table.Fire] reports).
func (t *Table) Refusal(s State, e Event) error {
	if s >= NumStates || e >= NumEvents || t.entries[s][e].Action != Refuse {
		return nil
	}
	return &t.refused[s][e]
}

// Fire applies e to the lease in s. A Move changes the state, adds the move's
// and the entered state's marks and clears e's latch bit (unless the move
// keeps it); a Latch sets the bit; a Refuse changes nothing and returns a
// *[RefusedError]. After a Move the caller settles the lease: [Table.Complete],
// then [Table.Redeliver], until neither applies.
func (t *Table) Fire(s *Slot, e Event) (Step, error) {
	var step Step
	err := t.FireTo(s, e, &step)
	return step, err
}

// FireTo is [Table.Fire] writing the step into *step (which must not be nil)
// instead of returning it. A step and an error together are too wide for the
// registers Go returns values in: returned, the step is written to the stack
// field by field and read back whole, a stall a hot caller pays on every
// event (the core's door, several times a lease).
func (t *Table) FireTo(s *Slot, e Event, step *Step) error {
	if s == nil {
		*step = Step{Event: e}
		return fmt.Errorf("fsm: Fire(%s) on a nil slot: %w", e, ErrOutOfRange)
	}
	if s.State >= NumStates || e >= NumEvents {
		*step = Step{From: s.State, To: s.State, Event: e}
		return fmt.Errorf("fsm: Fire(%s) in %s: want a state below %d and an event below %d: %w", e, s.State, NumStates, NumEvents, ErrOutOfRange)
	}
	from := s.State
	en := &t.entries[from][e]
	switch en.Action {
	case Move:
		s.State = en.Next
		s.Marks |= en.Marks | t.marks[en.Next]
		if en.Keep {
			s.Latched |= 1 << e
		} else {
			s.Latched &^= 1 << e
		}
		step.set(from, s.State, e, Move, en.Result, en.Effects|t.entry[en.Next], en.Stores)
		return nil
	case Latch:
		s.Latched |= 1 << e
		step.set(from, from, e, Latch, NoResult, en.Effects, en.Stores)
		return nil
	}
	step.set(from, from, e, Refuse, NoResult, 0, 0)
	return &t.refused[from][e]
}

// set writes a fired step field by field: a composite literal is built on the
// stack and copied whole, a wide load of narrow stores that the processor
// cannot forward.
func (st *Step) set(from, to State, e Event, a Action, r Result, fx Effects, stores Stores) {
	st.From, st.To, st.Event, st.Completion, st.Guard = from, to, e, false, 0
	st.Action, st.Result, st.Effects, st.Stores = a, r, fx, stores
}

// Complete applies the first completion of the lease's state whose guard is in
// facts and returns the step; ok is false when none holds.
func (t *Table) Complete(s *Slot, facts Facts) (step Step, ok bool) {
	ok = t.CompleteTo(s, facts, &step)
	return step, ok
}

// CompleteTo is [Table.Complete] writing the step into *step (which must not
// be nil), as [Table.FireTo] does; where no completion holds it reports false
// and leaves *step as it was.
func (t *Table) CompleteTo(s *Slot, facts Facts, step *Step) bool {
	if s == nil || s.State >= NumStates {
		return false
	}
	for _, c := range t.completions[s.State] {
		if facts&(1<<c.Guard) != 0 {
			from := s.State
			s.State = c.Next
			s.Marks |= c.Marks | t.marks[c.Next]
			step.set(from, c.Next, 0, Move, c.Result, t.entry[c.Next], 0)
			step.Completion, step.Guard = true, c.Guard
			return true
		}
	}
	return false
}

// Redeliver applies the lowest-numbered latched event that is a Move in the
// lease's current state, clearing its bit, and returns the step; ok is false
// when no latched event applies.
func (t *Table) Redeliver(s *Slot) (step Step, ok bool) {
	ok = t.RedeliverTo(s, &step)
	return step, ok
}

// RedeliverTo is [Table.Redeliver] writing the step into *step (which must not
// be nil), as [Table.FireTo] does; where no latched event applies it reports
// false and leaves *step as it was.
func (t *Table) RedeliverTo(s *Slot, step *Step) bool {
	if s == nil || s.State >= NumStates {
		return false
	}
	row := &t.entries[s.State]
	for pending := uint32(s.Latched) & (1<<NumEvents - 1); pending != 0; pending &= pending - 1 {
		e := Event(bits.TrailingZeros32(pending))
		if en := &row[e]; en.Action == Move {
			from := s.State
			s.State = en.Next
			s.Marks |= en.Marks | t.marks[en.Next]
			if !en.Keep {
				s.Latched &^= 1 << e
			}
			step.set(from, s.State, e, Move, en.Result, en.Effects|t.entry[en.Next], 0)
			return true
		}
	}
	return false
}

// CompletionName is how drawings and traces name the completion guarded by g:
// the guard in brackets.
func CompletionName(g Guard) string { return "[" + g.String() + "]" }

// The declaration's building blocks.

// block is everything declared about one state.
type block struct {
	state       State
	entry, rest Effects
	marks       Marks
	completions []completion
	moves       []move
	latches     []latch
	refusals    []refusal
}

func effects(es ...Effect) Effects {
	var f Effects
	for _, e := range es {
		f |= 1 << e
	}
	return f
}

func marks(ms ...Mark) Marks {
	var s Marks
	for _, m := range ms {
		s |= 1 << m
	}
	return s
}

type move struct {
	event   Event
	to      State
	result  Result
	marks   Marks
	keep    bool
	effects Effects
	stores  Stores
}

func on(e Event, to State) move { return move{event: e, to: to} }

// latching declares the outcome the move latches.
func (m move) latching(r Result) move { m.result = r; return m }

// marking declares marks the move gives the lease.
func (m move) marking(ms ...Mark) move { m.marks |= marks(ms...); return m }

// keeping declares that the move keeps its event latched for a later state.
func (m move) keeping() move { m.keep = true; return m }

// doing declares what the move does besides the entered state's effects.
func (m move) doing(es ...Effect) move { m.effects |= effects(es...); return m }

// storing declares what the move takes from its evidence.
func (m move) storing(ss ...Store) move { m.stores |= stores(ss...); return m }

func stores(ss ...Store) Stores {
	var f Stores
	for _, s := range ss {
		f |= 1 << s
	}
	return f
}

type completion struct {
	guard  Guard
	to     State
	result Result
	marks  Marks
}

func when(g Guard, to State) completion { return completion{guard: g, to: to} }

func (c completion) latching(r Result) completion { c.result = r; return c }

// latch declares events that are recorded in a state and re-delivered after a
// later move; meaning says what keeping them means there.
type latch struct {
	meaning string
	events  []Event
	effects Effects
	stores  Stores
}

func keep(meaning string, events ...Event) latch { return latch{meaning: meaning, events: events} }

// doing declares what keeping the latch does.
func (l latch) doing(es ...Effect) latch { l.effects |= effects(es...); return l }

// storing declares what the latch takes from its evidence.
func (l latch) storing(ss ...Store) latch { l.stores |= stores(ss...); return l }

// refusal declares that events change nothing in a state, and why.
type refusal struct {
	reason string
	events []Event
}

func refuse(reason string, events ...Event) refusal { return refusal{reason: reason, events: events} }

// allBut returns every event except those listed.
func allBut(except ...Event) []Event {
	var out []Event
	for e := range NumEvents {
		skip := false
		for _, x := range except {
			skip = skip || x == e
		}
		if !skip {
			out = append(out, e)
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
// (state, event) pair undeclared, declares one twice, declares a state twice,
// names an unknown state, event or guard, gives a refusal or latch no reason,
// or declares a move, latch or completion that does not behave as one.
func compile(decl []block) (*Table, error) {
	t := new(Table)
	var declared [NumStates][NumEvents]bool
	var seen [NumStates]bool
	set := func(s State, e Event, en Entry) error {
		if e >= NumEvents {
			return fmt.Errorf("fsm: %s in %s: %w", e, s, ErrOutOfRange)
		}
		if declared[s][e] {
			return fmt.Errorf("fsm: (%s, %s) declared twice: every pair needs exactly one move, latch or refusal", s, e)
		}
		declared[s][e] = true
		t.entries[s][e] = en
		return nil
	}
	for _, b := range decl {
		s := b.state
		if s >= NumStates {
			return nil, fmt.Errorf("fsm: block for %s: %w", s, ErrOutOfRange)
		}
		if seen[s] {
			return nil, fmt.Errorf("fsm: state %s declared in two blocks", s)
		}
		seen[s] = true
		if b.entry >= 1<<NumEffects || b.rest >= 1<<NumEffects || b.marks >= 1<<NumMarks {
			return nil, fmt.Errorf("fsm: effects or marks of %s: %w", s, ErrOutOfRange)
		}
		t.entry[s], t.rest[s], t.marks[s] = b.entry, b.rest, b.marks
		for _, c := range b.completions {
			if c.guard >= NumGuards || c.to >= NumStates || c.result >= NumResults {
				return nil, fmt.Errorf("fsm: completion of %s: %w", s, ErrOutOfRange)
			}
			if c.to == s {
				return nil, fmt.Errorf("fsm: completion [%s] of %s loops to itself; a completion must move", c.guard, s)
			}
			t.completions[s] = append(t.completions[s], Completion{Guard: c.guard, Next: c.to, Result: c.result, Marks: c.marks})
		}
		for _, m := range b.moves {
			if m.to >= NumStates || m.result >= NumResults {
				return nil, fmt.Errorf("fsm: move of %s on %s: %w", s, m.event, ErrOutOfRange)
			}
			if m.to == s {
				return nil, fmt.Errorf("fsm: (%s, %s) moves to itself; declare it as a latch", s, m.event)
			}
			if m.marks >= 1<<NumMarks {
				return nil, fmt.Errorf("fsm: marks of (%s, %s): %w", s, m.event, ErrOutOfRange)
			}
			if m.effects >= 1<<NumEffects {
				return nil, fmt.Errorf("fsm: effects of (%s, %s): %w", s, m.event, ErrOutOfRange)
			}
			if m.stores >= 1<<NumStores {
				return nil, fmt.Errorf("fsm: stores of (%s, %s): %w", s, m.event, ErrOutOfRange)
			}
			if m.stores.Has(StoreByPeer) && m.result == NoResult {
				return nil, fmt.Errorf("fsm: (%s, %s) stores by_peer but latches no result: by_peer goes with a result", s, m.event)
			}
			if err := set(s, m.event, Entry{Action: Move, Next: m.to, Result: m.result, Marks: m.marks, Keep: m.keep, Effects: m.effects, Stores: m.stores}); err != nil {
				return nil, err
			}
		}
		for _, l := range b.latches {
			if l.meaning == "" {
				return nil, fmt.Errorf("fsm: latch in %s of %v says nothing about what keeping them means", s, l.events)
			}
			if l.effects >= 1<<NumEffects || l.stores >= 1<<NumStores {
				return nil, fmt.Errorf("fsm: effects or stores of the latch in %s of %v: %w", s, l.events, ErrOutOfRange)
			}
			if l.stores.Has(StoreByPeer) || l.stores.Has(StoreFirst) {
				return nil, fmt.Errorf("fsm: the latch in %s of %v stores an answer: an answer is stored only with the result it latches", s, l.events)
			}
			for _, e := range l.events {
				if err := set(s, e, Entry{Action: Latch, Next: s, why: l.meaning, Effects: l.effects, Stores: l.stores}); err != nil {
					return nil, err
				}
			}
		}
		for _, r := range b.refusals {
			if r.reason == "" {
				return nil, fmt.Errorf("fsm: refusal in %s of %v has no reason", s, r.events)
			}
			for _, e := range r.events {
				if err := set(s, e, Entry{Action: Refuse, Next: s, why: r.reason}); err != nil {
					return nil, err
				}
			}
		}
	}
	for s := range NumStates {
		for e := range NumEvents {
			if en := t.entries[s][e]; en.Action == Move && en.Keep && t.entries[en.Next][e].Action == Refuse {
				return nil, fmt.Errorf("fsm: (%s, %s) keeps its event latched, but %s refuses it: keep it only for a state that latches or moves on it", s, e, en.Next)
			}
		}
	}
	for s := range NumStates {
		terminal := len(t.completions[s]) == 0
		for e := range NumEvents {
			if !declared[s][e] {
				return nil, fmt.Errorf("fsm: (%s, %s) is not declared: add a move, a latch or a refusal with its reason", s, e)
			}
			en := t.entries[s][e]
			if en.Action == Refuse {
				t.refused[s][e] = RefusedError{State: s, Event: e, Reason: en.why}
			}
			if en.Action == Move {
				terminal = false
			}
		}
		t.terminal[s] = terminal
	}
	t.groups = deriveGroups(t)
	return t, nil
}
