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

// Adopt stores each non-empty bufs[i] itself — not a copy — under (the
// extent's name, unit i's name), as Put stores a copy: each counts as a use,
// and a new row in a full store evicts the least recently used ones. The
// caller hands those buffers over: each must hold its row's whole content,
// and neither the caller nor anyone else may touch it again. A row larger
// than the byte bound is not stored (its bytes are recycled). Adopt returns
// how many rows it stored; entries of bufs past the extent's units are not
// taken. Like Put, it is not a delivery: the backend's mode policy does not
// apply.
//
// The rows of one call are stored under one lock, and their headers are made
// in one allocation: a promotion hands over a lease's rows at once, on the
// lease's path (docs/tiers.md).
func (b *Backend) Adopt(ext contract.CacheExtent, bufs [][]byte) int {
	bufs = bufs[:min(len(bufs), ext.Len())]
	rows := make([]row, len(bufs))
	name := ext.Name()
	kept := 0
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, buf := range bufs {
		if len(buf) == 0 {
			continue
		}
		r := &rows[i]
		r.b = buf
		if b.store.putRow(key{name, ext.Unit(i).Name}, r) {
			kept++
			continue
		}
		b.store.recycle(r)
	}
	return kept
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
	b.store.recycleBytes(buf)
}
