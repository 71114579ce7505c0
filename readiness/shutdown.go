package readiness

import (
	"fmt"

	"github.com/kvready/kvready/fsm"
)

// undrained says why a shutdown stopped waiting: the slots still held, how
// many leases hold them with access or a copy still unproven, the slots
// quarantined, and the Quiesce calls still out — a drain also waits for those
// to answer, so a Quiesce that never returns keeps an engine whose slots are
// all quarantined from draining.
func undrained(rep Report, unanswered int64) string {
	tab := fsm.Lifecycle()
	unproven := 0
	for s, n := range rep.Held {
		if st := fsm.State(s); tab.Containable(st) || st == fsm.Contained {
			unproven += n
		}
	}
	return fmt.Sprintf("shutdown did not drain: %d slots still held (%d leases with access or a copy still unproven), %d slots quarantined, %d Quiesce calls still unanswered",
		rep.SlotsHeld, unproven, rep.SlotsQuarantined, unanswered)
}
