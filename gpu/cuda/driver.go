package cuda

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/kvready/kvready/gpu"
)

// result is a CUresult.
type result int32

// The CUresult values this package distinguishes (cuda.h).
const (
	cudaSuccess             result = 0
	errInvalidValue         result = 1
	errNotInitialized       result = 3
	errDeinitialized        result = 4
	errInsufficientDriver   result = 35
	errNoDevice             result = 100
	errInvalidDevice        result = 101
	errInvalidContext       result = 201
	errInvalidHandle        result = 400
	errNotFound             result = 500
	errNotReady             result = 600
	errECCUncorrectable     result = 214
	errIllegalAddress       result = 700
	errHardwareStackError   result = 714
	errLaunchFailed         result = 719
	errSystemNotReady       result = 802
	errSystemDriverMismatch result = 803
)

// lost reports a sticky error after which the context, and every copy queued
// on it, can no longer be trusted.
func (r result) lost() bool {
	return r == errECCUncorrectable || r == errDeinitialized || (r >= errIllegalAddress && r <= errLaunchFailed)
}

// noDriver reports an answer of cuInit meaning there is no usable driver or GPU.
func (r result) noDriver() bool {
	switch r {
	case errInsufficientDriver, errNoDevice, errInvalidDevice, errSystemNotReady, errSystemDriverMismatch:
		return true
	}
	return false
}

// Flags from cuda.h.
const (
	streamNonBlocking    = 0x1 // CU_STREAM_NON_BLOCKING
	eventDisableTiming   = 0x2 // CU_EVENT_DISABLE_TIMING
	memHostAllocPortable = 0x1 // CU_MEMHOSTALLOC_PORTABLE
)

// driver is the part of the CUDA driver API this package uses, as Go
// functions. Open fills it from libcuda.so.1; tests fill it with a fake.
type driver struct {
	path              string // the library it was loaded from
	calls             string // how the hot calls are made: "cgo" or "purego"
	init              func(flags uint32) result
	deviceGetCount    func(n *int32) result
	deviceGet         func(dev *int32, ordinal int32) result
	deviceBusID       func(buf []byte, dev int32) result
	primaryCtxRetain  func(ctx *uintptr, dev int32) result
	primaryCtxRelease func(dev int32) result
	ctxSetCurrent     func(ctx uintptr) result
	streamCreate      func(s *uintptr, flags uint32) result
	streamDestroy     func(s uintptr) result
	streamWaitEvent   func(s, e uintptr, flags uint32) result
	eventCreate       func(e *uintptr, flags uint32) result
	eventRecord       func(e, s uintptr) result
	eventQuery        func(e uintptr) result
	eventDestroy      func(e uintptr) result
	memcpyHtoDAsync   func(dst uint64, src unsafe.Pointer, n uintptr, s uintptr) result
	memcpyDtoHAsync   func(dst unsafe.Pointer, src uint64, n uintptr, s uintptr) result
	// These make ctx current and then the call, on one thread: set is
	// cuCtxSetCurrent's answer, call the call's (not made when set failed).
	// The cgo trampolines do it in one crossing; fillInCtx builds them from
	// the single calls for any other driver.
	htodInCtx       func(ctx uintptr, dst uint64, src unsafe.Pointer, n uintptr, s uintptr) (set, call result)
	dtohInCtx       func(ctx uintptr, dst unsafe.Pointer, src uint64, n uintptr, s uintptr) (set, call result)
	recordInCtx     func(ctx, e, s uintptr) (set, call result)
	memcpyHtoD      func(dst uint64, src unsafe.Pointer, n uintptr) result
	memcpyDtoH      func(dst unsafe.Pointer, src uint64, n uintptr) result
	memAlloc        func(p *uint64, n uintptr) result
	memFree         func(p uint64) result
	memHostAlloc    func(p *unsafe.Pointer, n uintptr, flags uint32) result
	memFreeHost     func(p unsafe.Pointer) result
	memAddressRange func(base *uint64, size *uintptr, p uint64) result
	errorName       func(r result) string
}

