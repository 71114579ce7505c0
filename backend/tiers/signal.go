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
// waits on takes no lock either: set and made are two bits of one word,
// each set by one atomic Or that also reads the other (fire sets set, wait
// sets made), so whichever of the two comes second sees the first and
// closes the channel, under its owner's mutex (mu, given to fire and wait:
// an attempt's two signals share its lock), once. One word, not two flags,
// and no lock of its own: the signal is 16 bytes, and an attempt holds two
// (SPEC §5's figure counts its bytes too).
type signal struct {
	state  atomic.Uint32 // sigSet | sigMade
	closed bool          // ch is closed (under mu)
	ch     chan struct{}
}

const (
	sigSet  uint32 = 1 << iota // the signal fired
	sigMade                    // ch was made: a firing must close it
)

// closedChan is what wait answers once the signal fired: no channel made.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// fire sets the signal, once; later calls do nothing. mu is the lock wait
// is given.
func (s *signal) fire(mu *sync.Mutex) {
	if old := s.state.Or(sigSet); old&sigSet != 0 || old&sigMade == 0 {
		return
	}
	mu.Lock()
	s.closeLocked()
	mu.Unlock()
}

func (s *signal) closeLocked() {
	if s.ch != nil && !s.closed {
		s.closed = true
		close(s.ch)
	}
}

// isSet reports whether the signal fired, without waiting.
func (s *signal) isSet() bool { return s.state.Load()&sigSet != 0 }

// wait is a channel closed once the signal fired; mu is the lock fire is
// given (held only to make or close the channel).
func (s *signal) wait(mu *sync.Mutex) <-chan struct{} {
	if s.isSet() {
		return closedChan
	}
	mu.Lock()
	defer mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
		if s.state.Or(sigMade)&sigSet != 0 { // fired before it saw the channel
			s.closeLocked()
		}
	}
	return s.ch
}
