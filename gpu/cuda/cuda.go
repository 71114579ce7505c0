// Package cuda implements gpu.Device and gpu.Stream on the CUDA driver API,
// loaded at run time from libcuda.so.1 with github.com/ebitengine/purego: the
// build needs neither cgo nor CUDA headers, and without a driver Open returns
// an error wrapping gpu.ErrNoDriver instead of failing to link. Another
// driver library (the fake one tests use, gpu/cuda/fakedriver) is chosen with
// WithLibrary or the environment variable KVREADY_CUDA_LIBRARY.
//
// Events handed to callers are (stream id, sequence) values, never driver
// handles. A stream keeps the driver events of its unresolved sequence numbers
// in order, queries only the oldest, and recycles a driver event once it has
// completed, so a stale gpu.Event can never alias a recycled handle, and a
// never-recorded event (which cuEventQuery would report as complete) is never
// asked about.
//
// Asynchronous copies need pinned host memory: HostAlloc returns it (from
// cuMemHostAlloc, outside the Go heap, so the garbage collector never moves or
// frees it under a running copy) and the stream refuses a host slice that does
// not lie inside such an allocation. Every driver call runs with the device's
// primary context current on a locked OS thread.
package cuda

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/kvready/kvready/gpu"
)

// ErrNotPinned is wrapped (with gpu.ErrCopyRefused: nothing was queued) by an
// asynchronous copy whose host memory was not
// allocated by the device's HostAlloc.
var ErrNotPinned = errors.New("cuda: host memory of an asynchronous copy is not pinned memory from HostAlloc")

// Device is one CUDA device with its primary context retained.
type Device struct {
	drv     *driver
	ordinal int
	dev     int32
	ctx     uintptr

	mu     sync.Mutex
	pinned []hostSpan // sorted by start; guarded by mu
	// pinnedView is a copy of pinned, published after every change, so that
	// the check of every asynchronous copy reads it without taking mu.
	pinnedView atomic.Pointer[[]hostSpan]
	closed     bool

	streamsMu sync.Mutex
	streams   []*Stream // open streams, for Wait
}

// publishPinned publishes a copy of pinned; the caller holds mu.
func (d *Device) publishPinned() {
	v := slices.Clone(d.pinned)
	d.pinnedView.Store(&v)
}

type hostSpan struct {
	start uintptr
	n     int
	p     unsafe.Pointer
}

var _ gpu.Device = (*Device)(nil)

// DefaultLibrary is the driver library Open loads unless told otherwise: the
// soname the NVIDIA driver installs (no CUDA toolkit needed).
const DefaultLibrary = "libcuda.so.1"

// LibraryEnv is the environment variable that names the driver library to
// load when Open is given no WithLibrary option (unset or empty:
// DefaultLibrary).
const LibraryEnv = "KVREADY_CUDA_LIBRARY"

// Option configures Open.
type Option func(*options)

type options struct {
	library string
}

// WithLibrary makes Open load the CUDA driver API from path (a file name
// dlopen searches for, or a path) instead of $KVREADY_CUDA_LIBRARY or
// libcuda.so.1. An empty path is no option. Each library is loaded once per
// process and stays loaded.
func WithLibrary(path string) Option {
	return func(o *options) {
		if path != "" {
			o.library = path
		}
	}
}

// Library returns the driver library Open loads with opts: the WithLibrary
// path, else $KVREADY_CUDA_LIBRARY, else DefaultLibrary.
func Library(opts ...Option) string {
	o := options{library: os.Getenv(LibraryEnv)}
	for _, opt := range opts {
		opt(&o)
	}
	if o.library == "" {
		return DefaultLibrary
	}
	return o.library
}

// Open loads the CUDA driver (once per process and library; see Library),
// initialises it and retains device ordinal's primary context. With no
// driver library, or a driver that reports no usable device, the error wraps
// gpu.ErrNoDriver. A library that cannot be loaded, or lacks an entry point
// the package needs, is an error naming the path and the symbol; an ordinal
// the driver does not have is an error naming how many devices it sees.
func Open(ordinal int, opts ...Option) (*Device, error) {
	drv, err := loadDriver(Library(opts...))
	if err != nil {
		return nil, err
	}
	return open(drv, ordinal)
}

