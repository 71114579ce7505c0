package ucx

/*
#include <stdlib.h>
#include "kvucx.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/kvready/kvready/transfer"
)

// memory is one registration: a transfer.Memory.
type memory struct {
	t      *Transport
	mode   Mode
	packed []byte
	size   int
	pin    runtime.Pinner // in the registration: one allocation fewer a Register
	region uint64         // Checked
	gen    uint64         // Checked
	mh     C.ucp_mem_h
	how    transfer.Revocation // set once revoked
}

var _ transfer.Memory = (*memory)(nil)

// Register implements transfer.Transport. mem is pinned (runtime.Pinner) so
// the garbage collector never moves or frees what UCX may touch; see
// Transport for how long. The memory stays the caller's to read; it must
// not be resized or reused while registered.
func (t *Transport) Register(mem []byte) (transfer.Memory, error) {
	if len(mem) == 0 {
		return nil, fmt.Errorf("ucx: cannot register 0 bytes; a registration of at least 1 byte expected")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.w == nil {
		return nil, fmt.Errorf("%w: transport %s#%d cannot register memory", ErrClosed, t.cfg.Name, t.cfg.Incarnation)
	}
	m := &memory{t: t, mode: t.cfg.Mode, size: len(mem)}
	m.pin.Pin(&mem[0])
	base := unsafe.Pointer(&mem[0])
	k := key{mode: m.mode, owner: t.cfg.Name, inc: t.cfg.Incarnation, len: uint64(len(mem))}
	if m.mode == Checked {
		// Written straight into m (a field's memory, holding no Go pointer):
		// locals passed by address would each escape, one allocation apiece.
		if st := C.kvu_region_add(t.w, base, C.size_t(len(mem)), (*C.uint64_t)(unsafe.Pointer(&m.region)), (*C.uint64_t)(unsafe.Pointer(&m.gen))); st != C.UCS_OK {
			m.pin.Unpin()
			return nil, fmt.Errorf("ucx: registering %d bytes: %w", len(mem), statusErr(st))
		}
		k.region, k.gen = m.region, m.gen
	} else {
		var rkey unsafe.Pointer
		var rlen C.size_t
		if st := C.kvu_mem_map(t.w, base, C.size_t(len(mem)), &m.mh, &rkey, &rlen); st != C.UCS_OK {
			m.pin.Unpin()
			return nil, fmt.Errorf("ucx: ucp_mem_map of %d bytes: %w", len(mem), statusErr(C.int(st)))
		}
		k.base = uint64(uintptr(base))
		k.rkey = C.GoBytes(rkey, C.int(rlen))
		C.kvu_rkey_buffer_release(rkey)
	}
	m.packed = k.append(nil)
	t.regions[m] = struct{}{}
	return m, nil
}

// PackedKey implements transfer.Memory: the owner's name and incarnation,
// the length, and the registration's slot and generation (Checked) or its
// address and UCX rkey (OneSided). The transport never sends it: publishing
// it, after negotiation, is the caller's.
func (m *memory) PackedKey() []byte { return append([]byte(nil), m.packed...) }

// Len implements transfer.Memory.
func (m *memory) Len() int { return m.size }

// Revoke implements transfer.Memory. Checked: the registration leaves the
// owner's table under the transport's lock, and only Progress, under the
// same lock, writes it: no put lands after Revoke returns, whenever it was
// posted — RevokedFenced. A rendezvous put being received straight into
// it (over tcp and shared memory, Config.Bounce) is waited for first,
// progressing the worker, for at most Config.RevokeWait; if one is still
// arriving then (over tcp, a writer stopped mid-transfer), Revoke answers RevokedNewOnly and the
// memory stays pinned for the life of the process. OneSided: ucp_mem_unmap — RevokedNewOnly, the
// conservative answer: over tcp and shared memory UCX 1.13 moves a
// one-sided put by software RMA, which writes the address the put names
// without looking for a registration, so even puts posted later still land
// (and cma, where used, writes with process_vm_writev); only the writer's
// own evidence ends its access. Idempotent.
func (m *memory) Revoke() (transfer.Revocation, error) {
	t := m.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if m.how != 0 {
		return m.how, nil
	}
	return m.how, m.end()
}

// end takes the registration out of the owner's table (Checked: unpinned,
// since nothing writes it after) or unmaps it (OneSided: pinned for ever);
// t.mu is held, and Close ends every registration before the worker goes.
func (m *memory) end() error {
	t := m.t
	delete(t.regions, m)
	if m.mode == Checked {
		if C.kvu_region_revoke(t.w, C.uint64_t(m.region), C.uint64_t(m.gen), C.int64_t(t.cfg.RevokeWait.Nanoseconds())) == 0 {
			m.keepPinned()
			m.how = transfer.RevokedNewOnly
			return nil
		}
		m.pin.Unpin()
		m.how = transfer.RevokedFenced
		return nil
	}
	var err error
	if st := C.kvu_mem_unmap(t.w, m.mh); st != C.UCS_OK {
		err = fmt.Errorf("ucx: ucp_mem_unmap: %w", statusErr(C.int(st)))
	}
	m.keepPinned()
	m.how = transfer.RevokedNewOnly
	return err
}

// keepPinned keeps the memory pinned for the life of the process: something
// the owner cannot stop may still write it.
func (m *memory) keepPinned() {
	forever.mu.Lock()
	forever.pins = append(forever.pins, &m.pin)
	forever.mu.Unlock()
}
