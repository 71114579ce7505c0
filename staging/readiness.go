package staging

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Interval is the range [RestartFloor, UsableUntil] of token positions at which a
// request may resume after a fetch (no lower than its own context position). It
// is empty when RestartFloor > UsableUntil.
type Interval struct {
	RestartFloor int
	UsableUntil  int
}

// Empty reports whether no position is in the interval.
func (iv Interval) Empty() bool { return iv.RestartFloor > iv.UsableUntil }

// String formats the interval as [floor, until].
func (iv Interval) String() string { return fmt.Sprintf("[%d, %d]", iv.RestartFloor, iv.UsableUntil) }

// Readiness computes where a request may resume after a fetch into full-attention
// layer groups, from arrived[g][i]: whether block firstBlock+i of layer group g
// has arrived and its local copy has landed. firstBlock is the first block not
// already known. UsableUntil is tokensPerBlock × the end of the contiguous run of
// blocks, from firstBlock, that every layer group has; rows past a hole do not
// count. RestartFloor is 0: full attention releases no block below the prefix.
//
// Ask only after the local copies have landed: an arrival the copy has not yet
// made real is not readiness. It refuses tokensPerBlock < 1, firstBlock < 0 and
// an end that overflows. It is [WindowedReadiness] with every group full.
func Readiness(tokensPerBlock, firstBlock int, arrived [][]bool) (Interval, error) {
	return WindowedReadiness(tokensPerBlock, firstBlock, nil, arrived)
}

// WindowedReadiness is [Readiness] for layer groups that may have sliding
// windows: groups[g] is layer group g's attention (a group past the end of
// groups, and every group when groups is nil, is full attention).
//
// UsableUntil is tokensPerBlock × the largest block end E > firstBlock at which
// every layer group has every block of [firstBlock, E) that a history of E
// blocks reads ([Attention.Needed]): full attention all of them, a window its
// sinks and its window; blocks below firstBlock are known. A block past
// len(arrived[g]) has not arrived, and no E past the longest arrived[g] is
// tried. With no such E it is firstBlock × tokensPerBlock. This is the
// reference lender's usable_until: under windows it is not monotonic (a hole
// the window has passed does not count), so the ends are tried from the
// largest down, skipping below each needed hole found.
//
// RestartFloor is UsableUntil when some layer group's window has stale blocks
// there (rows below the window were never staged, so the request can resume at
// UsableUntil and nowhere lower), else 0, as for full attention.
//
// It allocates nothing, and refuses what [Readiness] refuses and an invalid
// attention.
func WindowedReadiness(tokensPerBlock, firstBlock int, groups []Attention, arrived [][]bool) (Interval, error) {
	return usableInterval(tokensPerBlock, firstBlock, groups, arrivalSet{matrix: arrived, first: firstBlock})
}

// ReadinessOfView is [Readiness] over a lease's view and its arrival masks (one per
// run, row order, as [ServedMasksInto] returns): a run's rows must hold strictly
// increasing block ordinals, and a row counts once its mask is true. Every layer
// group the request needs must have a run in the view.
func ReadinessOfView(tokensPerBlock, firstBlock int, view *View, masks [][]bool) (Interval, error) {
	return WindowedReadinessOfView(tokensPerBlock, firstBlock, nil, view, masks)
}

// WindowedReadinessOfView is [WindowedReadiness] over a lease's view and its
// masks, as [ReadinessOfView] reads them: groups is indexed by each run's
// LayerGroup, and a run's extent ends after its last row, arrived or not.
func WindowedReadinessOfView(tokensPerBlock, firstBlock int, groups []Attention, view *View, masks [][]bool) (Interval, error) {
	if len(masks) != view.Runs() {
		return Interval{}, fmt.Errorf("staging: %d masks for a view of %d runs; want one per run", len(masks), view.Runs())
	}
	for i := range view.Runs() {
		r := view.Run(i)
		if len(masks[i]) != len(r.Ordinals) {
			return Interval{}, fmt.Errorf("staging: mask %d has %d entries for %d rows; want one per row", i, len(masks[i]), len(r.Ordinals))
		}
	}
	return usableInterval(tokensPerBlock, firstBlock, groups, arrivalSet{view: view, masks: masks, first: firstBlock})
}

// arrivalSet is the arrivals readiness reads: a matrix (arrived[g][i] is block
// first+i of layer group g) or a view and its masks.
type arrivalSet struct {
	matrix [][]bool
	view   *View
	masks  [][]bool
	first  int
}

func (s arrivalSet) len() int {
	if s.view != nil {
		return s.view.Runs()
	}
	return len(s.matrix)
}

// group returns the i-th group's arrivals and its layer group.
func (s arrivalSet) group(i int) (arrivals, int) {
	if s.view != nil {
		r := s.view.Run(i)
		return arrivals{ords: r.Ordinals, mask: s.masks[i]}, r.LayerGroup
	}
	return arrivals{base: s.first, mask: s.matrix[i]}, i
}

var errOverflow = errors.New("overflow")

// arrivals is one layer group's arrived rows, by block ordinal.
type arrivals struct {
	base int    // the block of mask[0] when ords is nil
	ords []int  // the block of mask[i], strictly increasing; nil: mask[i] is block base+i
	mask []bool // whether the row arrived
}

