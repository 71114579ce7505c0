package diagram_test

import (
	"fmt"
	"strings"

	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/fsm/diagram"
)

// The Mermaid drawing labels each move with the outcome it latches,
// completions with their guard in brackets, and latches — evidence kept for a
// later state — as self-loops.
func ExampleMermaid() {
	for _, line := range strings.Split(diagram.Mermaid(fsm.Lifecycle()), "\n") {
		if strings.HasPrefix(line, "    staged -->") || strings.HasPrefix(line, "    requested -->") {
			fmt.Println(strings.TrimSpace(line))
		}
	}
	// Output:
	// staged --> access_fenced : [withdrawn]
	// staged --> failed : [staging_incomplete] (failed)
	// staged --> failed : [deadline_passed] (timeout)
	// staged --> requested : submitted
	// staged --> failed : rejected (rejected), submit_escaped (failed)
	// staged --> staged : release_requested, close / latch
	// requested --> served : outcome_served (served)
	// requested --> partial : outcome_partial (partial)
	// requested --> missed : outcome_missed (missed)
	// requested --> failed : outcome_failed (failed), outcome_cancelled (cancelled), contract_violation (violation), deadline (timeout)
	// requested --> quarantined : containment
	// requested --> requested : access_proven, access_unproven, release_requested, close / latch
}
