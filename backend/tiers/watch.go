package tiers

import (
	"fmt"
	"sync"
	"time"
)

// watchList is the parts whose tier's completion callback is awaited,
// oldest first. Each is listed with its deadline, the time it was listed
// plus the backend's one wait, so the list is in deadline order and one
// timer serves every attempt of the backend: waiting for a tier's answer
// costs no goroutine and no timer of its own (SPEC §5's tier figure: a
// local hit costs what backend/mem alone does, give or take a few percent).
type watchList struct {
	mu         sync.Mutex
	head, tail *part
	timer      *time.Timer
	armed      bool
	closed     bool
}

// add lists p, with its deadline wait from now; false once the list is
// closed (the backend is closing: nothing more is awaited).
func (w *watchList) add(p *part, wait time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	p.deadline = time.Now().Add(wait)
	p.listed = true
	p.prev, p.next = w.tail, nil
	if w.tail != nil {
		w.tail.next = p
	} else {
		w.head = p
	}
	w.tail = p
	if !w.armed {
		w.armed = true
		w.timer.Reset(wait)
	}
	return true
}

// remove unlists p, if it is listed.
func (w *watchList) remove(p *part) {
	w.mu.Lock()
	w.unlink(p)
	w.mu.Unlock()
}

func (w *watchList) unlink(p *part) {
	if !p.listed {
		return
	}
	if p.prev != nil {
		p.prev.next = p.next
	} else {
		w.head = p.next
	}
	if p.next != nil {
		p.next.prev = p.prev
	} else {
		w.tail = p.prev
	}
	p.prev, p.next, p.listed = nil, nil, false
}

// due unlists and returns the parts whose deadline passed, and arms the
// timer for the next one.
func (w *watchList) due() []*part {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = false
	now := time.Now()
	var out []*part
	for w.head != nil && !w.head.deadline.After(now) {
		p := w.head
		w.unlink(p)
		out = append(out, p)
	}
	if w.head != nil && !w.closed {
		w.armed = true
		w.timer.Reset(w.head.deadline.Sub(now))
	}
	return out
}

// close unlists and returns every part, and lists none from now on.
func (w *watchList) close() []*part {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	w.timer.Stop()
	var out []*part
	for w.head != nil {
		p := w.head
		w.unlink(p)
		out = append(out, p)
	}
	return out
}

// expireDue is the watch list's timer: every part whose tier gave no answer
// within the wait is judged so (and its tier asked to cancel).
func (b *Backend) expireDue() {
	for _, p := range b.watching.due() {
		p.a.expire(p, fmt.Sprintf("none within %v", b.wait))
	}
}
