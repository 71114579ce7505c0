package fsm_test

import (
	"context"
	"testing"

	looplab "github.com/looplab/fsm"

	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/fsm/declaration"
)

// cycleStep is one transition of a lease's lifecycle: an event, or the
// completion its guard takes.
type cycleStep struct {
	completion bool
	event      fsm.Event
	guard      fsm.Guard
}

// cycle is a served fetch from waiting to released, one transition per step;
// the benchmarks run it round and round.
var cycle = []cycleStep{
	{event: fsm.SlotsGranted},
	{completion: true, guard: fsm.IsFetch},
	{event: fsm.AdmissionGranted},
	{event: fsm.Submitted},
	{event: fsm.OutcomeServed},
	{event: fsm.AccessProven},
	{event: fsm.CopiesLanded},
	{event: fsm.ReleaseRequested},
}

// BenchmarkTransition measures one transition through the compiled table and
// through looplab/fsm, side by side (SPEC §5: the table must be ≥ 50× cheaper,
// with no allocation). A completion goes through Table.Complete on the table
// and through the event named "[guard]" on looplab.
func BenchmarkTransition(b *testing.B) {
	b.Run("table", func(b *testing.B) {
		tab := fsm.Lifecycle()
		facts := fsm.Facts(0).With(fsm.IsFetch)
		var s fsm.Slot
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			c := &cycle[i]
			if c.completion {
				if _, ok := tab.Complete(&s, facts); !ok {
					b.Fatalf("no completion in %s", s.State)
				}
			} else if _, err := tab.Fire(&s, c.event); err != nil {
				b.Fatal(err)
			}
			if i++; i == len(cycle) {
				i, s = 0, fsm.Slot{}
			}
		}
	})
	b.Run("looplab", func(b *testing.B) {
		names := make([]string, len(cycle))
		for i, c := range cycle {
			names[i] = c.event.String()
			if c.completion {
				names[i] = fsm.CompletionName(c.guard)
			}
		}
		f := looplab.NewFSM(fsm.Waiting.String(), declaration.Lifecycle(), nil)
		ctx := context.Background()
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			if err := f.Event(ctx, names[i]); err != nil {
				b.Fatal(err)
			}
			if i++; i == len(names) {
				i = 0
				f.SetState(fsm.Waiting.String())
			}
		}
	})
}
