package fsm

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"

	looplab "github.com/looplab/fsm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCompleteness enumerates every (state, event) pair: each is a move to
// another state, a latch that keeps the state, or a refusal with a reason, and
// moves and latches are exactly the pairs the looplab declaration lists.
func TestCompleteness(t *testing.T) {
	tab := Lifecycle()
	inDecl := map[[2]string]string{}
	for _, d := range Declaration() {
		for _, src := range d.Src {
			key := [2]string{src, d.Name}
			_, dup := inDecl[key]
			require.False(t, dup, "(%s, %s) appears twice in the looplab declaration", src, d.Name)
			inDecl[key] = d.Dst
		}
	}
	counts := map[Kind]int{}
	for s := range NumStates {
		for e := range NumEvents {
			en := tab.Lookup(s, e)
			counts[en.Kind]++
			dst, declared := inDecl[[2]string{s.String(), e.String()}]
			switch en.Kind {
			case Move:
				assert.NotEqual(t, s, en.Next, "(%s, %s): a move must change the state", s, e)
				assert.Less(t, en.Next, NumStates, "(%s, %s)", s, e)
				assert.Empty(t, en.Reason(), "(%s, %s)", s, e)
				assert.True(t, declared, "(%s, %s) moves but is not in the declaration", s, e)
				assert.Equal(t, en.Next.String(), dst, "(%s, %s)", s, e)
			case Latch:
				assert.Equal(t, s, en.Next, "(%s, %s): a latch keeps the state", s, e)
				assert.Empty(t, en.Reason(), "(%s, %s)", s, e)
				assert.True(t, declared, "(%s, %s) latches but is not in the declaration", s, e)
				assert.Equal(t, s.String(), dst, "(%s, %s): a latch is a self-loop", s, e)
			case Refuse:
				assert.Equal(t, s, en.Next, "(%s, %s): a refusal keeps the state", s, e)
				assert.NotEmpty(t, en.Reason(), "(%s, %s) is refused without a reason", s, e)
				assert.False(t, declared, "(%s, %s) is refused but the declaration lists it", s, e)
			default:
				t.Errorf("(%s, %s) has kind %s", s, e, en.Kind)
			}
		}
	}
	assert.Equal(t, int(NumStates)*int(NumEvents), counts[Move]+counts[Latch]+counts[Refuse])
	assert.Equal(t, len(inDecl), counts[Move]+counts[Latch])
}

// TestDeclaredPairs pins the pairs the safety rules hang on, so that an edit to
// the declaration that changes one of them is a visible, reviewed test change.
func TestDeclaredPairs(t *testing.T) {
	tests := []struct {
		s      State
		e      Event
		kind   Kind
		next   State
		reason string // substring of the refusal reason
	}{
		{Waiting, SlotsGranted, Move, Granted, ""},
		{Waiting, ReleaseRequested, Move, Released, ""},
		{Waiting, Withdrawn, Move, Released, ""},
		{Waiting, AccessProven, Refuse, Waiting, "nothing exposed"},
		{Granted, CopiesLanded, Move, Staged, ""},
		{Granted, CopyFailed, Move, Quarantined, ""},
		{Granted, ReleaseRequested, Latch, Granted, ""},
		{Granted, Withdrawn, Latch, Granted, ""},
		{Staged, Submitted, Move, Requested, ""},
		{Staged, Rejected, Move, Failed, ""},
		{Staged, Withdrawn, Move, AccessFenced, ""},
		{Staged, AccessProven, Refuse, Staged, "nothing exposed"},
		{Requested, OutcomeServed, Move, Served, ""},
		{Requested, OutcomePartial, Move, Partial, ""},
		{Requested, OutcomeMissed, Move, Missed, ""},
		{Requested, OutcomeFailed, Move, Failed, ""},
		{Requested, OutcomeCancelled, Move, Failed, ""},
		{Requested, ContractViolation, Move, Failed, ""},
		{Requested, Deadline, Move, Failed, ""},
		{Requested, AccessUnproven, Move, Quarantined, ""},
		{Requested, DrainExpired, Move, Quarantined, ""},
		{Requested, AccessProven, Latch, Requested, ""},
		{Requested, ReleaseRequested, Latch, Requested, ""},
		{Requested, Close, Latch, Requested, ""},
		{Requested, CopiesLanded, Refuse, Requested, "no local copy in flight before the outcome"},
		{Requested, Withdrawn, Refuse, Requested, "cannot be withdrawn"},
		{Served, CopiesLanded, Move, LogicallyComplete, ""},
		{Served, ContractViolation, Move, Failed, ""},
		{Served, OutcomeMissed, Refuse, Served, "outcome already latched"},
		{Partial, DeviceLost, Move, Quarantined, ""},
		{Missed, ContractViolation, Refuse, Missed, "a latched miss stays a miss"},
		{Missed, OutcomeFailed, Refuse, Missed, "outcome already latched"},
		{Missed, Deadline, Refuse, Missed, "outcome already latched"},
		{Missed, CopiesLanded, Move, LogicallyComplete, ""},
		{Failed, OutcomeMissed, Refuse, Failed, "already latched as failed"},
		{Failed, AccessProven, Latch, Failed, ""},
		{LogicallyComplete, AccessProven, Move, AccessFenced, ""},
		{LogicallyComplete, ReleaseRequested, Latch, LogicallyComplete, ""},
		{AccessFenced, ReleaseRequested, Move, Released, ""},
		{AccessFenced, Close, Move, Released, ""},
		{AccessFenced, AccessUnproven, Refuse, AccessFenced, "fence stands"},
		{Quarantined, AccessProven, Refuse, Quarantined, "never return"},
		{Quarantined, ReleaseRequested, Refuse, Quarantined, "never return"},
		{Released, ReleaseRequested, Refuse, Released, "handle is stale"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%s", tt.s, tt.e), func(t *testing.T) {
			en := Lifecycle().Lookup(tt.s, tt.e)
			assert.Equal(t, tt.kind, en.Kind)
			assert.Equal(t, tt.next, en.Next)
			if tt.kind == Refuse {
				assert.Contains(t, en.Reason(), tt.reason)
			}
		})
	}
}

