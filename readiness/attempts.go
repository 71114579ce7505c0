package readiness

import (
	"math/bits"
	"sync"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/internal/grow"
)

// attemptTable is the runner's record of every lease's attempt, by lease id:
// the one thing the core never holds. The watcher polls the attempts marked
// watched straight from this table, so an attempt is held once, in one slot
// per lease id, however many goroutines look at it. A slot is 20 bytes and a
// bit: the attempt (an interface, 16), its lease's generation (4) in a
// parallel array — a struct of the two would be padded to 24 — and the
// lease's kind as a bit. Which ids are watched is a bitmap, so a sweep costs
// O(ids/64 + watched): a table grown by a burst of leases costs the watcher
// little once the burst is over.
//
// Sharing follows the fields: attempts and gens, and the watch bitmap, are
// written by the owner under mu and read by the watcher under mu (which also
// clears a bit when it found the outcome); the kind bitmap is the owner's
// alone. The owner reads its own writes without the lock.
type attemptTable struct {
	mu       sync.Mutex
	attempts []contract.Attempt // by lease id; nil once dropped
	gens     []uint32           // gens[id] is the generation of the lease whose attempt attempts[id] is
	watch    []uint64           // bit id%64 of word id/64: the watcher polls attempts[id]
	publish  []uint64           // bit id%64 of word id/64: the lease is a publish, else a fetch
	watched  int                // bits set in watch
	// notices are the completion callbacks handed to notifying attempts,
	// by lease id: the owner's alone, and kept apart from the slots so that
	// an engine whose backends never notify pays nothing per slot for them.
	notices map[uint32]*notice
}

// heldAttempt is a lease's attempt, as the owner reads it. It is kept until
// the lease is fenced — for ever if it is quarantined.
type heldAttempt struct {
	a    contract.Attempt
	kind Kind
}

// genOf and handleAt split and join a handle as the table stores it.
func genOf(h Handle) uint32 { return uint32(h.Uint64() >> 32) }

func handleAt(id uint32, gen uint32) Handle { return HandleOf(uint64(gen)<<32 | uint64(id)) }

// has reports whether the table holds an attempt for the handle's lease at
// its generation. Owner only.
func (t *attemptTable) has(h Handle) bool {
	id := h.Index()
	return id < len(t.attempts) && t.gens[id] == genOf(h) && t.attempts[id] != nil
}

// get returns the lease's attempt and kind, and false if the handle is stale
// or the attempt already dropped. Owner only.
func (t *attemptTable) get(h Handle) (heldAttempt, bool) {
	if !t.has(h) {
		return heldAttempt{}, false
	}
	id := uint32(h.Index())
	k := Fetch
	if t.publish[id/64]&(1<<(id%64)) != 0 {
		k = Publish
	}
	return heldAttempt{a: t.attempts[id], kind: k}, true
}

// setWatched sets or clears id's bit, keeping the count; the caller holds mu.
func (t *attemptTable) setWatched(id uint32, on bool) {
	w, bit := &t.watch[id/64], uint64(1)<<(id%64)
	switch was := *w&bit != 0; {
	case on && !was:
		*w |= bit
		t.watched++
	case !on && was:
		*w &^= bit
		t.watched--
	}
}

// keep records a lease's new attempt, watched if watch is set.
func (t *attemptTable) keep(h Handle, k Kind, a contract.Attempt, watch bool) {
	id := uint32(h.Index())
	t.mu.Lock()
	if int(id) >= len(t.attempts) {
		t.attempts = grow.Len(t.attempts, int(id)+1)
		t.gens = grow.Len(t.gens, int(id)+1)
		words := (int(id) + 64) / 64
		t.watch = grow.Len(t.watch, max(words, len(t.watch)))
		t.publish = grow.Len(t.publish, max(words, len(t.publish)))
	}
	t.attempts[id], t.gens[id] = a, genOf(h)
	if bit := uint64(1) << (id % 64); k == Publish {
		t.publish[id/64] |= bit
	} else {
		t.publish[id/64] &^= bit
	}
	t.setWatched(id, watch)
	t.mu.Unlock()
}

// notified records the completion callback handed to the lease's attempt,
// so that forgetting the attempt retires it. Owner only.
func (t *attemptTable) notified(h Handle, n *notice) {
	if t.notices == nil {
		t.notices = map[uint32]*notice{}
	}
	t.notices[uint32(h.Index())] = n
}

// rewatch has the watcher poll the lease's attempt (again). A stale handle
// changes nothing.
func (t *attemptTable) rewatch(h Handle) {
	if !t.has(h) {
		return
	}
	t.mu.Lock()
	t.setWatched(uint32(h.Index()), true)
	t.mu.Unlock()
}

// unwatch stops polling the lease's attempt and keeps it; drop also forgets
// the attempt, and drops any completion it reports from then on. A stale
// handle changes nothing.
func (t *attemptTable) unwatch(h Handle) { t.stop(h, false) }

func (t *attemptTable) drop(h Handle) { t.stop(h, true) }

func (t *attemptTable) stop(h Handle, forget bool) {
	if !t.has(h) {
		return
	}
	t.mu.Lock()
	t.setWatched(uint32(h.Index()), false)
	if forget {
		t.attempts[h.Index()] = nil
	}
	t.mu.Unlock()
	if forget && len(t.notices) > 0 {
		id := uint32(h.Index())
		if n := t.notices[id]; n != nil && n.h == h {
			n.retire()
			delete(t.notices, id)
		}
	}
}

// watchedAttempt is what the watcher copies out of the table to poll without
// holding its lock.
type watchedAttempt struct {
	h Handle
	a contract.Attempt
}

// collect appends to dst the watched attempts found from bitmap word from on,
// stopping at the end of the word in which dst reaches max entries. It
// returns dst, the word to continue from, and the bitmap's length in words.
// Watcher side.
func (t *attemptTable) collect(dst []watchedAttempt, from, max int) ([]watchedAttempt, int, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := from
	for ; w < len(t.watch) && len(dst) < max; w++ {
		for word := t.watch[w]; word != 0; word &= word - 1 {
			id := uint32(w*64 + bits.TrailingZeros64(word))
			dst = append(dst, watchedAttempt{h: handleAt(id, t.gens[id]), a: t.attempts[id]})
		}
	}
	return dst, w, len(t.watch)
}

// watching returns how many attempts are watched. Watcher side.
func (t *attemptTable) watching() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.watched
}

// claim keeps, of the outcomes the watcher found, those whose attempt is
// still watched, and stops watching them: an outcome is reported once, and
// never for an attempt the owner stopped watching meanwhile or whose lease id
// now carries another generation. Watcher side.
func (t *attemptTable) claim(found []letter) []letter {
	t.mu.Lock()
	k := 0
	for _, m := range found {
		id := uint32(m.ev.Lease.Index())
		if t.gens[id] == genOf(m.ev.Lease) && t.watch[id/64]&(1<<(id%64)) != 0 {
			t.setWatched(id, false)
			found[k] = m
			k++
		}
	}
	t.mu.Unlock()
	clear(found[k:])
	return found[:k]
}
