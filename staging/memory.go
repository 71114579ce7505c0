package staging

import (
	"errors"
	"fmt"
	"unsafe"
)

// Group describes one pool group of staging memory: Slots slots of SlotBytes
// bytes each. A lease's rows of local layer group g use pool group g.
type Group struct {
	Slots     int
	SlotBytes int
}

// Alloc returns nbytes of host memory for one pool group's slab. On a real GPU
// it must be memory the device can copy to and from asynchronously — the CUDA
// driver's pinned host allocation (cuMemHostAlloc) or memory the caller pinned
// — never a plain Go allocation, which the driver refuses or copies
// synchronously.
type Alloc func(nbytes int) ([]byte, error)

// GoHeap is an Alloc from the Go heap. It is only for the simulated device
// (gpu/sim), tests and demos: no real GPU copies asynchronously from it.
func GoHeap(nbytes int) ([]byte, error) {
	if nbytes <= 0 {
		return nil, fmt.Errorf("staging: GoHeap(%d); want a positive size", nbytes)
	}
	return make([]byte, nbytes), nil
}

// Memory is the manager's staging memory: one slab per pool group, cut into
// slots. It is created before the backend and the engine because both refer to
// it: the backend resolves a unit's local coordinates through Row, the engine
// lends its slots. The slabs are the caller's (or its allocator's); Memory
// never moves or frees them.
//
// One live engine at a time lends from a Memory (Claim): a second is refused,
// naming the first. The slots an engine left out of circulation — quarantined,
// or held by a lease it never finished — stay out for every later engine over
// the same Memory, until the Memory itself is released (SPEC §4 rule 17).
type Memory struct {
	groups []Group
	slabs  [][]byte
	parts  Parts
	// claims: one live engine lends from the memory at a time, and what an
	// engine left out of circulation stays out (claim.go).
	claims claims
}

// ErrNoGroups is returned for memory without pool groups.
var ErrNoGroups = errors.New("staging: no pool groups; want one per local layer group")

// NewMemory allocates one slab per pool group with alloc.
func NewMemory(alloc Alloc, groups ...Group) (*Memory, error) {
	if alloc == nil {
		return nil, errors.New("staging: NewMemory: alloc is nil; want the host allocator of the device (staging.GoHeap for the simulated one)")
	}
	if err := checkGroups(groups); err != nil {
		return nil, err
	}
	slabs := make([][]byte, len(groups))
	for g, grp := range groups {
		n := grp.Slots * grp.SlotBytes
		slab, err := alloc(n)
		if err != nil {
			return nil, fmt.Errorf("staging: allocating %d bytes for pool group %d: %w", n, g, err)
		}
		if len(slab) < n {
			return nil, fmt.Errorf("staging: the allocator returned %d bytes for pool group %d; want %d", len(slab), g, n)
		}
		slabs[g] = slab[:n:n]
	}
	return newMemory(groups, slabs)
}

// MemoryOver builds staging memory over slabs the caller provides, one per
// pool group, each at least Slots × SlotBytes bytes long (the rest is not
// used). The caller keeps the slabs alive and unmoved for the memory's life.
func MemoryOver(slabs [][]byte, groups ...Group) (*Memory, error) {
	if err := checkGroups(groups); err != nil {
		return nil, err
	}
	if len(slabs) != len(groups) {
		return nil, fmt.Errorf("staging: %d slabs for %d pool groups; want one per group", len(slabs), len(groups))
	}
	own := make([][]byte, len(groups))
	for g, grp := range groups {
		n := grp.Slots * grp.SlotBytes
		if len(slabs[g]) < n {
			return nil, fmt.Errorf("staging: slab %d has %d bytes; pool group %d needs %d slots of %d bytes = %d", g, len(slabs[g]), g, grp.Slots, grp.SlotBytes, n)
		}
		own[g] = slabs[g][:n:n]
	}
	return newMemory(groups, own)
}

func checkGroups(groups []Group) error {
	if len(groups) == 0 {
		return ErrNoGroups
	}
	for g, grp := range groups {
		if grp.Slots <= 0 || grp.SlotBytes <= 0 || grp.Slots > MaxSlots || grp.SlotBytes > maxInt/grp.Slots {
			return fmt.Errorf("staging: pool group %d: %d slots of %d bytes; want 1..%d slots of a positive size", g, grp.Slots, grp.SlotBytes, MaxSlots)
		}
	}
	return nil
}

func newMemory(groups []Group, slabs [][]byte) (*Memory, error) {
	parts := make([]Part, len(groups))
	for g, grp := range groups {
		parts[g] = Part{
			Name:      fmt.Sprintf("group%d", g),
			Address:   int(uintptr(unsafe.Pointer(unsafe.SliceData(slabs[g])))),
			NBytes:    len(slabs[g]),
			SlotBytes: grp.SlotBytes,
			Slots:     grp.Slots,
		}
	}
	ps, err := NewParts(parts)
	if err != nil {
		return nil, err
	}
	return &Memory{groups: append([]Group(nil), groups...), slabs: slabs, parts: ps}, nil
}

// Row returns slot local of pool group localGroup: the memory a backend
// resolves a unit's coordinates to. It is safe for concurrent use (the slabs
// never move).
func (m *Memory) Row(localGroup, local int) ([]byte, bool) {
	if localGroup < 0 || localGroup >= len(m.slabs) {
		return nil, false
	}
	grp := m.groups[localGroup]
	if local < 0 || local >= grp.Slots {
		return nil, false
	}
	sb := grp.SlotBytes
	return m.slabs[localGroup][local*sb : (local+1)*sb : (local+1)*sb], true
}

// Groups returns the pool groups.
func (m *Memory) Groups() []Group { return append([]Group(nil), m.groups...) }

// NumGroups returns the number of pool groups.
func (m *Memory) NumGroups() int { return len(m.groups) }

// Group returns pool group g, for 0 <= g < NumGroups().
func (m *Memory) Group(g int) Group { return m.groups[g] }

// Parts returns the staging parts, one per pool group (part g is group g), for
// building extents and registering the memory with a backend.
func (m *Memory) Parts() Parts { return m.parts }