func TestCompileRefusesBadDeclarations(t *testing.T) {
	// full returns a copy of the real declaration that edit may change.
	full := func(edit func([]block) []block) []block {
		c := make([]block, len(declaration))
		for i, b := range declaration {
			c[i] = block{state: b.state, edges: slices.Clone(b.edges), refusals: slices.Clone(b.refusals)}
		}
		return edit(c)
	}
	tests := []struct {
		name string
		decl []block
		want string
	}{
		{"missing pair", full(func(d []block) []block {
			d[Released].refusals = []refusal{refuse(whyReleased, everyEvent()[1:]...)}
			return d
		}), "(released, slots_granted) is not declared"},
		{"pair declared twice", full(func(d []block) []block {
			d[Waiting].refusals = append(d[Waiting].refusals, refuse("again", SlotsGranted))
			return d
		}), "(waiting, slots_granted) declared twice"},
		{"latch and refusal of one pair", full(func(d []block) []block {
			d[Requested].refusals = append(d[Requested].refusals, refuse("no", AccessProven))
			return d
		}), "(requested, access_proven) declared twice"},
		{"unknown event name", full(func(d []block) []block {
			d[Waiting].edges = append(d[Waiting].edges, looplab.EventDesc{Name: "slot_granted", Src: []string{"waiting"}, Dst: "granted"})
			return d
		}), `unknown event "slot_granted"`},
		{"unknown state name", full(func(d []block) []block {
			d[Waiting].edges = append(d[Waiting].edges, looplab.EventDesc{Name: "close", Src: []string{"waiting"}, Dst: "gone"})
			return d
		}), `unknown state "gone"`},
		{"edge in another state's block", full(func(d []block) []block {
			d[Waiting].edges = append(d[Waiting].edges, move(Granted, SlotsGranted, Staged)...)
			return d
		}), "declared in the block of waiting"},
		{"refusal without reason", full(func(d []block) []block {
			d[Released].refusals = []refusal{refuse("", everyEvent()...)}
			return d
		}), "has no reason"},
		{"no source", full(func(d []block) []block {
			d[Waiting].edges = append(d[Waiting].edges, looplab.EventDesc{Name: "close", Dst: "released"})
			return d
		}), "no source state"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab, err := compile(tt.decl)
			require.Error(t, err)
			assert.Nil(t, tab)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	// The unedited copy compiles to the same table, so the edits above are what
	// the errors are about.
	tab, err := compile(full(func(d []block) []block { return d }))
	require.NoError(t, err)
	assert.Equal(t, Lifecycle().entries, tab.entries)
}

func TestFire(t *testing.T) {
	tab := Lifecycle()
	t.Run("move", func(t *testing.T) {
		s := Slot{State: Requested, Latched: Latches(0).With(OutcomeServed).With(Close)}
		step, err := tab.Fire(&s, OutcomeServed)
		require.NoError(t, err)
		assert.Equal(t, Step{From: Requested, To: Served, Event: OutcomeServed, Kind: Move}, step)
		assert.Equal(t, Served, s.State)
		assert.False(t, s.Latched.Has(OutcomeServed), "a move clears its own latch bit")
		assert.True(t, s.Latched.Has(Close), "other latches stay")
	})
	t.Run("latch", func(t *testing.T) {
		s := Slot{State: Requested}
		step, err := tab.Fire(&s, AccessProven)
		require.NoError(t, err)
		assert.Equal(t, Step{From: Requested, To: Requested, Event: AccessProven, Kind: Latch}, step)
		assert.Equal(t, Slot{State: Requested, Latched: Latches(0).With(AccessProven)}, s)
		_, err = tab.Fire(&s, AccessProven)
		require.NoError(t, err, "latching twice is idempotent")
		assert.Equal(t, Slot{State: Requested, Latched: Latches(0).With(AccessProven)}, s)
	})
	t.Run("refuse changes nothing", func(t *testing.T) {
		s := Slot{State: Missed, Latched: Latches(0).With(ReleaseRequested)}
		before := s
		step, err := tab.Fire(&s, ContractViolation)
		var re *RefusedError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, RefusedError{State: Missed, Event: ContractViolation, Reason: whyMissStays}, *re)
		assert.Equal(t, "fsm: contract_violation refused in state missed: "+whyMissStays, err.Error())
		assert.Equal(t, Step{From: Missed, To: Missed, Event: ContractViolation, Kind: Refuse}, step)
		assert.Equal(t, before, s)
	})
	t.Run("out of range changes nothing", func(t *testing.T) {
		for _, c := range []struct {
			s Slot
			e Event
		}{{Slot{State: NumStates}, Close}, {Slot{State: Waiting}, NumEvents}, {Slot{State: 200}, 250}} {
			s := c.s
			_, err := tab.Fire(&s, c.e)
			require.ErrorIs(t, err, ErrOutOfRange)
			assert.Equal(t, c.s, s)
			_, ok := tab.Redeliver(&s)
			assert.False(t, ok)
		}
		_, err := tab.Fire(nil, Close)
		require.ErrorIs(t, err, ErrOutOfRange)
		_, ok := tab.Redeliver(nil)
		assert.False(t, ok)
		assert.Equal(t, Refuse, tab.Lookup(NumStates, Close).Kind)
		assert.NotEmpty(t, tab.Lookup(Waiting, NumEvents).Reason())
	})
}

// drive fires e and then drains redelivery, as the engine does.
func drive(tab *Table, s *Slot, e Event) ([]Step, error) {
	step, err := tab.Fire(s, e)
	if err != nil {
		return nil, err
	}
	steps := []Step{step}
	if step.Kind != Move {
		return steps, nil
	}
	for {
		st, ok := tab.Redeliver(s)
		if !ok {
			return steps, nil
		}
		steps = append(steps, st)
	}
}

func TestRedeliver(t *testing.T) {
	tests := []struct {
		name   string
		events []Event
		want   State
		latch  Latches
	}{
		{"access proof before the outcome waits for copies",
			[]Event{SlotsGranted, CopiesLanded, Submitted, AccessProven, OutcomeServed}, Served, Latches(0).With(AccessProven)},
		{"latched proof and release fire in event order after the copies",
			[]Event{SlotsGranted, CopiesLanded, Submitted, ReleaseRequested, AccessProven, OutcomeServed, CopiesLanded}, Released, 0},
		{"a rejection with its proof fences once the copies are in",
			[]Event{SlotsGranted, CopiesLanded, Rejected, AccessProven, CopiesLanded}, AccessFenced, 0},
		{"withdrawn while a publish copy is in flight fences after it lands",
			[]Event{SlotsGranted, Withdrawn, CopiesLanded}, AccessFenced, 0},
		{"withdrawn and released before the copy lands",
			[]Event{SlotsGranted, Close, Withdrawn, CopiesLanded}, Released, 0},
		{"a copy that fails quarantines whatever was latched",
			[]Event{SlotsGranted, ReleaseRequested, CopyFailed}, Quarantined, Latches(0).With(ReleaseRequested)},
		{"a deadline never releases",
			[]Event{SlotsGranted, CopiesLanded, Submitted, ReleaseRequested, Deadline, CopiesLanded}, LogicallyComplete, Latches(0).With(ReleaseRequested)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s Slot
			for _, e := range tt.events {
				_, err := drive(Lifecycle(), &s, e)
				require.NoError(t, err, "%s in %s", e, s.State)
			}
			assert.Equal(t, tt.want, s.State)
			assert.Equal(t, tt.latch, s.Latched)
		})
	}
}

