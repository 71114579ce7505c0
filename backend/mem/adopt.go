package mem

import "github.com/kvready/kvready/contract"

// Reserve returns n bytes that nobody else holds — recycled from rows the
// store dropped when it has some of that length — for a caller to fill and
// then hand over with Adopt, or back with Unreserve. Their content is
// undefined. A stack of tiers reserves them before a lower tier's fetch, so
// that the fetch can land a copy of each row in them while the row's bytes
// are hot in the cache (backend/tiers's Adopter); a promotion that copies the
// staging rows after the fetch reads them again, cold, on the lease's path.
//
// Reserved bytes count against no bound until adopted. A non-positive n
// returns nil.
func (b *Backend) Reserve(n int) []byte {
	if n <= 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.store.buffer(n)
}

// Adopt stores buf itself — not a copy — under (extent, name), as Put stores
// a copy: it counts as a use, and a new row in a full store evicts the least
// recently used ones. The caller hands buf over: it must hold the row's
// whole content, and neither the caller nor anyone else may touch it again.
// A row larger than the byte bound is not stored (its bytes are recycled);
// Adopt reports whether it stored the row. Like Put, it is not a delivery:
// the backend's mode policy does not apply.
func (b *Backend) Adopt(extent string, name contract.Name, buf []byte) bool {
	if len(buf) == 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.store.put(key{extent, name}, buf) {
		return true
	}
	b.store.recycle(&row{b: buf})
	return false
}

// Unreserve gives back bytes Reserve returned that will not be adopted. The
// caller must be sure nothing writes them any more: the next row stored may
// take them.
func (b *Backend) Unreserve(buf []byte) {
	if len(buf) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.store.recycle(&row{b: buf})
}
