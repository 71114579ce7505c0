package diagram_test

import (
	"fmt"
	"strings"

	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/fsm/diagram"
)

// The Mermaid drawing labels each move with the outcome it latches and the
// marks it gives, completions with their guard in brackets, latches — evidence
// kept for a later state — as self-loops with what keeping them does, and each
// state with its effects: on entry, and where a lease comes to rest.
func ExampleMermaid() {
	for _, line := range strings.Split(diagram.Mermaid(fsm.Lifecycle()), "\n") {
		if strings.HasPrefix(line, "    staged ") || strings.HasPrefix(line, "    requested ") {
			fmt.Println(strings.TrimSpace(line))
		}
	}
	// Output:
	// staged : rest / admit
	// requested : entry / arm_deadline
	// staged --> access_fenced : [cancel_withdrawn] (cancelled)
	// staged --> access_fenced : [withdrawn]
	// staged --> failed : [staging_incomplete] (failed)
	// staged --> failed : [deadline_passed] (timeout)
	// staged --> admitted : admission_granted
	// staged --> failed : deadline (timeout)
	// staged --> access_fenced : cancel_requested (cancelled), release_requested keep, close (cancelled) keep
	// requested --> served : outcome_served (served)
	// requested --> partial : outcome_partial (partial)
	// requested --> missed : outcome_missed (missed)
	// requested --> failed : outcome_failed (failed), outcome_cancelled (cancelled), contract_violation (violation), deadline (timeout), cancel_requested (cancelled), close (cancelled) keep
	// requested --> contained : containment
	// requested --> requested : access_proven, access_unproven, release_requested, retry {ask_proof} / latch
}
