package readiness

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/staging"
)

// Clock tells the time. Tests and simulations inject a manual clock; deadlines
// and drain periods are measured on it.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Config assembles an engine. Memory, TokensPerBlock and Stream are required,
// and at least one of Fetcher and Publisher.
type Config struct {
	// Memory is the staging memory the engine lends, one pool group per local
	// layer group.
	Memory *Memory
	// TokensPerBlock is the number of token positions in one block.
	TokensPerBlock int
	// ExtentName is the extent namespace; empty means staging.ExtentName.
	ExtentName []byte

	// Fetcher serves fetches; nil refuses fetch leases.
	Fetcher contract.Fetcher
	// Publisher serves publishes; nil refuses publish leases.
	Publisher contract.Publisher

	// Stream carries the copies between staging and device memory.
	Stream gpu.Stream
	// Device is the ordinal Health is asked about.
	Device int
	// Health, if set, reports device loss; a lost device's in-flight copies
	// are unproven and new leases are refused.
	Health gpu.Health

	// Clock defaults to the system clock.
	Clock Clock
	// RequestTimeout is the deadline of a request that names none (default 30s).
	RequestTimeout time.Duration
	// DrainGrace is how long, after a deadline or Close, access may stay
	// unproven before the slots are quarantined and OnContainment is raised
	// (default 10s). It also bounds each Quiesce call.
	DrainGrace time.Duration
	// QuiesceWorkers is the number of goroutines that run Quiesce (default 4).
	QuiesceWorkers int
	// Inline makes the engine poll attempts and run Quiesce on the owner
	// goroutine, inside Progress, instead of on background goroutines. Rounds
	// are then deterministic, for simulation and property tests; a round costs
	// O(attempts pending), and a Quiesce that blocks blocks Progress. Use it
	// only with backends that answer Quiesce at once.
	Inline bool

	// OnContainment, if set, is called on the owner goroutine when a drain
	// grace period expires with access unproven: memory a backend may still
	// write is held out of circulation for ever, and the process is in a state
	// an operator must know about.
	OnContainment func(Containment)
	// OnTransition, if set, is called on the owner goroutine for every state
	// change, for tracing. It must not call the engine.
	OnTransition func(Transition)
	// Logger receives the few events worth logging (quarantine, containment,
	// contract violations, device loss); nil means slog.Default().
	Logger *slog.Logger
}

// Transition is one state change of one lease.
type Transition struct {
	Lease    Handle
	From, To fsm.State
	Cause    fsm.Event
}

// Containment is the fatal signal raised when a drain grace period expires
// with a backend's access to a lease's memory still unproven.
type Containment struct {
	Lease  Handle
	Slots  int
	Reason string
}

const (
	defaultRequestTimeout = 30 * time.Second
	defaultDrainGrace     = 10 * time.Second
	defaultQuiesceWorkers = 4
)

func (c *Config) validate() error {
	var errs []error
	if c.Memory == nil {
		errs = append(errs, errors.New("no Memory: want the staging memory from NewMemory"))
	}
	if c.TokensPerBlock <= 0 {
		errs = append(errs, fmt.Errorf("TokensPerBlock = %d; want a positive number", c.TokensPerBlock))
	}
	if c.Fetcher == nil && c.Publisher == nil {
		errs = append(errs, errors.New("neither Fetcher nor Publisher is set; want at least one backend"))
	}
	if c.Stream == nil {
		errs = append(errs, errors.New("no Stream: want the stream that copies between staging and device memory"))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"RequestTimeout", c.RequestTimeout}, {"DrainGrace", c.DrainGrace}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s = %v; want a non-negative duration (0 means the default)", d.name, d.v))
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

func (c *Config) applyDefaults() {
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = defaultRequestTimeout
	}
	if c.DrainGrace == 0 {
		c.DrainGrace = defaultDrainGrace
	}
	if c.QuiesceWorkers == 0 {
		c.QuiesceWorkers = defaultQuiesceWorkers
	}
	if len(c.ExtentName) == 0 {
		c.ExtentName = []byte(staging.ExtentName)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}
