//go:build cgo

package cuda

// The driver calls a copy, its event and the polling make go through these C
// trampolines when cgo is available, a context switch and the call it is for
// in one crossing: a cgo call costs about a third
// of a purego call and allocates nothing (BenchmarkCUDACopyEvent). The driver
// is still loaded at run time (purego.Dlopen); only the call is made from C.
// Handles travel as uintptr_t and are cast to the driver's pointer types in
// C; host pointers are pinned driver memory, never Go memory.

/*
#include <stddef.h>
#include <stdint.h>

typedef int kv_result;

static kv_result kv_ctx_set_current(uintptr_t f, uintptr_t ctx) {
	return ((kv_result (*)(void *))f)((void *)ctx);
}
static kv_result kv_event_record(uintptr_t f, uintptr_t ev, uintptr_t stream) {
	return ((kv_result (*)(void *, void *))f)((void *)ev, (void *)stream);
}
static kv_result kv_event_query(uintptr_t f, uintptr_t ev) {
	return ((kv_result (*)(void *))f)((void *)ev);
}
static kv_result kv_memcpy_htod_async(uintptr_t f, unsigned long long dst, uintptr_t src, size_t n, uintptr_t stream) {
	return ((kv_result (*)(unsigned long long, const void *, size_t, void *))f)(dst, (const void *)src, n, (void *)stream);
}
static kv_result kv_memcpy_dtoh_async(uintptr_t f, uintptr_t dst, unsigned long long src, size_t n, uintptr_t stream) {
	return ((kv_result (*)(void *, unsigned long long, size_t, void *))f)((void *)dst, src, n, (void *)stream);
}

// The context switch and the call in one crossing: a C call cannot move to
// another thread, so the context is current for the call without locking
// the goroutine to its thread.
typedef struct { kv_result set, call; } kv_pair;

static kv_pair kv_in_ctx_htod(uintptr_t setf, uintptr_t ctx, uintptr_t f, unsigned long long dst, uintptr_t src, size_t n, uintptr_t stream) {
	kv_pair p = { kv_ctx_set_current(setf, ctx), 0 };
	if (p.set == 0)
		p.call = kv_memcpy_htod_async(f, dst, src, n, stream);
	return p;
}
static kv_pair kv_in_ctx_dtoh(uintptr_t setf, uintptr_t ctx, uintptr_t f, uintptr_t dst, unsigned long long src, size_t n, uintptr_t stream) {
	kv_pair p = { kv_ctx_set_current(setf, ctx), 0 };
	if (p.set == 0)
		p.call = kv_memcpy_dtoh_async(f, dst, src, n, stream);
	return p;
}
static kv_pair kv_in_ctx_record(uintptr_t setf, uintptr_t ctx, uintptr_t f, uintptr_t ev, uintptr_t stream) {
	kv_pair p = { kv_ctx_set_current(setf, ctx), 0 };
	if (p.set == 0)
		p.call = kv_event_record(f, ev, stream);
	return p;
}
*/
import "C"

import "unsafe"

// hotPathCgo replaces the driver's hot calls by cgo trampolines over the
// same entry points, and reports that it did.
func hotPathCgo(d *driver, sym func(string) uintptr) bool {
	setCur := C.uintptr_t(sym("cuCtxSetCurrent"))
	d.ctxSetCurrent = func(ctx uintptr) result {
		return result(C.kv_ctx_set_current(setCur, C.uintptr_t(ctx)))
	}
	record := C.uintptr_t(sym("cuEventRecord"))
	d.eventRecord = func(e, s uintptr) result {
		return result(C.kv_event_record(record, C.uintptr_t(e), C.uintptr_t(s)))
	}
	query := C.uintptr_t(sym("cuEventQuery"))
	d.eventQuery = func(e uintptr) result {
		return result(C.kv_event_query(query, C.uintptr_t(e)))
	}
	htod := C.uintptr_t(sym("cuMemcpyHtoDAsync_v2"))
	d.memcpyHtoDAsync = func(dst uint64, src unsafe.Pointer, n uintptr, s uintptr) result {
		return result(C.kv_memcpy_htod_async(htod, C.ulonglong(dst), C.uintptr_t(uintptr(src)), C.size_t(n), C.uintptr_t(s)))
	}
	dtoh := C.uintptr_t(sym("cuMemcpyDtoHAsync_v2"))
	d.memcpyDtoHAsync = func(dst unsafe.Pointer, src uint64, n uintptr, s uintptr) result {
		return result(C.kv_memcpy_dtoh_async(dtoh, C.uintptr_t(uintptr(dst)), C.ulonglong(src), C.size_t(n), C.uintptr_t(s)))
	}
	d.htodInCtx = func(ctx uintptr, dst uint64, src unsafe.Pointer, n uintptr, s uintptr) (result, result) {
		p := C.kv_in_ctx_htod(setCur, C.uintptr_t(ctx), htod, C.ulonglong(dst), C.uintptr_t(uintptr(src)), C.size_t(n), C.uintptr_t(s))
		return result(p.set), result(p.call)
	}
	d.dtohInCtx = func(ctx uintptr, dst unsafe.Pointer, src uint64, n uintptr, s uintptr) (result, result) {
		p := C.kv_in_ctx_dtoh(setCur, C.uintptr_t(ctx), dtoh, C.uintptr_t(uintptr(dst)), C.ulonglong(src), C.size_t(n), C.uintptr_t(s))
		return result(p.set), result(p.call)
	}
	d.recordInCtx = func(ctx, e, s uintptr) (result, result) {
		p := C.kv_in_ctx_record(setCur, C.uintptr_t(ctx), record, C.uintptr_t(e), C.uintptr_t(s))
		return result(p.set), result(p.call)
	}
	return true
}
