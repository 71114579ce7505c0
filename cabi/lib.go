package main

/*
#include "cgo.h"
*/
import "C"

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/staging"
)

// version is the kvready release this library was built from; builds may set
// it with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

//export kvready_abi_version
func kvready_abi_version() C.uint32_t { return C.KVREADY_ABI_VERSION }

//export kvready_version
func kvready_version(buf *C.char, cap C.size_t, n *C.size_t) (st C.int) {
	defer guard(0, &st)
	s := fmt.Sprintf("kvready %s (C ABI %d), contract revision %s", version, C.KVREADY_ABI_VERSION, contract.RevisionCancelRequest)
	return writeString(0, s, buf, cap, n)
}

// writeString writes s into a caller buffer, reporting its full length; a
// buffer too small is KVREADY_ERR_BUFFER (and holds s cut to fit).
func writeString(h uint64, s string, buf *C.char, cap C.size_t, n *C.size_t) C.int {
	full := cString(buf, cap, s)
	if n != nil {
		*n = C.size_t(full)
	}
	if !fits(cap, full+1) {
		return fail(h, statusf(C.KVREADY_ERR_BUFFER, "kvready: the buffer holds %d bytes; the string needs %d and a NUL", uint64(cap), full))
	}
	return C.KVREADY_OK
}

//export kvready_last_error
func kvready_last_error(h C.uint64_t, buf *C.char, cap C.size_t, n *C.size_t) (st C.int) {
	defer guard(0, &st)
	objects.Lock()
	msg, ok := objects.errs[errorOn(uint64(h))]
	if _, isLive := objects.m[uint64(h)]; !isLive || h == 0 {
		msg, ok = objects.threadErrs[uint64(C.kv_thread())]
	}
	objects.Unlock()
	if !ok {
		msg = ""
	}
	full := cString(buf, cap, msg)
	if n != nil {
		*n = C.size_t(full)
	}
	if !fits(cap, full+1) {
		return C.KVREADY_ERR_BUFFER // not recorded: it would replace the message being read
	}
	return C.KVREADY_OK
}

//export kvready_detach_callbacks
func kvready_detach_callbacks() C.int {
	detached.Store(true)
	return C.KVREADY_OK
}

//export kvready_profile_validate
func kvready_profile_validate(json *C.kv_cchar, n C.size_t) (st C.int) {
	defer guard(0, &st)
	doc, err := inBytes(unsafe.Pointer(json), n, maxDocument, "kvready_profile_validate: json")
	if err != nil {
		return fail(0, err)
	}
	_, err = contract.LoadProfile(doc)
	if err != nil {
		if !contract.IsProfileError(err) {
			err = statusf(C.KVREADY_ERR_PROFILE, "%v", err) // not JSON: refused all the same
		}
	}
	return fail(0, err)
}

//export kvready_layout_id
func kvready_layout_id(json *C.kv_cchar, n C.size_t, id *C.uint8_t, tokensPerBlock *C.int32_t) (st C.int) {
	defer guard(0, &st)
	if id == nil {
		return fail(0, invalid("kvready_layout_id: id is NULL; want room for %d bytes", C.KVREADY_LAYOUT_ID_SIZE))
	}
	doc, err := inBytes(unsafe.Pointer(json), n, maxDocument, "kvready_layout_id: json")
	if err != nil {
		return fail(0, err)
	}
	l, err := staging.ParseLayout(doc)
	if err != nil {
		return fail(0, invalid("%v", err))
	}
	sum, err := l.ID()
	if err != nil {
		return fail(0, invalid("%v", err))
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(id)), len(sum)), sum[:])
	if tokensPerBlock != nil {
		*tokensPerBlock = C.int32_t(l.TokensPerBlock)
	}
	return C.KVREADY_OK
}

// maxNames bounds the names one kvready_names call derives.
const maxNames = 1 << 24

