package cuda

import (
	"testing"
	"unsafe"

	"pgregory.net/rapid"
)

// pinnedPtr against a scan of the allocations: a buffer is pinned exactly
// when it lies inside one of them — not across two that happen to touch,
// not before the first, not past the end of the last — and its driver
// address keeps its offset inside that allocation.
func TestPinnedLookupAgreesWithAScan(t *testing.T) {
	arena := make([]byte, 1<<12)
	base := uintptr(unsafe.Pointer(&arena[0]))
	mapped := make([]byte, 8<<10) // where the driver maps each allocation: 1 KiB apart
	rapid.Check(t, func(t *rapid.T) {
		d := &Device{}
		// Sorted, disjoint allocations inside the arena, some touching.
		at := rapid.IntRange(0, 64).Draw(t, "first")
		for range rapid.IntRange(0, 6).Draw(t, "allocations") {
			n := rapid.IntRange(1, 200).Draw(t, "size")
			if at+n > len(arena) {
				break
			}
			d.pinned = append(d.pinned, hostSpan{start: base + uintptr(at), n: n, p: unsafe.Pointer(&mapped[len(d.pinned)<<10])})
			at += n + rapid.IntRange(0, 1).Draw(t, "gap")*rapid.IntRange(1, 64).Draw(t, "gap_bytes")
		}
		d.publishPinned()
		off := rapid.IntRange(0, len(arena)-1).Draw(t, "offset")
		n := rapid.IntRange(1, len(arena)-off).Draw(t, "len")
		buf := arena[off : off+n]
		got, err := d.pinnedPtr(buf)
		start := base + uintptr(off)
		var want unsafe.Pointer
		for _, s := range d.pinned {
			if start >= s.start && start+uintptr(n) <= s.start+uintptr(s.n) {
				want = unsafe.Add(s.p, start-s.start)
			}
		}
		switch {
		case want == nil && err == nil:
			t.Fatalf("[%d, +%d) is inside no allocation of %v, but pinnedPtr accepted it", off, n, d.pinned)
		case want != nil && err != nil:
			t.Fatalf("[%d, +%d) is inside an allocation, but pinnedPtr refused it: %v", off, n, err)
		case want != got:
			t.Fatalf("[%d, +%d): driver address %p, want %p", off, n, got, want)
		}
	})
}
