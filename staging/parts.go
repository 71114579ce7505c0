package staging

import (
	"cmp"
	"fmt"
	"slices"
)

// Part is one staging region, registered with a backend as (Address, NBytes):
// Slots slots of SlotBytes bytes each, back to back from Address. One slot holds
// one row.
type Part struct {
	Name      string
	Address   int
	NBytes    int
	SlotBytes int
	Slots     int
}

// SlotAddress returns the address of slot s, which the caller keeps in [0, Slots).
func (p Part) SlotAddress(s int) int { return p.Address + s*p.SlotBytes }

// Parts is a validated, immutable list of staging parts; a row names its part by
// index. Validating once lets every extent built against it skip the check.
type Parts struct {
	parts []Part
	// base[i] is the number of slots in parts before i: a row's physical
	// coordinate (part, slot) becomes the single integer base[part]+slot.
	base []int
}

// NewParts validates and copies parts: every integer positive, Slots × SlotBytes
// within NBytes, and no two parts overlapping.
func NewParts(parts []Part) (Parts, error) {
	type span struct{ lo, hi, i int }
	spans := make([]span, len(parts))
	base := make([]int, len(parts))
	total := 0
	for i, p := range parts {
		if p.Address <= 0 || p.NBytes <= 0 || p.SlotBytes <= 0 || p.Slots <= 0 {
			return Parts{}, fmt.Errorf("staging: part %d (%q): address %d, nbytes %d, slot_bytes %d, slots %d; want positive integers",
				i, p.Name, p.Address, p.NBytes, p.SlotBytes, p.Slots)
		}
		if p.Slots > p.NBytes/p.SlotBytes {
			return Parts{}, fmt.Errorf("staging: part %d (%q): %d slots of %d bytes do not fit its %d bytes",
				i, p.Name, p.Slots, p.SlotBytes, p.NBytes)
		}
		if p.Address > maxInt-p.NBytes {
			return Parts{}, fmt.Errorf("staging: part %d (%q): %d bytes from address %d overflow the address space", i, p.Name, p.NBytes, p.Address)
		}
		spans[i] = span{p.Address, p.Address + p.NBytes, i}
		base[i] = total
		total += p.Slots
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
	for k := 1; k < len(spans); k++ {
		if spans[k-1].hi > spans[k].lo {
			return Parts{}, fmt.Errorf("staging: parts %d and %d overlap; parts never share memory", spans[k-1].i, spans[k].i)
		}
	}
	return Parts{parts: slices.Clone(parts), base: base}, nil
}

const maxInt = int(^uint(0) >> 1)

// Len returns the number of parts.
func (ps Parts) Len() int { return len(ps.parts) }

// Part returns part i, for 0 <= i < Len().
func (ps Parts) Part(i int) Part { return ps.parts[i] }

// Slot returns the slot that address addr is in part i, refusing an unknown part
// and an address outside, misaligned with or past the capacity of the part.
func (ps Parts) Slot(i, addr int) (int, error) {
	if i < 0 || i >= len(ps.parts) {
		return 0, fmt.Errorf("staging: unknown part %d; there are %d parts", i, len(ps.parts))
	}
	p := ps.parts[i]
	off := addr - p.Address
	if addr < p.Address || off%p.SlotBytes != 0 {
		return 0, fmt.Errorf("staging: address %#x is outside or misaligned with part %d (%q, %d-byte slots from %#x)",
			addr, i, p.Name, p.SlotBytes, p.Address)
	}
	slot := off / p.SlotBytes
	if slot >= p.Slots {
		return 0, fmt.Errorf("staging: address %#x is slot %d of part %d (%q), past its %d slots", addr, slot, i, p.Name, p.Slots)
	}
	return slot, nil
}
