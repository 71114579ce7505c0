package fsm

import (
	"context"
	"errors"
	"slices"
	"testing"

	looplab "github.com/looplab/fsm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// reachable returns the states reachable from s through moves, never entering
// avoid. A latch never changes the state, and a latched event only ever fires as
// one of these moves, so the move graph bounds every path latches can take.
func reachable(tab *Table, from State, avoid ...State) [NumStates]bool {
	var seen [NumStates]bool
	if slices.Contains(avoid, from) {
		return seen
	}
	seen[from] = true
	queue := []State{from}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for e := range NumEvents {
			en := tab.Lookup(s, e)
			if en.Kind != Move || seen[en.Next] || slices.Contains(avoid, en.Next) {
				continue
			}
			seen[en.Next] = true
			queue = append(queue, en.Next)
		}
	}
	return seen
}

func TestEveryStateReachableFromWaiting(t *testing.T) {
	seen := reachable(Lifecycle(), Waiting)
	for s := range NumStates {
		assert.True(t, seen[s], "%s is unreachable from waiting", s)
	}
}

// TestNoReleaseWithoutFence: once a lease holds slots, every path to released
// passes through access_fenced (rule 1). Only waiting, which holds nothing,
// releases directly.
func TestNoReleaseWithoutFence(t *testing.T) {
	for s := range NumStates {
		if s == Waiting || s == AccessFenced || s == Released {
			continue
		}
		assert.False(t, reachable(Lifecycle(), s, AccessFenced)[Released],
			"a path from %s reaches released without access_fenced", s)
	}
	require.True(t, reachable(Lifecycle(), Requested)[Released], "the check above must not pass vacuously")
}

// TestFenceNeedsProofAndCopies: the fence is entered only by an access proof
// after every local copy landed, or by withdrawing a lease never exposed; and
// logically_complete only when the copies landed.
func TestFenceNeedsProofAndCopies(t *testing.T) {
	for s := range NumStates {
		for e := range NumEvents {
			en := Lifecycle().Lookup(s, e)
			if en.Kind != Move {
				continue
			}
			switch en.Next {
			case AccessFenced:
				ok := (s == LogicallyComplete && e == AccessProven) || (s == Staged && e == Withdrawn)
				assert.True(t, ok, "(%s, %s) enters access_fenced", s, e)
			case LogicallyComplete:
				assert.Equal(t, CopiesLanded, e, "(%s, %s) enters logically_complete", s, e)
			case Released:
				assert.Contains(t, []State{Waiting, AccessFenced}, s, "(%s, %s) releases", s, e)
			}
		}
	}
}

func TestQuarantineIsTerminal(t *testing.T) {
	for _, s := range []State{Quarantined, Released} {
		assert.True(t, s.Terminal())
		for e := range NumEvents {
			assert.Equal(t, Refuse, Lifecycle().Lookup(s, e).Kind, "(%s, %s)", s, e)
		}
	}
	seen := reachable(Lifecycle(), Quarantined)
	for s := range NumStates {
		assert.Equal(t, s == Quarantined, seen[s], "quarantined reaches %s", s)
	}
}

// TestUnprovenMeansQuarantined: wherever the backend may still touch the slots,
// an unproven access end or an expired drain quarantines them (rule 4).
func TestUnprovenMeansQuarantined(t *testing.T) {
	for _, s := range []State{Requested, Served, Partial, Missed, Failed, LogicallyComplete} {
		for _, e := range []Event{AccessUnproven, DrainExpired} {
			en := Lifecycle().Lookup(s, e)
			assert.Equal(t, Entry{Kind: Move, Next: Quarantined}, en, "(%s, %s)", s, e)
		}
	}
	for _, s := range []State{Granted, Served, Partial, Failed} {
		for _, e := range []Event{CopyFailed, DeviceLost} {
			assert.Equal(t, Entry{Kind: Move, Next: Quarantined}, Lifecycle().Lookup(s, e), "(%s, %s)", s, e)
		}
	}
}

