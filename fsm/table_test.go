package fsm

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCompleteness enumerates every (state, event) pair: each is exactly one of
// a move to another state, a latch that keeps the state and says what keeping
// the event means, or a refusal with its reason; every completion moves; and
// Declaration lists exactly the moves, the latches (as self-loops) and the
// completions (as "[guard]" events) of the table.
func TestCompleteness(t *testing.T) {
	tab := Lifecycle()
	counts := map[Action]int{}
	completions := 0
	for s := range NumStates {
		for e := range NumEvents {
			en := tab.Lookup(s, e)
			counts[en.Action]++
			switch en.Action {
			case Move:
				assert.NotEqual(t, s, en.Next, "(%s, %s): a move changes the state", s, e)
				assert.Less(t, en.Next, NumStates, "(%s, %s)", s, e)
				assert.Less(t, en.Result, NumResults, "(%s, %s)", s, e)
				assert.Empty(t, en.Reason(), "(%s, %s)", s, e)
			case Latch:
				assert.Equal(t, s, en.Next, "(%s, %s): a latch keeps the state", s, e)
				assert.Equal(t, NoResult, en.Result, "(%s, %s): a latch latches no outcome", s, e)
				assert.NotEmpty(t, en.Reason(), "(%s, %s): a latch says what keeping the event means", s, e)
			case Refuse:
				assert.Equal(t, s, en.Next, "(%s, %s): a refusal keeps the state", s, e)
				assert.Equal(t, NoResult, en.Result, "(%s, %s)", s, e)
				assert.NotEmpty(t, en.Reason(), "(%s, %s) is refused without a reason", s, e)
			default:
				t.Errorf("(%s, %s) has kind %s", s, e, en.Action)
			}
		}
		for _, c := range tab.Completions(s) {
			assert.NotEqual(t, s, c.Next, "%s [%s]: a completion moves", s, c.Guard)
			assert.Less(t, c.Guard, NumGuards)
			completions++
		}
	}
	assert.Equal(t, int(NumStates)*int(NumEvents), counts[Move]+counts[Latch]+counts[Refuse])
	assert.Positive(t, counts[Move])
	assert.Positive(t, counts[Latch])
	assert.Positive(t, completions)
}

// tiny is a small, valid declaration: waiting moves to granted on
// slots_granted and keeps close; granted completes to staged for a fetch;
// everything else is refused.
func tiny() []block {
	d := []block{{
		state:    Waiting,
		moves:    []move{on(SlotsGranted, Granted)},
		latches:  []latch{keep("kept for later", Close)},
		refusals: []refusal{refuse("not here", allBut(SlotsGranted, Close)...)},
	}}
	for s := Granted; s < NumStates; s++ {
		d = append(d, block{state: s, refusals: []refusal{refuse("nothing here", allBut()...)}})
	}
	d[Granted].completions = []completion{when(IsFetch, Staged).latching(Failure)}
	return d
}

