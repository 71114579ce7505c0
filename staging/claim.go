package staging

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
)

// ErrMemoryClaimed is wrapped by the error for a claim on staging memory that
// another live holder (an engine) has claimed: one live engine lends from a
// Memory at a time (SPEC §4 rule 17). The error names the holder.
var ErrMemoryClaimed = errors.New("staging: the memory is claimed by another live engine")

// claims is a Memory's record of its holder and of the slots earlier holders
// left out of circulation. The slots stay out until the Memory itself is
// released: nothing a holder does after its claim ended, and nothing a later
// holder proves, brings them back.
type claims struct {
	mu     sync.Mutex
	holder *Claim
	out    [][]uint64 // per pool group, one bit per slot: out of circulation for every later holder
	nout   int
}

// Claim is one holder's claim on a Memory: while it lasts no other claim is
// granted, and the holder lends from the claim's Allocator alone. The
// allocator starts with every slot an earlier holder left out of circulation
// quarantined (Inherited). End hands the memory over.
type Claim struct {
	mem       *Memory
	holder    string
	alloc     *Allocator
	inherited int
	// ended is set by End under mem.claims.mu, and read without it: the
	// holder asks on every grant (readiness's checkClaimed).
	ended atomic.Bool
}

// Claim claims the memory for holder, a name that says who holds it (an
// engine's, such as "engine#3 (created …)"), and returns the claim with the
// allocator the holder lends from. It refuses, wrapping ErrMemoryClaimed and
// naming the current holder, a memory whose earlier claim has not ended;
// a refusal changes nothing.
func (m *Memory) Claim(holder string) (*Claim, error) {
	m.claims.mu.Lock()
	defer m.claims.mu.Unlock()
	if h := m.claims.holder; h != nil {
		return nil, fmt.Errorf("%w: %s holds it (an engine holds its memory until Close or Shutdown returns, or it halts)", ErrMemoryClaimed, h.holder)
	}
	slots := make([]int, len(m.groups))
	for g, grp := range m.groups {
		slots[g] = grp.Slots
	}
	a, err := newAllocatorOut(slots, m.claims.out)
	if err != nil {
		return nil, err
	}
	c := &Claim{mem: m, holder: holder, alloc: a, inherited: m.claims.nout}
	m.claims.holder = c
	return c, nil
}

// Allocator returns the allocator the holder lends from: over the memory's
// pool groups, with the inherited slots quarantined from the start.
func (c *Claim) Allocator() *Allocator { return c.alloc }

// Inherited returns the slots, over every pool group, that earlier holders
// left out of circulation: quarantined in the allocator from the start, never
// lent.
func (c *Claim) Inherited() int { return c.inherited }

// Holder returns the name the claim was made under.
func (c *Claim) Holder() string { return c.holder }

// Ended reports whether End was called.
func (c *Claim) Ended() bool { return c.ended.Load() }

// End hands the memory over: the claim ends, and every slot that is not free
// in the claim's allocator now — quarantined (inherited ones included), or
// still held by a lease the holder left unfinished, which an old backend or
// copy may still touch — stays out of circulation for every later holder. A
// holder hands every slot over only once its leases are all released. It
// returns the slots the memory keeps out of circulation. Calling it again
// changes nothing. The holder must not lend from the allocator afterwards.
func (c *Claim) End() int {
	m := c.mem
	m.claims.mu.Lock()
	defer m.claims.mu.Unlock()
	if c.ended.Load() {
		return m.claims.nout
	}
	c.ended.Store(true)
	if m.claims.holder == c {
		m.claims.holder = nil
	}
	if m.claims.out == nil {
		m.claims.out = make([][]uint64, len(c.alloc.pools))
	}
	n := 0
	for g := range c.alloc.pools {
		p := &c.alloc.pools[g]
		out := m.claims.out[g]
		if out == nil {
			out = make([]uint64, len(p.held))
			m.claims.out[g] = out
		}
		for w, held := range p.held {
			if last := len(p.held) - 1; w == last && p.size%64 != 0 {
				held &= ^(^uint64(0) << (p.size % 64)) // bits past size are set in held
			}
			out[w] |= held
			n += bits.OnesCount64(out[w])
		}
	}
	m.claims.nout = n
	return n
}

// OutOfCirculation returns the slots, over every pool group, that ended
// claims left out of circulation on the memory: what the next holder
// inherits.
func (m *Memory) OutOfCirculation() int {
	m.claims.mu.Lock()
	defer m.claims.mu.Unlock()
	return m.claims.nout
}

// newAllocatorOut is NewAllocator with the slots set in out[g] (one bit per
// slot of group g; out or out[g] may be nil: none) quarantined from the
// start: held for ever, never granted, counted by Quarantined.
func newAllocatorOut(slots []int, out [][]uint64) (*Allocator, error) {
	a, err := NewAllocator(slots)
	if err != nil {
		return nil, err
	}
	for g := range a.pools {
		if g >= len(out) || out[g] == nil {
			continue
		}
		p := &a.pools[g]
		if len(out[g]) != len(p.held) {
			return nil, fmt.Errorf("%w: pool group %d: %d words of slots out of circulation for %d slots", ErrInvariant, g, len(out[g]), p.size)
		}
		for w, o := range out[g] {
			p.held[w] |= o
			p.quar[w] |= o
			n := bits.OnesCount64(o)
			p.free -= n
			p.quarantined += n
		}
		p.usable = p.longestUsable()
		if err := p.counted(g); err != nil {
			return nil, err
		}
	}
	return a, nil
}
