package staging

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
)

// ErrNothingToStage is wrapped by the error of sizing a layout whose one fetch
// needs no bytes, a layout with no layer groups among them: there are no pages
// to stage. Such a layout is valid and has a layout id ([Layout.Validate]);
// it only cannot be staged.
var ErrNothingToStage = errors.New("staging: the layout has no pages to stage")

// ErrSizeOverflow is wrapped by the error of sizing options whose byte counts
// do not fit an int: the fetch, or the fetches, are out of range.
var ErrSizeOverflow = errors.New("overflows a byte count")

// ErrBelowOneFetch is wrapped by the error of sizing with MaxBytes below one
// fetch; the error says how many bytes one fetch needs.
var ErrBelowOneFetch = errors.New("staging: max_bytes is below one fetch")

// SizingOptions says how much staging to size: fetches of at most FetchTokens
// tokens, MaxFetches of them at once, capped at MaxBytes but never below one
// fetch, which always fits. It is a capacity budget, not concurrency: a lease
// takes one contiguous run per pool group, and holes that released leases
// leave can make it wait.
type SizingOptions struct {
	// FetchTokens is the longest whole-block range a fetch stages. Required.
	FetchTokens int
	// MaxFetches is how many fetches the slots hold at once; 0 means no count
	// (MaxBytes alone sizes the slots).
	MaxFetches int
	// MaxBytes caps the staging bytes; 0 means no cap (MaxFetches alone).
	MaxBytes int
}