func TestCompileRefusesBadDeclarations(t *testing.T) {
	edit := func(f func([]block) []block) []block { return f(tiny()) }
	tests := []struct {
		name       string
		decl       []block
		want       string
		outOfRange bool
	}{
		{"missing pair", edit(func(d []block) []block {
			d[Granted].refusals = []refusal{refuse("nothing here", allBut(Close)...)}
			return d
		}), "(granted, close) is not declared", false},
		{"missing state", edit(func(d []block) []block { return d[:len(d)-1] }),
			"(released, slots_granted) is not declared", false},
		{"pair declared twice", edit(func(d []block) []block {
			d[Waiting].refusals = append(d[Waiting].refusals, refuse("again", SlotsGranted))
			return d
		}), "(waiting, slots_granted) declared twice", false},
		{"latch and refusal of one pair", edit(func(d []block) []block {
			d[Waiting].refusals = append(d[Waiting].refusals, refuse("no", Close))
			return d
		}), "(waiting, close) declared twice", false},
		{"move and latch of one pair", edit(func(d []block) []block {
			d[Waiting].latches = append(d[Waiting].latches, keep("also", SlotsGranted))
			return d
		}), "(waiting, slots_granted) declared twice", false},
		{"state declared twice", edit(func(d []block) []block {
			return append(d, block{state: Waiting})
		}), "state waiting declared in two blocks", false},
		{"move to itself", edit(func(d []block) []block {
			d[Waiting].moves = []move{on(SlotsGranted, Waiting)}
			return d
		}), "(waiting, slots_granted) moves to itself", false},
		{"completion to itself", edit(func(d []block) []block {
			d[Granted].completions = []completion{when(IsFetch, Granted)}
			return d
		}), "completion [fetch] of granted loops to itself", false},
		{"latch without meaning", edit(func(d []block) []block {
			d[Waiting].latches = []latch{keep("", Close)}
			return d
		}), "says nothing about what keeping them means", false},
		{"refusal without reason", edit(func(d []block) []block {
			d[Released].refusals = []refusal{refuse("", allBut()...)}
			return d
		}), "has no reason", false},
		{"state out of range", edit(func(d []block) []block {
			return append(d, block{state: NumStates})
		}), "block for state(15)", true},
		{"move event out of range", edit(func(d []block) []block {
			d[Waiting].moves = append(d[Waiting].moves, on(NumEvents, Granted))
			return d
		}), "event(27) in waiting", true},
		{"move target out of range", edit(func(d []block) []block {
			d[Waiting].moves = []move{on(SlotsGranted, NumStates)}
			return d
		}), "move of waiting on slots_granted", true},
		{"move result out of range", edit(func(d []block) []block {
			d[Waiting].moves = []move{on(SlotsGranted, Granted).latching(NumResults)}
			return d
		}), "move of waiting on slots_granted", true},
		{"latch event out of range", edit(func(d []block) []block {
			d[Waiting].latches = append(d[Waiting].latches, keep("kept", NumEvents))
			return d
		}), "event(27) in waiting", true},
		{"move stores out of range", edit(func(d []block) []block {
			d[Waiting].moves = []move{on(SlotsGranted, Granted).storing(NumStores)}
			return d
		}), "stores of (waiting, slots_granted)", true},
		{"latch stores out of range", edit(func(d []block) []block {
			d[Waiting].latches = []latch{keep("kept", Close).storing(NumStores)}
			return d
		}), "effects or stores of the latch in waiting", true},
		{"by_peer without a result", edit(func(d []block) []block {
			d[Waiting].moves = []move{on(SlotsGranted, Granted).storing(StoreByPeer)}
			return d
		}), "(waiting, slots_granted) stores by_peer but latches no result", false},
		{"a latch storing an answer", edit(func(d []block) []block {
			d[Waiting].latches = []latch{keep("kept", Close).storing(StoreFirst)}
			return d
		}), "the latch in waiting of [close] stores an answer", false},
		{"refusal event out of range", edit(func(d []block) []block {
			d[Released].refusals = append(d[Released].refusals, refuse("no", Event(200)))
			return d
		}), "event(200) in released", true},
		{"completion guard out of range", edit(func(d []block) []block {
			d[Granted].completions = []completion{when(NumGuards, Staged)}
			return d
		}), "completion of granted", true},
		{"completion target out of range", edit(func(d []block) []block {
			d[Granted].completions = []completion{when(IsFetch, NumStates)}
			return d
		}), "completion of granted", true},
		{"completion result out of range", edit(func(d []block) []block {
			d[Granted].completions = []completion{when(IsFetch, Staged).latching(Result(100))}
			return d
		}), "completion of granted", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab, err := compile(tt.decl)
			require.Error(t, err)
			assert.Nil(t, tab)
			assert.Contains(t, err.Error(), tt.want)
			assert.Equal(t, tt.outOfRange, errors.Is(err, ErrOutOfRange), "%v", err)
		})
	}
	// The unedited declarations compile, so the edits above are what the errors
	// are about; and compiling the lifecycle again gives the same table.
	tab, err := compile(tiny())
	require.NoError(t, err)
	assert.Equal(t, Entry{Action: Move, Next: Granted}, tab.Lookup(Waiting, SlotsGranted))
	assert.Equal(t, Entry{Action: Latch, Next: Waiting, why: "kept for later"}, tab.Lookup(Waiting, Close))
	assert.Equal(t, []Completion{{Guard: IsFetch, Next: Staged, Result: Failure}}, tab.Completions(Granted))
	assert.True(t, tab.terminal[Staged], "a state with no move and no completion is terminal")
	assert.False(t, tab.terminal[Granted], "a completion leaves the state")
	again, err := compile(declaration)
	require.NoError(t, err)
	assert.Equal(t, Lifecycle().entries, again.entries)
	assert.Equal(t, Lifecycle().completions, again.completions)
	assert.Panics(t, func() { mustCompile(tiny()[1:]) }, "a broken declaration stops the program")
}

