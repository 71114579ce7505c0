package simulate

import (
	"sync"
	"time"
)

// epoch is the virtual clock's start: an ordinary instant, so that durations
// printed from it read naturally.
var epoch = time.Unix(1_800_000_000, 0)

// clock is the virtual clock shared by the engine, the device and the driver.
// The driver advances it; readers may be on other goroutines (the device's
// completion check), hence the lock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: epoch} }

// Now implements readiness.Clock and sim.Clock.
func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// since returns the virtual time elapsed since the start.
func (c *clock) since() time.Duration { return c.Now().Sub(epoch) }
