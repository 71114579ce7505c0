// Package notify is the bookkeeping behind contract.Notifier that every
// backend shares: the callbacks an attempt was given before its outcome, each
// called exactly once, when the outcome is set — or at once, if it already is.
package notify

import (
	"context"
	"fmt"
	"sync"
)

// Callee is a completion callback held as a value with a method, for a
// caller that already holds such a value: registering it through
// [CalleeNotifier] allocates nothing, where a method value (p.done) handed
// to Notify is an allocation per registration — one per lease on a stack of
// tiers, which registers with each tier's attempt (SPEC §5's tier figure).
type Callee interface {
	// Notified is called exactly once, when the attempt's outcome is known
	// (the same promise as a callback handed to Notify).
	Notified()
}

// Func is a plain callback as a [Callee]. A func value is one pointer, so
// holding it as an interface allocates nothing.
type Func func()

// Notified calls f.
func (f Func) Notified() { f() }

// CalleeNotifier is an optional capability of a [contract.Notifier]'s
// attempt: NotifyCallee(c) is Notify(c.Notified) without making the method
// value, with every promise of Notify, and it counts as the attempt's one
// Notify. Every backend whose attempts keep their callbacks in a [List]
// has it for free ([List.AddCallee]).
type CalleeNotifier interface {
	NotifyCallee(c Callee)
}

// List holds an attempt's callbacks until it fires. The zero List is ready
// to use; it must not be copied after first use.
type List struct {
	mu sync.Mutex
	// first is the first callback, kept apart so that an attempt with one
	// callback (the common case: the engine's, or a stack's over its tier)
	// allocates no slice for it — an allocation every lease would pay.
	first Callee
	// fs is the callbacks after first, in order (nil: none; &fired: Fire
	// was called): a pointer to the slice, not the slice, and the fired
	// mark in it rather than a bool beside it, so that the List, in every
	// attempt of every backend, is 32 bytes, not 48 (SPEC §5's tier figure
	// pays an attempt's bytes per lease, twice through a stack of tiers).
	fs *[]Callee
}

// fired is what List.fs points to once Fire was called: its address is the
// mark, its contents never used.
var fired []Callee

// Add arranges for f to be called once: by Fire, or at once, on the calling
// goroutine, if Fire was already called. A nil f is ignored.
func (l *List) Add(f func()) {
	if f == nil {
		return
	}
	l.AddCallee(Func(f))
}

// AddCallee is Add(c.Notified), without making the method value. A nil c
// (or a nil Func in it) is ignored.
func (l *List) AddCallee(c Callee) {
	if f, ok := c.(Func); c == nil || (ok && f == nil) {
		return
	}
	l.mu.Lock()
	if l.fs == &fired {
		l.mu.Unlock()
		c.Notified()
		return
	}
	switch {
	case l.first == nil:
		l.first = c
	case l.fs == nil:
		l.fs = &[]Callee{c}
	default:
		*l.fs = append(*l.fs, c)
	}
	l.mu.Unlock()
}

// Fire calls every callback added so far, once, on the calling goroutine,
// outside the lock; every later Add calls its own at once. Calling it again
// does nothing.
func (l *List) Fire() {
	l.mu.Lock()
	first, fs := l.first, l.fs
	l.first, l.fs = nil, &fired
	l.mu.Unlock()
	if fs == &fired {
		return
	}
	if first != nil {
		first.Notified()
	}
	if fs != nil {
		for _, c := range *fs {
			c.Notified()
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