func TestFire(t *testing.T) {
	tab := Lifecycle()
	t.Run("move", func(t *testing.T) {
		s := Slot{State: Requested, Latched: Latches(0).With(OutcomeCancelled).With(ReleaseRequested)}
		step, err := tab.Fire(&s, OutcomeCancelled)
		require.NoError(t, err)
		assert.Equal(t, Step{From: Requested, To: Failed, Event: OutcomeCancelled, Action: Move, Result: Cancel, Effects: effects(StartDrain, RequestCancel),
			Stores: stores(StoreReason, StoreByPeer, StoreFirst)}, step)
		assert.Equal(t, "outcome_cancelled", step.Cause())
		assert.Equal(t, Failed, s.State)
		assert.False(t, s.Latched.Has(OutcomeCancelled), "a move clears its own latch bit")
		assert.True(t, s.Latched.Has(ReleaseRequested), "other latches stay")
	})
	t.Run("latch", func(t *testing.T) {
		s := Slot{State: Requested}
		step, err := tab.Fire(&s, AccessProven)
		require.NoError(t, err)
		assert.Equal(t, Step{From: Requested, To: Requested, Event: AccessProven, Action: Latch, Stores: stores(StoreProofAnswer)}, step)
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
		assert.Equal(t, Step{From: Missed, To: Missed, Event: ContractViolation, Action: Refuse}, step)
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
			_, ok = tab.Complete(&s, ^Facts(0))
			assert.False(t, ok)
			assert.Equal(t, c.s, s)
		}
		_, err := tab.Fire(nil, Close)
		require.ErrorIs(t, err, ErrOutOfRange)
		_, ok := tab.Redeliver(nil)
		assert.False(t, ok)
		_, ok = tab.Complete(nil, ^Facts(0))
		assert.False(t, ok)
		assert.Equal(t, Refuse, tab.Lookup(NumStates, Close).Action)
		assert.NotEmpty(t, tab.Lookup(Waiting, NumEvents).Reason())
		assert.Nil(t, tab.Completions(NumStates))
	})
}

func TestComplete(t *testing.T) {
	tab := Lifecycle()
	t.Run("a holding guard moves", func(t *testing.T) {
		s := Slot{State: Granted, Latched: Latches(0).With(Close)}
		step, ok := tab.Complete(&s, Facts(0).With(IsFetch))
		require.True(t, ok)
		assert.Equal(t, Step{From: Granted, To: Staged, Completion: true, Guard: IsFetch, Action: Move}, step)
		assert.Equal(t, "[fetch]", step.Cause())
		assert.Equal(t, Slot{State: Staged, Latched: Latches(0).With(Close)}, s, "a completion leaves the latches alone")
	})
	t.Run("completions are tried in declaration order", func(t *testing.T) {
		s := Slot{State: Staged}
		step, ok := tab.Complete(&s, Facts(0).With(DeadlinePassed).With(StagingIncomplete).With(Withdrawn))
		require.True(t, ok)
		assert.Equal(t, Withdrawn, step.Guard, "nothing is exposed for a lease nobody wants")
		assert.Equal(t, AccessFenced, s.State)
		s = Slot{State: Staged}
		step, ok = tab.Complete(&s, Facts(0).With(DeadlinePassed).With(StagingIncomplete))
		require.True(t, ok)
		assert.Equal(t, Step{From: Staged, To: Failed, Completion: true, Guard: StagingIncomplete, Action: Move, Result: Failure, Effects: effects(StartDrain, RequestCancel)}, step)
	})
	t.Run("no guard holds", func(t *testing.T) {
		s := Slot{State: Staged}
		_, ok := tab.Complete(&s, Facts(0).With(IsFetch).With(NothingToCopy))
		assert.False(t, ok, "guards of other states do not apply")
		assert.Equal(t, Slot{State: Staged}, s)
		s = Slot{State: Requested}
		_, ok = tab.Complete(&s, ^Facts(0))
		assert.False(t, ok, "requested has no completion")
		assert.Equal(t, Slot{State: Requested}, s)
	})
}

