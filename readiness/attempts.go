package readiness

import (
	"sync"

	"github.com/kvready/kvready/contract"
)

// attemptTable is the runner's record of every lease's attempt, by lease id:
// the one thing the core never holds. The watcher polls the attempts it marks
// as watched straight from this table, so an attempt is held once, in one
// 24-byte slot per lease id, however many goroutines look at it.
//
// Sharing follows the fields: a, gen and watching are written by the owner
// under mu and read by the watcher under mu (which also clears watching when
// it found an outcome); retries and flags are the owner's alone and never
// locked. The owner reads its own writes without the lock.
type attemptTable struct {
	mu      sync.Mutex
	slots   []attemptSlot
	watched int // slots with watching set, under mu
}

// attemptSlot is one lease's attempt. It is kept until the lease is fenced —
// for ever if it is quarantined.
type attemptSlot struct {
	a        contract.Attempt
	gen      uint32
	watching bool // the watcher polls a
	retries  uint8
	flags    attemptFlags
}

type attemptFlags uint8

const (
	publishing attemptFlags = 1 << iota // the attempt is a publish's, not a fetch's
	asking                              // a Quiesce call for it is queued or running
	scheduled                           // a retry is scheduled on the clock
)

func (s *attemptSlot) kind() Kind {
	if s.flags&publishing != 0 {
		return Publish
	}
	return Fetch
}

// get returns the lease's slot, or nil if the handle is stale or the attempt
// already dropped. Owner only.
func (t *attemptTable) get(h Handle) *attemptSlot {
	if int(h.id) >= len(t.slots) || t.slots[h.id].gen != h.gen || t.slots[h.id].a == nil {
		return nil
	}
	return &t.slots[h.id]
}

// keep records a lease's new attempt, watched if watch is set.
func (t *attemptTable) keep(h Handle, k Kind, a contract.Attempt, watch bool) {
	var f attemptFlags
	if k == Publish {
		f = publishing
	}
	t.mu.Lock()
	for int(h.id) >= len(t.slots) {
		t.slots = append(t.slots, attemptSlot{})
	}
	s := &t.slots[h.id]
	if s.watching {
		t.watched-- // a retired lease's slot is never still watched; stay exact if it were
	}
	*s = attemptSlot{a: a, gen: h.gen, watching: watch, flags: f}
	if watch {
		t.watched++
	}
	t.mu.Unlock()
}

// unwatch stops polling the lease's attempt and keeps it; drop also forgets
// the attempt. A stale handle changes nothing.
func (t *attemptTable) unwatch(h Handle) { t.stop(h, false) }

func (t *attemptTable) drop(h Handle) { t.stop(h, true) }

func (t *attemptTable) stop(h Handle, forget bool) {
	s := t.get(h)
	if s == nil {
		return
	}
	t.mu.Lock()
	if s.watching {
		s.watching = false
		t.watched--
	}
	if forget {
		s.a = nil
	}
	t.mu.Unlock()
	if forget {
		s.retries, s.flags = 0, 0
	}
}

// watchedAttempt is what the watcher copies out of the table to poll without
// holding its lock.
type watchedAttempt struct {
	h Handle
	a contract.Attempt
}

// collect appends the watched attempts of ids [from, to) to dst, and returns
// dst and the table's length. Watcher side.
func (t *attemptTable) collect(dst []watchedAttempt, from, to int) ([]watchedAttempt, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	to = min(to, len(t.slots))
	for id := from; id < to; id++ {
		if s := &t.slots[id]; s.watching {
			dst = append(dst, watchedAttempt{h: Handle{id: uint32(id), gen: s.gen}, a: s.a})
		}
	}
	return dst, len(t.slots)
}

// size returns the table's length and how many slots are watched. Watcher side.
func (t *attemptTable) size() (n, watched int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.slots), t.watched
}

// claim keeps, of the outcomes the watcher found, those whose attempt is
// still watched, and stops watching them: an outcome is reported once, and
// never for an attempt the owner stopped watching meanwhile. Watcher side.
func (t *attemptTable) claim(found []outcomeMsg) []outcomeMsg {
	t.mu.Lock()
	k := 0
	for _, m := range found {
		if s := &t.slots[m.h.id]; s.gen == m.h.gen && s.watching {
			s.watching = false
			t.watched--
			found[k] = m
			k++
		}
	}
	t.mu.Unlock()
	clear(found[k:])
	return found[:k]
}
