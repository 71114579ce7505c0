package main

/*
#include "cgo.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/readiness"
)

// kind is what an object handle names; it is kept in the handle's top byte,
// so that a handle of one kind passed where another is expected is refused.
type kind uint8

const (
	kindEngine kind = iota + 1
	kindMemory
	kindBackend
	kindDevice
	kindTransport
)

func article(k kind) string {
	if k == kindEngine {
		return "an"
	}
	return "a"
}

func (k kind) String() string {
	switch k {
	case kindEngine:
		return "engine"
	case kindMemory:
		return "staging memory"
	case kindBackend:
		return "backend"
	case kindDevice:
		return "device"
	case kindTransport:
		return "transport"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// objects is the handle table. A handle is never reused: the serial only
// grows.
var objects struct {
	sync.Mutex
	m      map[uint64]any
	serial uint64
	// errs holds the last error of each live handle on each thread — threads
	// may call one engine at once (SPEC §4 rule 18), and each reads back its
	// own call's error — and threadErrs that of each thread for calls
	// without a live handle.
	errs       map[errKey]string
	threadErrs map[uint64]string
}

func init() {
	objects.m = map[uint64]any{}
	objects.errs = map[errKey]string{}
	objects.threadErrs = map[uint64]string{}
}

// recent is a lock-free view of the table for the calls made per lease
// (kvready_lend, _release, ...): slot serial%len(recent) holds the entry of
// the last handle registered there while that handle lives. A lookup that
// finds its own handle there needs neither the table's lock nor its map; one
// that does not (an older handle sharing the slot, a freed one, a forged one)
// asks the map under the lock, which stays the authority. register stores
// the entry after the map has it and unregister clears it before the map
// drops it, both under the lock, so that the view never names an object the
// map has not or no longer has. With the lock and the map every call paid
// about 110 instructions to find its engine, 40 with the view (callgrind,
// issue #40).
var recent [256]atomic.Pointer[entry]

// entry is one live handle and its object, as recent keeps it.
type entry struct {
	h   uint64
	obj any
}

func register(k kind, obj any) uint64 {
	objects.Lock()
	defer objects.Unlock()
	objects.serial++
	h := uint64(k)<<56 | objects.serial
	objects.m[h] = obj
	recent[h%uint64(len(recent))].Store(&entry{h: h, obj: obj})
	return h
}

func unregister(h uint64) {
	objects.Lock()
	defer objects.Unlock()
	if slot := &recent[h%uint64(len(recent))]; slot.Load() != nil && slot.Load().h == h {
		slot.Store(nil) // before the map drops it: see recent
	}
	delete(objects.m, h)
	for k := range objects.errs {
		if k.h == h {
			delete(objects.errs, k)
		}
	}
}

// errKey names one handle's last error on one thread.
type errKey struct{ h, thread uint64 }

// errorOn is the key of h's last error on the calling thread.
func errorOn(h uint64) errKey { return errKey{h: h, thread: uint64(C.kv_thread())} }

// lookup finds the live object h names if it is of kind k.
func lookup[T any](h uint64, k kind) (T, error) {
	var zero T
	if h == 0 {
		return zero, &statusError{C.KVREADY_ERR_BAD_HANDLE, fmt.Sprintf("kvready: %v handle 0: no object has it (handles are never 0)", k)}
	}
	if got := kind(h >> 56); got != k {
		return zero, &statusError{C.KVREADY_ERR_BAD_HANDLE, fmt.Sprintf("kvready: handle %#x is a %v handle; want %s %v handle", h, got, article(k), k)}
	}
	var obj any
	var ok bool
	if en := recent[h%uint64(len(recent))].Load(); en != nil && en.h == h {
		obj, ok = en.obj, true
	} else {
		objects.Lock()
		obj, ok = objects.m[h]
		objects.Unlock()
	}
	t, isT := obj.(T)
	if !ok || !isT {
		return zero, &statusError{C.KVREADY_ERR_BAD_HANDLE, fmt.Sprintf("kvready: no live %v has handle %#x (closed, or never issued)", k, h)}
	}
	return t, nil
}

func live(h uint64) bool {
	objects.Lock()
	defer objects.Unlock()
	_, ok := objects.m[h]
	return ok
}

// statusError is an error with the status it returns as.
type statusError struct {
	status C.int
	msg    string
}

func (e *statusError) Error() string { return e.msg }

func statusf(status C.int, format string, args ...any) error {
	return &statusError{status, fmt.Sprintf(format, args...)}
}

func invalid(format string, args ...any) error {
	return statusf(C.KVREADY_ERR_INVALID, format, args...)
}

// statusOf maps an error to the status a C caller sees.
func statusOf(err error) C.int {
	var se *statusError
	switch {
	case err == nil:
		return C.KVREADY_OK
	case errors.As(err, &se):
		return se.status
	case errors.Is(err, readiness.ErrStaleHandle):
		return C.KVREADY_ERR_STALE_LEASE
	case errors.Is(err, readiness.ErrLayerFailed):
		return C.KVREADY_ERR_LAYER_FAILED
	case errors.Is(err, readiness.ErrNotReady):
		return C.KVREADY_ERR_NOT_READY
	case errors.Is(err, readiness.ErrClosed):
		return C.KVREADY_ERR_CLOSED
	case errors.Is(err, readiness.ErrHalted):
		return C.KVREADY_ERR_HALTED
	case errors.Is(err, readiness.ErrDeviceLost), errors.Is(err, gpu.ErrDeviceLost):
		return C.KVREADY_ERR_DEVICE_LOST
	case errors.Is(err, readiness.ErrUngrantable):
		return C.KVREADY_ERR_UNGRANTABLE
	case errors.Is(err, readiness.ErrInvalidRequest):
		return C.KVREADY_ERR_INVALID
	case contract.IsProfileError(err):
		return C.KVREADY_ERR_PROFILE
	case errors.Is(err, context.DeadlineExceeded):
		return C.KVREADY_ERR_TIMEOUT
	}
	return C.KVREADY_ERR_FAILED
}

// fail records err as the last error of h on the calling thread (or of the
// calling thread, when h names no live object) and returns its status; nil returns KVREADY_OK and
// records nothing. A live handle of the wrong kind keeps its error too: the
// caller reads it back with the handle it passed.
func fail(h uint64, err error) C.int {
	if err == nil {
		return C.KVREADY_OK
	}
	objects.Lock()
	if _, ok := objects.m[h]; ok && h != 0 {
		objects.errs[errorOn(h)] = err.Error()
	} else {
		objects.threadErrs[uint64(C.kv_thread())] = err.Error()
	}
	objects.Unlock()
	return statusOf(err)
}

// guard turns a panic in an exported function into KVREADY_ERR_INTERNAL,
// recorded on h: a bug in kvready must not take the embedder's process down.
// The message stays one line naming the panic; the goroutine's stack goes to
// the log (slog's default logger: stderr unless the embedder routes it), so
// that a caller who prints the message is not handed a stack. Deferred first
// in every exported function.
func guard(h uint64, status *C.int) {
	if p := recover(); p != nil {
		slog.Default().Error("kvready: internal error (a bug in kvready; please report it with this stack)",
			slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
		*status = fail(h, internalError(p))
	}
}

// internalError is what a recovered panic answers: its value, one line, and
// where its stack went.
func internalError(p any) error {
	msg := strings.ReplaceAll(fmt.Sprint(p), "\n", " ")
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	return statusf(C.KVREADY_ERR_INTERNAL, "kvready: internal error (a bug in kvready; please report it): %s; its stack is in the log", msg)
}

// detached is set by kvready_detach_callbacks: the embedder's callbacks are
// never called again.
var detached atomic.Bool

// errDetached is what a callback that is no longer called answers.
var errDetached = errors.New("kvready: the embedder's callbacks were detached (kvready_detach_callbacks): nothing is asked of them any more")

// cString copies s into the C buffer dst of cap bytes, NUL-terminated, and
// returns the full length of s. It writes nothing when cap is 0, and views
// no more of dst than it writes (a cap of SIZE_MAX is a large buffer).
func cString(dst *C.char, cap C.size_t, s string) int {
	if b := outView((*byte)(unsafe.Pointer(dst)), cap, len(s)+1); len(b) > 0 {
		n := copy(b[:len(b)-1], s)
		b[n] = 0
	}
	return len(s)
}

// fits reports whether a caller's array of cap elements holds need of them.
// It compares unsigned: a capacity past int64 (SIZE_MAX) holds anything,
// never a negative one.
func fits(cap C.size_t, need int) bool {
	return need <= 0 || uint64(cap) >= uint64(need)
}

// outView views the first min(cap, need) elements of a caller's array, the
// elements a call writes: never a slice longer than needed, so that no
// capacity, SIZE_MAX included, makes one that cannot exist.
func outView[T any](p *T, cap C.size_t, need int) []T {
	n := need
	if !fits(cap, need) {
		n = int(cap)
	}
	if p == nil || n <= 0 {
		return nil
	}
	return unsafe.Slice(p, n)
}

// inView views the n elements a caller passes in at p, after refusing
// (KVREADY_ERR_INVALID, naming what and the bound) a count above max or one
// whose bytes would run past the end of the address space: no length a
// caller gives makes a slice that cannot exist. max math.MaxInt: no bound but
// the address space.
func inView[T any](p *T, n C.size_t, max uint64, what string) ([]T, error) {
	if n == 0 {
		return nil, nil
	}
	if p == nil {
		return nil, invalid("%s: NULL with length %d; want a pointer to %d elements, or length 0", what, uint64(n), uint64(n))
	}
	size := uint64(unsafe.Sizeof(*p))
	if uint64(n) > max && max < math.MaxInt/size {
		return nil, invalid("%s: length %d; want at most %d", what, uint64(n), max)
	}
	if end := uint64(uintptr(unsafe.Pointer(p))) + uint64(n)*size; uint64(n) > math.MaxInt/size || end < uint64(uintptr(unsafe.Pointer(p))) {
		return nil, invalid("%s: length %d runs past the end of the address space from %p; want the length of the caller's buffer", what, uint64(n), p)
	}
	return unsafe.Slice(p, int(n)), nil
}

// inBytes is inView of bytes.
func inBytes(p unsafe.Pointer, n C.size_t, max uint64, what string) ([]byte, error) {
	return inView((*byte)(p), n, max, what)
}

// maxDocument bounds a JSON document a caller passes (a profile, a layout).
const maxDocument = 1 << 24

// cArray copies s into the fixed C char array a, NUL-terminated, cutting it to
// fit.
func cArray(a []C.char, s string) {
	if len(a) == 0 {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&a[0])), len(a))
	n := copy(b[:len(b)-1], s)
	b[n] = 0
}

// goStringN reads a NUL-terminated string from a buffer of n bytes, never
// past it.
func goStringN(p *C.char, n int) string {
	if p == nil || n <= 0 {
		return ""
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(p)), n)
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// bytesOf views n bytes of C memory (or of a Go argument passed in for the
// call) as a slice, or returns nil for n == 0.
func bytesOf(p unsafe.Pointer, n C.size_t) []byte {
	if n == 0 || p == nil {
		return nil
	}
	return unsafe.Slice((*byte)(p), int(n))
}