// TestMissNeverFails: no path turns a miss into a failure, nor a failure into a
// miss or a delivery (rule 2, rule 3).
func TestMissNeverFails(t *testing.T) {
	assert.False(t, reachable(Lifecycle(), Missed)[Failed], "missed reaches failed")
	fromFailed := reachable(Lifecycle(), Failed)
	for _, s := range []State{Missed, Served, Partial} {
		assert.False(t, fromFailed[s], "failed reaches %s", s)
	}
	assert.True(t, reachable(Lifecycle(), Served)[Failed], "a violation after a delivery must still fail it")
}

func TestReleaseReachableFromEveryLiveState(t *testing.T) {
	for s := range NumStates {
		if s.Terminal() {
			continue
		}
		assert.True(t, reachable(Lifecycle(), s)[Released], "%s cannot reach released", s)
	}
}

// drawEvent draws the next piece of evidence for a lease in s: mostly a move the
// state accepts (so that sequences get deep into the lifecycle), else a latch,
// else any event at all (so that refusals and odd orders are exercised too).
func drawEvent(t *rapid.T, s State) Event {
	var moves, accepted []Event
	for e := range NumEvents {
		switch Lifecycle().Lookup(s, e).Kind {
		case Move:
			moves = append(moves, e)
			accepted = append(accepted, e)
		case Latch:
			accepted = append(accepted, e)
		}
	}
	switch pick := rapid.IntRange(0, 5).Draw(t, "pick"); {
	case pick >= 3 && len(moves) > 0:
		return rapid.SampledFrom(moves).Draw(t, "move")
	case pick >= 1 && len(accepted) > 0:
		return rapid.SampledFrom(accepted).Draw(t, "accepted")
	}
	return rapid.SampledFrom(allEvents).Draw(t, "event")
}

var (
	allStates = func() []State {
		out := make([]State, NumStates)
		for i := range out {
			out[i] = State(i)
		}
		return out
	}()
	allEvents = everyEvent()
)

// TestAgreesWithLooplab drives random event sequences, from random states,
// through a looplab/fsm machine built from Declaration and through the compiled
// table, and checks that they agree at every step: looplab's nil error is a move,
// NoTransitionError (its answer to a self-loop) is a latch, and
// InvalidEventError a refusal. Latches are modelled beside looplab with a plain
// set, re-delivered in event order after every move.
func TestAgreesWithLooplab(t *testing.T) {
	tab := Lifecycle()
	ctx := context.Background() // a cancelled context leaves looplab stuck
	rapid.Check(t, func(t *rapid.T) {
		start := rapid.SampledFrom(allStates).Draw(t, "start")
		oracle := looplab.NewFSM(start.String(), Declaration(), nil)
		latched := map[Event]bool{}
		s := Slot{State: start}
		for range rapid.IntRange(1, 50).Draw(t, "steps") {
			e := drawEvent(t, s.State)
			err := oracle.Event(ctx, e.String())
			step, ferr := tab.Fire(&s, e)
			var noTransition looplab.NoTransitionError
			var invalid looplab.InvalidEventError
			switch {
			case err == nil:
				if step.Kind != Move || ferr != nil {
					t.Fatalf("%s in %s: looplab moved to %s, table answered %s (%v)", e, step.From, oracle.Current(), step.Kind, ferr)
				}
				delete(latched, e)
				redeliverOracle(t, ctx, oracle, latched, tab, &s)
			case errors.As(err, &noTransition):
				if step.Kind != Latch || ferr != nil {
					t.Fatalf("%s in %s: looplab self-loop, table answered %s (%v)", e, step.From, step.Kind, ferr)
				}
				latched[e] = true
			case errors.As(err, &invalid):
				var re *RefusedError
				if step.Kind != Refuse || !errors.As(ferr, &re) || re.Reason == "" {
					t.Fatalf("%s in %s: looplab refused, table answered %s (%v)", e, step.From, step.Kind, ferr)
				}
			default:
				t.Fatalf("%s in %s: unexpected looplab error %v", e, step.From, err)
			}
			if oracle.Current() != s.State.String() {
				t.Fatalf("after %s: looplab in %s, table in %s", e, oracle.Current(), s.State)
			}
			for e := range NumEvents {
				if latched[e] != s.Latched.Has(e) {
					t.Fatalf("after %s: latch %s is %v in the model, %v in the slot", e, e, latched[e], s.Latched.Has(e))
				}
			}
		}
	})
}

