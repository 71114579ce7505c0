package diagram_test

import (
	"fmt"
	"strings"

	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/fsm/diagram"
)

// The Mermaid drawing labels latches — evidence kept for a later state — as
// self-loops.
func ExampleMermaid() {
	for _, line := range strings.Split(diagram.Mermaid(fsm.Lifecycle()), "\n") {
		if strings.HasPrefix(line, "    requested -->") {
			fmt.Println(strings.TrimSpace(line))
		}
	}
	// Output:
	// requested --> served : outcome_served
	// requested --> partial : outcome_partial
	// requested --> missed : outcome_missed
	// requested --> failed : outcome_failed, outcome_cancelled, contract_violation, deadline
	// requested --> requested : access_proven, release_requested, close / latch
	// requested --> quarantined : access_unproven, drain_expired
}