var (
	loadMu sync.Mutex
	loaded = map[string]*driver{}
)

// loadDriver opens the driver library at path once per process: a library
// stays loaded, and a failed load is tried again by the next Open.
func loadDriver(path string) (*driver, error) {
	loadMu.Lock()
	defer loadMu.Unlock()
	if d, ok := loaded[path]; ok {
		return d, nil
	}
	d, err := loadLibrary(path)
	if err != nil {
		return nil, err
	}
	loaded[path] = d
	return d, nil
}

// symbols are the driver entry points the package resolves, all present in
// every driver since CUDA 4.
var symbols = []string{
	"cuInit", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetPCIBusId", "cuDevicePrimaryCtxRetain",
	"cuDevicePrimaryCtxRelease_v2", "cuCtxSetCurrent", "cuStreamCreate", "cuStreamDestroy_v2", "cuEventCreate",
	"cuEventRecord", "cuEventQuery", "cuEventDestroy_v2", "cuMemcpyHtoDAsync_v2",
	"cuMemcpyDtoHAsync_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemAlloc_v2",
	"cuMemFree_v2", "cuMemHostAlloc", "cuMemFreeHost", "cuMemGetAddressRange_v2", "cuGetErrorName",
	"cuStreamWaitEvent",
}

// loadLibrary opens path and resolves every symbol the package needs; a
// missing library or symbol is an error wrapping gpu.ErrNoDriver. The calls a
// copy, its event and polling make go through cgo where it is available.
func loadLibrary(path string) (*driver, error) { return loadLibraryWith(path, true) }