// redeliverOracle fires the lowest latched event that looplab moves on, again and
// again, and checks that Table.Redeliver makes the same moves.
func redeliverOracle(t *rapid.T, ctx context.Context, oracle *looplab.FSM, latched map[Event]bool, tab *Table, s *Slot) {
	for {
		moved := false
		for e := range NumEvents {
			if !latched[e] {
				continue
			}
			from := oracle.Current()
			if err := oracle.Event(ctx, e.String()); err != nil {
				continue // still a latch or a refusal here: it stays latched
			}
			delete(latched, e)
			step, ok := tab.Redeliver(s)
			want := Step{Event: e, Kind: Move}
			want.From, _ = ParseState(from)
			want.To, _ = ParseState(oracle.Current())
			if !ok || step != want {
				t.Fatalf("redelivery: looplab made %+v, table %+v (ok=%v)", want, step, ok)
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

// TestSafetyUnderAnyEvidence drives random evidence, in any order, through the
// table as the engine does, from any state, (fire, then drain redelivery) and checks the rules at
// every step: no release without the fence once slots are held, a miss never
// becomes a failure nor a failure a miss, terminal states stay put, and a refusal
// changes nothing.
func TestSafetyUnderAnyEvidence(t *testing.T) {
	tab := Lifecycle()
	rapid.Check(t, func(t *rapid.T) {
		s := Slot{State: rapid.SampledFrom(allStates).Draw(t, "start")}
		wasMissed, wasFailed := s.State == Missed, s.State == Failed
		for range rapid.IntRange(1, 80).Draw(t, "steps") {
			e := drawEvent(t, s.State)
			before := s
			steps, err := drive(tab, &s, e)
			if err != nil {
				var re *RefusedError
				if !errors.As(err, &re) || re.State != before.State || re.Event != e {
					t.Fatalf("%s in %s: refusal %v does not name the pair", e, before.State, err)
				}
				if s != before {
					t.Fatalf("refused %s changed the slot from %+v to %+v", e, before, s)
				}
				continue
			}
			prev := before.State
			for _, st := range steps {
				if st.From != prev {
					t.Fatalf("step %+v does not start where the lease was (%s)", st, prev)
				}
				if st.To == Released && st.Kind == Move && st.From != AccessFenced && st.From != Waiting {
					t.Fatalf("released from %s by %s without the fence", st.From, st.Event)
				}
				if prev.Terminal() && st.To != prev {
					t.Fatalf("terminal %s left for %s", prev, st.To)
				}
				prev = st.To
				switch st.To {
				case Missed:
					if wasFailed {
						t.Fatalf("a failure became a miss")
					}
					wasMissed = true
				case Failed:
					if wasMissed {
						t.Fatalf("a miss became a failure")
					}
					wasFailed = true
				}
			}
			if prev != s.State {
				t.Fatalf("steps end in %s, slot in %s", prev, s.State)
			}
			if _, ok := tab.Redeliver(&s); ok {
				t.Fatalf("a latched event still applies in %s after draining", s.State)
			}
		}
	})
}

// TestLivenessFromAnyPrefix: whatever evidence a lease has seen, a backend that
// answers and copies that land release it (rule 6), unless it was quarantined.
func TestLivenessFromAnyPrefix(t *testing.T) {
	tab := Lifecycle()
	happy := []Event{SlotsGranted, CopiesLanded, Submitted, OutcomeServed, CopiesLanded, AccessProven, ReleaseRequested}
	rapid.Check(t, func(t *rapid.T) {
		s := Slot{State: rapid.SampledFrom(allStates).Draw(t, "start")}
		for range rapid.IntRange(0, 30).Draw(t, "prefix") {
			_, _ = drive(tab, &s, drawEvent(t, s.State))
		}
		if s.State == Quarantined {
			return
		}
		// The happy evidence, offered twice in full: whatever of it the lease's
		// state refuses, a later state accepts.
		for range 2 {
			for _, e := range happy {
				_, _ = drive(tab, &s, e)
			}
		}
		if s.State != Released {
			t.Fatalf("lease stuck in %s with latches %b", s.State, s.Latched)
		}
	})
}
