package readiness

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/kvready/kvready/staging"
)

// The engine owns the memory it lends (SPEC §4 rule 17). A Core — and so an
// Engine, which drives one — claims its staging.Memory when it is assembled:
// a second engine over memory a live one holds is refused, naming the holder
// (the error wraps staging.ErrMemoryClaimed). The claim ends when the holder
// hands the memory over: an Engine when Close or Shutdown returns, a Core
// driven by hand when HandOver is called, and either when it halts. Every
// slot that is not free at that moment — quarantined, or held by a lease the
// engine left unfinished, which an old backend or copy may still touch —
// stays out of circulation for every later engine over the memory, which
// reports it as Stats.SlotsInherited. Only the memory's release forgets them.

// holders numbers the engines and cores of the process, from 1.
var holders atomic.Uint64

// claimMemory claims mem for a new engine (kind "engine") or a core driven by
// hand ("core"), named with a number of its own and when it was assembled.
func claimMemory(mem *staging.Memory, kind string) (*staging.Claim, error) {
	name := fmt.Sprintf("%s#%d (created %s)", kind, holders.Add(1), time.Now().Format(time.RFC3339))
	claim, err := mem.Claim(name)
	if err != nil {
		return nil, fmt.Errorf("readiness: %s: %w", kind, err)
	}
	return claim, nil
}

// Name returns the core's identity: "core#N" or, for an Engine's core,
// "engine#N", with when it was assembled. A second engine over its memory is
// refused with this name.
func (c *Core) Name() string { return c.claim.Holder() }

// Name returns the engine's identity ("engine#N (created …)"): the name an
// engine refused over its memory is told.
func (e *Engine) Name() string { return e.core.Name() }

// HandOver ends the core's claim on its memory and returns how many slots the
// memory now keeps out of circulation for later engines: every slot that is
// not free in the core's allocator — quarantined, inherited, or held by a
// lease still unfinished. It closes the core first (Close), so it lends
// nothing more; the core may go on stepping its leases to their end, but
// what they free stays out for later engines. Hand over once the core has
// drained (Drained) to hand over every slot. A core that halts hands over at
// once. Calling it again changes nothing.
func (c *Core) HandOver() int {
	c.Close()
	return c.claim.End()
}

// HandedOver reports whether the core's claim on its memory has ended.
func (c *Core) HandedOver() bool { return c.claim.Ended() }

// checkClaimed asserts that the core still holds its memory before it takes
// a grant: a core that handed its memory over is closed, and Close withdraws
// every waiting lease, so a grant after the hand-over would lend a slot a
// later engine may lend too.
func (c *Core) checkClaimed(grants []staging.Ticket) bool {
	if len(grants) == 0 || !c.claim.Ended() {
		return true
	}
	c.haltWith(&InvariantError{What: fmt.Sprintf("%d grants after the memory was handed over to later engines", len(grants))})
	c.stats.InvariantBreaches++
	return false
}