func open(drv *driver, ordinal int) (*Device, error) {
	drv.fillInCtx()
	if ordinal < 0 {
		return nil, fmt.Errorf("cuda: device ordinal %d; want >= 0", ordinal)
	}
	if r := drv.init(0); r != cudaSuccess {
		err := drv.check("cuInit", r)
		if r.noDriver() {
			return nil, fmt.Errorf("%w: %w", gpu.ErrNoDriver, err)
		}
		return nil, err
	}
	var count int32
	if err := drv.check("cuDeviceGetCount", drv.deviceGetCount(&count)); err != nil {
		return nil, err
	}
	if ordinal >= int(count) {
		if count == 0 {
			return nil, fmt.Errorf("cuda: device ordinal %d: %w: the driver (%s) sees no device", ordinal, gpu.ErrNoDriver, drv.path)
		}
		return nil, fmt.Errorf("cuda: device ordinal %d out of range: the driver (%s) sees %d device(s), ordinals 0..%d (CUDA_VISIBLE_DEVICES renumbers them)", ordinal, drv.path, count, count-1)
	}
	d := &Device{drv: drv, ordinal: ordinal}
	if err := drv.check(fmt.Sprintf("cuDeviceGet(%d)", ordinal), drv.deviceGet(&d.dev, int32(ordinal))); err != nil {
		return nil, err
	}
	if err := drv.check("cuDevicePrimaryCtxRetain", drv.primaryCtxRetain(&d.ctx, d.dev)); err != nil {
		return nil, err
	}
	return d, nil
}

// ID returns the device ordinal.
func (d *Device) ID() int { return d.ordinal }

// Library returns the driver library the device was opened through.
func (d *Device) Library() string { return d.drv.path }

// PCIBusID returns the device's PCI bus id as the driver reports it
// (cuDeviceGetPCIBusId), e.g. "00000000:17:00.0": the identity that NVML
// and the CUDA ordinal (which CUDA_VISIBLE_DEVICES renumbers) agree on.
func (d *Device) PCIBusID() (string, error) {
	buf := make([]byte, 64)
	if err := d.drv.check("cuDeviceGetPCIBusId", d.drv.deviceBusID(buf, d.dev)); err != nil {
		return "", err
	}
	if i := slices.Index(buf, 0); i >= 0 {
		buf = buf[:i]
	}
	return string(buf), nil
}

// enter makes the device's context current on a locked OS thread; the caller
// must call runtime.UnlockOSThread when done. The CUDA current context is
// per thread, and a goroutine may otherwise move between threads.
func (d *Device) enter() error {
	runtime.LockOSThread()
	if err := d.drv.check("cuCtxSetCurrent", d.drv.ctxSetCurrent(d.ctx)); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	return nil
}

// Close releases the primary context. Streams, allocations and pinned memory
// must have been released first. Close is idempotent.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	if err := d.drv.check("cuDevicePrimaryCtxRelease", d.drv.primaryCtxRelease(d.dev)); err != nil {
		return err
	}
	d.closed = true
	return nil
}

// Alloc reserves n bytes of device memory.
func (d *Device) Alloc(n int) (gpu.DevicePtr, error) {
	if n <= 0 {
		return 0, fmt.Errorf("cuda: Alloc(%d); want a positive size", n)
	}
	if err := d.enter(); err != nil {
		return 0, err
	}
	defer runtime.UnlockOSThread()
	var p uint64
	if err := d.drv.check(fmt.Sprintf("cuMemAlloc(%d)", n), d.drv.memAlloc(&p, uintptr(n))); err != nil {
		return 0, err
	}
	return gpu.DevicePtr(p), nil
}