func TestRedeliverOrder(t *testing.T) {
	// Both latched events move logically_complete; the lower-numbered one wins
	// and the other stays latched for the next state.
	s := Slot{State: LogicallyComplete, Latched: Latches(0).With(AccessUnproven).With(AccessProven)}
	step, ok := Lifecycle().Redeliver(&s)
	require.True(t, ok)
	assert.Equal(t, Step{From: LogicallyComplete, To: AccessFenced, Event: AccessProven, Kind: Move}, step)
	assert.Equal(t, Latches(0).With(AccessUnproven), s.Latched)
	_, ok = Lifecycle().Redeliver(&s)
	assert.False(t, ok, "access_unproven is refused once fenced")
}

func TestZeroAllocations(t *testing.T) {
	tab := Lifecycle()
	cycle := []Event{SlotsGranted, CopiesLanded, Submitted, AccessProven, OutcomeServed, CopiesLanded, ReleaseRequested, Close}
	allocs := testing.AllocsPerRun(100, func() {
		var s Slot
		for _, e := range cycle {
			if st, _ := tab.Fire(&s, e); st.Kind == Move {
				for {
					if _, ok := tab.Redeliver(&s); !ok {
						break
					}
				}
			}
		}
		if s.State != Released {
			panic("cycle did not release: " + s.State.String())
		}
	})
	assert.Zero(t, allocs)
}

