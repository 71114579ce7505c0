package main

/*
#include "cgo.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/sim"
)

// device is a device object: the stream an engine's copies go through and
// the health it is asked about. A simulated device (gpu/sim) keeps sim set; a
// device the embedder implements is a cDevice.
type device struct {
	stream gpu.Stream
	health gpu.Health
	sim    *sim.Device
	simMem int64 // the simulated device's memory, in bytes
	c      *cDevice
	users  atomic.Int32

	// The simulated device's streams by number: 0 is the engine's copy
	// stream, the others the embedder's (kvready_sim_stream_new), which any
	// thread may add.
	mu      sync.Mutex
	streams []*sim.Stream
}

// eventSeqBits is how many low bits of a simulated event's token hold its
// sequence number on its stream; the stream's process-unique id is above
// them, so that a token of another device's stream is refused, never taken
// for an event of this one.
const eventSeqBits = 40

//export kvready_sim_device_new
func kvready_sim_device_new(memBytes C.int64_t, latencyNS C.int64_t, out *C.uint64_t) (st C.int) {
	defer guard(0, &st)
	if out == nil {
		return fail(0, invalid("kvready_sim_device_new: device (the out-parameter) is NULL"))
	}
	if memBytes <= 0 || memBytes > 1<<36 || latencyNS < 0 {
		return fail(0, invalid("kvready_sim_device_new: %d bytes, latency %d ns; want 1 byte to 64 GiB and a latency >= 0", memBytes, latencyNS))
	}
	var opts []sim.Option
	if latencyNS > 0 {
		opts = append(opts, sim.WithLatency(sim.WallClock{}, time.Duration(latencyNS)))
	}
	return newSim(int64(memBytes), opts, out)
}

//export kvready_sim_device_new_bandwidth
func kvready_sim_device_new_bandwidth(memBytes C.int64_t, bytesPerSecond C.double, out *C.uint64_t) (st C.int) {
	defer guard(0, &st)
	if out == nil {
		return fail(0, invalid("kvready_sim_device_new_bandwidth: device (the out-parameter) is NULL"))
	}
	bps := float64(bytesPerSecond)
	if memBytes <= 0 || memBytes > 1<<36 || !(bps > 0) || math.IsInf(bps, 0) {
		return fail(0, invalid("kvready_sim_device_new_bandwidth: %d bytes, %v bytes per second; want 1 byte to 64 GiB and a positive, finite rate", memBytes, bps))
	}
	return newSim(int64(memBytes), []sim.Option{sim.WithBandwidth(sim.WallClock{}, bps)}, out)
}

// newSim registers a simulated device with its copy stream (stream 0).
func newSim(memBytes int64, opts []sim.Option, out *C.uint64_t) C.int {
	d, err := sim.New(0, int(memBytes), opts...)
	if err != nil {
		return fail(0, invalid("%v", err))
	}
	s, err := d.NewStream()
	if err != nil {
		return fail(0, invalid("%v", err))
	}
	ss := s.(*sim.Stream)
	*out = C.uint64_t(register(kindDevice, &device{stream: ss, health: d, sim: d, simMem: memBytes, streams: []*sim.Stream{ss}}))
	return C.KVREADY_OK
}

// simStream returns stream number n of a simulated device, refusing the
// engine's copy stream (0): work the embedder queued there would sit among
// the engine's copies.
func simStream(h C.uint64_t, n C.uint32_t, fn string) (*sim.Stream, error) {
	d, err := simDevice(h, fn)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if n == 0 || int(n) >= len(d.streams) {
		return nil, invalid("%s: stream %d; want a stream kvready_sim_stream_new made, 1 to %d (0 is the engine's copy stream)", fn, uint32(n), len(d.streams)-1)
	}
	return d.streams[n], nil
}

// simEvent turns an event's token (kvready_sim_record) back into the event.
func (d *device) simEvent(tok uint64, fn string) (*sim.Stream, gpu.Event, error) {
	id, seq := tok>>eventSeqBits, tok&(1<<eventSeqBits-1)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.streams {
		if s.ID() == id && seq != 0 {
			return s, gpu.MakeEvent(id, seq), nil
		}
	}
	return nil, gpu.Event{}, invalid("%s: event %#x is no token kvready_sim_record returned for a stream of this device (stream id %d, sequence %d)", fn, tok, id, seq)
}

// event is the gpu.Event an embedder's token names for this device: a
// simulated device's event (kvready_sim_record), or the embedder's own event
// for a device of callbacks, which only its wait callback can make sense of.
func (d *device) event(tok uint64, fn string) (gpu.Event, error) {
	switch {
	case d.sim != nil:
		_, ev, err := d.simEvent(tok, fn)
		return ev, err
	case d.c.cb.wait == nil:
		return gpu.Event{}, invalid("%s: event %#x, but the device's callbacks have no wait: it cannot put its copies behind another stream's event; synchronise and pass event 0", fn, tok)
	}
	return gpu.MakeEvent(d.c.external(), tok), nil
}

//export kvready_sim_stream_new
func kvready_sim_stream_new(h C.uint64_t, out *C.uint32_t) (st C.int) {
	defer guard(uint64(h), &st)
	d, err := simDevice(h, "kvready_sim_stream_new")
	if err != nil {
		return fail(uint64(h), err)
	}
	if out == nil {
		return fail(uint64(h), invalid("kvready_sim_stream_new: stream (the out-parameter) is NULL"))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.streams) >= 1<<16 {
		return fail(uint64(h), invalid("kvready_sim_stream_new: the device has %d streams; want at most %d", len(d.streams), 1<<16))
	}
	s, err := d.sim.NewStream()
	if err != nil {
		return fail(uint64(h), err)
	}
	d.streams = append(d.streams, s.(*sim.Stream))
	*out = C.uint32_t(len(d.streams) - 1)
	return C.KVREADY_OK
}

//export kvready_sim_compute
func kvready_sim_compute(h C.uint64_t, stream C.uint32_t, ns C.int64_t) (st C.int) {
	defer guard(uint64(h), &st)
	s, err := simStream(h, stream, "kvready_sim_compute")
	if err != nil {
		return fail(uint64(h), err)
	}
	if ns < 0 {
		return fail(uint64(h), invalid("kvready_sim_compute: %d ns; want a duration >= 0", int64(ns)))
	}
	return fail(uint64(h), s.Compute(time.Duration(ns)))
}

//export kvready_sim_record
func kvready_sim_record(h C.uint64_t, stream C.uint32_t, event *C.uint64_t) (st C.int) {
	defer guard(uint64(h), &st)
	s, err := simStream(h, stream, "kvready_sim_record")
	if err != nil {
		return fail(uint64(h), err)
	}
	if event == nil {
		return fail(uint64(h), invalid("kvready_sim_record: event (the out-parameter) is NULL"))
	}
	ev, err := s.Record()
	if err != nil {
		return fail(uint64(h), err)
	}
	if ev.Seq() >= 1<<eventSeqBits || s.ID() >= 1<<(64-eventSeqBits) {
		return fail(uint64(h), invalid("kvready_sim_record: stream id %d, event %d; a token holds ids below 2^%d and events below 2^%d", s.ID(), ev.Seq(), 64-eventSeqBits, eventSeqBits))
	}
	*event = C.uint64_t(s.ID()<<eventSeqBits | ev.Seq())
	return C.KVREADY_OK
}

//export kvready_sim_query
func kvready_sim_query(h C.uint64_t, event C.uint64_t, status *C.int32_t) (st C.int) {
	defer guard(uint64(h), &st)
	d, err := simDevice(h, "kvready_sim_query")
	if err != nil {
		return fail(uint64(h), err)
	}
	if status == nil {
		return fail(uint64(h), invalid("kvready_sim_query: status (the out-parameter) is NULL"))
	}
	s, ev, err := d.simEvent(uint64(event), "kvready_sim_query")
	if err != nil {
		return fail(uint64(h), err)
	}
	got, err := s.Query(ev)
	if err != nil {
		return fail(uint64(h), invalid("kvready_sim_query: %v", err))
	}
	switch got {
	case gpu.Complete:
		*status = C.KVREADY_EVENT_COMPLETE
	case gpu.Failed:
		*status = C.KVREADY_EVENT_FAILED
	default:
		*status = C.KVREADY_EVENT_PENDING
	}
	return C.KVREADY_OK
}

//export kvready_sim_wait
func kvready_sim_wait(h C.uint64_t, stream C.uint32_t, event C.uint64_t) (st C.int) {
	defer guard(uint64(h), &st)
	s, err := simStream(h, stream, "kvready_sim_wait")
	if err != nil {
		return fail(uint64(h), err)
	}
	d, _ := simDevice(h, "kvready_sim_wait")
	_, ev, err := d.simEvent(uint64(event), "kvready_sim_wait")
	if err != nil {
		return fail(uint64(h), err)
	}
	if err := s.Wait(ev); err != nil {
		if errors.Is(err, gpu.ErrDeviceLost) {
			return fail(uint64(h), err)
		}
		return fail(uint64(h), invalid("kvready_sim_wait: %v", err))
	}
	return C.KVREADY_OK
}

func simOf(h C.uint64_t, fn string) (*sim.Device, error) {
	d, err := simDevice(h, fn)
	if err != nil {
		return nil, err
	}
	return d.sim, nil
}

func simDevice(h C.uint64_t, fn string) (*device, error) {
	d, err := lookup[*device](uint64(h), kindDevice)
	if err != nil {
		return nil, err
	}
	if d.sim == nil {
		return nil, statusf(C.KVREADY_ERR_UNSUPPORTED, "%s: device %#x is not a simulated device (kvready_sim_device_new)", fn, uint64(h))
	}
	return d, nil
}

// span refuses a length past the device's memory before any slice of it is
// made (a size_t past int64 would make a negative one).
func (d *device) span(fn string, n C.size_t) error {
	if uint64(n) > uint64(d.simMem) {
		return invalid("%s: %d bytes; the device has %d bytes of memory in all, want n <= %d", fn, uint64(n), d.simMem, d.simMem)
	}
	return nil
}

//export kvready_sim_alloc
func kvready_sim_alloc(h C.uint64_t, n C.int64_t, ptr *C.uint64_t) (st C.int) {
	defer guard(uint64(h), &st)
	d, err := simOf(h, "kvready_sim_alloc")
	if err != nil {
		return fail(uint64(h), err)
	}
	if ptr == nil || n <= 0 || n > 1<<36 {
		return fail(uint64(h), invalid("kvready_sim_alloc: %d bytes (ptr NULL: %v); want 1 to %d bytes and a ptr", int64(n), ptr == nil, int64(1)<<36))
	}
	p, err := d.Alloc(int(n))
	if err != nil {
		return fail(uint64(h), invalid("%v", err))
	}
	*ptr = C.uint64_t(p)
	return C.KVREADY_OK
}

//export kvready_sim_write
func kvready_sim_write(h C.uint64_t, ptr C.uint64_t, src *C.kv_cvoid, n C.size_t) (st C.int) {
	defer guard(uint64(h), &st)
	dev, err := simDevice(h, "kvready_sim_write")
	if err != nil {
		return fail(uint64(h), err)
	}
	if err := dev.span("kvready_sim_write", n); err != nil {
		return fail(uint64(h), err)
	}
	d := dev.sim
	if src == nil && n > 0 {
		return fail(uint64(h), invalid("kvready_sim_write: src is NULL for %d bytes", n))
	}
	if err := d.Write(gpu.DevicePtr(ptr), bytesOf(unsafe.Pointer(src), n)); err != nil {
		return fail(uint64(h), invalid("%v", err))
	}
	return C.KVREADY_OK
}

//export kvready_sim_read
func kvready_sim_read(h C.uint64_t, ptr C.uint64_t, dst unsafe.Pointer, n C.size_t) (st C.int) {
	defer guard(uint64(h), &st)
	dev, err := simDevice(h, "kvready_sim_read")
	if err != nil {
		return fail(uint64(h), err)
	}
	if err := dev.span("kvready_sim_read", n); err != nil {
		return fail(uint64(h), err)
	}
	d := dev.sim
	if dst == nil && n > 0 {
		return fail(uint64(h), invalid("kvready_sim_read: dst is NULL for %d bytes", n))
	}
	if err := d.Read(bytesOf(dst, n), gpu.DevicePtr(ptr)); err != nil {
		return fail(uint64(h), invalid("%v", err))
	}
	return C.KVREADY_OK
}

//export kvready_sim_complete_all
func kvready_sim_complete_all(h C.uint64_t, completed *C.int64_t) (st C.int) {
	defer guard(uint64(h), &st)
	d, err := simOf(h, "kvready_sim_complete_all")
	if err != nil {
		return fail(uint64(h), err)
	}
	n := d.CompleteAll()
	if completed != nil {
		*completed = C.int64_t(n)
	}
	return C.KVREADY_OK
}

//export kvready_sim_complete_next
func kvready_sim_complete_next(h C.uint64_t, stream C.uint32_t, n C.int64_t, done *C.int64_t) (st C.int) {
	defer guard(uint64(h), &st)
	return simResolveNext(h, stream, n, done, true)
}

//export kvready_sim_fail_next
func kvready_sim_fail_next(h C.uint64_t, stream C.uint32_t, n C.int64_t, done *C.int64_t) (st C.int) {
	defer guard(uint64(h), &st)
	return simResolveNext(h, stream, n, done, false)
}

// simResolveNext completes (ok) or fails the next n events of a stream of a
// simulated device; the engine's copy stream (0) included, which is what a
// test steps.
func simResolveNext(h C.uint64_t, stream C.uint32_t, n C.int64_t, done *C.int64_t, ok bool) C.int {
	fn := map[bool]string{true: "kvready_sim_complete_next", false: "kvready_sim_fail_next"}[ok]
	d, err := simDevice(h, fn)
	if err != nil {
		return fail(uint64(h), err)
	}
	d.mu.Lock()
	var s *sim.Stream
	streams := len(d.streams)
	if int(stream) < streams {
		s = d.streams[stream]
	}
	d.mu.Unlock()
	if s == nil || n < 0 {
		return fail(uint64(h), invalid("%s: stream %d, %d events; want a stream of the device (0 to %d) and n >= 0", fn, uint32(stream), int64(n), streams-1))
	}
	resolve := d.sim.CompleteNext
	if !ok {
		resolve = d.sim.FailNext
	}
	k, err := resolve(s, int(n))
	if err != nil {
		return fail(uint64(h), invalid("%s: %v", fn, err))
	}
	if done != nil {
		*done = C.int64_t(k)
	}
	return C.KVREADY_OK
}

//export kvready_sim_lose
func kvready_sim_lose(h C.uint64_t, reason *C.kv_cchar) (st C.int) {
	defer guard(uint64(h), &st)
	d, err := simOf(h, "kvready_sim_lose")
	if err != nil {
		return fail(uint64(h), err)
	}
	why := "lost (kvready_sim_lose)"
	if reason != nil {
		why = C.GoString((*C.char)(unsafe.Pointer(reason)))
	}
	d.Lose(why)
	return C.KVREADY_OK
}

//export kvready_device_new
func kvready_device_new(cb *C.kv_cdevice_callbacks, out *C.uint64_t) (st C.int) {
	defer guard(0, &st)
	if cb == nil || out == nil {
		return fail(0, invalid("kvready_device_new: callbacks and device (the out-parameter) are required (NULL given)"))
	}
	if cb.copy == nil || cb.record == nil || cb.query == nil {
		return fail(0, invalid("kvready_device_new: the callbacks need copy, record and query (NULL: %v, %v, %v)", cb.copy == nil, cb.record == nil, cb.query == nil))
	}
	table := C.kv_copy_device((*C.kvready_device_callbacks)(unsafe.Pointer(cb)))
	if table == nil {
		return fail(0, statusf(C.KVREADY_ERR_FAILED, "kvready_device_new: out of C memory"))
	}
	c := &cDevice{cb: table, id: streamIDs.Add(1) | 1<<63}
	*out = C.uint64_t(register(kindDevice, &device{stream: c, health: c, c: c}))
	return C.KVREADY_OK
}

//export kvready_device_close
func kvready_device_close(h C.uint64_t) (st C.int) {
	defer guard(uint64(h), &st)
	d, err := lookup[*device](uint64(h), kindDevice)
	if err != nil {
		return fail(uint64(h), err)
	}
	if u := d.users.Load(); u > 0 {
		return fail(uint64(h), statusf(C.KVREADY_ERR_BUSY, "kvready_device_close: %d engines still use this device; free them first (kvready_engine_free)", u))
	}
	unregister(uint64(h))
	if d.c != nil && d.c.cb.close != nil && !detached.Load() {
		C.kv_device_close(d.c.cb)
	}
	return C.KVREADY_OK
}

// streamIDs numbers the embedder's queues; the top bit keeps them apart from
// the simulated device's stream ids.
var streamIDs atomic.Uint64

// cDevice is a gpu.Stream and gpu.Health over the embedder's callbacks. The
// embedder's events may complete in any order: an event reads Complete here
// only once it and every event recorded before it have completed, which is
// what a stream's event means (everything queued before it finished).
type cDevice struct {
	cb *C.kvready_device_callbacks // C memory: a copy of the embedder's table
	id uint64

	mu     sync.Mutex
	seq    uint64   // events recorded
	events []cEvent // recorded and not yet released, oldest first
	failed uint64   // the first event that failed (0: none); every later one fails too
}

type cEvent struct {
	seq   uint64
	token uint64
	done  bool
}

// ID returns the queue's process-unique id.
func (d *cDevice) ID() uint64 { return d.id }

// CopyHtoD queues a copy of a staging row (caller memory) to the device.
func (d *cDevice) CopyHtoD(dst gpu.DevicePtr, src []byte) error { return d.copy(1, dst, src) }

// CopyDtoH queues a copy of device memory into a staging row.
func (d *cDevice) CopyDtoH(dst []byte, src gpu.DevicePtr) error { return d.copy(0, src, dst) }

func (d *cDevice) copy(toDevice C.int32_t, dev gpu.DevicePtr, host []byte) error {
	if detached.Load() {
		return fmt.Errorf("%w: %v", gpu.ErrCopyRefused, errDetached)
	}
	if len(host) == 0 {
		return fmt.Errorf("%w: an empty copy", gpu.ErrCopyRefused)
	}
	// host is a slot of the caller's staging memory (kvready_memory_over):
	// C memory, which the embedder's queue may read or write after the call.
	st := C.kv_copy(d.cb, toDevice, C.uint64_t(dev), unsafe.Pointer(unsafe.SliceData(host)), C.size_t(len(host)))
	switch st {
	case C.KVREADY_OK:
		return nil
	case C.KVREADY_ERR_REFUSED:
		return fmt.Errorf("%w: the embedder's device refused the %d-byte copy at %#x", gpu.ErrCopyRefused, len(host), uint64(dev))
	case C.KVREADY_ERR_DEVICE_LOST:
		return fmt.Errorf("%w: the embedder's device is lost", gpu.ErrDeviceLost)
	}
	return fmt.Errorf("kvready: the embedder's copy failed with status %d; work may have been queued", int(st))
}

// Record asks the embedder for an event after everything queued so far.
func (d *cDevice) Record() (gpu.Event, error) {
	if detached.Load() {
		return gpu.Event{}, errDetached
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var tok C.uint64_t
	st := C.kv_record(d.cb, &tok)
	if st != C.KVREADY_OK {
		return gpu.Event{}, fmt.Errorf("kvready: the embedder's record failed with status %d", int(st))
	}
	d.seq++
	d.events = append(d.events, cEvent{seq: d.seq, token: uint64(tok)})
	return gpu.MakeEvent(d.id, d.seq), nil
}

// Query answers Complete only once ev and every earlier event completed.
func (d *cDevice) Query(ev gpu.Event) (gpu.Status, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := gpu.CheckEvent(ev, d.id, d.seq); err != nil {
		return gpu.Pending, err
	}
	if d.failed != 0 && ev.Seq() >= d.failed {
		return gpu.Failed, nil
	}
	if detached.Load() {
		return gpu.Pending, errDetached
	}
	for i := range d.events {
		e := &d.events[i]
		if e.seq > ev.Seq() {
			break
		}
		if e.done {
			continue
		}
		var s C.int32_t
		st := C.kv_query(d.cb, C.uint64_t(e.token), &s)
		switch {
		case st != C.KVREADY_OK:
			return gpu.Pending, fmt.Errorf("kvready: the embedder's query of event %d failed with status %d", e.token, int(st))
		case s == C.KVREADY_EVENT_PENDING:
			d.release()
			return gpu.Pending, nil
		case s == C.KVREADY_EVENT_COMPLETE:
			e.done = true
		case s == C.KVREADY_EVENT_FAILED:
			d.failed = e.seq
			return gpu.Failed, nil
		default:
			return gpu.Pending, fmt.Errorf("kvready: the embedder's query of event %d answered status %d; want KVREADY_EVENT_PENDING, _COMPLETE or _FAILED", e.token, int(s))
		}
	}
	d.release()
	return gpu.Complete, nil
}

// release drops the completed events at the front, telling the embedder.
func (d *cDevice) release() {
	n := 0
	for n < len(d.events) && d.events[n].done {
		if d.cb.release_event != nil {
			C.kv_release_event(d.cb, C.uint64_t(d.events[n].token))
		}
		n++
	}
	if n > 0 {
		d.events = append(d.events[:0], d.events[n:]...)
	}
}

// external is the stream id the embedder's own events carry (the events
// kvready_layer_computed hands Wait): no stream has it.
func (d *cDevice) external() uint64 { return d.id | 1<<62 }

// Wait asks the embedder to hold its queue behind one of its own events.
func (d *cDevice) Wait(ev gpu.Event) error {
	switch {
	case ev.IsZero():
		return gpu.ErrNotRecorded
	case ev.StreamID() != d.external():
		return fmt.Errorf("%w: %v is no event of the embedder's (kvready_layer_computed hands those)", gpu.ErrForeignEvent, ev)
	case d.cb.wait == nil:
		return errors.New("kvready: the embedder's device has no wait callback")
	case detached.Load():
		return errDetached
	}
	if st := C.kv_wait(d.cb, C.uint64_t(ev.Seq())); st != C.KVREADY_OK {
		return fmt.Errorf("kvready: the embedder's wait for event %#x failed with status %d", ev.Seq(), int(st))
	}
	return nil
}

// Addressable asks the embedder, or accepts any nonzero address.
func (d *cDevice) Addressable(p gpu.DevicePtr, n int) error {
	if p == 0 {
		return fmt.Errorf("device address 0")
	}
	if d.cb.addressable == nil || detached.Load() {
		return nil
	}
	var msg [errBuf]C.char
	if st := C.kv_addressable(d.cb, C.uint64_t(p), C.size_t(n), &msg[0], errBuf); st != C.KVREADY_OK {
		return fmt.Errorf("the embedder's device: %s", orStatus(goStringN(&msg[0], errBuf), st))
	}
	return nil
}

// Lost asks the embedder whether the device is lost.
func (d *cDevice) Lost(int) (bool, string) {
	if d.cb.lost == nil || detached.Load() {
		return false, ""
	}
	var lost C.int32_t
	var msg [errBuf]C.char
	if st := C.kv_lost(d.cb, &lost, &msg[0], errBuf); st != C.KVREADY_OK {
		return false, ""
	}
	return lost != 0, goStringN(&msg[0], errBuf)
}

var (
	_ gpu.Stream = (*cDevice)(nil)
	_ gpu.Health = (*cDevice)(nil)
	_ gpu.Waiter = (*cDevice)(nil)
	_ gpu.Waiter = (*sim.Stream)(nil)
)
