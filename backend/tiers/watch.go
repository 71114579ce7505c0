package tiers

import (
	"fmt"
	"sync"
	"time"
)

// watchList is the parts whose tier's completion callback is awaited,
// oldest first. One timer serves every attempt of the backend, ticking every
// quarter of the backend's wait while anything is listed; a part is listed
// with the tick count of the moment (its epoch), so the list is in epoch
// order, and the tick that makes a part's age at least the wait expires it:
// between the wait and 1.25 times it. Waiting for a tier's answer so costs
// no goroutine, no timer and no clock reading of its own (SPEC §5's tier
// figure: a local hit costs what backend/mem alone does, give or take a few
// percent; a clock reading alone is a tenth of that on a virtual machine).
type watchList struct {
	mu         sync.Mutex
	head, tail *part
	timer      *time.Timer
	tick       time.Duration // a quarter of the wait
	epoch      uint64        // ticks so far
	armed      bool
	closed     bool
	// held counts the parts added and not yet done: listed, or claimed and
	// still being judged. drained, once Close waits, is closed when it
	// reaches 0.
	held    int
	drained chan struct{}
}

// ticksPerWait is how many ticks make a wait; a part listed in epoch e has
// waited at least ticksPerWait ticks once the epoch is e+ticksPerWait+1 (it
// was listed after the tick that began e).
const ticksPerWait = 4

// add lists p, in the current epoch, and holds it until done(p); false
// once the list is closed (the backend is closing: nothing more is
// awaited).
func (w *watchList) add(p *part) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	w.held++
	p.epoch = w.epoch
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
		w.timer.Reset(w.tick)
	}
	return true
}

// done unlists p, if it is still listed, and ends its hold: its answer
// was judged (or judged missing) and its step taken.
func (w *watchList) done(p *part) {
	w.mu.Lock()
	w.unlink(p)
	w.held--
	if w.held == 0 && w.drained != nil {
		close(w.drained)
		w.drained = nil
	}
	w.mu.Unlock()
}

// wait returns once every part added has been done with.
func (w *watchList) wait() {
	w.mu.Lock()
	if w.held == 0 {
		w.mu.Unlock()
		return
	}
	if w.drained == nil {
		w.drained = make(chan struct{})
	}
	ch := w.drained
	w.mu.Unlock()
	<-ch
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

// due counts a tick, unlists the parts that have waited the whole wait,
// returns those it claimed, and ticks on while anything is left. A part is
// claimed here, under the lock, while it is listed — its step not over, its
// attempt not reusable (attempt.ref) — never after: a part whose callback
// claimed it first is that callback's to end.
func (w *watchList) due() []*part {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.epoch++
	w.armed = false
	var out []*part
	for w.head != nil && w.head.epoch+ticksPerWait+1 <= w.epoch {
		p := w.head
		w.unlink(p)
		if p.claim() {
			out = append(out, p)
		}
	}
	if w.head != nil && !w.closed {
		w.armed = true
		w.timer.Reset(w.tick)
	}
	return out
}

// close unlists every part, returns those it claimed (as due does), and
// lists none from now on (a part being judged stays held until done).
func (w *watchList) close() []*part {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	w.timer.Stop()
	var out []*part
	for w.head != nil {
		p := w.head
		w.unlink(p)
		if p.claim() {
			out = append(out, p)
		}
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
