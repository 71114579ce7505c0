package readiness

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/kvready/kvready/staging"
)

// Group describes one pool group of staging memory: Slots slots of SlotBytes
// bytes each. A lease's rows of local layer group g use pool group g.
type Group struct {
	Slots     int
	SlotBytes int
}

// Memory is the manager's staging memory: one slab per pool group, cut into
// slots. It is created before the backend and the engine because both refer
// to it: the backend resolves a unit's local coordinates through Row, the
// engine lends its slots.
type Memory struct {
	groups []Group
	slabs  [][]byte
	parts  staging.Parts
}

// NewMemory allocates the staging slabs.
func NewMemory(groups ...Group) (*Memory, error) {
	if len(groups) == 0 {
		return nil, errors.New("readiness: no pool groups; want one per local layer group")
	}
	m := &Memory{groups: append([]Group(nil), groups...), slabs: make([][]byte, len(groups))}
	parts := make([]staging.Part, len(groups))
	for g, grp := range groups {
		if grp.Slots <= 0 || grp.SlotBytes <= 0 || grp.Slots > staging.MaxSlots {
			return nil, fmt.Errorf("readiness: pool group %d: %d slots of %d bytes; want 1..%d slots of a positive size",
				g, grp.Slots, grp.SlotBytes, staging.MaxSlots)
		}
		m.slabs[g] = make([]byte, grp.Slots*grp.SlotBytes)
		parts[g] = staging.Part{
			Name:      fmt.Sprintf("group%d", g),
			Address:   int(uintptr(unsafe.Pointer(&m.slabs[g][0]))),
			NBytes:    len(m.slabs[g]),
			SlotBytes: grp.SlotBytes,
			Slots:     grp.Slots,
		}
	}
	ps, err := staging.NewParts(parts)
	if err != nil {
		return nil, fmt.Errorf("readiness: %w", err)
	}
	m.parts = ps
	return m, nil
}

// Row returns slot local of pool group localGroup: the memory a backend
// resolves a unit's coordinates to. It is safe for concurrent use (the slabs
// never move), and it is how backend/mem reaches staging.
func (m *Memory) Row(localGroup, local int) ([]byte, bool) {
	if localGroup < 0 || localGroup >= len(m.slabs) {
		return nil, false
	}
	sb := m.groups[localGroup].SlotBytes
	if local < 0 || local >= m.groups[localGroup].Slots {
		return nil, false
	}
	return m.slabs[localGroup][local*sb : (local+1)*sb : (local+1)*sb], true
}

// Groups returns the pool groups.
func (m *Memory) Groups() []Group { return append([]Group(nil), m.groups...) }

// Parts returns the staging parts (one per pool group), e.g. for registering
// them with a backend.
func (m *Memory) Parts() []staging.Part {
	out := make([]staging.Part, m.parts.Len())
	for i := range out {
		out[i] = m.parts.Part(i)
	}
	return out
}
