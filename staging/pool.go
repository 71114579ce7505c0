package staging

import (
	"fmt"
	"math/bits"
)

// pool is one group's slots as two bitmaps: held (a lease holds it, or it is
// quarantined) and quarantined. Bits past size are set in held, so a scan for a
// free slot never runs off the end.
type pool struct {
	size        int
	free        int
	quarantined int
	low         int // no slot below low is free
	// usable is the longest run of slots with no quarantined slot in it: the
	// largest request the pool can ever grant.
	usable int
	held   []uint64
	quar   []uint64
	// changes counts takes and gives since the free count was last checked
	// against the bitmap (audit).
	changes int
}

func newPool(n int) pool {
	words := (n + 63) / 64
	p := pool{size: n, free: n, usable: n, held: make([]uint64, words), quar: make([]uint64, words)}
	if r := n % 64; r != 0 {
		p.held[words-1] = ^uint64(0) << r
	}
	return p
}

// find returns the first slot of the lowest run of count free slots, or -1.
func (p *pool) find(count int) int {
	if count > p.free {
		return -1
	}
	for i, first := p.low, true; i < p.size; {
		s := p.next(i, false, p.size)
		if s >= p.size {
			return -1
		}
		if first {
			p.low, first = s, false
		}
		// Only whether [s, s+count) is free matters, so the scan for its end
		// stops there instead of running to the end of a long free region.
		e := min(p.next(s, true, s+count), p.size)
		if e-s >= count {
			return s
		}
		i = e
	}
	return -1
}

// next returns the first slot at or after i whose held bit is want; if there is
// none before limit, it may return any value at or past limit.
func (p *pool) next(i int, want bool, limit int) int {
	w := i >> 6
	if w >= len(p.held) {
		return len(p.held) * 64
	}
	word := p.held[w]
	if !want {
		word = ^word
	}
	word >>= uint(i & 63)
	if word != 0 {
		return i + bits.TrailingZeros64(word)
	}
	for w++; w < len(p.held) && w<<6 < limit; w++ {
		word = p.held[w]
		if !want {
			word = ^word
		}
		if word != 0 {
			return w<<6 + bits.TrailingZeros64(word)
		}
	}
	return max(limit, w<<6)
}

// rangeMasks calls f with each word of [s, s+n) and the mask of its bits there.
func rangeMasks(s, n int, f func(w int, m uint64)) {
	for e := s + n; s < e; {
		w, lo := s>>6, s&63
		hi := min(64, lo+(e-s))
		m := ^uint64(0) << lo
		if hi < 64 {
			m &= ^uint64(0) >> (64 - hi)
		}
		f(w, m)
		s += hi - lo
	}
}

// take marks [s, s+n) held. It refuses, changing nothing, a range with a
// slot already held: granting it would lend one slot twice.
func (p *pool) take(s, n int) error {
	if !p.all(s, n, false) {
		return fmt.Errorf("%w: granting slots [%d, %d), some of which are held", ErrInvariant, s, s+n)
	}
	rangeMasks(s, n, func(w int, m uint64) { p.held[w] |= m })
	p.free -= n
	if s == p.low {
		p.low = s + n
	}
	return nil
}

// give releases [s, s+n), except its quarantined slots, which stay held for
// ever. It refuses, changing nothing, a range with a slot that is not held:
// the allocator never takes back a slot it did not lend.
func (p *pool) give(s, n int) error {
	if !p.all(s, n, true) {
		return fmt.Errorf("%w: returning slots [%d, %d), some of which are not lent", ErrInvariant, s, s+n)
	}
	rangeMasks(s, n, func(w int, m uint64) {
		back := m &^ p.quar[w]
		p.held[w] &^= back
		p.free += bits.OnesCount64(back)
	})
	p.low = min(p.low, s)
	return nil
}

// audit checks the free count against the free runs once every 4·len(held)
// takes and gives: a recount reads every word of the bitmap, so checking at
// that period costs about a quarter of a word per change, however large the
// pool. A drift is found within that many changes.
func (p *pool) audit(g int) error {
	if p.changes++; p.changes < 4*len(p.held) {
		return nil
	}
	p.changes = 0
	return p.counted(g)
}

// counted checks the pool's free count against its free runs: the slots
// below size whose held bit is clear. The two are kept apart (the count
// answers FreeSlots and bounds find at once); a difference is a bug, and a
// count that says free where the bitmap says held would lend a slot twice.
func (p *pool) counted(g int) error {
	n := 0
	for _, w := range p.held {
		n += 64 - bits.OnesCount64(w) // bits past size are set: held
	}
	if n != p.free {
		return fmt.Errorf("%w: pool group %d counts %d free slots, but its free runs hold %d", ErrInvariant, g, p.free, n)
	}
	return nil
}

// all reports whether every slot of [s, s+n) is held (held set) or free.
func (p *pool) all(s, n int, held bool) bool {
	if s < 0 || n < 0 || s+n > p.size {
		return false
	}
	ok := true
	rangeMasks(s, n, func(w int, m uint64) {
		if held {
			ok = ok && p.held[w]&m == m
		} else {
			ok = ok && p.held[w]&m == 0
		}
	})
	return ok
}

func (p *pool) quarantine(s, n int) {
	rangeMasks(s, n, func(w int, m uint64) {
		p.quarantined += bits.OnesCount64(m &^ p.quar[w])
		p.quar[w] |= m
	})
	p.usable = p.longestUsable()
}

// longestUsable measures the longest run of slots that holds no quarantined
// slot. Quarantine is rare, so a scan of the bitmap (a word at a time where it
// can) is cheap enough.
func (p *pool) longestUsable() int {
	best, run := 0, 0
	for w, word := range p.quar {
		width := min(64, p.size-w*64)
		if word == 0 {
			run += width
			best = max(best, run)
			continue
		}
		for b := range width {
			if word&(1<<b) != 0 {
				run = 0
				continue
			}
			run++
			best = max(best, run)
		}
	}
	return best
}
