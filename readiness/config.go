package readiness

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/staging"
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

// systemClock is the default clock: the system's monotonic clock, counted
// from the wall time it was made at. A read is one monotonic clock read, not
// time.Now's two (wall and monotonic): the runner reads it every round, and on
// a virtual machine a clock read can cost as much as a lease's transitions. A
// step of the wall clock (a settimeofday, a leap) moves no deadline.
type systemClock struct {
	base   time.Time
	baseNs int64 // base.UnixNano()
}

func newSystemClock() systemClock {
	now := time.Now()
	return systemClock{base: now, baseNs: now.UnixNano()}
}

func (c systemClock) Now() time.Time { return c.base.Add(time.Since(c.base)) }

// unixNano is Now().UnixNano() without building the Time: the round's Tick
// takes nanoseconds, and building a Time only to take it apart again cost
// more than the clock read itself.
func (c systemClock) unixNano() int64 { return c.baseNs + int64(time.Since(c.base)) }

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

// Config assembles an Engine. Memory, TokensPerBlock and Stream are
// required, and at least one of Fetcher and Publisher; every duration left at
// zero takes its default.
type Config struct {
	// Memory is the staging memory the engine lends, one pool group per local
	// layer group: staging.NewMemory with the device's pinned host allocator,
	// or staging.MemoryOver slabs the caller pinned (staging.GoHeap only with
	// the simulated device). Required.
	Memory *staging.Memory
	// TokensPerBlock is the number of token positions in one block. Required.
	TokensPerBlock int
	// Attention is each local layer group's attention: a sliding window and
	// its sink blocks, or full attention (the zero value, and every group past
	// the end of the list). Readiness needs of a window group only its sinks
	// and its window (see staging.WindowedReadiness).
	Attention []staging.Attention
	// ExtentName is the extent namespace; empty means staging.ExtentName.
	ExtentName []byte
	// Layers is, for each local layer group, its layers in ascending layer
	// id with the byte spans each occupies in one of the group's slots
	// (LayersOf builds it from a staging.Layout). A fetch's staging→device
	// copies then go layer by layer — each layer's spans of every served
	// row, then one event — and layer l is ready, and the owner woken, when
	// its event completed (SPEC §4 rule 16): LayerReadiness, WaitLayer. A
	// row's device memory mirrors its staging slot. Empty: the whole slot is
	// one layer.
	Layers [][]staging.LayerSpans

	// RequestTimeout is the deadline, after the submission, of a request that
	// names none (default 30s).
	RequestTimeout time.Duration
	// DrainGrace is how long access or a local copy may stay unproven once the
	// drain has started — at the request deadline at the latest, earlier on a
	// failure, a cancel, a Quiesce that could not answer true, an escaped
	// submission or a failed copy — before the slots are contained (default
	// 10s).
	DrainGrace time.Duration
	// QuiesceTimeout bounds each Quiesce call (default 1s). On the engine's
	// clock it decides: a call still unanswered then proves nothing for now —
	// the drain starts, and its context is cancelled — though a true it
	// answers later is still taken. The call's context is also cancelled
	// after as long in real time, so that a backend waiting on a clock that
	// does not move never pins a worker.
	QuiesceTimeout time.Duration
	// RetryBackoff is the wait before asking Quiesce again after an answer
	// that proved nothing (default 1ms); it doubles on each retry, up to
	// MaxRetryBackoff (default 250ms).
	RetryBackoff, MaxRetryBackoff time.Duration
	// KeepReleased is how many of the latest released leases stay readable
	// through their handles (Lease, Readiness); default 1024.
	KeepReleased int

	// MaxOutstanding bounds the submissions outstanding at the backend: from
	// admission until the lease's access is fenced (or it is contained). A
	// staged lease beyond the bound waits, holding its slots but exposing
	// nothing, in arrival order (SPEC §4 rule 12): its request deadline starts
	// only at its submission, so it measures the backend's service, never the
	// engine's queue. 0 means the backends' own AdmissionLimit (see
	// Admitter), or no bound.
	MaxOutstanding int
	// Containment is what containment does (SPEC §4 rule 5): Quarantine (the
	// default), Fatal or Recover.
	Containment Policy
	// RecoverEvery is how often a contained lease's backend is asked again
	// under the Recover policy (default 1s): the slow cadence.
	RecoverEvery time.Duration

	// OnTransition, if set, is called on the owner goroutine for every move,
	// for tracing. It must not call the engine.
	OnTransition func(Transition)
	// Logger receives the few events worth logging (quarantine, containment,
	// ungrantable leases, contract violations, device loss, a halt); nil
	// means slog.Default().
	Logger *slog.Logger

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

	// Clock defaults to the system clock: its monotonic reading, counted from
	// the wall time the engine was made at, so that a step of the wall clock
	// moves no deadline.
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

// Defaults returns the config a zero Config assembles with: every setting
// that has a default holds it (the same withDefaults New applies, the one
// place defaults are set), Clock is the system clock and Logger
// slog.Default(); what is required or optional (Memory, TokensPerBlock,
// the backends, Stream, the callbacks) is left zero. The C ABI hands these
// to its embedders (kvready_engine_config_defaults), and the Python binding
// reads its defaults from there.
func Defaults() Config { return Config{}.withDefaults() }

// validate names every problem of the config at once, wrapped in one error;
// nil means it assembles. A Core needs the lifecycle's settings; an Engine
// (engine true) its backends and stream as well.
func (c *Config) validate(engine bool) error {
	errs := c.validateLifecycle()
	if engine {
		if c.Fetcher == nil && c.Publisher == nil {
			errs = append(errs, errors.New("neither Fetcher nor Publisher is set; want at least one backend"))
		}
		if c.Stream == nil {
			errs = append(errs, errors.New("no Stream: want the stream that copies between staging and device memory"))
		}
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
// When MaxOutstanding is 0, the engine bounds the submissions outstanding
// at its backends by the smallest positive AdmissionLimit they report.
type Admitter interface {
	AdmissionLimit() int
}

// admissionLimit is the smallest positive AdmissionLimit of the backends
// that report one; 0 when none does. A backend that panics in it reports
// nothing (its fault is its own: it costs no bound, and no engine).
func admissionLimit(backends ...any) int {
	limit := 0
	for _, be := range backends {
		a, ok := be.(Admitter)
		if !ok {
			continue
		}
		n := func() (n int) {
			defer func() {
				if recover() != nil {
					n = 0
				}
			}()
			return a.AdmissionLimit()
		}()
		if n > 0 && (limit == 0 || n < limit) {
			limit = n
		}
	}
	return limit
}
