package staging

import (
	"fmt"
	"math"
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
// an end that overflows.
func Readiness(tokensPerBlock, firstBlock int, arrived [][]bool) (Interval, error) {
	if err := checkBlocks(tokensPerBlock, firstBlock); err != nil {
		return Interval{}, err
	}
	common := -1
	for _, a := range arrived {
		n := 0
		for n < len(a) && a[n] {
			n++
		}
		if common < 0 || n < common {
			common = n
		}
	}
	return interval(tokensPerBlock, firstBlock, max(common, 0))
}

// ReadinessOfView is [Readiness] over a lease's view and its arrival masks (one per
// run, row order, as [ServedMasksInto] returns): a run's rows must hold strictly
// increasing block ordinals, and a row counts once its mask is true. Every layer
// group the request needs must have a run in the view.
func ReadinessOfView(tokensPerBlock, firstBlock int, view *View, masks [][]bool) (Interval, error) {
	if err := checkBlocks(tokensPerBlock, firstBlock); err != nil {
		return Interval{}, err
	}
	if len(masks) != view.Runs() {
		return Interval{}, fmt.Errorf("staging: %d masks for a view of %d runs; want one per run", len(masks), view.Runs())
	}
	common := -1
	for i := range view.Runs() {
		r := view.Run(i)
		if len(masks[i]) != len(r.Ordinals) {
			return Interval{}, fmt.Errorf("staging: mask %d has %d entries for %d rows; want one per row", i, len(masks[i]), len(r.Ordinals))
		}
		next := firstBlock // the block this group needs next
		for k, o := range r.Ordinals {
			if k > 0 && o <= r.Ordinals[k-1] {
				return Interval{}, fmt.Errorf("staging: run %d (layer group %d) ordinals are not strictly increasing at row %d", i, r.LayerGroup, k)
			}
			if o == next && masks[i][k] {
				next++
			}
		}
		if n := next - firstBlock; common < 0 || n < common {
			common = n
		}
	}
	return interval(tokensPerBlock, firstBlock, max(common, 0))
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

func interval(tokensPerBlock, firstBlock, blocks int) (Interval, error) {
	end := firstBlock + blocks
	if end < firstBlock || end > math.MaxInt/tokensPerBlock {
		return Interval{}, fmt.Errorf("staging: %d blocks of %d tokens overflow a token position", end, tokensPerBlock)
	}
	return Interval{RestartFloor: 0, UsableUntil: end * tokensPerBlock}, nil
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
