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
// per lease id, however many goroutines look at it. A slot is 16 bytes and
// four bits: the attempt (an interface) and, in bitmaps, whether it is
// watched, whether the lease is a publish, and the two bits that keep a
// sighting to the lease it was made of (below). Which ids are watched is a
// bitmap, so a sweep costs O(ids/64 + watched): a table grown by a burst of
// leases costs the watcher little once the burst is over.
//
// The table keeps no generation: the lease's is kept once, in the core's
// record. A slot holds the attempt of the lease the core's record at its id
// carries now (an attempt is dropped when its lease is fenced, before the
// record can carry another), so the owner, which reads the core, names the
// lease; the watcher, which cannot, names only the id of an attempt it saw
// answer, and two bits keep that sighting to the lease it was made of:
//   - changed: the owner kept, dropped or gave up (park) the id's attempt
//     since the watcher last collected it;
//   - out: the watcher claimed a sighting of the id's attempt that the
//     owner has not yet taken. The watcher collects no id whose sighting is
//     out, so changed stays set from the owner's change until the owner
//     takes the sighting.
//
// A sighting is the lease's if changed is clear when the watcher claims it
// and when the owner takes it (resolve): nothing happened to the id in
// between, so the core's record there still carries the lease whose attempt
// was polled, and the owner names it with the record's handle. A sighting of
// an id that changed is dropped, as one of a stale generation was.
//
// Sharing follows the fields: the attempts and the bitmaps are written by the
// owner under mu and read by the watcher under mu (which also writes the
// watched, changed and out bits it owns); the kind bitmap is the owner's
// alone. The owner reads its own writes without the lock, and writes without
// it too until the watcher's goroutine starts (shared): an engine whose
// backends answer at once or notify never starts it, and pays no lock per
// lease.
type attemptTable struct {
	mu       sync.Mutex
	shared   bool               // the watcher's goroutine was started: the owner takes mu to write (owner only)
	attempts []contract.Attempt // by lease id; nil once dropped
	watch    []uint64           // bit id%64 of word id/64: the watcher polls attempts[id]
	publish  []uint64           // bit id%64 of word id/64: the lease is a publish, else a fetch
	changed  []uint64           // bit id%64 of word id/64: the id's attempt changed since the watcher collected it
	out      []uint64           // bit id%64 of word id/64: a sighting of the id's attempt is out
	watched  int                // bits set in watch
	// notices are the completion callbacks handed to notifying attempts,
	// by lease id: the owner's alone, and kept apart from the slots so that
	// an engine whose backends never notify pays nothing per slot for them.
	notices map[uint32]*notice
	// fresh are notices made and never handed out (newNotice). Owner only.
	fresh []notice
}

// heldAttempt is a lease's attempt, as the owner reads it. It is kept until
// the lease is fenced — for ever if it is quarantined.
type heldAttempt struct {
	a    contract.Attempt
	kind Kind
}

func bit(words []uint64, id uint32) bool { return words[id/64]&(1<<(id%64)) != 0 }

func setBit(words []uint64, id uint32, on bool) {
	if on {
		words[id/64] |= 1 << (id % 64)
	} else {
		words[id/64] &^= 1 << (id % 64)
	}
}

// get returns the attempt and kind of the lease at id, and false if the table
// holds none there (never kept, or dropped). Owner only: the owner knows the
// id's lease is the one it asks about (the core named it).
func (t *attemptTable) get(id uint32) (heldAttempt, bool) {
	if int(id) >= len(t.attempts) || t.attempts[id] == nil {
		return heldAttempt{}, false
	}
	k := Fetch
	if bit(t.publish, id) {
		k = Publish
	}
	return heldAttempt{a: t.attempts[id], kind: k}, true
}

// setWatched sets or clears id's bit, keeping the count; the caller holds mu.
func (t *attemptTable) setWatched(id uint32, on bool) {
	if bit(t.watch, id) == on {
		return
	}
	setBit(t.watch, id, on)
	if on {
		t.watched++
	} else {
		t.watched--
	}
}

// keep records the new attempt of the lease at id, watched if watch is set.
// It reports false, and keeps nothing, if the id still holds an attempt: the
// record's previous lease was never fenced, so it could not carry another
// (the caller halts the engine on it).
func (t *attemptTable) keep(id uint32, k Kind, a contract.Attempt, watch bool) bool {
	t.lock()
	defer t.unlock()
	if int(id) >= len(t.attempts) {
		t.attempts = grow.Len(t.attempts, int(id)+1)
		words := (int(id) + 64) / 64
		for _, w := range []*[]uint64{&t.watch, &t.publish, &t.changed, &t.out} {
			*w = grow.Len(*w, max(words, len(*w)))
		}
	}
	if t.attempts[id] != nil {
		return false
	}
	t.attempts[id] = a
	setBit(t.publish, id, k == Publish)
	setBit(t.changed, id, true)
	t.setWatched(id, watch)
	return true
}

// lock and unlock guard the owner's writes once the watcher shares the
// table. Owner only.
func (t *attemptTable) lock() {
	if t.shared {
		t.mu.Lock()
	}
}

func (t *attemptTable) unlock() {
	if t.shared {
		t.mu.Unlock()
	}
}