func TestNames(t *testing.T) {
	seen := map[string]bool{}
	for s := range NumStates {
		name := s.String()
		assert.Regexp(t, `^[a-z]+(_[a-z]+)*$`, name, "state names are snake_case Mermaid identifiers")
		assert.NotEmpty(t, s.Meaning())
		assert.NotEmpty(t, s.Slots())
		got, err := ParseState(name)
		require.NoError(t, err)
		assert.Equal(t, s, got)
		assert.False(t, seen[name])
		seen[name] = true
	}
	for e := range NumEvents {
		name := e.String()
		assert.Regexp(t, `^[a-z]+(_[a-z]+)*$`, name)
		assert.NotEmpty(t, e.Meaning())
		got, err := ParseEvent(name)
		require.NoError(t, err)
		assert.Equal(t, e, got)
		assert.False(t, seen[name], "event %s shares a name with a state or event", name)
		seen[name] = true
	}
	assert.Equal(t, "state(12)", NumStates.String())
	assert.Equal(t, "event(19)", NumEvents.String())
	assert.Equal(t, "kind(3)", Kind(3).String())
	assert.Empty(t, NumStates.Meaning()+NumStates.Slots()+NumEvents.Meaning())
	_, err := ParseState("access-fenced")
	assert.ErrorContains(t, err, `unknown state "access-fenced"`)
	_, err = ParseEvent("Close")
	assert.ErrorContains(t, err, `unknown event "Close"`)
	assert.LessOrEqual(t, int(NumEvents), 32, "Latches has one bit per event")
}

func TestRefusedErrorIsShared(t *testing.T) {
	// Refusals are prebuilt so that they cost no allocation; two refusals of the
	// same pair are the same error.
	s := Slot{State: Released}
	_, err1 := Lifecycle().Fire(&s, ReleaseRequested)
	_, err2 := Lifecycle().Fire(&s, ReleaseRequested)
	require.Error(t, err1)
	assert.Same(t, err1, err2)
	assert.True(t, errors.Is(err1, err2))
	assert.True(t, strings.HasPrefix(err1.Error(), "fsm: release_requested refused in state released"))
}

func FuzzParse(f *testing.F) {
	for s := range NumStates {
		f.Add(s.String())
	}
	for e := range NumEvents {
		f.Add(e.String())
	}
	f.Add("")
	f.Add("access-fenced")
	f.Fuzz(func(t *testing.T, name string) {
		if s, err := ParseState(name); err == nil {
			if s.String() != name {
				t.Fatalf("ParseState(%q) = %s", name, s)
			}
		} else if !strings.Contains(err.Error(), fmt.Sprintf("%q", name)) {
			t.Fatalf("error does not name the input: %v", err)
		}
		if e, err := ParseEvent(name); err == nil {
			if e.String() != name {
				t.Fatalf("ParseEvent(%q) = %s", name, e)
			}
		} else if !strings.Contains(err.Error(), fmt.Sprintf("%q", name)) {
			t.Fatalf("error does not name the input: %v", err)
		}
	})
}

func TestSlotIsSmall(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(Slot{}), uintptr(8), "the engine keeps one Slot per lease")
	assert.Equal(t, Slot{State: Waiting}, Slot{}, "the zero Slot is a waiting lease")
}
