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

// store maps (extent, name) to row bytes, with an optional bound on how many
// rows it holds: beyond it, storing a new row evicts the least recently used
// one. The recency list is intrusive (no allocation to move an entry), and the
// entry of an evicted row is reused for the row that displaced it, so a Put at
// capacity allocates only the copy of its row.
//
// A store is guarded by its Backend's mutex; evictions alone is atomic, so
// that it can be read without the lock.
type store struct {
	m         map[key]*entry
	root      entry // sentinel: root.next is the most recently used, root.prev the least
	capacity  int   // 0: unbounded
	evictions atomic.Uint64
}

func (s *store) init(capacity int) {
	s.m = map[key]*entry{}
	s.root.next, s.root.prev = &s.root, &s.root
	s.capacity = capacity
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
// copy) and counts it as a use. A new key beyond the capacity evicts the least
// recently used row first.
func (s *store) put(k key, row []byte) {
	if e, ok := s.m[k]; ok {
		e.row = row
		s.use(e)
		return
	}
	var e *entry
	if s.capacity > 0 && len(s.m) >= s.capacity {
		e = s.root.prev
		s.unlink(e)
		delete(s.m, e.k)
		s.evictions.Add(1)
	} else {
		e = new(entry)
	}
	e.k, e.row = k, row
	s.m[k] = e
	s.pushFront(e)
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