// identity builds the names of a manager from the C description of its layer
// groups.
func identity(scope *C.kv_cu8, scopeLen C.size_t, layoutID *C.kv_cu8, layoutIDLen C.size_t,
	layers *C.kv_ci32, offsets *C.kv_ci32, nGroups C.size_t, counts, indexes *C.kv_ci32) (*staging.Identity, error) {
	if nGroups == 0 || nGroups > 1<<16 {
		return nil, invalid("kvready: %d layer groups; want 1 to 65536", nGroups)
	}
	if offsets == nil || counts == nil || indexes == nil {
		return nil, invalid("kvready: offsets, shard_counts and shard_indexes are required (NULL given)")
	}
	offs := unsafe.Slice((*int32)(unsafe.Pointer(offsets)), int(nGroups)+1)
	total := int(offs[nGroups])
	if offs[0] != 0 || total < 0 || total > 1<<20 || (total > 0 && layers == nil) {
		return nil, invalid("kvready: offsets run from %d to %d; want 0 to the number of layer ids (at most 2^20) in layers", offs[0], total)
	}
	var all []int32
	if total > 0 {
		all = unsafe.Slice((*int32)(unsafe.Pointer(layers)), total)
	}
	groups := make([][]int, nGroups)
	shards := make([]staging.Shard, nGroups)
	cs := unsafe.Slice((*int32)(unsafe.Pointer(counts)), int(nGroups))
	is := unsafe.Slice((*int32)(unsafe.Pointer(indexes)), int(nGroups))
	for g := range groups {
		lo, hi := int(offs[g]), int(offs[g+1])
		if lo > hi || hi > total {
			return nil, invalid("kvready: offsets[%d..%d] = %d..%d; want a non-decreasing run within 0..%d", g, g+1, lo, hi, total)
		}
		groups[g] = make([]int, 0, hi-lo)
		for _, l := range all[lo:hi] {
			groups[g] = append(groups[g], int(l))
		}
		shards[g] = staging.Shard{Count: int(cs[g]), Index: int(is[g])}
	}
	sc, err := inBytes(unsafe.Pointer(scope), scopeLen, math.MaxInt, "kvready: scope")
	if err != nil {
		return nil, err
	}
	lid, err := inBytes(unsafe.Pointer(layoutID), layoutIDLen, math.MaxInt, "kvready: layout_id")
	if err != nil {
		return nil, err
	}
	id, err := staging.NewIdentity(sc, lid, groups, shards)
	if err != nil {
		return nil, invalid("%v", err)
	}
	return id, nil
}

//export kvready_name
func kvready_name(scope *C.kv_cu8, scopeLen C.size_t, layoutID *C.kv_cu8, layoutIDLen C.size_t,
	layers *C.kv_ci32, offsets *C.kv_ci32, nGroups C.size_t, counts, indexes *C.kv_ci32,
	group C.int32_t, key *C.kv_cu8, name *C.uint8_t) (st C.int) {
	defer guard(0, &st)
	return kvready_names(scope, scopeLen, layoutID, layoutIDLen, layers, offsets, nGroups, counts, indexes, group, key, 1, name)
}

//export kvready_names
func kvready_names(scope *C.kv_cu8, scopeLen C.size_t, layoutID *C.kv_cu8, layoutIDLen C.size_t,
	layers *C.kv_ci32, offsets *C.kv_ci32, nGroups C.size_t, counts, indexes *C.kv_ci32,
	group C.int32_t, keys *C.kv_cu8, n C.size_t, names *C.uint8_t) (st C.int) {
	defer guard(0, &st)
	id, err := identity(scope, scopeLen, layoutID, layoutIDLen, layers, offsets, nGroups, counts, indexes)
	if err != nil {
		return fail(0, err)
	}
	if n == 0 {
		return C.KVREADY_OK
	}
	if keys == nil || names == nil || n > maxNames {
		return fail(0, invalid("kvready_names: %d names (keys or names NULL: %v); want at most %d, keys and names required", uint64(n), keys == nil || names == nil, maxNames))
	}
	ks, err := inBytes(unsafe.Pointer(keys), n*staging.KeySize, math.MaxInt, "kvready_names: keys")
	if err != nil {
		return fail(0, err)
	}
	out, err := inBytes(unsafe.Pointer(names), n*contract.NameSize, math.MaxInt, "kvready_names: names")
	if err != nil {
		return fail(0, err)
	}
	for i := range int(n) {
		var k staging.Key
		copy(k[:], ks[i*staging.KeySize:])
		nm, err := id.Name(int(group), k)
		if err != nil {
			return fail(0, invalid("%v", err))
		}
		copy(out[i*contract.NameSize:], nm[:])
	}
	return C.KVREADY_OK
}