// loadLibraryWith is loadLibrary; with cgoCalls false every call goes through
// purego (the build without cgo, and the tests of that path).
func loadLibraryWith(path string, cgoCalls bool) (*driver, error) {
	// dlerror is per thread: the goroutine stays on one for the call, so that
	// the reason read back is this call's.
	runtime.LockOSThread()
	lib, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	runtime.UnlockOSThread()
	if err != nil {
		reason := err.Error()
		if reason == "" {
			// The loader does not always say why; the likely cause, then.
			reason = "the dynamic loader cannot open it (no CUDA driver installed here, or not on the library path)"
		}
		return nil, fmt.Errorf("cuda: loading %s: %w: %s", path, gpu.ErrNoDriver, reason)
	}
	syms := map[string]uintptr{}
	for _, name := range symbols {
		sym, err := purego.Dlsym(lib, name)
		if err != nil || sym == 0 {
			_ = purego.Dlclose(lib)
			return nil, fmt.Errorf("cuda: %s has no symbol %s: %w (a driver too old, or not the CUDA driver)", path, name, gpu.ErrNoDriver)
		}
		syms[name] = sym
	}
	// Each wrapper converts pointers to uintptr inside the SyscallN call
	// expression, which purego marks go:uintptrescapes: the pointed-to Go
	// values stay alive and in place for the call.
	call := func(name string) uintptr { return syms[name] }
	r := func(v uintptr) result { return result(int32(v)) }
	d := &driver{path: path}
	fInit := call("cuInit")
	d.init = func(flags uint32) result { v, _, _ := purego.SyscallN(fInit, uintptr(flags)); return r(v) }
	fCount := call("cuDeviceGetCount")
	d.deviceGetCount = func(n *int32) result {
		v, _, _ := purego.SyscallN(fCount, uintptr(unsafe.Pointer(n)))
		return r(v)
	}
	fBusID := call("cuDeviceGetPCIBusId")
	d.deviceBusID = func(buf []byte, dev int32) result {
		v, _, _ := purego.SyscallN(fBusID, uintptr(unsafe.Pointer(unsafe.SliceData(buf))), uintptr(len(buf)), uintptr(dev))
		return r(v)
	}
	fDevGet := call("cuDeviceGet")
	d.deviceGet = func(dev *int32, ord int32) result {
		v, _, _ := purego.SyscallN(fDevGet, uintptr(unsafe.Pointer(dev)), uintptr(ord))
		return r(v)
	}
	fRetain := call("cuDevicePrimaryCtxRetain")
	d.primaryCtxRetain = func(ctx *uintptr, dev int32) result {
		v, _, _ := purego.SyscallN(fRetain, uintptr(unsafe.Pointer(ctx)), uintptr(dev))
		return r(v)
	}
	fRelease := call("cuDevicePrimaryCtxRelease_v2")
	d.primaryCtxRelease = func(dev int32) result { v, _, _ := purego.SyscallN(fRelease, uintptr(dev)); return r(v) }
	fSetCur := call("cuCtxSetCurrent")
	d.ctxSetCurrent = func(ctx uintptr) result { v, _, _ := purego.SyscallN(fSetCur, ctx); return r(v) }
	fStreamCreate := call("cuStreamCreate")
	d.streamCreate = func(s *uintptr, flags uint32) result {
		v, _, _ := purego.SyscallN(fStreamCreate, uintptr(unsafe.Pointer(s)), uintptr(flags))
		return r(v)
	}
	fStreamDestroy := call("cuStreamDestroy_v2")
	d.streamDestroy = func(s uintptr) result { v, _, _ := purego.SyscallN(fStreamDestroy, s); return r(v) }
	fStreamWait := call("cuStreamWaitEvent")
	d.streamWaitEvent = func(s, e uintptr, flags uint32) result {
		v, _, _ := purego.SyscallN(fStreamWait, s, e, uintptr(flags))
		return r(v)
	}
	fEventCreate := call("cuEventCreate")
	d.eventCreate = func(e *uintptr, flags uint32) result {
		v, _, _ := purego.SyscallN(fEventCreate, uintptr(unsafe.Pointer(e)), uintptr(flags))
		return r(v)
	}
	fEventRecord := call("cuEventRecord")
	d.eventRecord = func(e, s uintptr) result { v, _, _ := purego.SyscallN(fEventRecord, e, s); return r(v) }
	fEventQuery := call("cuEventQuery")
	d.eventQuery = func(e uintptr) result { v, _, _ := purego.SyscallN(fEventQuery, e); return r(v) }
	fEventDestroy := call("cuEventDestroy_v2")
	d.eventDestroy = func(e uintptr) result { v, _, _ := purego.SyscallN(fEventDestroy, e); return r(v) }
	fHtoDAsync := call("cuMemcpyHtoDAsync_v2")
	d.memcpyHtoDAsync = func(dst uint64, src unsafe.Pointer, n uintptr, s uintptr) result {
		v, _, _ := purego.SyscallN(fHtoDAsync, uintptr(dst), uintptr(src), n, s)
		return r(v)
	}
	fDtoHAsync := call("cuMemcpyDtoHAsync_v2")
	d.memcpyDtoHAsync = func(dst unsafe.Pointer, src uint64, n uintptr, s uintptr) result {
		v, _, _ := purego.SyscallN(fDtoHAsync, uintptr(dst), uintptr(src), n, s)
		return r(v)
	}
	fHtoD := call("cuMemcpyHtoD_v2")
	d.memcpyHtoD = func(dst uint64, src unsafe.Pointer, n uintptr) result {
		v, _, _ := purego.SyscallN(fHtoD, uintptr(dst), uintptr(src), n)
		return r(v)
	}
	fDtoH := call("cuMemcpyDtoH_v2")
	d.memcpyDtoH = func(dst unsafe.Pointer, src uint64, n uintptr) result {
		v, _, _ := purego.SyscallN(fDtoH, uintptr(dst), uintptr(src), n)
		return r(v)
	}
	fAlloc := call("cuMemAlloc_v2")
	d.memAlloc = func(p *uint64, n uintptr) result {
		v, _, _ := purego.SyscallN(fAlloc, uintptr(unsafe.Pointer(p)), n)
		return r(v)
	}
	fFree := call("cuMemFree_v2")
	d.memFree = func(p uint64) result { v, _, _ := purego.SyscallN(fFree, uintptr(p)); return r(v) }
	fHostAlloc := call("cuMemHostAlloc")
	d.memHostAlloc = func(p *unsafe.Pointer, n uintptr, flags uint32) result {
		v, _, _ := purego.SyscallN(fHostAlloc, uintptr(unsafe.Pointer(p)), n, uintptr(flags))
		return r(v)
	}
	fFreeHost := call("cuMemFreeHost")
	d.memFreeHost = func(p unsafe.Pointer) result { v, _, _ := purego.SyscallN(fFreeHost, uintptr(p)); return r(v) }
	fRange := call("cuMemGetAddressRange_v2")
	d.memAddressRange = func(base *uint64, size *uintptr, p uint64) result {
		v, _, _ := purego.SyscallN(fRange, uintptr(unsafe.Pointer(base)), uintptr(unsafe.Pointer(size)), uintptr(p))
		return r(v)
	}
	fErrName := call("cuGetErrorName")
	d.errorName = func(code result) string {
		var s *byte
		v, _, _ := purego.SyscallN(fErrName, uintptr(code), uintptr(unsafe.Pointer(&s)))
		if r(v) != cudaSuccess || s == nil {
			return ""
		}
		return cString(s)
	}
	d.calls = "purego"
	if cgoCalls && hotPathCgo(d, call) {
		d.calls = "cgo"
	}
	d.fillInCtx()
	return d, nil
}

