package main

/*
#include "cgo.h"
*/
import "C"

import (
	"fmt"
	"math"
	"sync/atomic"
	"unsafe"

	"github.com/kvready/kvready/staging"
)

// rows resolves a unit's coordinates to its staging row: *staging.Memory, or
// the conformance kit's memory.
type rows interface {
	Row(localGroup, local int) ([]byte, bool)
}

// memory is a staging-memory object: the caller's slabs (staging.MemoryOver),
// or, during a conformance check, the kit's memory (reached through write and
// read only: it is Go memory, and its address never crosses to C).
type memory struct {
	staged *staging.Memory // nil for the kit's memory
	rows   rows
	users  atomic.Int32 // engines and backends over it
}

//export kvready_memory_over
func kvready_memory_over(groups *C.kv_cgroup, n C.size_t, slabs *unsafe.Pointer, out *C.uint64_t) (st C.int) {
	defer guard(0, &st)
	if out == nil {
		return fail(0, invalid("kvready_memory_over: memory (the out-parameter) is NULL"))
	}
	if n == 0 || n > 1<<16 || groups == nil || slabs == nil {
		return fail(0, invalid("kvready_memory_over: %d pool groups (groups and slabs NULL: %v, %v); want 1 to 65536 groups, one slab each", n, groups == nil, slabs == nil))
	}
	gs := unsafe.Slice((*C.kvready_group)(unsafe.Pointer(groups)), int(n))
	ps := unsafe.Slice(slabs, int(n))
	sgs := make([]staging.Group, n)
	bufs := make([][]byte, n)
	for g, grp := range gs {
		slots, width := int64(grp.slots), int64(grp.slot_bytes)
		if slots <= 0 || width <= 0 || slots > staging.MaxSlots || width > (1<<40)/slots {
			return fail(0, invalid("kvready_memory_over: pool group %d: %d slots of %d bytes; want 1..%d slots of a positive size, at most 2^40 bytes in all", g, slots, width, staging.MaxSlots))
		}
		if ps[g] == nil {
			return fail(0, invalid("kvready_memory_over: slab %d is NULL; want %d bytes of caller memory", g, slots*width))
		}
		buf, err := inBytes(ps[g], C.size_t(slots*width), math.MaxInt, fmt.Sprintf("kvready_memory_over: slab %d", g))
		if err != nil {
			return fail(0, err)
		}
		sgs[g] = staging.Group{Slots: int(slots), SlotBytes: int(width)}
		bufs[g] = buf
	}
	m, err := staging.MemoryOver(bufs, sgs...)
	if err != nil {
		return fail(0, invalid("%v", err))
	}
	*out = C.uint64_t(register(kindMemory, &memory{staged: m, rows: m}))
	return C.KVREADY_OK
}

// slot finds the bytes [offset, offset+n) of a slot, or says why not.
func (m *memory) slot(group C.int32_t, local, offset C.int64_t, n C.size_t) ([]byte, error) {
	row, ok := m.rows.Row(int(group), int(local))
	if !ok {
		return nil, invalid("kvready: no slot %d in pool group %d of this staging memory", local, group)
	}
	// n is compared unsigned: a size_t past int64 (SIZE_MAX) is a length past
	// the slot, not a negative one.
	if offset < 0 || int64(offset) > int64(len(row)) || uint64(n) > uint64(int64(len(row))-int64(offset)) {
		return nil, invalid("kvready: bytes [%d, %d+%d) are outside the %d-byte slot %d of pool group %d; want offset + n <= %d", offset, offset, uint64(n), len(row), local, group, len(row))
	}
	return row[offset : int64(offset)+int64(n)], nil
}

//export kvready_memory_write
func kvready_memory_write(h C.uint64_t, group C.int32_t, local, offset C.int64_t, src *C.kv_cvoid, n C.size_t) (st C.int) {
	defer guard(uint64(h), &st)
	m, err := lookup[*memory](uint64(h), kindMemory)
	if err != nil {
		return fail(uint64(h), err)
	}
	dst, err := m.slot(group, local, offset, n)
	if err != nil {
		return fail(uint64(h), err)
	}
	if n > 0 && src == nil {
		return fail(uint64(h), invalid("kvready_memory_write: src is NULL for %d bytes", n))
	}
	copy(dst, bytesOf(unsafe.Pointer(src), n))
	return C.KVREADY_OK
}

