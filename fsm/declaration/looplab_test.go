package declaration_test

import (
	"context"
	"errors"
	"testing"

	looplab "github.com/looplab/fsm"
	"pgregory.net/rapid"

	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/fsm/declaration"
)

// TestAgreesWithLooplab checks the compiler, not the lifecycle: a looplab/fsm
// machine built from Declaration and the compiled table are two readings of the
// same declaration, so they agree even when the declaration is wrong (the
// oracle tests in oracle_test.go and rules_test.go judge the lifecycle itself).
// What this test catches is a table that does not do what was declared — a pair
// dropped, a latch compiled as a refusal, a completion lost or misordered.
//
// It drives random events and completions, from random states, through both:
// looplab's nil error is a move, NoTransitionError (its answer to a self-loop)
// a latch, and InvalidEventError a refusal; a completion is the event named
// "[guard]", which the table takes through Complete with that guard alone.
// Latches are modelled beside looplab with a plain set, re-delivered in event
// order after every move.
func TestAgreesWithLooplab(t *testing.T) {
	tab := fsm.Lifecycle()
	ctx := context.Background() // a cancelled context leaves looplab stuck
	var states []fsm.State
	for s := range fsm.NumStates {
		states = append(states, s)
	}
	rapid.Check(t, func(t *rapid.T) {
		start := rapid.SampledFrom(states).Draw(t, "start")
		machine := looplab.NewFSM(start.String(), declaration.Lifecycle(), nil)
		latched := map[fsm.Event]bool{}
		s := fsm.Slot{State: start}
		for range rapid.IntRange(1, 50).Draw(t, "steps") {
			from := s.State
			if rapid.IntRange(0, 3).Draw(t, "completion") == 0 {
				g := fsm.Guard(rapid.IntRange(0, int(fsm.NumGuards)-1).Draw(t, "guard"))
				err := machine.Event(ctx, fsm.CompletionName(g))
				step, ok := tab.Complete(&s, fsm.Facts(0).With(g))
				var invalid looplab.InvalidEventError
				var unknown looplab.UnknownEventError // a guard no state tests
				switch {
				case err == nil:
					if !ok || step.Guard != g || step.To.String() != machine.Current() {
						t.Fatalf("[%s] in %s: looplab moved to %s, table %+v (%v)", g, from, machine.Current(), step, ok)
					}
					redeliverBoth(t, ctx, machine, latched, tab, &s)
				case errors.As(err, &invalid) || errors.As(err, &unknown):
					if ok {
						t.Fatalf("[%s] in %s: looplab has no such completion, the table took %+v", g, from, step)
					}
				default:
					t.Fatalf("[%s] in %s: unexpected looplab error %v", g, from, err)
				}
			} else {
				e := fsm.Event(rapid.IntRange(0, int(fsm.NumEvents)-1).Draw(t, "event"))
				err := machine.Event(ctx, e.String())
				step, ferr := tab.Fire(&s, e)
				var noTransition looplab.NoTransitionError
				var invalid looplab.InvalidEventError
				switch {
				case err == nil:
					if step.Action != fsm.Move || ferr != nil {
						t.Fatalf("%s in %s: looplab moved to %s, table answered %s (%v)", e, from, machine.Current(), step.Action, ferr)
					}
					if tab.Lookup(from, e).Keep {
						latched[e] = true // the move keeps its event latched
					} else {
						delete(latched, e)
					}
					redeliverBoth(t, ctx, machine, latched, tab, &s)
				case errors.As(err, &noTransition):
					if step.Action != fsm.Latch || ferr != nil {
						t.Fatalf("%s in %s: looplab self-loop, table answered %s (%v)", e, from, step.Action, ferr)
					}
					latched[e] = true
				case errors.As(err, &invalid):
					var re *fsm.RefusedError
					if step.Action != fsm.Refuse || !errors.As(ferr, &re) || re.Reason == "" {
						t.Fatalf("%s in %s: looplab refused, table answered %s (%v)", e, from, step.Action, ferr)
					}
				default:
					t.Fatalf("%s in %s: unexpected looplab error %v", e, from, err)
				}
			}
			if machine.Current() != s.State.String() {
				t.Fatalf("looplab in %s, table in %s", machine.Current(), s.State)
			}
			for e := range fsm.NumEvents {
				if latched[e] != s.Latched.Has(e) {
					t.Fatalf("latch %s is %v beside looplab, %v in the slot", e, latched[e], s.Latched.Has(e))
				}
			}
		}
	})
}

// redeliverBoth fires the lowest latched event that looplab moves on, again and
// again, and checks that fsm.Table.Redeliver makes the same moves.
func redeliverBoth(t *rapid.T, ctx context.Context, machine *looplab.FSM, latched map[fsm.Event]bool, tab *fsm.Table, s *fsm.Slot) {
	for {
		moved := false
		for e := range fsm.NumEvents {
			if !latched[e] {
				continue
			}
			from := machine.Current()
			if err := machine.Event(ctx, e.String()); err != nil {
				continue // still a latch or a refusal here: it stays latched
			}
			fromState, _ := fsm.ParseState(from)
			if !tab.Lookup(fromState, e).Keep {
				delete(latched, e)
			}
			step, ok := tab.Redeliver(s)
			if !ok || step.Event != e || step.Action != fsm.Move || step.From.String() != from || step.To.String() != machine.Current() {
				t.Fatalf("redelivery: looplab moved %s on %s to %s, table %+v (ok=%v)", from, e, machine.Current(), step, ok)
			}
			moved = true
			break
		}
		if !moved {
			if step, ok := tab.Redeliver(s); ok {
				t.Fatalf("redelivery: looplab made no move, table made %+v", step)
			}
			return
		}
	}
}