// fillInCtx gives the driver the context-and-call forms it lacks, from its
// single calls: the goroutine stays on its thread from the context switch to
// the call.
func (d *driver) fillInCtx() {
	inCtx := func(ctx uintptr, call func() result) (result, result) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if set := d.ctxSetCurrent(ctx); set != cudaSuccess {
			return set, cudaSuccess
		}
		return cudaSuccess, call()
	}
	if d.htodInCtx == nil {
		d.htodInCtx = func(ctx uintptr, dst uint64, src unsafe.Pointer, n uintptr, s uintptr) (result, result) {
			return inCtx(ctx, func() result { return d.memcpyHtoDAsync(dst, src, n, s) })
		}
	}
	if d.dtohInCtx == nil {
		d.dtohInCtx = func(ctx uintptr, dst unsafe.Pointer, src uint64, n uintptr, s uintptr) (result, result) {
			return inCtx(ctx, func() result { return d.memcpyDtoHAsync(dst, src, n, s) })
		}
	}
	if d.recordInCtx == nil {
		d.recordInCtx = func(ctx, e, s uintptr) (result, result) {
			return inCtx(ctx, func() result { return d.eventRecord(e, s) })
		}
	}
}

// cString copies a NUL-terminated C string the driver owns (static storage).
func cString(p *byte) string {
	var n int
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// check turns a CUresult into an error naming the call, or nil on success.
func (d *driver) check(call string, r result) error {
	if r == cudaSuccess {
		return nil
	}
	name := ""
	if d.errorName != nil {
		name = d.errorName(r)
	}
	if name == "" {
		name = fmt.Sprintf("CUresult %d", int32(r))
	}
	if r.lost() {
		return fmt.Errorf("cuda: %s: %s: %w", call, name, gpu.ErrDeviceLost)
	}
	if r == errInvalidValue || r == errInvalidHandle || r == errInvalidContext {
		// The driver validates arguments, handles and the context before
		// it queues anything.
		return fmt.Errorf("cuda: %s: %s: %w", call, name, gpu.ErrCopyRefused)
	}
	return fmt.Errorf("cuda: %s: %s", call, name)
}
