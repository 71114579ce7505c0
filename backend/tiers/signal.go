package tiers

import (
	"sync"
	"sync/atomic"
)

// signal is a one-way event — an attempt's outcome latched, its parts all
// handed out — whose channel is made only for a caller that waits on it:
// the engine asks without waiting (Poll, TryQuiesce, Notify), so most
// attempts never need one, and each channel made is an allocation a lease
// would pay (SPEC §5's tier figure counts them). Firing a signal nobody
// waits on takes no lock either: set and made are a Dekker pair (fire sets
// set, then reads made; wait sets made, then reads set; Go's atomics are
// sequentially consistent), so at least one of the two sees the other and
// closes the channel, under mu, once.
type signal struct {
	set    atomic.Bool
	made   atomic.Bool // ch was made: a firing must close it
	mu     sync.Mutex
	ch     chan struct{}
	closed bool // ch is closed (under mu)
}

// closedChan is what wait answers once the signal fired: no channel made.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// fire sets the signal, once; later calls do nothing.
func (s *signal) fire() {
	if s.set.Swap(true) || !s.made.Load() {
		return
	}
	s.mu.Lock()
	s.closeLocked()
	s.mu.Unlock()
}

func (s *signal) closeLocked() {
	if s.ch != nil && !s.closed {
		s.closed = true
		close(s.ch)
	}
}

// isSet reports whether the signal fired, without waiting.
func (s *signal) isSet() bool { return s.set.Load() }

// wait is a channel closed once the signal fired.
func (s *signal) wait() <-chan struct{} {
	if s.set.Load() {
		return closedChan
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
		s.made.Store(true)
	}
	if s.set.Load() {
		s.closeLocked()
	}
	return s.ch
}
