package redis

import (
	"errors"
	"fmt"
	"time"
)

// Defaults of the options.
const (
	// DefaultAttemptTimeout bounds each fetch, publication and probe, from
	// its submission: everything the attempt does (waiting for a worker and
	// a connection, dialling, retries, the network calls, the copies into
	// staging) ends by then, so Quiesce answers true at most this long after
	// the submission, plus scheduling. It must fit inside the engine's
	// request deadline plus its drain grace (docs/backend-redis.md, "Sizing").
	DefaultAttemptTimeout = 2 * time.Second
	// DefaultTimeout is DefaultAttemptTimeout under its earlier name.
	DefaultTimeout = DefaultAttemptTimeout
	// DefaultConcurrency is the number of worker goroutines making network
	// calls: with one call per attempt, the attempts served at once.
	DefaultConcurrency = 8
	// DefaultBatch is the number of keys in one pipelined network call.
	DefaultBatch = 8
	// DefaultBreakerFailures is how many calls in a row must fail with a
	// connection error before the store is held for down (WithBreaker); one
	// call with no reply within its bound is enough on its own. A dead
	// store refuses at once, so it opens within microseconds; a hung one
	// within one attempt bound, even for a manager that sends one request
	// at a time.
	DefaultBreakerFailures = 3
	// DefaultBreakerProbe and DefaultBreakerProbeMax are the first and the
	// longest wait between the PINGs that look for the store's return while
	// it is held for down (WithBreakerProbe): the waits double from the one
	// to the other.
	DefaultBreakerProbe    = 100 * time.Millisecond
	DefaultBreakerProbeMax = 2 * time.Second
)

type settings struct {
	prefix  string
	policy  SlotPolicy
	ttl     time.Duration
	timeout time.Duration // the attempt bound
	workers int
	batch   int
	batched bool // WithBatch was given: publications keep it too
	units   int  // units a typical attempt carries; 0: at most one batch
	noProbe bool

	breakAfter           int // connection errors in a row that open the breaker; 0: never
	probeFirst, probeMax time.Duration
	onHealth             func(HealthChange)
}

func defaults() settings {
	return settings{
		prefix:  DefaultPrefix,
		timeout: DefaultAttemptTimeout,
		workers: DefaultConcurrency,
		batch:   DefaultBatch,

		breakAfter: DefaultBreakerFailures,
		probeFirst: DefaultBreakerProbe,
		probeMax:   DefaultBreakerProbeMax,
	}
}

// apply applies opts to the defaults and reports every bad option at once.
func apply(method string, opts []Option) (settings, error) {
	s := defaults()
	var errs []error
	for i, o := range opts {
		if o == nil {
			errs = append(errs, fmt.Errorf("option %d is nil", i))
			continue
		}
		if err := o(&s); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return settings{}, fmt.Errorf("redis: %s: %w", method, errors.Join(errs...))
	}
	return s, nil
}

// callsPerAttempt is how many pipelined calls a typical attempt needs.
func (s *settings) callsPerAttempt() int {
	if s.units <= s.batch {
		return 1
	}
	return (s.units + s.batch - 1) / s.batch
}

// Option configures a Backend.
type Option func(*settings) error

// WithPrefix sets the key prefix (default DefaultPrefix). Two deployments with
// different prefixes share a server without seeing each other's units. The
// prefix may not contain '{' or '}', which would take over the Cluster hash tag.
func WithPrefix(prefix string) Option {
	return func(s *settings) error {
		if err := checkPrefix(prefix); err != nil {
			return fmt.Errorf("WithPrefix: %w", err)
		}
		s.prefix = prefix
		return nil
	}
}

// WithSlotPolicy sets how keys map to Cluster hash slots (default SlotPerBlock).
// Every process sharing a store must use the same policy, or they will not
// find each other's units.
func WithSlotPolicy(p SlotPolicy) Option {
	return func(s *settings) error {
		if p != SlotPerBlock && p != SlotPerUnit {
			return fmt.Errorf("WithSlotPolicy(%d): want SlotPerBlock or SlotPerUnit", int(p))
		}
		s.policy = p
		return nil
	}
}

// WithTTL makes publications expire after ttl (default 0: never; the server's
// eviction policy then decides). A unit that already exists keeps its own
// expiry: SET NX does not write it again. ttl is rounded down to milliseconds.
// With a TTL every name goes as its own SET NX, never as a run in MSETNX,
// which takes no expiry.
func WithTTL(ttl time.Duration) Option {
	return func(s *settings) error {
		if ttl != 0 && ttl < time.Millisecond {
			return fmt.Errorf("WithTTL(%v): want 0 (no expiry) or at least 1ms", ttl)
		}
		s.ttl = ttl.Truncate(time.Millisecond)
		return nil
	}
}

// WithAttemptTimeout sets the attempt bound (default DefaultAttemptTimeout):
// every fetch, publication and probe ends within d of its submission. An
// attempt with no answer by then reports Failed("timeout: ...") and its work
// ends: it waits for no worker or connection any longer, a call still waiting
// for a connection or a dial is abandoned, and a call on the wire ends at its
// socket deadline (a client built by Open, or any client with
// ContextTimeoutEnabled, sets it from the attempt's deadline). Quiesce then
// answers true: a fetch copies nothing after the bound, and a publication
// reads staging no longer.
//
// Size it so that d plus a scheduling margin fits inside the engine's request
// deadline plus its drain grace: then a dead, paused or evicting store costs
// the requests in flight, never a lease's slots (docs/backend-redis.md).
func WithAttemptTimeout(d time.Duration) Option {
	return func(s *settings) error {
		if d <= 0 {
			return fmt.Errorf("WithAttemptTimeout(%v): want a positive duration", d)
		}
		s.timeout = d
		return nil
	}
}

