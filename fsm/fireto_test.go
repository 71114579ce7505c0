package fsm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// garbage is a step with every field set to what no fired step carries
// together, so that a field FireTo, CompleteTo or RedeliverTo forgets to write
// shows up as a difference.
var garbage = Step{From: NumStates - 1, To: NumStates - 1, Event: NumEvents - 1, Completion: true, Guard: NumGuards - 1,
	Action: Latch, Result: NumResults - 1, Effects: ^Effects(0), Stores: ^Stores(0)}

// TestStepWritersWriteEveryField checks the writers the core's door uses
// against the returning forms, from every state, with every event, every set
// of facts and every single latched event: a step they reuse (the door reuses
// one through a lease's whole settling) keeps nothing of the step before,
// and where nothing applies it is left as it was.
func TestStepWritersWriteEveryField(t *testing.T) {
	tab := Lifecycle()
	for s := range NumStates {
		for e := range NumEvents {
			a, b := Slot{State: s, Latched: 1 << ((e + 1) % NumEvents)}, Slot{State: s, Latched: 1 << ((e + 1) % NumEvents)}
			want, wantErr := tab.Fire(&a, e)
			got := garbage
			err := tab.FireTo(&b, e, &got)
			require.Equal(t, want, got, "FireTo(%s) in %s", e, s)
			require.Equal(t, wantErr, err, "FireTo(%s) in %s", e, s)
			require.Equal(t, a, b, "FireTo(%s) in %s: the slot", e, s)
		}
		for f := range Facts(1<<NumGuards - 1) {
			a, b := Slot{State: s}, Slot{State: s}
			want, ok := tab.Complete(&a, f)
			got := garbage
			require.Equal(t, ok, tab.CompleteTo(&b, f, &got), "CompleteTo in %s with facts %b", s, f)
			if !ok {
				want = garbage // left as it was
			}
			require.Equal(t, want, got, "CompleteTo in %s with facts %b", s, f)
			require.Equal(t, a, b, "CompleteTo in %s with facts %b: the slot", s, f)
		}
		for e := range NumEvents {
			a, b := Slot{State: s, Latched: 1 << e}, Slot{State: s, Latched: 1 << e}
			want, ok := tab.Redeliver(&a)
			got := garbage
			require.Equal(t, ok, tab.RedeliverTo(&b, &got), "RedeliverTo of %s in %s", e, s)
			if !ok {
				want = garbage
			}
			require.Equal(t, want, got, "RedeliverTo of %s in %s", e, s)
			require.Equal(t, a, b, "RedeliverTo of %s in %s: the slot", e, s)
		}
	}
}
