package staging

import (
	"fmt"
	"math"
)

// Attention says which blocks of a layer group its layers read. The zero value
// is full attention: every block below the position. A sliding window of Window
// tokens reads, at a history of h tokens, the blocks holding positions
// h+1−Window … h−1 (the next token attends Window positions, itself included)
// plus its first SinkBlocks blocks; every other block below h is stale, and a
// manager may have released it.
type Attention struct {
	// Window is the window in tokens; 0 means full attention.
	Window int
	// SinkBlocks is the number of leading blocks a window always reads. Full
	// attention reads them anyway.
	SinkBlocks int
}

// Full is full attention.
var Full = Attention{}

// Windowed reports whether a has a sliding window.
func (a Attention) Windowed() bool { return a.Window > 0 }

// Validate refuses a negative window or sink count.
func (a Attention) Validate() error {
	if a.Window < 0 {
		return fmt.Errorf("staging: window %d; want 0 (full attention) or at least 1 token", a.Window)
	}
	if a.SinkBlocks < 0 {
		return fmt.Errorf("staging: %d sink blocks; want at least 0", a.SinkBlocks)
	}
	return nil
}

// BlockRange is the half-open range of block ordinals [Begin, End).
type BlockRange struct{ Begin, End int }

// Len returns the number of blocks in the range (0 when it is empty).
func (r BlockRange) Len() int { return max(0, r.End-r.Begin) }

// Stale returns the blocks a history of history tokens no longer reads:
// empty for full attention; for a window, from its sink blocks to the first
// block that holds a position of the window (empty when there is none).
// It is the reference runtime's AttnLifeCycle.get_stale_range.
func (a Attention) Stale(tokensPerBlock, history int) BlockRange {
	blocks := ceilDiv(history, tokensPerBlock)
	begin := min(blocks, a.SinkBlocks)
	if !a.Windowed() {
		return BlockRange{begin, begin}
	}
	return BlockRange{begin, max(begin, floorDiv(history-(a.Window-1), tokensPerBlock))}
}

// Needed returns the blocks of [startBlock, endBlock) that a history of
// history tokens reads, as at most two ranges in order: every block for full
// attention; for a window, those below its stale range (its sinks) and those
// above it (the window). Either may be empty. Arithmetic only: a range of any
// length costs nothing.
func (a Attention) Needed(tokensPerBlock, startBlock, endBlock, history int) (low, high BlockRange) {
	s := a.Stale(tokensPerBlock, history)
	low = BlockRange{startBlock, min(endBlock, s.Begin)}
	high = BlockRange{max(startBlock, s.End), endBlock}
	if low.Len() == 0 {
		low = BlockRange{startBlock, startBlock}
	}
	if high.Len() == 0 {
		high = BlockRange{endBlock, endBlock}
	}
	return low, high
}

// AttentionOf returns each layer group's attention, in layer group order, as
// the layout describes it (window and sink_blocks).
func (l Layout) AttentionOf() []Attention {
	out := make([]Attention, len(l.LayerGroups))
	for i, g := range l.LayerGroups {
		if g.Window != nil {
			out[i] = Attention{Window: *g.Window, SinkBlocks: g.SinkBlocks}
		}
	}
	return out
}

// NeededRows returns, per layer group, the block ordinals a fetch of the token
// range [start, end) must stage so that the request can resume at end: the
// blocks the range touches (a partial last block included) that a history of
// end tokens reads. Window groups need only their sinks and their window, so
// they stage fewer rows; a manager never stages what it cannot use. dst's
// storage is reused: it allocates nothing when dst already holds len(groups)
// slices of enough capacity.
//
// It refuses tokensPerBlock < 1, a start that is not on a block boundary, a
// negative or reversed range, and an invalid attention.
func NeededRows(dst [][]int, tokensPerBlock int, groups []Attention, start, end int) ([][]int, error) {
	if tokensPerBlock < 1 {
		return nil, fmt.Errorf("staging: tokens per block is %d; want at least 1", tokensPerBlock)
	}
	if start < 0 || end < start {
		return nil, fmt.Errorf("staging: token range [%d, %d); want 0 <= start <= end", start, end)
	}
	if start%tokensPerBlock != 0 {
		return nil, fmt.Errorf("staging: a fetch starts at token %d, inside block %d; want a multiple of %d tokens per block", start, start/tokensPerBlock, tokensPerBlock)
	}
	for g, a := range groups {
		if err := a.Validate(); err != nil {
			return nil, fmt.Errorf("layer group %d: %w", g, err)
		}
	}
	if cap(dst) < len(groups) {
		dst = append(dst[:cap(dst)], make([][]int, len(groups)-cap(dst))...)
	}
	dst = dst[:len(groups)]
	first, last := start/tokensPerBlock, ceilDiv(end, tokensPerBlock)
	for g, a := range groups {
		low, high := a.Needed(tokensPerBlock, first, last, end)
		out := dst[g][:0]
		for _, r := range [2]BlockRange{low, high} {
			for b := r.Begin; b < r.End; b++ {
				out = append(out, b)
			}
		}
		dst[g] = out
	}
	return dst, nil
}

// ceilDiv is ⌈a/b⌉ for b > 0 and a >= 0 (0 for a <= 0).
func ceilDiv(a, b int) int {
	if a <= 0 {
		return 0
	}
	return (a-1)/b + 1
}

// floorDiv is ⌊a/b⌋ for b > 0, rounding towards −∞ as Python's // does.
func floorDiv(a, b int) int {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// mulFits reports whether a*b, both non-negative, fits an int.
func mulFits(a, b int) bool { return a == 0 || b <= math.MaxInt/a }
