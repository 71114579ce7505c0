package tiers

import (
	"sync"
	"sync/atomic"
)

// signal is a one-way event — an attempt's outcome latched, its parts all
// handed out — whose channel is made only for a caller that waits on it:
// the engine asks without waiting (Poll, TryQuiesce, Notify), so most
// attempts never need one, and each channel made is an allocation a lease
// would pay (SPEC §5's tier figure counts them).
type signal struct {
	set atomic.Bool
	mu  sync.Mutex
	ch  chan struct{}
}

// fire sets the signal, once; later calls do nothing.
func (s *signal) fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.set.Load() {
		return
	}
	s.set.Store(true)
	if s.ch != nil {
		close(s.ch)
	}
}

// isSet reports whether the signal fired, without waiting.
func (s *signal) isSet() bool { return s.set.Load() }

// wait is a channel closed once the signal fired.
func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
		if s.set.Load() {
			close(s.ch)
		}
	}
	return s.ch
}
