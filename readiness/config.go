package readiness

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/readiness/core"
)

// Clock tells the time. Deadlines, containment deadlines, Quiesce timeouts
// and the back-off between Quiesce retries are measured on it; tests and
// simulations inject a manual clock.
type Clock interface {
	Now() time.Time
}

// TimerClock is a Clock that can also wake the engine when it reaches a time.
// The engine uses it to wake its owner at the next deadline; the system clock
// is one, and so is a manual clock that fires when advanced (gpu/sim's
// ManualClock). With a Clock that is not a TimerClock, deadlines fire only
// when the owner runs a round.
type TimerClock interface {
	Clock
	// NewTimer returns a stopped timer that calls f, from any goroutine, once
	// the clock has moved the duration of its latest Reset past the moment of
	// that Reset; Reset replaces any earlier arming, Stop disarms it. The
	// engine makes one and resets it every round it needs to: arming it must
	// not allocate. (The result is an unnamed interface so that a clock need
	// not import this package to be one.)
	NewTimer(f func()) interface {
		Reset(d time.Duration)
		Stop()
	}
}

// Timer is what a TimerClock's NewTimer returns.
type Timer = interface {
	Reset(d time.Duration)
	Stop()
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(f func()) interface {
	Reset(d time.Duration)
	Stop()
} {
	t := time.AfterFunc(time.Hour, f)
	t.Stop()
	return wallTimer{t}
}

type wallTimer struct{ t *time.Timer }

func (w wallTimer) Reset(d time.Duration) { w.t.Reset(d) }
func (w wallTimer) Stop()                 { w.t.Stop() }

// Config assembles an Engine. Core.Memory, Core.TokensPerBlock and Stream are
// required, and at least one of Fetcher and Publisher.
type Config struct {
	// Core is the lifecycle's configuration: the staging memory, tokens per
	// block, attention, and every deadline, grace, timeout and back-off.
	Core core.Config

	// Fetcher serves fetches; nil refuses fetch leases.
	Fetcher contract.Fetcher
	// Publisher serves publishes; nil refuses publish leases.
	Publisher contract.Publisher

	// Stream carries the copies between staging and device memory.
	Stream gpu.Stream
	// Device is the ordinal Health is asked about.
	Device int
	// Health, if set, reports device loss; a lost device's in-flight copies
	// are unproven (contained at their deadline) and new leases are refused.
	Health gpu.Health

	// Clock defaults to the system clock.
	Clock Clock
	// QuiesceWorkers is the number of goroutines that run each backend's
	// Quiesce calls (default 4, started with the first call): the contract
	// lets Quiesce block, so it never runs on the owner goroutine. A backend
	// that answers its proofs without blocking (contract.QuiesceProber) needs
	// them only for what it cannot answer now.
	QuiesceWorkers int

	// OnWake, if set, is called whenever Wake is signalled — from the owner
	// goroutine for work its own calls made, from any other goroutine for a
	// completion, a Quiesce answer, a landed copy or a deadline — so that an
	// owner that sleeps on something else (a pollable descriptor, an event
	// loop's future) is woken without a goroutine forwarding Wake to it. It
	// must not block nor call the engine.
	OnWake func()

	// OnContainment, if set, is called on the owner goroutine when a lease is
	// contained: its containment deadline passed with backend access or a
	// local copy unproven, and its memory is held out of circulation. It must
	// not call the engine.
	OnContainment func(Containment)
	// OnRecovery, if set, is called on the owner goroutine when a contained
	// lease's access was proven over after all (the Recover policy): its
	// slots return as any fenced lease's do. It must not call the engine.
	OnRecovery func(Handle)
	// OnHalt, if set, is called once on the owner goroutine when the engine
	// halts (a broken invariant, or a containment under the fatal policy):
	// from then on it releases nothing and every call that would change
	// anything is refused with ErrHalted. It must not call the engine.
	OnHalt func(error)
	// Observer, if set, is shown what the engine counted, on the owner
	// goroutine, whenever it says a snapshot is due: how a metrics exporter
	// (package kvready/metrics) watches the engine. Nil costs nothing.
	Observer Observer
}

const defaultQuiesceWorkers = 4

func (c *Config) validate() error {
	errs := c.Core.Validate()
	if c.Fetcher == nil && c.Publisher == nil {
		errs = append(errs, errors.New("neither Fetcher nor Publisher is set; want at least one backend"))
	}
	if c.Stream == nil {
		errs = append(errs, errors.New("no Stream: want the stream that copies between staging and device memory"))
	}
	if c.QuiesceWorkers < 0 {
		errs = append(errs, fmt.Errorf("QuiesceWorkers = %d; want a non-negative number (0 means the default)", c.QuiesceWorkers))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("readiness: invalid config: %w", err)
	}
	return nil
}

// Admitter is what a backend may implement to say how many submissions it can
// serve at once without queueing inside itself (its connection pool, say).
// When Core.MaxOutstanding is 0, the engine bounds the submissions outstanding
// at its backends by the smallest positive AdmissionLimit they report.
type Admitter interface {
	AdmissionLimit() int
}

func (c *Config) applyDefaults() {
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.Core.MaxOutstanding == 0 {
		for _, be := range []any{c.Fetcher, c.Publisher} {
			if a, ok := be.(Admitter); ok {
				if n := a.AdmissionLimit(); n > 0 && (c.Core.MaxOutstanding == 0 || n < c.Core.MaxOutstanding) {
					c.Core.MaxOutstanding = n
				}
			}
		}
	}
	if c.QuiesceWorkers == 0 {
		c.QuiesceWorkers = defaultQuiesceWorkers
	}
}