func (o SizingOptions) validate() error {
	var errs []error
	if o.FetchTokens < 1 {
		errs = append(errs, fmt.Errorf("fetch_tokens is %d; want at least 1", o.FetchTokens))
	}
	if o.MaxFetches < 0 {
		errs = append(errs, fmt.Errorf("max_fetches is %d; want at least 1 (0: bounded by max_bytes alone)", o.MaxFetches))
	}
	if o.MaxBytes < 0 {
		errs = append(errs, fmt.Errorf("max_bytes is %d; want at least 1 (0: no cap)", o.MaxBytes))
	}
	if o.MaxFetches == 0 && o.MaxBytes == 0 {
		errs = append(errs, errors.New("neither max_fetches nor max_bytes is set; want at least one"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("staging: sizing: %w", err)
	}
	return nil
}

// PageBytes returns the bytes of one row of each device pool group: one slot of
// every pool of the group, so the sum of its slot widths.
func (l Layout) PageBytes() map[int]int {
	out := make(map[int]int, len(l.PoolGroups))
	for g, widths := range l.PoolGroups {
		sum := 0
		for _, w := range widths {
			sum = satAdd(sum, w)
		}
		out[g] = sum
	}
	return out
}

// FetchRows returns the rows per device pool group that any whole-block range
// of at most fetchTokens tokens can need: ⌈fetchTokens/T⌉ per layer group, a
// window group at most its sink blocks plus ⌈window/T⌉ (at a history on a block
// boundary, where every staging range ends, a window of W tokens reads at most
// ⌈(W−1)/T⌉ ≤ ⌈W/T⌉ blocks besides its sinks). Layer groups sharing a pool
// group add up. It is the reference's fetch_rows; it refuses fetchTokens < 1
// and an invalid layout.
func (l Layout) FetchRows(fetchTokens int) (map[int]int, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if fetchTokens < 1 {
		return nil, fmt.Errorf("staging: sizing: fetch_tokens is %d; want at least 1", fetchTokens)
	}
	target := ceilDiv(fetchTokens, l.TokensPerBlock)
	rows := make(map[int]int, len(l.PoolGroups))
	for _, g := range l.LayerGroups {
		blocks := target
		if g.Window != nil {
			blocks = min(target, satAdd(g.SinkBlocks, ceilDiv(*g.Window, l.TokensPerBlock)))
		}
		rows[g.PoolGroup] = satAdd(rows[g.PoolGroup], blocks)
	}
	return rows, nil
}

// Sizing is the staging a layout needs: per device pool group, the rows of one
// fetch, the bytes of a row, and the slots to allocate.
type Sizing struct {
	// OneFetch is the bytes one fetch of FetchTokens stages.
	OneFetch int
	// Groups lists the pool groups that stage rows, in pool group order.
	Groups []GroupSizing
}

// GroupSizing is one device pool group's share of a [Sizing].
type GroupSizing struct {
	PoolGroup int
	// FetchRows is the rows one fetch needs ([Layout.FetchRows]).
	FetchRows int
	// PageBytes is the bytes of one row ([Layout.PageBytes]).
	PageBytes int
	// Slots is the slots to allocate; Slots × PageBytes bytes.
	Slots int
}

// Bytes returns the group's staging bytes, Slots × PageBytes.
func (g GroupSizing) Bytes() int { return g.Slots * g.PageBytes }

// SlotCounts returns the slots per device pool group: MaxFetches fetches, or
// MaxBytes split by each group's share of one fetch, rounded down to whole
// slots; with both, the smaller. Each group's share of the bytes is its share of
// one fetch, so a cap keeps every group's rows of one fetch; uncapped, a group
// gets exactly MaxFetches times its rows. It is the reference's slot_counts.
//
// It refuses invalid options, MaxBytes below one fetch (wrapping
// [ErrBelowOneFetch]; the error says how many bytes one fetch needs), a layout
// with nothing to stage ([ErrNothingToStage]) and sizes that overflow
// ([ErrSizeOverflow]).
func (l Layout) SlotCounts(o SizingOptions) (Sizing, error) {
	if err := o.validate(); err != nil {
		return Sizing{}, err
	}
	rows, err := l.FetchRows(o.FetchTokens)
	if err != nil {
		return Sizing{}, err
	}
	pages := l.PageBytes()
	s := Sizing{}
	for g, n := range rows {
		if !mulFits(n, pages[g]) {
			return Sizing{}, fmt.Errorf("staging: sizing: %d rows of %d bytes in pool group %d: %w", n, pages[g], g, ErrSizeOverflow)
		}
		s.OneFetch = satAdd(s.OneFetch, n*pages[g])
		s.Groups = append(s.Groups, GroupSizing{PoolGroup: g, FetchRows: n, PageBytes: pages[g]})
	}
	slices.SortFunc(s.Groups, func(a, b GroupSizing) int { return a.PoolGroup - b.PoolGroup })
	switch {
	case s.OneFetch < 1:
		return Sizing{}, fmt.Errorf("%w: no layer group needs a row", ErrNothingToStage)
	case s.OneFetch == math.MaxInt:
		return Sizing{}, fmt.Errorf("staging: sizing: one fetch of %d tokens %w", o.FetchTokens, ErrSizeOverflow)
	case o.MaxBytes > 0 && o.MaxBytes < s.OneFetch:
		return Sizing{}, fmt.Errorf("%w: max_bytes is %d; one fetch of %d tokens needs %d bytes",
			ErrBelowOneFetch, o.MaxBytes, o.FetchTokens, s.OneFetch)
	}
	total := o.MaxBytes
	if o.MaxFetches > 0 {
		if !mulFits(o.MaxFetches, s.OneFetch) {
			if total == 0 {
				return Sizing{}, fmt.Errorf("staging: sizing: %d fetches of %d bytes: %w", o.MaxFetches, s.OneFetch, ErrSizeOverflow)
			}
		} else if f := o.MaxFetches * s.OneFetch; total == 0 || f < total {
			total = f
		}
	}
	for i := range s.Groups {
		g := &s.Groups[i]
		// total × weight / one, in 128 bits: the product may overflow, the
		// quotient never exceeds total.
		hi, lo := bits.Mul64(uint64(total), uint64(g.FetchRows*g.PageBytes))
		share, _ := bits.Div64(hi, lo, uint64(s.OneFetch))
		g.Slots = int(share) / g.PageBytes
	}
	return s, nil
}

// Counts returns the slots per pool group, as the reference's slot_counts
// returns them.
func (s Sizing) Counts() map[int]int {
	out := make(map[int]int, len(s.Groups))
	for _, g := range s.Groups {
		out[g.PoolGroup] = g.Slots
	}
	return out
}

// satAdd adds non-negative a and b, saturating at math.MaxInt.
func satAdd(a, b int) int {
	if a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}
