package readiness

import "github.com/kvready/kvready/fsm"

// StepOf is the table's whole step behind a traced move — its effects and
// stores too — for the transcripts, which print what the table declared.
func StepOf(tr Transition) fsm.Step { return tr.step }

// CauseOf is the index of what caused step, as Transition.Cause holds it.
func CauseOf(step fsm.Step) int { return causeOfStep(step) }