// noticeBatch is how many notices newNotice makes in one allocation. A
// notice is never reused — a late or repeated callback of a forgotten
// attempt must find its own, retired, never a later attempt's — so they are
// made in batches instead: one allocation a batch of attempts, not one each.
// A batch lives while a backend holds any of its notices, at most a batch a
// lease quarantined for ever.
const noticeBatch = 32

// newNotice answers a notice never handed out before, armed, for the lease
// h. Owner only.
func (t *attemptTable) newNotice(h Handle, mail *mailbox, faults *faultCounts) *notice {
	if len(t.fresh) == 0 {
		t.fresh = make([]notice, noticeBatch)
	}
	n := &t.fresh[0]
	t.fresh = t.fresh[1:]
	n.h, n.mail, n.faults = h, mail, faults
	return n
}

// notified records the completion callback handed to the lease's attempt,
// so that forgetting the attempt retires it. Owner only.
func (t *attemptTable) notified(id uint32, n *notice) {
	if t.notices == nil {
		t.notices = map[uint32]*notice{}
	}
	t.notices[id] = n
}

// rewatch has the watcher poll the attempt at id (again). An id that holds
// none changes nothing.
func (t *attemptTable) rewatch(id uint32) {
	if _, ok := t.get(id); !ok {
		return
	}
	t.lock()
	t.setWatched(id, true)
	t.unlock()
}

// unwatch stops polling the attempt at id and keeps it; drop also forgets
// the attempt, and drops any completion and any sighting of it from then on;
// gaveUp keeps it and drops its sightings (a quarantined lease parked: the
// record carries no handle any more). An id that holds no attempt changes
// nothing.
func (t *attemptTable) unwatch(id uint32) { t.stop(id, false, false) }

func (t *attemptTable) drop(id uint32) { t.stop(id, true, true) }

func (t *attemptTable) gaveUp(id uint32) { t.stop(id, false, true) }

func (t *attemptTable) stop(id uint32, forget, changed bool) {
	if _, ok := t.get(id); !ok {
		return
	}
	t.lock()
	t.setWatched(id, false)
	if forget {
		t.attempts[id] = nil
	}
	if changed {
		setBit(t.changed, id, true)
	}
	t.unlock()
	if forget && len(t.notices) > 0 {
		if n := t.notices[id]; n != nil {
			n.retire()
			delete(t.notices, id)
		}
	}
}

// watchedAttempt is what the watcher copies out of the table to poll without
// holding its lock.
type watchedAttempt struct {
	id uint32
	a  contract.Attempt
}

// collect appends to dst the watched attempts found from bitmap word from on,
// stopping at the end of the word in which dst reaches max entries, and
// clears their changed bits: a change from now on voids what their poll
// finds. An id whose sighting is out is not collected until the owner took
// it. It returns dst, the word to continue from, and the bitmap's length in
// words. Watcher side.
func (t *attemptTable) collect(dst []watchedAttempt, from, max int) ([]watchedAttempt, int, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := from
	for ; w < len(t.watch) && len(dst) < max; w++ {
		word := t.watch[w] &^ t.out[w]
		t.changed[w] &^= word
		for ; word != 0; word &= word - 1 {
			id := uint32(w*64 + bits.TrailingZeros64(word))
			dst = append(dst, watchedAttempt{id: id, a: t.attempts[id]})
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

// claim keeps, of the sightings the watcher found (their ev.Lease naming an
// id, sighted), those whose attempt is still watched and unchanged since it
// was collected, stops watching them and marks them out: a sighting is
// reported once, and never for an attempt the owner stopped watching,
// dropped or replaced meanwhile. Watcher side.
func (t *attemptTable) claim(found []letter) []letter {
	t.mu.Lock()
	k := 0
	for _, m := range found {
		id := uint32(m.ev.Lease.Index())
		if bit(t.watch, id) && !bit(t.changed, id) && !bit(t.out, id) {
			t.setWatched(id, false)
			setBit(t.out, id, true)
			found[k] = m
			k++
		}
	}
	t.mu.Unlock()
	clear(found[k:])
	return found[:k]
}

// resolve takes the watcher's sightings among letters in, and returns
// letters without the ones it drops: each sighting whose id did not change
// since it was claimed is the lease's that the core's record carries at the
// id now, and is named by it (handle); one whose id changed is dropped, as a
// sighting of a stale generation was. Every sighting's id is no longer out.
// It also reports whether a dropped sighting's id is watched again (a new
// attempt there, which the watcher skipped while the sighting was out).
// Owner only, once per letter.
func (t *attemptTable) resolve(letters []letter, handle func(id uint32) Handle) (_ []letter, rewatched bool) {
	t.lock()
	defer t.unlock()
	k := 0
	for _, l := range letters {
		if l.sighted {
			id := uint32(l.ev.Lease.Index())
			if int(id) >= len(t.attempts) || !bit(t.out, id) {
				continue // never claimed: not the watcher's
			}
			setBit(t.out, id, false)
			if bit(t.changed, id) {
				rewatched = rewatched || bit(t.watch, id)
				continue
			}
			l.ev.Lease, l.sighted = handle(id), false
		}
		letters[k] = l
		k++
	}
	clear(letters[k:])
	return letters[:k], rewatched
}
