// Package notify is the bookkeeping behind contract.Notifier that every
// backend shares: the callbacks an attempt was given before its outcome, each
// called exactly once, when the outcome is set — or at once, if it already is.
package notify

import "sync"

// List holds an attempt's callbacks until it fires. The zero List is ready
// to use; it must not be copied after first use.
type List struct {
	mu    sync.Mutex
	fired bool
	fs    []func()
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
	l.fs = append(l.fs, f)
	l.mu.Unlock()
}

// Fire calls every callback added so far, once, on the calling goroutine,
// outside the lock; every later Add calls its own at once. Calling it again
// does nothing.
func (l *List) Fire() {
	l.mu.Lock()
	fs := l.fs
	l.fs, l.fired = nil, true
	l.mu.Unlock()
	for _, f := range fs {
		f()
	}
}