// WithTimeout is WithAttemptTimeout under its earlier name: it sets the
// same attempt bound, and reports a bad value as WithTimeout.
func WithTimeout(d time.Duration) Option {
	return func(s *settings) error {
		if d <= 0 {
			return fmt.Errorf("WithTimeout(%v): want a positive duration", d)
		}
		s.timeout = d
		return nil
	}
}

// WithConcurrency sets how many worker goroutines make network calls (default
// DefaultConcurrency), shared by every submission of the backend. Each holds
// at most one connection at a time; Open sizes the client's pools to match.
func WithConcurrency(n int) Option {
	return func(s *settings) error {
		if n < 1 || n > 1024 {
			return fmt.Errorf("WithConcurrency(%d): want 1 to 1024 workers", n)
		}
		s.workers = n
		return nil
	}
}

// WithBatch sets how many keys one pipelined network call carries (default
// DefaultBatch). A submission of more units is split into several calls,
// which the workers run in parallel.
//
// Without it, a publication of rows of 256 KiB or more (a call of
// DefaultBatch of them is 2 MiB or more) is split into at most one call per
// two of the machine's cores (GOMAXPROCS/2, at least one) — each call a busy
// writer thread — and never into calls smaller than DefaultBatch: on a 2-core
// machine, which often shares its cores with the server, such a lease is one
// pipeline, as a bare client sends it. Smaller rows go in calls of
// DefaultBatch side by side, which pays for itself (docs/backend-redis.md,
// Performance). Fetches are split by DefaultBatch: parallel reads pay too.
func WithBatch(n int) Option {
	return func(s *settings) error {
		if n < 1 || n > 1<<16 {
			return fmt.Errorf("WithBatch(%d): want 1 to 65536 keys", n)
		}
		s.batch, s.batched = n, true
		return nil
	}
}

// WithUnitsPerAttempt tells the backend how many units a typical attempt
// carries (a lease's blocks × layer groups), for AdmissionLimit: an attempt
// of n units needs ceil(n / batch) pipelined calls, each holding a worker.
// Default 0: attempts of at most one batch. It changes nothing else.
func WithUnitsPerAttempt(n int) Option {
	return func(s *settings) error {
		if n < 0 || n > 1<<24 {
			return fmt.Errorf("WithUnitsPerAttempt(%d): want 0 (at most one batch) to 16777216 units", n)
		}
		s.units = n
		return nil
	}
}

// WithoutProbe makes Probe answer "cannot answer cheaply" (answered false, no
// error) instead of asking the server: for deployments where a probe's round
// trip costs about as much as the fetch it would save.
func WithoutProbe() Option {
	return func(s *settings) error { s.noProbe = true; return nil }
}

// WithBreaker sets how many network calls in a row must fail with a
// connection error (refused, reset, closed by the server) before the backend
// holds the store for down (default DefaultBreakerFailures); 0 never does.
// One call with no reply within its attempt's bound (a hung store, a black
// hole, a dial that timed out) holds it for down on its own, so that a
// manager sending one request at a time learns it within one bound: such a
// call counts only if it waited at least half the bound and at least 100ms
// (a call that timed out well under its bound, picked up late or under a
// bound too tight for the store, never counts), and only with no other call
// answered meanwhile (a store that answers others is slow, not down). If the
// store was only slow, the probe's first PING closes the breaker again. A
// call the store answers, with a value, a miss or a server error, ends a run
// of connection errors.
//
// While the store is held for down, Fetch and Publish refuse at once with an
// error wrapping contract.ErrSubmissionRejected and ErrUnavailable — nothing
// escaped, so an engine returns the lease's slots at once, and the outcome
// is a failure, never a miss — and Probe answers ErrUnavailable. Attempts
// already in flight keep their bound; their batches not yet sent fail
// without being sent. A PING on a backoff (WithBreakerProbe) ends the outage
// when the store answers it.
func WithBreaker(failures int) Option {
	return func(s *settings) error {
		if failures < 0 || failures > 1<<20 {
			return fmt.Errorf("WithBreaker(%d): want 0 (never hold the store for down) to 1048576 connection errors in a row", failures)
		}
		s.breakAfter = failures
		return nil
	}
}

// WithBreakerProbe sets how often a store held for down is PINGed: first
// after first, then after twice the last wait, up to most (defaults
// DefaultBreakerProbe and DefaultBreakerProbeMax). Each PING is bounded by
// the attempt bound. A store that comes back is served again at most most
// plus one attempt bound after it answers.
func WithBreakerProbe(first, most time.Duration) Option {
	return func(s *settings) error {
		if first < time.Millisecond || most < first || most > time.Hour {
			return fmt.Errorf("WithBreakerProbe(%v, %v): want 1ms <= first <= most <= 1h", first, most)
		}
		s.probeFirst, s.probeMax = first, most
		return nil
	}
}

// WithHealthFunc has f told when the backend holds the store for down and
// when it is back: once each, in that order, from a goroutine of the
// backend's own (f may log; it must not call the backend's Close). A nil f
// tells nothing. Health answers the same at any time.
func WithHealthFunc(f func(HealthChange)) Option {
	return func(s *settings) error { s.onHealth = f; return nil }
}
