package tiers

import (
	"sync"

	"github.com/kvready/kvready/contract"
)

// TeeFetcher is a tier that can land a copy of each row it fetches in a
// second buffer as it writes the row (backend/redis's FetchTee). The stack
// promotes what such a tier served into the tier above it from those copies:
// no promotion reads the staging rows after the fetch, so the copy is made
// while each row's bytes are hot in the cache — and, for a store that sends
// a row in chunks, while it is still sending the rest — instead of after the
// fetch, cold, on the lease's path (SPEC §5's tier figure).
//
// FetchTee is Fetch, and tee is called, on the calling goroutine and before
// FetchTee returns, at most once per unit with the unit's index in the
// extent and its staging row's length; it returns the buffer to fill (nil:
// none). A TeeFetcher must write into a unit's buffer exactly the bytes it
// writes into the unit's row, within the same access: its Quiesce (and
// TryQuiesce) answering true for the attempt also says it will never touch
// the buffers again, and a unit it reports served has its row's whole
// content in its buffer. A rejected submission touched no buffer.
type TeeFetcher interface {
	FetchTee(extent contract.CacheExtent, route contract.Route, tee func(unit, n int) []byte) (contract.Attempt, error)
}

// Adopter is an upper tier that can take promoted rows' bytes whole
// (backend/mem): Reserve hands out n bytes nobody else holds, Adopt stores
// each non-empty bufs[i] itself under (extent, unit i's name) — the caller
// never touches them again — and reports how many it kept, and Unreserve
// takes back bytes that will not be adopted. A lease's rows are adopted in
// one call: the adoption runs between the lower tier's proof and the
// lease's, so each row's lock, guard and header would be on the lease's path.
type Adopter interface {
	Reserve(n int) []byte
	Adopt(extent contract.CacheExtent, bufs [][]byte) int
	Unreserve(buf []byte)
}

// teeTargets is, for each tier, the one tier above it that its served units
// are promoted into through a tee, or -1: a tier is teed when its fetcher is
// a TeeFetcher and the only tier above it that publishes is an Adopter.
// With more than one tier above it, its units are promoted by publications
// from the staging rows, as from any tier.
func teeTargets(tiers []Tier, uppers [][]int) []int {
	to := make([]int, len(tiers))
	for i, t := range tiers {
		to[i] = -1
		if len(uppers[i]) != 1 {
			continue
		}
		j := uppers[i][0]
		_, tees := t.Fetcher.(TeeFetcher)
		_, adopts := tiers[j].Publisher.(Adopter)
		if tees && adopts {
			to[i] = j
		}
	}
	return to
}

// tee is the second buffers a teed fetch part lands its units' rows in,
// reserved from the upper tier to: by unit index in the part's extent.
type tee struct {
	to      int
	adopter Adopter
	mu      sync.Mutex
	sealed  bool // the submission returned: the tier asks for no buffer any more
	bufs    [][]byte
}

func newTee(b *Backend, to, units int) *tee {
	return &tee{to: to, adopter: b.tiers[to].Publisher.(Adopter), bufs: make([][]byte, units)}
}

// buffer is the tee callback handed to the tier: a buffer of n bytes for
// unit, reserved from the upper tier — once per unit, and only while the
// submission runs (a call out of range, repeated or late gets none).
func (t *tee) buffer(unit, n int) []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sealed || unit < 0 || unit >= len(t.bufs) || t.bufs[unit] != nil || n <= 0 {
		return nil
	}
	var buf []byte
	if err := guard(func() error { buf = t.adopter.Reserve(n); return nil }); err != nil || len(buf) != n {
		return nil
	}
	t.bufs[unit] = buf
	return buf
}

// seal ends the tier's asking for buffers: the submission returned.
func (t *tee) seal() {
	t.mu.Lock()
	t.sealed = true
	t.mu.Unlock()
}

// unreserve gives every buffer back to the upper tier: only once the lower
// tier can no longer write them (its submission was rejected, or its access
// is proven over).
func (t *tee) unreserve() {
	for i, buf := range t.bufs {
		if buf != nil {
			_ = guard(func() error { t.adopter.Unreserve(buf); return nil })
			t.bufs[i] = nil
		}
	}
}

// adopt hands the upper tier the buffers of the units the lower tier served
// whole (units, as the part's extent lists them: served is their subset) and
// gives back the rest; only once the lower tier's access is proven over. It
// returns how many the upper tier kept.
func (t *tee) adopt(ext contract.CacheExtent, served contract.NameSet) uint64 {
	handed := 0
	for i, buf := range t.bufs {
		if buf == nil {
			continue
		}
		if !served.Has(ext.Unit(i).Name) {
			_ = guard(func() error { t.adopter.Unreserve(buf); return nil })
			t.bufs[i] = nil
			continue
		}
		handed++
	}
	if handed == 0 {
		return 0
	}
	kept := 0
	_ = guard(func() error { kept = t.adopter.Adopt(ext, t.bufs); return nil })
	clear(t.bufs) // handed over: the stack touches none of them again
	// An adopter that miscounts is held to what it was handed.
	return uint64(min(max(kept, 0), handed))
}