// settle fires e and settles the lease as the engine does: completions first,
// then redelivery, until neither applies.
func settle(tab *Table, s *Slot, facts Facts, e Event) ([]Step, error) {
	step, err := tab.Fire(s, e)
	if err != nil {
		return nil, err
	}
	steps := []Step{step}
	if step.Action != Move {
		return steps, nil
	}
	for {
		if st, ok := tab.Complete(s, facts); ok {
			steps = append(steps, st)
			continue
		}
		st, ok := tab.Redeliver(s)
		if !ok {
			return steps, nil
		}
		steps = append(steps, st)
	}
}

func TestRedeliver(t *testing.T) {
	fetch := Facts(0).With(IsFetch)
	tests := []struct {
		name   string
		facts  Facts
		events []Event
		want   State
		latch  Latches
	}{
		{"an access proof before the outcome fences once the outcome is in",
			fetch, []Event{SlotsGranted, AdmissionGranted, Submitted, AccessProven, OutcomeServed}, AccessFenced, 0},
		{"a release before the fence waits for the landed copies",
			fetch, []Event{SlotsGranted, AdmissionGranted, Submitted, ReleaseRequested, OutcomeServed, AccessProven, CopiesLanded}, Released, 0},
		{"a rejection is fenced at once and copies nothing",
			fetch.With(NeverExposed).With(NothingToCopy), []Event{SlotsGranted, AdmissionGranted, Rejected}, LogicallyComplete, 0},
		{"a publish withdrawn while its staging copies are in flight",
			Facts(0).With(Withdrawn).With(NothingToCopy), []Event{SlotsGranted, ReleaseRequested, CopiesLanded}, Released, 0},
		{"a failed copy holds the slots until containment",
			fetch, []Event{SlotsGranted, AdmissionGranted, Submitted, OutcomeServed, AccessProven, ReleaseRequested, CopyFailed}, CopyUnproven, Latches(0).With(ReleaseRequested)},
		{"containment keeps the release latched for ever",
			fetch.With(NotRecoverable), []Event{SlotsGranted, AdmissionGranted, Submitted, ReleaseRequested, AccessUnproven, Containment}, Quarantined,
			Latches(0).With(ReleaseRequested).With(AccessUnproven)},
		{"a deadline never releases",
			fetch, []Event{SlotsGranted, AdmissionGranted, Submitted, ReleaseRequested, Deadline}, Failed, Latches(0).With(ReleaseRequested)},
		{"close waits for the fence and the copies",
			fetch, []Event{SlotsGranted, AdmissionGranted, Submitted, OutcomeMissed, Close, AccessProven, CopiesLanded}, Released, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s Slot
			for _, e := range tt.events {
				_, err := settle(Lifecycle(), &s, tt.facts, e)
				require.NoError(t, err, "%s in %s", e, s.State)
			}
			assert.Equal(t, tt.want, s.State)
			assert.Equal(t, tt.latch, s.Latched)
		})
	}
}

func TestRedeliverOrder(t *testing.T) {
	// Both latched events move logically_complete; the lower-numbered one wins
	// and the other stays latched.
	s := Slot{State: LogicallyComplete, Latched: Latches(0).With(Close).With(ReleaseRequested).With(AccessUnproven)}
	step, ok := Lifecycle().Redeliver(&s)
	require.True(t, ok)
	assert.Equal(t, Step{From: LogicallyComplete, To: Released, Event: ReleaseRequested, Action: Move, Effects: effects(Free, Retire)}, step)
	assert.Equal(t, Latches(0).With(Close).With(AccessUnproven), s.Latched)
	_, ok = Lifecycle().Redeliver(&s)
	assert.False(t, ok, "released takes nothing")
}

