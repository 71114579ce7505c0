package fsm_test

import (
	"errors"
	"fmt"

	"github.com/kvready/kvready/fsm"
)

// A lease's access proof arrives before its outcome: the table latches it, and
// it fences the slots only once the outcome is in and the local copies landed.
func Example() {
	tab := fsm.Lifecycle()
	var lease fsm.Slot // the zero Slot is waiting
	fire := func(e fsm.Event) {
		step, err := tab.Fire(&lease, e)
		var refused *fsm.RefusedError
		if errors.As(err, &refused) {
			fmt.Printf("%-17s refused: %s\n", e, refused.Reason)
			return
		}
		fmt.Printf("%-17s %s: %s -> %s\n", e, step.Kind, step.From, step.To)
		for step.Kind == fsm.Move {
			again, ok := tab.Redeliver(&lease)
			if !ok {
				break
			}
			fmt.Printf("%-17s redelivered: %s -> %s\n", again.Event, again.From, again.To)
		}
	}
	for _, e := range []fsm.Event{
		fsm.SlotsGranted, fsm.CopiesLanded, fsm.Submitted,
		fsm.AccessProven, fsm.ReleaseRequested, fsm.OutcomeMissed,
		fsm.ContractViolation, fsm.CopiesLanded, fsm.ReleaseRequested,
	} {
		fire(e)
	}
	// Output:
	// slots_granted     move: waiting -> granted
	// copies_landed     move: granted -> staged
	// submitted         move: staged -> requested
	// access_proven     latch: requested -> requested
	// release_requested latch: requested -> requested
	// outcome_missed    move: requested -> missed
	// contract_violation refused: a latched miss stays a miss; the violation is counted separately
	// copies_landed     move: missed -> logically_complete
	// access_proven     redelivered: logically_complete -> access_fenced
	// release_requested redelivered: access_fenced -> released
	// release_requested refused: released: the handle is stale
}
