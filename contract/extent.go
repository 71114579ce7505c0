package contract

import (
	"errors"
	"fmt"
	"hash/maphash"
	"iter"
)

// Unit is one independently named, indivisibly delivered piece of content.
//
// LocalGroup is the manager's layer group and Local a staging slot index within
// it; both are process-local memory coordinates, never sent to a peer and never
// a block ordinal. Both must be non-negative.
type Unit struct {
	Name       Name
	LocalGroup int
	Local      int
}

// Validate reports a negative local coordinate.
func (u Unit) Validate() error {
	if u.LocalGroup < 0 || u.Local < 0 {
		return fmt.Errorf("contract: unit %s has negative local coordinate (local_group %d, local %d); both must be >= 0",
			shortName(u.Name), u.LocalGroup, u.Local)
	}
	return nil
}

// ErrDuplicateUnit is wrapped by the error returned when two units of one extent
// share a name.
var ErrDuplicateUnit = errors.New("contract: two units in one extent share a name")

// CacheExtent is the immutable description of one fetch destination or publish
// source: an extent name, its units and an explicit sequence-end flag.
//
// The extent name should be a stable, versioned namespace such as
// "trtllm:shared-kv:staging:1" — never a request id or an allocation identity.
// It is opaque bytes, and any bytes are valid, the empty name included, with or
// without units, as the reference's CacheExtent and build_extent accept.
// Only sequence-aware backends may read IsLast; a name-addressed store must not.
//
// A backend must not keep a CacheExtent after Quiesce has answered true for the
// attempt that carried it: the caller may then reuse its storage (see Reset).
type CacheExtent struct {
	name   string
	units  []Unit
	isLast bool
	// seen is scratch for the duplicate check of large extents, kept so that
	// Reset does not allocate once it has seen its largest extent.
	seen []int32
}

// NewCacheExtent validates and snapshots an extent. The units are copied, so later
// changes to the caller's slice do not reach the extent. Any name is valid, the
// empty one included, with or without units, and so is an extent with no units
// (the reference's CacheExtent checks neither). It fails for a unit with a
// negative coordinate or two units with one name.
func NewCacheExtent(name []byte, units []Unit, isLast bool) (CacheExtent, error) {
	var e CacheExtent
	if err := e.Reset(name, units, isLast); err != nil {
		return CacheExtent{}, err
	}
	return e, nil
}

// Reset validates name, units and isLast and, only if they are valid, makes e
// describe them, reusing e's storage. It lets a caller that owns e build extents
// without allocating. On error e is unchanged.
//
// Reset must not be called while a backend may still hold e: only after Quiesce
// answered true for every attempt that carried it.
func (e *CacheExtent) Reset(name []byte, units []Unit, isLast bool) error {
	seen, err := checkUnits(units, e.seen)
	e.seen = seen
	if err != nil {
		return err
	}
	if e.name != string(name) { // the comparison does not allocate
		e.name = string(name)
	}
	e.units = append(e.units[:0], units...)
	e.isLast = isLast
	return nil
}

// quadraticLimit is the unit count up to which duplicate names are found by
// pairwise comparison; below it, that is cheaper than hashing.
const quadraticLimit = 32

var nameSeed = maphash.MakeSeed()

// checkUnits refuses a negative coordinate or a repeated name. Above
// quadraticLimit units it uses an open-addressing table of unit indices in
// seen, which it grows as needed and returns for reuse.
func checkUnits(units []Unit, seen []int32) ([]int32, error) {
	for i, u := range units {
		if err := u.Validate(); err != nil {
			return seen, fmt.Errorf("unit %d: %w", i, err)
		}
	}
	if len(units) <= quadraticLimit {
		for i := range units {
			for j := i + 1; j < len(units); j++ {
				if units[i].Name == units[j].Name {
					return seen, fmt.Errorf("%w: units %d and %d are both %s", ErrDuplicateUnit, i, j, shortName(units[i].Name))
				}
			}
		}
		return seen, nil
	}
	size := 1
	for size < 2*len(units) {
		size <<= 1
	}
	if cap(seen) < size {
		seen = make([]int32, size)
	}
	seen = seen[:size]
	for i := range seen {
		seen[i] = -1
	}
	mask := uint64(size - 1)
	for i := range units {
		slot := maphash.Bytes(nameSeed, units[i].Name[:]) & mask
		for seen[slot] >= 0 {
			if j := seen[slot]; units[j].Name == units[i].Name {
				return seen, fmt.Errorf("%w: units %d and %d are both %s", ErrDuplicateUnit, j, i, shortName(units[i].Name))
			}
			slot = (slot + 1) & mask
		}
		seen[slot] = int32(i)
	}
	return seen, nil
}

// Name returns the extent name. A Go string is immutable, so no caller can change
// the extent through it.
func (e CacheExtent) Name() string { return e.name }

// IsLast reports the explicit sequence-end flag.
func (e CacheExtent) IsLast() bool { return e.isLast }

// Len returns the number of units.
func (e CacheExtent) Len() int { return len(e.units) }

// Unit returns unit i, for 0 <= i < Len().
func (e CacheExtent) Unit(i int) Unit { return e.units[i] }

// Units returns a copy of the units.
func (e CacheExtent) Units() []Unit { return append([]Unit(nil), e.units...) }

// All yields every unit with its index, in extent order, without copying.
func (e CacheExtent) All() iter.Seq2[int, Unit] {
	return func(yield func(int, Unit) bool) {
		for i, u := range e.units {
			if !yield(i, u) {
				return
			}
		}
	}
}

// shortName abbreviates a name for messages: the full 108 digits rarely help a
// reader find which unit was wrong.
func shortName(n Name) string {
	s := n.String()
	return s[:16] + "…"
}