// Free releases device memory from Alloc.
func (d *Device) Free(p gpu.DevicePtr) error {
	if err := d.enter(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	return d.drv.check(fmt.Sprintf("cuMemFree(%#x)", uint64(p)), d.drv.memFree(uint64(p)))
}

// Write copies src to device memory and returns once the copy is done.
func (d *Device) Write(dst gpu.DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	if err := d.enter(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	err := d.drv.check("cuMemcpyHtoD", d.drv.memcpyHtoD(uint64(dst), unsafe.Pointer(&src[0]), uintptr(len(src))))
	runtime.KeepAlive(src)
	return err
}

// Read copies device memory into dst and returns once the copy is done.
func (d *Device) Read(dst []byte, src gpu.DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	if err := d.enter(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	err := d.drv.check("cuMemcpyDtoH", d.drv.memcpyDtoH(unsafe.Pointer(&dst[0]), uint64(src), uintptr(len(dst))))
	runtime.KeepAlive(dst)
	return err
}

// HostAlloc returns n bytes of pinned host memory, usable by asynchronous
// copies. The memory is outside the Go heap: release it with FreeHost, and do
// not touch the slice afterwards.
func (d *Device) HostAlloc(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cuda: HostAlloc(%d); want a positive size", n)
	}
	if err := d.enter(); err != nil {
		return nil, err
	}
	defer runtime.UnlockOSThread()
	var p unsafe.Pointer
	if err := d.drv.check(fmt.Sprintf("cuMemHostAlloc(%d)", n), d.drv.memHostAlloc(&p, uintptr(n), memHostAllocPortable)); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s := hostSpan{start: uintptr(p), n: n, p: p}
	i, _ := slices.BinarySearchFunc(d.pinned, s.start, func(h hostSpan, a uintptr) int { return cmp.Compare(h.start, a) })
	d.pinned = slices.Insert(d.pinned, i, s)
	d.publishPinned()
	return unsafe.Slice((*byte)(p), n), nil
}

// FreeHost releases memory from HostAlloc; b must be the whole slice it
// returned. Anything else is refused and nothing is freed.
func (d *Device) FreeHost(b []byte) error {
	if len(b) == 0 {
		return errors.New("cuda: FreeHost of an empty slice; want a slice returned by HostAlloc")
	}
	start := uintptr(unsafe.Pointer(&b[0]))
	d.mu.Lock()
	i, ok := slices.BinarySearchFunc(d.pinned, start, func(h hostSpan, a uintptr) int { return cmp.Compare(h.start, a) })
	if !ok || d.pinned[i].n != len(b) {
		d.mu.Unlock()
		return fmt.Errorf("cuda: FreeHost(%#x, %d bytes): not a whole HostAlloc allocation", start, len(b))
	}
	s := d.pinned[i]
	d.mu.Unlock()
	if err := d.enter(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	if err := d.drv.check("cuMemFreeHost", d.drv.memFreeHost(s.p)); err != nil {
		return err
	}
	d.mu.Lock()
	d.pinned = slices.DeleteFunc(d.pinned, func(h hostSpan) bool { return h.start == start })
	d.publishPinned()
	d.mu.Unlock()
	return nil
}

// pinnedPtr returns the address of b if it lies inside one pinned allocation.
func (d *Device) pinnedPtr(b []byte) (unsafe.Pointer, error) {
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	var pinned []hostSpan
	if v := d.pinnedView.Load(); v != nil {
		pinned = *v
	}
	// The last span starting at or before start (every copy searches: no
	// comparison closure).
	lo, hi := 0, len(pinned)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if pinned[m].start <= start {
			lo = m + 1
		} else {
			hi = m
		}
	}
	i := lo - 1
	if i < 0 || start+uintptr(len(b)) > pinned[i].start+uintptr(pinned[i].n) {
		return nil, fmt.Errorf("%w: %w: [%#x, +%d)", gpu.ErrCopyRefused, ErrNotPinned, start, len(b))
	}
	return unsafe.Add(pinned[i].p, start-pinned[i].start), nil
}

var streamIDs atomic.Uint64

var errStreamClosed = errors.New("cuda: the stream is closed")

// externalID is the stream id External's events carry: no stream has it.
var externalID = streamIDs.Add(1)

// External wraps a CUevent that other code recorded — a framework's compute
// event, such as PyTorch's torch.cuda.Event.cuda_event — so that a Stream
// can Wait for it. kvready never queries, records or destroys it: only Wait
// takes it, and the caller keeps it alive until the wait is queued.
func External(ev uintptr) gpu.Event { return gpu.MakeEvent(externalID, uint64(ev)) }

// Wait queues a wait for ev on s (cuStreamWaitEvent): what is queued on s
// after it runs once ev completed. ev is an event recorded by another Stream
// of the same device, or one made by External. An event of another stream
// that already completed queues nothing; one that failed is an error (what
// it covers did not finish), as is an unknown one: nothing is queued.
func (s *Stream) Wait(ev gpu.Event) error {
	if ev.IsZero() {
		return fmt.Errorf("cuda: Wait: %w", gpu.ErrNotRecorded)
	}
	h := s.Handle()
	if h == 0 {
		return errStreamClosed
	}
	if ev.StreamID() == externalID {
		return s.waitRaw(h, uintptr(ev.Seq()))
	}
	if ev.StreamID() == s.id {
		return fmt.Errorf("cuda: Wait(%v) on the stream that recorded it; want an event of another stream (a stream already runs in order)", ev)
	}
	on := s.dev.stream(ev.StreamID())
	if on == nil {
		return fmt.Errorf("cuda: Wait(%v): %w: no open stream of device %d issued it", ev, gpu.ErrForeignEvent, s.dev.ordinal)
	}
	// The other stream's lock keeps its driver event from being recorded
	// again before the wait captured it; s's own lock is not taken under it.
	on.mu.Lock()
	defer on.mu.Unlock()
	st, err := on.queryLocked(ev)
	switch {
	case err != nil:
		return fmt.Errorf("cuda: Wait: %w", err)
	case st == gpu.Failed:
		return fmt.Errorf("cuda: Wait(%v): the event failed: what it covers did not finish", ev)
	case st == gpu.Complete:
		return nil
	}
	for i := range on.n {
		if x := on.ring[(on.head+i)&(len(on.ring)-1)]; x.seq == ev.Seq() {
			return s.waitRaw(h, x.ev)
		}
	}
	return fmt.Errorf("cuda: Wait(%v): %w", ev, gpu.ErrUnknownEvent)
}

// waitRaw queues the driver's wait for ev on the stream h (s's handle).
func (s *Stream) waitRaw(h, ev uintptr) error {
	if ev == 0 {
		return fmt.Errorf("cuda: Wait: a null CUevent")
	}
	if err := s.dev.enter(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	return s.dev.drv.check("cuStreamWaitEvent", s.dev.drv.streamWaitEvent(h, ev, 0))
}

// stream returns the open stream of d whose id is id, or nil.
func (d *Device) stream(id uint64) *Stream {
	d.streamsMu.Lock()
	defer d.streamsMu.Unlock()
	for _, s := range d.streams {
		if s.id == id {
			return s
		}
	}
	return nil
}

// NewStream creates a non-blocking stream.
func (d *Device) NewStream() (gpu.Stream, error) {
	if err := d.enter(); err != nil {
		return nil, err
	}
	defer runtime.UnlockOSThread()
	s := &Stream{dev: d, id: streamIDs.Add(1)}
	if err := d.drv.check("cuStreamCreate", d.drv.streamCreate(&s.h, streamNonBlocking)); err != nil {
		return nil, err
	}
	d.streamsMu.Lock()
	d.streams = append(d.streams, s)
	d.streamsMu.Unlock()
	return s, nil
}

// Stream is a CUDA stream with its events.
type Stream struct {
	dev *Device
	id  uint64
	h   uintptr

	mu     sync.Mutex
	issued uint64
	done   uint64     // every event up to here is resolved
	failed []uint64   // resolved events that failed, ascending
	ring   []inflight // unresolved events, oldest at head; its length a power of two
	head   int
	n      int
	spare  []uintptr // completed driver events, ready to record again
}

type inflight struct {
	seq uint64
	ev  uintptr
}

var (
	_ gpu.Stream = (*Stream)(nil)
	_ gpu.Waiter = (*Stream)(nil)
)

// ID returns the stream's process-unique id.
func (s *Stream) ID() uint64 { return s.id }

// Handle returns the driver's CUstream handle (0 once closed), for work the
// caller queues on the same stream itself, such as its own kernels: events
// recorded afterwards then cover it too. The stream stays owned by s.
func (s *Stream) Handle() uintptr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h
}

// CopyHtoD queues a copy from pinned host memory to the device.
func (s *Stream) CopyHtoD(dst gpu.DevicePtr, src []byte) error {
	return s.copyAsync(true, dst, src)
}

// CopyDtoH queues a copy from the device into pinned host memory.
func (s *Stream) CopyDtoH(dst []byte, src gpu.DevicePtr) error {
	return s.copyAsync(false, src, dst)
}

// copyAsync checks that host is pinned and the stream open, then issues the
// copy on the device's context: the driver makes the context current and the
// copy in one call (driver.htodInCtx and dtohInCtx). It is on every round's
// path, so it calls the driver directly and unlocks without a defer.
func (s *Stream) copyAsync(toDevice bool, dev gpu.DevicePtr, host []byte) error {
	if len(host) == 0 {
		return nil
	}
	p, err := s.dev.pinnedPtr(host)
	if err != nil {
		return err
	}
	drv := s.dev.drv
	s.mu.Lock()
	if s.h == 0 {
		s.mu.Unlock()
		return errStreamClosed
	}
	var set, r result
	if toDevice {
		set, r = drv.htodInCtx(s.dev.ctx, uint64(dev), p, uintptr(len(host)), s.h)
	} else {
		set, r = drv.dtohInCtx(s.dev.ctx, p, uint64(dev), uintptr(len(host)), s.h)
	}
	s.mu.Unlock()
	if set != cudaSuccess || r != cudaSuccess {
		if err := drv.check("cuCtxSetCurrent", set); err != nil {
			return err
		}
		if toDevice {
			return drv.check("cuMemcpyHtoDAsync", r)
		}
		return drv.check("cuMemcpyDtoHAsync", r)
	}
	return nil
}

// Addressable asks the driver which allocation holds p
// (cuMemGetAddressRange) and reports whether n bytes from p lie inside it.
func (s *Stream) Addressable(p gpu.DevicePtr, n int) error {
	if n <= 0 || p == 0 {
		return fmt.Errorf("cuda: Addressable(%#x, %d): want a non-zero address and a positive size", uint64(p), n)
	}
	if err := s.dev.enter(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	var base uint64
	var size uintptr
	if err := s.dev.drv.check(fmt.Sprintf("cuMemGetAddressRange(%#x)", uint64(p)), s.dev.drv.memAddressRange(&base, &size, uint64(p))); err != nil {
		return err
	}
	if uint64(p)+uint64(n) > base+uint64(size) {
		return fmt.Errorf("cuda: [%#x, +%d) runs past its allocation [%#x, +%d)", uint64(p), n, base, size)
	}
	return nil
}

// Record records an event after everything queued so far.
func (s *Stream) Record() (gpu.Event, error) {
	s.mu.Lock()
	ev, err := s.recordLocked()
	s.mu.Unlock()
	return ev, err
}

func (s *Stream) recordLocked() (gpu.Event, error) {
	if s.h == 0 {
		return gpu.Event{}, errStreamClosed
	}
	if len(s.spare) == 0 {
		ev, err := s.dev.newEvent()
		if err != nil {
			return gpu.Event{}, err
		}
		s.spare = append(s.spare, ev)
	}
	// A spare event, recorded with the context switch in one call.
	k := len(s.spare)
	ev := s.spare[k-1]
	s.spare = s.spare[:k-1]
	drv := s.dev.drv
	set, r := drv.recordInCtx(s.dev.ctx, ev, s.h)
	if set != cudaSuccess || r != cudaSuccess {
		err := drv.check("cuCtxSetCurrent", set)
		if err == nil {
			err = drv.check("cuEventRecord", r)
		}
		s.spare = append(s.spare, ev) // never recorded: it may be used again
		return gpu.Event{}, err
	}
	return s.recorded(ev), nil
}

// newEvent creates a driver event on the device's context.
func (d *Device) newEvent() (uintptr, error) {
	if err := d.enter(); err != nil {
		return 0, err
	}
	defer runtime.UnlockOSThread()
	// Its own variable: the driver writes through its address, so it lives
	// on the heap, and only a new event pays for that.
	var created uintptr
	if err := d.drv.check("cuEventCreate", d.drv.eventCreate(&created, eventDisableTiming)); err != nil {
		return 0, err
	}
	return created, nil
}

// recorded puts the driver event just recorded in the in-flight ring and
// returns the event that stands for it. The caller holds s.mu.
func (s *Stream) recorded(ev uintptr) gpu.Event {
	s.issued++
	if s.n == len(s.ring) {
		ring := make([]inflight, max(2*len(s.ring), 16))
		for i := range s.n {
			ring[i] = s.ring[(s.head+i)&(len(s.ring)-1)]
		}
		s.ring, s.head = ring, 0
	}
	s.ring[(s.head+s.n)&(len(s.ring)-1)] = inflight{seq: s.issued, ev: ev}
	s.n++
	return gpu.MakeEvent(s.id, s.issued)
}

// Query reports ev's status without blocking. It asks the driver only about
// the oldest unresolved events, up to ev, in order.
func (s *Stream) Query(ev gpu.Event) (gpu.Status, error) {
	s.mu.Lock()
	st, err := s.queryLocked(ev)
	s.mu.Unlock()
	return st, err
}

func (s *Stream) queryLocked(ev gpu.Event) (gpu.Status, error) {
	if err := gpu.CheckEvent(ev, s.id, s.issued); err != nil {
		return gpu.Pending, err
	}
	if ev.Seq() > s.done {
		// cuEventQuery needs no current context (the event carries its
		// own; the driver documents no CUDA_ERROR_INVALID_CONTEXT for it):
		// polling skips the switch, and only destroying a failed event's
		// handle enters the device.
		drv := s.dev.drv
		entered := false
		for s.n > 0 && s.ring[s.head].seq <= ev.Seq() {
			h := s.ring[s.head]
			r := drv.eventQuery(h.ev)
			if r == errNotReady {
				break
			}
			if r == cudaSuccess {
				s.spare = append(s.spare, h.ev)
			} else {
				// The copies before it have no completion record: failed.
				// The handle's state is unknown, so it is not reused (and
				// leaked if the context cannot even be entered).
				s.failed = append(s.failed, h.seq)
				if !entered {
					entered = s.dev.enter() == nil
				}
				if entered {
					drv.eventDestroy(h.ev)
				}
			}
			s.done = h.seq
			s.ring[s.head] = inflight{}
			s.head = (s.head + 1) & (len(s.ring) - 1)
			s.n--
		}
		if entered {
			runtime.UnlockOSThread()
		}
		if ev.Seq() > s.done {
			return gpu.Pending, nil
		}
	}
	if _, bad := slices.BinarySearch(s.failed, ev.Seq()); bad {
		return gpu.Failed, nil
	}
	return gpu.Complete, nil
}

// Close destroys the stream and its events. Events still in flight read as
// Failed afterwards; their memory must be treated as still accessed.
func (s *Stream) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h == 0 {
		return nil
	}
	if err := s.dev.enter(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	drv := s.dev.drv
	for ; s.n > 0; s.n-- {
		h := s.ring[s.head]
		s.failed = append(s.failed, h.seq)
		s.done = h.seq
		drv.eventDestroy(h.ev)
		s.head = (s.head + 1) & (len(s.ring) - 1)
	}
	for _, ev := range s.spare {
		drv.eventDestroy(ev)
	}
	s.spare = nil
	err := drv.check("cuStreamDestroy", drv.streamDestroy(s.h))
	s.h = 0
	s.dev.streamsMu.Lock()
	s.dev.streams = slices.DeleteFunc(s.dev.streams, func(o *Stream) bool { return o == s })
	s.dev.streamsMu.Unlock()
	return err
}
