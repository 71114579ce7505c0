package redis

import "unsafe"

// copyStream copies n bytes, a positive multiple of 64, from src to dst,
// which must be 16-byte aligned, with non-temporal stores (copy_amd64.s).
//
//go:noescape
func copyStream(dst, src *byte, n int)

// teeCopy copies src into dst, as copy does, for a tee:
// dst is the bytes of a row the local tier dropped a while ago, cold in the
// cache, and nobody reads them before the lower tier's proof. A store into a
// line not in the cache first reads the line; non-temporal stores do not, and
// do not evict what the reads still need: on the 2-CPU AMD EPYC host a 64 KiB
// copy into cold bytes ran at 20–24 GB/s that way against 7–10.5 GB/s with
// copy (docs/tiers.md, 2026-12-03 evening). Into warm bytes they are slower
// (24 GB/s against 45), so only the tee uses them.
func teeCopy(dst, src []byte) {
	n := min(len(dst), len(src))
	if n < teeStreamMin {
		copy(dst, src)
		return
	}
	dst, src = dst[:n], src[:n]
	raceCopied(dst, src)
	// The head, up to dst's first 16-byte boundary, and the tail past the
	// last whole 64 bytes, with copy: MOVNTDQ faults on an unaligned address.
	head := int(-uintptr(unsafe.Pointer(unsafe.SliceData(dst))) & 15)
	body := (n - head) &^ 63
	copy(dst[:head], src[:head])
	copyStream(unsafe.SliceData(dst[head:]), unsafe.SliceData(src[head:]), body)
	copy(dst[head+body:], src[head+body:])
}
