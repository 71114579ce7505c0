package fsm_test

import (
	"errors"
	"fmt"

	"github.com/kvready/kvready/fsm"
)

// A fetch whose access proof arrives before its outcome: the table latches the
// proof, and it fences the slots only once the outcome — a miss — is in.
// Entering the fence would issue the staging→device copies; a miss has none, so
// the [nothing_to_copy] completion moves on at once, and the owner's release
// returns the slots.
func Example() {
	tab := fsm.Lifecycle()
	var lease fsm.Slot                      // the zero Slot is waiting
	facts := fsm.Facts(0).With(fsm.IsFetch) // what the engine knows of the lease
	show := func(how string, step fsm.Step) {
		line := fmt.Sprintf("%-19s %-11s %s -> %s", step.Cause(), how, step.From, step.To)
		if step.Result != fsm.NoResult {
			line += " (" + step.Result.String() + ")"
		}
		fmt.Println(line)
	}
	// settle takes the completions and re-delivers latched events after a
	// move, as the engine does, until neither applies.
	settle := func() {
		for {
			if step, ok := tab.Complete(&lease, facts); ok {
				show("completion", step)
				continue
			}
			step, ok := tab.Redeliver(&lease)
			if !ok {
				return
			}
			show("redelivered", step)
		}
	}
	fire := func(e fsm.Event) {
		step, err := tab.Fire(&lease, e)
		var refused *fsm.RefusedError
		if errors.As(err, &refused) {
			fmt.Printf("%-19s refused: %s\n", e, refused.Reason)
			return
		}
		show(step.Action.String(), step)
		if step.Action == fsm.Move {
			settle()
		}
	}
	fire(fsm.SlotsGranted)
	fire(fsm.AdmissionGranted) // the backend's bound on outstanding submissions has room
	fire(fsm.Submitted)
	fire(fsm.AccessProven) // Quiesce answered true before the outcome
	facts = facts.With(fsm.NothingToCopy)
	fire(fsm.OutcomeMissed)
	fire(fsm.OutcomeServed) // a changed answer, too late: only counted
	fire(fsm.ReleaseRequested)
	fire(fsm.ReleaseRequested)
	// Output:
	// slots_granted       move        waiting -> granted
	// [fetch]             completion  granted -> staged
	// admission_granted   move        staged -> admitted
	// submitted           move        admitted -> requested
	// access_proven       latch       requested -> requested
	// outcome_missed      move        requested -> missed (missed)
	// access_proven       redelivered missed -> access_fenced
	// [nothing_to_copy]   completion  access_fenced -> logically_complete
	// outcome_served      refused: access already proven over: the fence stands and a late answer changes nothing
	// release_requested   move        logically_complete -> released
	// release_requested   refused: released: the handle is stale
}
