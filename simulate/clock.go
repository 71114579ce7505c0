package simulate

import (
	"time"

	"github.com/kvready/kvready/gpu/sim"
)

// epoch is the virtual clock's start: an ordinary instant, so that durations
// printed from it read naturally.
var epoch = time.Unix(1_800_000_000, 0)

// clock is the virtual clock shared by the engine, the device and the driver.
// The driver advances it; readers may be on other goroutines (the device's
// completion check), which sim.ManualClock's lock allows.
type clock struct{ *sim.ManualClock }

func newClock() *clock { return &clock{sim.NewManualClock(epoch)} }

// since returns the virtual time elapsed since the start.
func (c *clock) since() time.Duration { return c.Now().Sub(epoch) }