func TestZeroAllocations(t *testing.T) {
	tab := Lifecycle()
	facts := Facts(0).With(IsFetch)
	cycle := []Event{SlotsGranted, AdmissionGranted, Submitted, AccessProven, ReleaseRequested, OutcomeServed, CopiesLanded, Close}
	allocs := testing.AllocsPerRun(100, func() {
		var s Slot
		for _, e := range cycle {
			if st, _ := tab.Fire(&s, e); st.Action == Move {
				for {
					if _, ok := tab.Complete(&s, facts); ok {
						continue
					}
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
	unique := func(name string) {
		assert.Regexp(t, `^[a-z]+(_[a-z]+)*$`, name, "names are snake_case Mermaid identifiers")
		assert.False(t, seen[name], "%s names two things", name)
		seen[name] = true
	}
	for s := range NumStates {
		unique(s.String())
		assert.NotEmpty(t, s.Meaning())
		assert.NotEmpty(t, s.Slots())
		got, err := ParseState(s.String())
		require.NoError(t, err)
		assert.Equal(t, s, got)
	}
	for st := range NumStores {
		assert.Regexp(t, `^[a-z_]+$`, st.String())
		assert.NotEmpty(t, st.Meaning())
	}
	assert.Equal(t, "reason, first_answer", Stores(0).With(StoreFirst).With(StoreReason).With(NumStores).String())
	assert.Equal(t, Marks(0).With(Attempted), RequestCancel.Needs())
	assert.Zero(t, NumEffects.Needs())
	for e := range NumEvents {
		unique(e.String())
		assert.NotEmpty(t, e.Meaning())
		got, err := ParseEvent(e.String())
		require.NoError(t, err)
		assert.Equal(t, e, got)
	}
	for g := range NumGuards {
		unique(g.String())
		assert.NotEmpty(t, g.Meaning())
		assert.Equal(t, "["+g.String()+"]", CompletionName(g))
	}
	results := map[string]bool{}
	for r := range NumResults {
		assert.Regexp(t, `^[a-z]+$`, r.String())
		assert.False(t, results[r.String()])
		results[r.String()] = true
	}
	assert.Equal(t, "state(15)", NumStates.String())
	assert.Equal(t, "event(27)", NumEvents.String())
	assert.Equal(t, "store(11)", NumStores.String())
	assert.Empty(t, NumStores.Meaning())
	assert.Equal(t, "guard(8)", NumGuards.String())
	assert.Equal(t, "result(9)", NumResults.String())
	assert.Equal(t, "kind(3)", Action(3).String())
	assert.Equal(t, []string{"refuse", "move", "latch"}, []string{Refuse.String(), Move.String(), Latch.String()})
	assert.Empty(t, NumStates.Meaning()+NumStates.Slots()+NumEvents.Meaning()+NumGuards.Meaning())
	assert.False(t, NumStates.Terminal())
	_, err := ParseState("access-fenced")
	assert.ErrorContains(t, err, `unknown state "access-fenced"`)
	_, err = ParseEvent("Close")
	assert.ErrorContains(t, err, `unknown event "Close"`)
	assert.LessOrEqual(t, int(NumEvents), 32, "Latches has one bit per event")
	assert.LessOrEqual(t, int(NumGuards), 8, "Facts has one bit per guard")
}

func TestResultFailure(t *testing.T) {
	failures := []Result{Failure, Cancel, Rejection, Timeout, Violation}
	for r := range NumResults + 1 {
		assert.Equal(t, slices.Contains(failures, r), r.Failure(), "%s", r)
	}
}

func TestFactsAndLatches(t *testing.T) {
	f := Facts(0).With(IsFetch).With(NothingToCopy).With(NumGuards)
	assert.True(t, f.Has(IsFetch))
	assert.True(t, f.Has(NothingToCopy))
	assert.False(t, f.Has(Withdrawn))
	assert.False(t, (^Facts(0)).Has(NumGuards), "an out-of-range guard never holds")
	assert.Equal(t, Facts(0).With(IsFetch).With(NothingToCopy), f, "With ignores an out-of-range guard")

	l := Latches(0).With(Close).With(AccessProven).With(NumEvents)
	assert.True(t, l.Has(Close))
	assert.True(t, l.Has(AccessProven))
	assert.False(t, l.Has(ReleaseRequested))
	assert.False(t, (^Latches(0)).Has(NumEvents))
	assert.Equal(t, Latches(0).With(AccessProven), l.Without(Close).Without(NumEvents))
}

func TestRefusedErrorIsShared(t *testing.T) {
	// Refusals are prebuilt so that they cost no allocation; two refusals of the
	// same pair are the same error.
	s := Slot{State: Released}
	_, err1 := Lifecycle().Fire(&s, ReleaseRequested)
	_, err2 := Lifecycle().Fire(&s, ReleaseRequested)
	require.Error(t, err1)
	assert.Same(t, err1, err2)
	assert.True(t, strings.HasPrefix(err1.Error(), "fsm: release_requested refused in state released"))
	allocs := testing.AllocsPerRun(100, func() { _, _ = Lifecycle().Fire(&s, Close) })
	assert.Zero(t, allocs)
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
