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
	row        []byte // never mutated once stored, only replaced: readers keep it outside the lock
	prev, next *entry
}

// store maps (extent, name) to row bytes, with optional bounds on how many
// rows it holds and on how many bytes they hold together: beyond either,
// storing a row evicts the least recently used ones until it fits. The recency list is intrusive (no allocation to move an entry), and the
// entry of an evicted row is reused for the row that displaced it, so a Put at
// capacity allocates only the copy of its row.
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
}

func (s *store) init(capacity int, maxBytes int64) {
	s.m = map[key]*entry{}
	s.root.next, s.root.prev = &s.root, &s.root
	s.capacity = capacity
	s.maxBytes = maxBytes
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

// put stores row under k (the store keeps row itself: the caller hands over a
// copy) and counts it as a use. Beyond a bound, the least recently used rows
// are evicted first, never the one being stored. A row larger than the byte
// bound is not stored (and an older row under k is dropped, so that the store
// never answers with content older than what was offered): put reports
// whether it stored the row.
func (s *store) put(k key, row []byte) bool {
	size := int64(len(row))
	if s.maxBytes > 0 && size > s.maxBytes {
		if e, ok := s.m[k]; ok {
			s.drop(e)
		}
		return false
	}
	if e, ok := s.m[k]; ok {
		s.bytes.Add(size - int64(len(e.row)))
		e.row = row
		s.use(e)
		s.evictFor(0, e)
		return true
	}
	var e *entry
	if s.capacity > 0 && len(s.m) >= s.capacity {
		e = s.root.prev
		s.drop(e)
		s.evictions.Add(1)
	} else {
		e = new(entry)
	}
	s.evictFor(size, nil)
	e.k, e.row = k, row
	s.m[k] = e
	s.bytes.Add(size)
	s.pushFront(e)
	return true
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
		s.evictions.Add(1)
	}
}

// drop removes e from the map and the recency list.
func (s *store) drop(e *entry) {
	s.unlink(e)
	delete(s.m, e.k)
	s.bytes.Add(-int64(len(e.row)))
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
