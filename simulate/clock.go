package simulate

import (
	"time"

	"github.com/kvready/kvready/gpu/sim"
)

// epoch is the virtual clock's start: an ordinary instant, so that durations
// printed from it read naturally.
var epoch = time.Unix(1_800_000_000, 0)

// clock is the time the driver, the device and (on the virtual clock) the
// engine share. since is the time elapsed since the start of the run; Advance
// moves a virtual clock forward and makes a real one wait.
type clock interface {
	Now() time.Time
	since() time.Duration
	Advance(d time.Duration)
	// real reports whether this is the system clock.
	real() bool
}

// virtualClock is the virtual clock of a run over the in-process store. The
// driver advances it; readers may be on other goroutines (the device's
// completion check), which sim.ManualClock's lock allows.
type virtualClock struct{ *sim.ManualClock }

func newVirtualClock() *virtualClock { return &virtualClock{sim.NewManualClock(epoch)} }

func (c *virtualClock) since() time.Duration { return c.Now().Sub(epoch) }
func (c *virtualClock) real() bool           { return false }

// realClock is the system clock, for a run over a real store: the store
// answers in real time, so everything else runs on it too.
type realClock struct{ start time.Time }

func newRealClock() *realClock { return &realClock{start: time.Now()} }

func (c *realClock) Now() time.Time          { return time.Now() }
func (c *realClock) since() time.Duration    { return time.Since(c.start) }
func (c *realClock) Advance(d time.Duration) { time.Sleep(d) }
func (c *realClock) real() bool              { return true }
