package fsm

import (
	"context"
	"testing"

	looplab "github.com/looplab/fsm"
)

// cycleEvents is one lease's moves from waiting to released; the benchmarks run
// them round and round, one transition per op.
var cycleEvents = []Event{SlotsGranted, CopiesLanded, Submitted, OutcomeServed, CopiesLanded, AccessProven, ReleaseRequested}

// BenchmarkTransition measures one transition through the compiled table and
// through looplab/fsm, side by side (SPEC §5: the table must be ≥ 50× cheaper).
func BenchmarkTransition(b *testing.B) {
	b.Run("table", func(b *testing.B) {
		tab := Lifecycle()
		var s Slot
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			if _, err := tab.Fire(&s, cycleEvents[i]); err != nil {
				b.Fatal(err)
			}
			if i++; i == len(cycleEvents) {
				i, s = 0, Slot{}
			}
		}
	})
	b.Run("looplab", func(b *testing.B) {
		names := make([]string, len(cycleEvents))
		for i, e := range cycleEvents {
			names[i] = e.String()
		}
		f := looplab.NewFSM(Waiting.String(), Declaration(), nil)
		ctx := context.Background()
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			if err := f.Event(ctx, names[i]); err != nil {
				b.Fatal(err)
			}
			if i++; i == len(names) {
				i = 0
				f.SetState(Waiting.String())
			}
		}
	})
}
