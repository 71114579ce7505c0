// Package notify is the bookkeeping behind contract.Notifier that every
// backend shares: the callbacks an attempt was given before its outcome, each
// called exactly once, when the outcome is set — or at once, if it already is.
package notify

import (
	"context"
	"fmt"
	"sync"
)

// List holds an attempt's callbacks until it fires. The zero List is ready
// to use; it must not be copied after first use.
type List struct {
	mu    sync.Mutex
	fired bool
	// first is the first callback, kept apart so that an attempt with one
	// callback (the common case: the engine's, or a stack's over its tier)
	// allocates no slice for it — an allocation every lease would pay.
	first func()
	// fs is the callbacks after first, in order (nil: none): a pointer to
	// the slice, not the slice, so that the List, in every attempt of every
	// backend, is 32 bytes, not 48 (SPEC §5's tier figure pays an attempt's
	// bytes per lease, twice through a stack of tiers).
	fs *[]func()
}

// Add arranges for f to be called once: by Fire, or at once, on the calling
// goroutine, if Fire was already called. A nil f is ignored.
func (l *List) Add(f func()) {
	if f == nil {
		return
	}
	l.mu.Lock()
	if l.fired {
		l.mu.Unlock()
		f()
		return
	}
	switch {
	case l.first == nil:
		l.first = f
	case l.fs == nil:
		l.fs = &[]func(){f}
	default:
		*l.fs = append(*l.fs, f)
	}
	l.mu.Unlock()
}

// Fire calls every callback added so far, once, on the calling goroutine,
// outside the lock; every later Add calls its own at once. Calling it again
// does nothing.
func (l *List) Fire() {
	l.mu.Lock()
	first, fs := l.first, l.fs
	l.first, l.fs, l.fired = nil, nil, true
	l.mu.Unlock()
	if first != nil {
		first()
	}
	if fs != nil {
		for _, f := range *fs {
			f()
		}
	}
}

// Settle waits until each of n attempts' ready channels is closed, honouring
// ctx: the Settle every backend answers (logical outcomes only, never a
// proof of access). what prefixes the error, e.g. "mem: Settle".
func Settle(ctx context.Context, what string, n int, ready func(i int) <-chan struct{}) error {
	for i := range n {
		select {
		case <-ready(i):
		case <-ctx.Done():
			return fmt.Errorf("%s: waiting for attempt %d: %w", what, i, ctx.Err())
		}
	}
	return nil
}