//export kvready_memory_read
func kvready_memory_read(h C.uint64_t, group C.int32_t, local, offset C.int64_t, dst unsafe.Pointer, n C.size_t) (st C.int) {
	defer guard(uint64(h), &st)
	m, err := lookup[*memory](uint64(h), kindMemory)
	if err != nil {
		return fail(uint64(h), err)
	}
	src, err := m.slot(group, local, offset, n)
	if err != nil {
		return fail(uint64(h), err)
	}
	if n > 0 && dst == nil {
		return fail(uint64(h), invalid("kvready_memory_read: dst is NULL for %d bytes", n))
	}
	copy(bytesOf(dst, n), src)
	return C.KVREADY_OK
}

//export kvready_memory_row
func kvready_memory_row(h C.uint64_t, group C.int32_t, local C.int64_t, row *unsafe.Pointer, n *C.size_t) (st C.int) {
	defer guard(uint64(h), &st)
	m, err := lookup[*memory](uint64(h), kindMemory)
	if err != nil {
		return fail(uint64(h), err)
	}
	if m.staged == nil {
		return fail(uint64(h), statusf(C.KVREADY_ERR_UNSUPPORTED,
			"kvready_memory_row: this is the conformance kit's memory, reached through kvready_memory_write and kvready_memory_read only"))
	}
	b, err := m.slot(group, local, 0, 0)
	if err != nil {
		return fail(uint64(h), err)
	}
	b = b[:cap(b)]
	if row != nil {
		// The slab is the caller's C memory (kvready_memory_over): handing its
		// address back hands back a C pointer.
		*row = unsafe.Pointer(unsafe.SliceData(b))
	}
	if n != nil {
		*n = C.size_t(len(b))
	}
	return C.KVREADY_OK
}

// groups returns the pool groups. The conformance kit's memory says only
// which rows exist, so its groups are found by asking.
func (m *memory) groups() []staging.Group {
	if m.staged != nil {
		return m.staged.Groups()
	}
	var gs []staging.Group
	for g := 0; g < 1<<16; g++ {
		row, ok := m.rows.Row(g, 0)
		if !ok {
			break
		}
		hi := 1
		for hi < staging.MaxSlots {
			if _, ok := m.rows.Row(g, hi); !ok {
				break
			}
			hi = min(2*hi, staging.MaxSlots)
		}
		lo := hi / 2 // Row(g, lo) exists; find the first that does not
		for lo+1 < hi {
			mid := (lo + hi) / 2
			if _, ok := m.rows.Row(g, mid); ok {
				lo = mid
			} else {
				hi = mid
			}
		}
		gs = append(gs, staging.Group{Slots: lo + 1, SlotBytes: len(row)})
	}
	return gs
}

//export kvready_memory_groups
func kvready_memory_groups(h C.uint64_t, out *C.kvready_group, cap C.size_t, n *C.size_t) (st C.int) {
	defer guard(uint64(h), &st)
	m, err := lookup[*memory](uint64(h), kindMemory)
	if err != nil {
		return fail(uint64(h), err)
	}
	gs := m.groups()
	if n != nil {
		*n = C.size_t(len(gs))
	}
	if !fits(cap, len(gs)) || out == nil {
		return fail(uint64(h), statusf(C.KVREADY_ERR_BUFFER, "kvready_memory_groups: %d pool groups; the array holds %d (out NULL: %v)", len(gs), uint64(cap), out == nil))
	}
	dst := outView(out, cap, len(gs))
	for i, g := range gs {
		dst[i].slots, dst[i].slot_bytes = C.int64_t(g.Slots), C.int64_t(g.SlotBytes)
	}
	return C.KVREADY_OK
}

//export kvready_memory_close
func kvready_memory_close(h C.uint64_t) (st C.int) {
	defer guard(uint64(h), &st)
	m, err := lookup[*memory](uint64(h), kindMemory)
	if err != nil {
		return fail(uint64(h), err)
	}
	if u := m.users.Load(); u > 0 {
		return fail(uint64(h), statusf(C.KVREADY_ERR_BUSY, "kvready_memory_close: %d engines or backends still use this staging memory; close them first", u))
	}
	unregister(uint64(h))
	return C.KVREADY_OK
}
