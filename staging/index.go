package staging

import (
	"hash/maphash"

	"github.com/kvready/kvready/contract"
)

var nameSeed = maphash.MakeSeed()

// nameIndex is an open-addressing table from a view's row names to their rows,
// built once per view. It finds duplicate names while it is built and answers
// "which row is this served name" without a Go map: entries are 12 bytes and
// hold a fingerprint, so a probe compares the full 54-byte name only when the
// fingerprint matches. Its storage is reused across views.
type nameIndex struct {
	slots []indexSlot
	mask  uint64
}

type indexSlot struct {
	fp  uint32 // high bits of the hash; 0 marks an empty slot
	run uint32
	row uint32
}

func fingerprint(h uint64) uint32 { return uint32(h>>32) | 1 }

// build indexes every row of runs. It returns the first duplicate it finds as
// (run, row) pairs, or ok=false.
func (x *nameIndex) build(runs []GroupRun, rows int) (dupRunA, dupRowA, dupRunB, dupRowB int, dup bool) {
	size := 16
	for size < 2*rows {
		size <<= 1
	}
	if cap(x.slots) < size {
		x.slots = make([]indexSlot, size)
	}
	x.slots = x.slots[:size]
	clear(x.slots)
	x.mask = uint64(size - 1)
	for r, run := range runs {
		for k := range run.Names {
			h := maphash.Bytes(nameSeed, run.Names[k][:])
			fp := fingerprint(h)
			i := h & x.mask
			for ; x.slots[i].fp != 0; i = (i + 1) & x.mask {
				s := x.slots[i]
				if s.fp == fp && runs[s.run].Names[s.row] == run.Names[k] {
					return int(s.run), int(s.row), r, k, true
				}
			}
			x.slots[i] = indexSlot{fp: fp, run: uint32(r), row: uint32(k)}
		}
	}
	return 0, 0, 0, 0, false
}

// find returns the run and row named n.
func (x *nameIndex) find(runs []GroupRun, n *contract.Name) (run, row int, ok bool) {
	h := maphash.Bytes(nameSeed, n[:])
	fp := fingerprint(h)
	for i := h & x.mask; x.slots[i].fp != 0; i = (i + 1) & x.mask {
		s := x.slots[i]
		if s.fp == fp && runs[s.run].Names[s.row] == *n {
			return int(s.run), int(s.row), true
		}
	}
	return 0, 0, false
}
