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

// Clock tells the time. Deadlines, containment deadlines and the back-off
// between Quiesce retries are measured on it; tests and simulations inject a
// manual clock.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Config assembles an Engine. Memory, TokensPerBlock and Stream are required,
// and at least one of Fetcher and Publisher.
type Config struct {
	// Memory is the staging memory the engine lends, one pool group per local
	// layer group: staging.NewMemory with the device's pinned host allocator,
	// or staging.MemoryOver slabs the caller pinned (staging.GoHeap only with
	// the simulated device).
	Memory *staging.Memory
	// TokensPerBlock is the number of token positions in one block.
	TokensPerBlock int
	// Attention is each local layer group's attention: a sliding window and
	// its sink blocks, or full attention (the zero value, and every group past
	// the end of the list). Readiness needs of a window group only its sinks
	// and its window (see staging.WindowedReadiness); staging.NeededRows says
	// which rows a fetch should carry. staging.Layout.AttentionOf reads it
	// from a layout.
	Attention []staging.Attention
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
	// are unproven (contained at their deadline) and new leases are refused.
	Health gpu.Health

	// Clock defaults to the system clock.
	Clock Clock
	// RequestTimeout is the deadline, after the submission, of a request that
	// names none (default 30s).
	RequestTimeout time.Duration
	// DrainGrace is how long access or a local copy may stay unproven once the
	// drain has started — at the request deadline at the latest — before the
	// slots are contained and OnContainment is called (default 10s).
	DrainGrace time.Duration
	// QuiesceTimeout bounds each Quiesce call (default 1s): a call that does
	// not answer in time proves nothing and is asked again later.
	QuiesceTimeout time.Duration
	// RetryBackoff is the wait before the first Quiesce retry after an answer
	// that proved nothing (default 1ms); it doubles on each retry, up to
	// MaxRetryBackoff (default 250ms). Both are measured on Clock.
	RetryBackoff, MaxRetryBackoff time.Duration
	// QuiesceWorkers is the number of goroutines that run Quiesce calls
	// (default 4).
	QuiesceWorkers int
	// KeepReleased is how many of the latest released leases stay readable
	// through their handles (default 1024).
	KeepReleased int

	// OnContainment, if set, is called on the owner goroutine when a lease is
	// contained: its containment deadline passed with backend access or a
	// local copy unproven, and its memory is held out of circulation for ever.
	// It must not call the engine.
	OnContainment func(Containment)
	// OnTransition, if set, is called on the owner goroutine for every move,
	// for tracing. It must not call the engine.
	OnTransition func(Transition)
	// Observer, if set, is shown what the engine counted, on the owner
	// goroutine, whenever it says a snapshot is due: how a metrics exporter
	// (package kvready/metrics) watches the engine. Nil costs nothing.
	Observer Observer
	// Logger receives the few events worth logging (quarantine, containment,
	// ungrantable leases, contract violations, device loss); nil means
	// slog.Default().
	Logger *slog.Logger
}

const (
	defaultQuiesceTimeout  = time.Second
	defaultRetryBackoff    = time.Millisecond
	defaultMaxRetryBackoff = 250 * time.Millisecond
	defaultQuiesceWorkers  = 4
)

func (c *Config) validate() error {
	core := c.core()
	errs := core.validate()
	if c.Fetcher == nil && c.Publisher == nil {
		errs = append(errs, errors.New("neither Fetcher nor Publisher is set; want at least one backend"))
	}
	if c.Stream == nil {
		errs = append(errs, errors.New("no Stream: want the stream that copies between staging and device memory"))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"QuiesceTimeout", c.QuiesceTimeout}, {"RetryBackoff", c.RetryBackoff}, {"MaxRetryBackoff", c.MaxRetryBackoff}} {
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
	if c.QuiesceTimeout == 0 {
		c.QuiesceTimeout = defaultQuiesceTimeout
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = defaultRetryBackoff
	}
	if c.MaxRetryBackoff == 0 {
		c.MaxRetryBackoff = defaultMaxRetryBackoff
	}
	c.MaxRetryBackoff = max(c.MaxRetryBackoff, c.RetryBackoff)
	if c.QuiesceWorkers == 0 {
		c.QuiesceWorkers = defaultQuiesceWorkers
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// core is the part of the config the Core takes.
func (c *Config) core() CoreConfig {
	return CoreConfig{
		Memory: c.Memory, TokensPerBlock: c.TokensPerBlock, Attention: c.Attention, ExtentName: c.ExtentName,
		RequestTimeout: c.RequestTimeout, DrainGrace: c.DrainGrace, KeepReleased: c.KeepReleased,
		OnTransition: c.OnTransition, Logger: c.Logger,
	}
}
