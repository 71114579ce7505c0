// Package pools keeps a backend's pool registrations (contract
// Registrar.RegisterPool): the memory spans a manager registered, each refused
// when it is empty, wraps around the address space or overlaps a live one.
// Every backend needs the same bookkeeping, and the handle rules (closing an
// old handle never revokes a newer registration of the same address) are easy
// to get subtly wrong, so they live here once.
package pools

import (
	"fmt"
	"sync"

	"github.com/kvready/kvready/contract"
)

// Registry is the set of live registrations. The zero value is ready to use,
// and it is safe for concurrent use.
type Registry struct {
	mu   sync.Mutex
	live map[uint64]span
	next uint64 // the last id handed out; ids are never reused
}

type span struct{ addr, end uintptr }

// Register registers [address, address+size). A zero address, a non-positive
// size, a span that wraps around, or one overlapping a live registration is
// refused and registers nothing; the error names the span and what was wrong.
func (r *Registry) Register(address uintptr, size int) (contract.Registration, error) {
	if address == 0 || size <= 0 || address+uintptr(size) < address {
		return nil, fmt.Errorf("RegisterPool(%#x, %d): want a non-zero address and a positive size that does not wrap", address, size)
	}
	s := span{address, address + uintptr(size)}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.live {
		if s.addr < l.end && l.addr < s.end {
			return nil, fmt.Errorf("RegisterPool(%#x, %d): overlaps the live registration [%#x, %#x)", address, size, l.addr, l.end)
		}
	}
	if r.live == nil {
		r.live = map[uint64]span{}
	}
	r.next++
	r.live[r.next] = s
	return &registration{r: r, id: r.next}, nil
}

// Live reports how many registrations are live.
func (r *Registry) Live() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.live)
}

type registration struct {
	r  *Registry
	id uint64
}

// Close revokes exactly this registration: ids are never reused, so closing
// a handle again does nothing and never revokes a newer registration of the
// same address.
func (h *registration) Close() error {
	h.r.mu.Lock()
	delete(h.r.live, h.id)
	h.r.mu.Unlock()
	return nil
}
