package mem

import (
	"sync/atomic"

	"github.com/kvready/kvready/contract"
)

// key addresses one stored row.
type key struct {
	extent string
	name   contract.Name
}

// entry is one stored row and its place in the recency list.
type entry struct {
	k          key
	row        *row // never mutated once stored, only replaced: readers keep it outside the lock
	prev, next *entry
}

// row is the bytes stored under one name. Fetches copy out of them outside
// the lock, so a row the store drops (evicted, replaced) while readers > 0
// is only marked dropped, and its last reader recycles it: its bytes are
// written again only once nobody can be reading them.
type row struct {
	b       []byte
	readers int
	dropped bool
}

// store maps (extent, name) to row bytes, with optional bounds on how many
// rows it holds and on how many bytes they hold together: beyond either,
// storing a row evicts the least recently used ones until it fits. The recency list is intrusive (no allocation to move an entry), and the
// entry of an evicted row is reused for the row that displaced it, so a Put at
// capacity allocates only the copy of its row.
//
// The bytes of a dropped row nobody reads any more go to a free list, by
// size, that the next stored copy of that size takes: at capacity, a store
// keeps rows without allocating (allocating and zeroing a fresh row cost ten
// times the copy into it: the local tier's promotions were dominated by it).
// The free list is bounded by maxFree bytes: what it holds beyond that is
// left to the garbage collector.
//
// A store is guarded by its Backend's mutex; evictions alone is atomic, so
// that it can be read without the lock.
type store struct {
	m         map[key]*entry
	root      entry // sentinel: root.next is the most recently used, root.prev the least
	capacity  int   // rows; 0: unbounded
	maxBytes  int64 // bytes of rows held; 0: unbounded
	bytes     atomic.Int64
	evictions atomic.Uint64

	free      map[int][][]byte // recycled row bytes by length, nobody reading them
	freeBytes int64
	maxFree   int64

	spares *entry // dropped entries for the next rows stored, linked by next
	nspare int
}

// maxFreeBytes bounds the free list of a store without a byte bound (with
// one, the free list holds at most as many bytes as the store may).
const maxFreeBytes = 64 << 20

func (s *store) init(capacity int, maxBytes int64) {
	s.m = map[key]*entry{}
	s.root.next, s.root.prev = &s.root, &s.root
	s.capacity = capacity
	s.maxBytes = maxBytes
	s.free = map[int][][]byte{}
	s.maxFree = maxFreeBytes
	if maxBytes > 0 && maxBytes < s.maxFree {
		s.maxFree = maxBytes
	}
}

// buffer returns n bytes nobody else holds, recycled when it can: the caller
// fills every byte before storing them.
func (s *store) buffer(n int) []byte {
	if l := s.free[n]; len(l) > 0 {
		b := l[len(l)-1]
		l[len(l)-1] = nil
		s.free[n] = l[:len(l)-1]
		s.freeBytes -= int64(n)
		return b
	}
	return make([]byte, n)
}

// read marks r as being copied out of, outside the lock, until unread.
func (s *store) read(r *row) { r.readers++ }

// unread ends one read of r; the last read of a dropped row recycles it.
func (s *store) unread(r *row) {
	r.readers--
	if r.readers == 0 && r.dropped {
		s.recycle(r)
	}
}

// release is a row leaving the store: recycled now if nobody reads it, by its
// last reader otherwise.
func (s *store) release(r *row) {
	if r.readers > 0 {
		r.dropped = true
		return
	}
	s.recycle(r)
}

func (s *store) recycle(r *row) {
	b := r.b
	r.b = nil // a use after recycling fails loudly, never reads another row
	s.recycleBytes(b)
}

// recycleBytes puts b, which nobody reads or writes any more, on the free
// list (within its bound).
func (s *store) recycleBytes(b []byte) {
	if b == nil || s.freeBytes+int64(len(b)) > s.maxFree {
		return
	}
	s.free[len(b)] = append(s.free[len(b)], b)
	s.freeBytes += int64(len(b))
}

// peek returns the entry under k without counting it as a use.
func (s *store) peek(k key) (*entry, bool) {
	e, ok := s.m[k]
	return e, ok
}

// use marks e as the most recently used row.
func (s *store) use(e *entry) {
	if s.root.next == e {
		return
	}
	s.unlink(e)
	s.pushFront(e)
}

// put stores b under k (the store keeps b itself: the caller hands over a
// copy, from buffer or its own) and counts it as a use; see putRow.
func (s *store) put(k key, b []byte) bool { return s.putRow(k, &row{b: b}) }

// putRow stores r, a row nobody else holds, under k and counts it as a use.
// Beyond a bound, the least recently used rows are evicted first, never the
// one being stored. A row larger than the byte bound is not stored (and an
// older row under k is dropped, so that the store never answers with content
// older than what was offered): putRow reports whether it stored the row,
// and a row it did not store is still the caller's.
func (s *store) putRow(k key, r *row) bool {
	size := int64(len(r.b))
	if s.maxBytes > 0 && size > s.maxBytes {
		if e, ok := s.m[k]; ok {
			s.drop(e)
			s.spare(e)
		}
		return false
	}
	if e, ok := s.m[k]; ok {
		s.bytes.Add(size - int64(len(e.row.b)))
		s.release(e.row)
		e.row = r
		s.use(e)
		s.evictFor(0, e)
		return true
	}
	var e *entry
	if s.capacity > 0 && len(s.m) >= s.capacity {
		e = s.root.prev
		s.drop(e)
		s.evictions.Add(1)
		s.evictFor(size, nil)
	} else {
		s.evictFor(size, nil)
		e = s.entry()
	}
	e.k, e.row = k, r
	s.m[k] = e
	s.bytes.Add(size)
	s.pushFront(e)
	return true
}

// maxSpare bounds the entries a store keeps for the rows it will store next.
const maxSpare = 64

// spare keeps e, dropped and no longer reachable from the map or the recency
// list, for the next row stored: the byte bound evicts rows one by one, not
// one for one, so the row-bounded eviction's reuse of the evicted entry does
// not apply there.
func (s *store) spare(e *entry) {
	if s.nspare >= maxSpare {
		return
	}
	*e = entry{next: s.spares}
	s.spares = e
	s.nspare++
}

// entry returns a spare entry, or a new one.
func (s *store) entry() *entry {
	e := s.spares
	if e == nil {
		return new(entry)
	}
	s.spares, e.next = e.next, nil
	s.nspare--
	return e
}

// evictFor evicts least recently used rows, never keep, until size more
// bytes fit under the byte bound.
func (s *store) evictFor(size int64, keep *entry) {
	if s.maxBytes == 0 {
		return
	}
	for s.bytes.Load()+size > s.maxBytes {
		e := s.root.prev
		if e == &s.root || e == keep {
			return
		}
		s.drop(e)
		s.spare(e)
		s.evictions.Add(1)
	}
}

// drop removes e from the map and the recency list.
func (s *store) drop(e *entry) {
	s.unlink(e)
	delete(s.m, e.k)
	s.bytes.Add(-int64(len(e.row.b)))
	s.release(e.row)
	e.row = nil
}

func (s *store) unlink(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (s *store) pushFront(e *entry) {
	e.prev, e.next = &s.root, s.root.next
	s.root.next.prev = e
	s.root.next = e
}
