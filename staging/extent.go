package staging

import (
	"errors"
	"fmt"
	"slices"

	"github.com/kvready/kvready/contract"
)

// ExtentName is the stable, versioned extent namespace of staging extents. It is
// never a request id or an allocation identity.
const ExtentName = "trtllm:shared-kv:staging:1"

// ExtentBuilder turns lease views into extents. It keeps its scratch storage
// between calls, so that building into a caller-owned extent allocates nothing
// once the builder has seen its largest view. The zero value is ready to use; it
// is not safe for concurrent use.
type ExtentBuilder struct {
	units []contract.Unit
	slots []int // physical coordinates, for the duplicate check
}

// ErrUnplacedView is wrapped by the error for a view without names, addresses
// and parts: there is nothing to name its units by.
var ErrUnplacedView = errors.New("staging: extents need staging names, addresses and part indices")

// Build makes dst the extent of view over parts. Every row becomes a unit named
// by the lender's name byte for byte, with LocalGroup its layer group and Local
// its slot in its part. It refuses a view without names, an unknown part, a
// negative block ordinal, a row outside, misaligned with or past the capacity of
// its part, two rows on one (part, slot), and two rows with one name. On error
// dst is unchanged.
//
// dst must not be rebuilt while a backend may still hold it (see
// [contract.CacheExtent.Reset]).
func (b *ExtentBuilder) Build(dst *contract.CacheExtent, view *View, parts Parts, name []byte, isLast bool) error {
	if err := view.Duplicate(); err != nil {
		return err
	}
	b.units = b.units[:0]
	b.slots = b.slots[:0]
	for i := range view.Runs() {
		r := view.Run(i)
		if !r.Placed() {
			return fmt.Errorf("%w: run %d (layer group %d) has none", ErrUnplacedView, i, r.LayerGroup)
		}
		if r.Part < 0 || r.Part >= parts.Len() {
			return fmt.Errorf("staging: run %d (layer group %d) refers to unknown part %d; there are %d parts", i, r.LayerGroup, r.Part, parts.Len())
		}
		for k, o := range r.Ordinals {
			if o < 0 {
				return fmt.Errorf("staging: run %d (layer group %d) row %d has negative block ordinal %d", i, r.LayerGroup, k, o)
			}
		}
		for k, addr := range r.Addresses {
			slot, err := parts.Slot(r.Part, addr)
			if err != nil {
				return fmt.Errorf("run %d (layer group %d) row %d: %w", i, r.LayerGroup, k, err)
			}
			b.slots = append(b.slots, parts.base[r.Part]+slot)
			b.units = append(b.units, contract.Unit{Name: r.Names[k], LocalGroup: r.LayerGroup, Local: slot})
		}
	}
	if err := b.checkPhysical(view, parts); err != nil {
		return err
	}
	return dst.Reset(name, b.units, isLast)
}

// checkPhysical refuses two rows on one physical slot: a backend writing both
// would leave one of them wrong. Rows are usually in slot order already, so the
// sort is skipped when they are.
func (b *ExtentBuilder) checkPhysical(view *View, parts Parts) error {
	if slices.IsSorted(b.slots) {
		for k := 1; k < len(b.slots); k++ {
			if b.slots[k] == b.slots[k-1] {
				return b.physicalError(view, parts, b.slots[k])
			}
		}
		return nil
	}
	slices.Sort(b.slots)
	for k := 1; k < len(b.slots); k++ {
		if b.slots[k] == b.slots[k-1] {
			return b.physicalError(view, parts, b.slots[k])
		}
	}
	return nil
}

func (b *ExtentBuilder) physicalError(view *View, parts Parts, global int) error {
	part := 0
	for p := range parts.Len() {
		if parts.base[p] <= global {
			part = p
		}
	}
	return fmt.Errorf("staging: two rows of the view are on slot %d of part %d (%q); each physical slot holds one row",
		global-parts.base[part], part, parts.Part(part).Name)
}

// BuildExtent is the convenient form of [ExtentBuilder.Build]: it validates parts
// and returns a new extent.
func BuildExtent(view *View, parts []Part, name []byte, isLast bool) (contract.CacheExtent, error) {
	ps, err := NewParts(parts)
	if err != nil {
		return contract.CacheExtent{}, err
	}
	var b ExtentBuilder
	var e contract.CacheExtent
	if err := b.Build(&e, view, ps, name, isLast); err != nil {
		return contract.CacheExtent{}, err
	}
	return e, nil
}
