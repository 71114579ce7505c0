package readiness

import (
	"sync"
	"sync/atomic"
)

// mailbox hands batches between the owner goroutine and one background
// goroutine without allocating in steady state: items accumulate in a slice that
// keeps its capacity, and an empty mailbox costs one atomic load to check.
type mailbox[T any] struct {
	mu     sync.Mutex
	items  []T
	n      atomic.Int64  // len(items), readable without the lock
	signal chan struct{} // capacity 1: "something was put"
}

func newMailbox[T any]() *mailbox[T] {
	return &mailbox[T]{signal: make(chan struct{}, 1)}
}

// put appends items and wakes the receiver.
func (m *mailbox[T]) put(items ...T) {
	if len(items) == 0 {
		return
	}
	m.mu.Lock()
	m.items = append(m.items, items...)
	m.n.Store(int64(len(m.items)))
	m.mu.Unlock()
	select {
	case m.signal <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// take appends every item to dst, empties the mailbox and returns dst.
func (m *mailbox[T]) take(dst []T) []T {
	if m.n.Load() == 0 {
		return dst
	}
	m.mu.Lock()
	dst = append(dst, m.items...)
	clear(m.items) // drop references (attempts, errors) the receiver now owns
	m.items = m.items[:0]
	m.n.Store(0)
	m.mu.Unlock()
	return dst
}