// scan checks the ordinals and returns the end of the group's extent (one past
// its last row, at least from) and the first block at or above from that has
// not arrived.
func (a arrivals) scan(from int) (end, missing int, err error) {
	if a.ords == nil {
		if len(a.mask) >= math.MaxInt-a.base {
			return 0, 0, errOverflow
		}
		mask, i := a.mask, from-a.base
		for i < len(mask) && mask[i] {
			i++
		}
		return max(from, a.base+len(mask)), a.base + i, nil
	}
	missing = from
	for k, o := range a.ords {
		if k > 0 && o <= a.ords[k-1] {
			return 0, 0, fmt.Errorf("ordinals are not strictly increasing at row %d", k)
		}
		if o == missing && a.mask[k] {
			missing++
		}
	}
	end = from
	if n := len(a.ords); n > 0 && a.ords[n-1] >= math.MaxInt-1 {
		return 0, 0, errOverflow
	} else if n > 0 {
		end = max(end, a.ords[n-1]+1)
	}
	return end, missing, nil
}

// at returns the index of the first row whose block is >= b.
func (a arrivals) at(b int) int {
	if a.ords == nil {
		return min(max(b-a.base, 0), len(a.mask))
	}
	i, _ := slices.BinarySearch(a.ords, b)
	return i
}

// has reports whether row i exists, holds block b and arrived.
func (a arrivals) has(i, b int) bool {
	if i < 0 || i >= len(a.mask) || !a.mask[i] {
		return false
	}
	if a.ords == nil {
		return a.base+i == b
	}
	return a.ords[i] == b
}

// firstMissing returns the smallest block of r that has not arrived, or r.End.
func (a arrivals) firstMissing(r BlockRange) int {
	for b, i := r.Begin, a.at(r.Begin); b < r.End; b, i = b+1, i+1 {
		if !a.has(i, b) {
			return b
		}
	}
	return r.End
}

// lastMissing returns the largest block of r that has not arrived, or r.Begin-1.
func (a arrivals) lastMissing(r BlockRange) int {
	for b, i := r.End-1, a.at(r.End)-1; b >= r.Begin; b, i = b-1, i-1 {
		if !a.has(i, b) {
			return b
		}
	}
	return r.Begin - 1
}

// usableInterval is the rule of [WindowedReadiness] over any arrival set.
func usableInterval(tokensPerBlock, firstBlock int, groups []Attention, set arrivalSet) (Interval, error) {
	if err := checkBlocks(tokensPerBlock, firstBlock); err != nil {
		return Interval{}, err
	}
	for g, a := range groups {
		if err := a.Validate(); err != nil {
			return Interval{}, fmt.Errorf("layer group %d: %w", g, err)
		}
	}
	attention := func(lg int) Attention {
		if lg < len(groups) {
			return groups[lg]
		}
		return Full
	}
	// One pass: the extent of the fetch, and no end past a full-attention
	// group's first hole, since that group lacks a block every later end reads.
	end, highest, windows := firstBlock, math.MaxInt, false
	for i := range set.len() {
		a, lg := set.group(i)
		e, missing, err := a.scan(firstBlock)
		if err == errOverflow {
			return Interval{}, fmt.Errorf("staging: run %d (layer group %d) ends past the last block a token position can name: its end would overflow", i, lg)
		}
		if err != nil {
			return Interval{}, fmt.Errorf("staging: run %d (layer group %d) %w", i, lg, err)
		}
		end = max(end, e)
		if attention(lg).Windowed() {
			windows = true
		} else {
			highest = min(highest, missing)
		}
	}
	if end > math.MaxInt/tokensPerBlock {
		return Interval{}, fmt.Errorf("staging: %d blocks of %d tokens overflow a token position", end, tokensPerBlock)
	}
	e := min(end, highest)
	if !windows {
		return Interval{UsableUntil: e * tokensPerBlock}, nil // full attention: the common prefix
	}
	for e > firstBlock {
		next := e // the largest end not yet ruled out
		for i := range set.len() {
			a, lg := set.group(i)
			at := attention(lg)
			if !at.Windowed() {
				continue // every end up to highest passes a full-attention group
			}
			// A needed hole at b rules out every end above b: the sinks below
			// b stay needed, and so does b itself while the window, which
			// only moves up with the end, has not passed it.
			low, high := at.Needed(tokensPerBlock, firstBlock, e, e*tokensPerBlock)
			if b := a.firstMissing(low); b < low.End {
				next = min(next, b)
			}
			if b := a.lastMissing(high); b >= high.Begin {
				next = min(next, b)
			}
		}
		if next == e {
			break
		}
		e = next
	}
	iv := Interval{UsableUntil: e * tokensPerBlock}
	for i := range set.len() {
		_, lg := set.group(i)
		if attention(lg).Stale(tokensPerBlock, iv.UsableUntil).Len() > 0 {
			iv.RestartFloor = iv.UsableUntil
		}
	}
	return iv, nil
}

func checkBlocks(tokensPerBlock, firstBlock int) error {
	if tokensPerBlock < 1 {
		return fmt.Errorf("staging: tokens per block is %d; want at least 1", tokensPerBlock)
	}
	if firstBlock < 0 {
		return fmt.Errorf("staging: first unknown block is %d; want at least 0", firstBlock)
	}
	return nil
}

// Combine joins the intervals of every rank, and of a target and its draft pool:
// the largest floor and the smallest usable_until. ok is false when the result is
// empty, or there is nothing to combine: then the request drops what it fetched
// everywhere and recomputes from 0, and the returned interval is the zero one.
func Combine(intervals ...Interval) (iv Interval, ok bool) {
	if len(intervals) == 0 {
		return Interval{}, false
	}
	iv = intervals[0]
	for _, x := range intervals[1:] {
		iv.RestartFloor = max(iv.RestartFloor, x.RestartFloor)
		iv.UsableUntil = min(iv.UsableUntil, x.UsableUntil)
	}
	if iv.Empty() {
		return Interval{}, false
	}
	return iv, true
}
