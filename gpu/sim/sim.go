// Package sim is a deterministic simulated GPU implementing gpu.Device,
// gpu.Stream and gpu.Health, for tests and demos without a GPU.
//
// Device memory is a byte slice. Copies really copy, and they do so at
// completion time, not at queue time: a host-to-device copy reads its source
// only when the test completes it, and a device-to-host copy writes its
// destination only then. A caller that recycles a host slot before the copy's
// event completed therefore sees visibly wrong bytes, instead of getting away
// with it because the simulation copied eagerly.
//
// Nothing completes on its own unless the device was built WithLatency: the
// test decides, with CompleteNext, FailNext and CompleteAll. A failed event's
// copies are not performed; their destinations are overwritten with Poison,
// because a failed copy leaves memory undefined. Lose makes the device lost:
// every queued event reads Failed from then on, and new work is refused with
// gpu.ErrDeviceLost.
//
// Timing: without a clock, the test resolves everything. WithLatency completes
// each operation a fixed time after it was queued; WithBandwidth runs each
// stream as a copy engine of that many bytes per second, one copy after
// another, so that a pipeline's timing is exact in virtual time. Beside
// copies, a stream takes Compute (a kernel that occupies it for a while) and
// Wait (cuStreamWaitEvent: hold the stream until another stream's event
// resolved), which is how a forward pass computing layer by layer and the
// copies behind it are simulated.
//
// All methods are safe for concurrent use (one mutex per device). Copies,
// records and queries allocate nothing in steady state.
package sim

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvready/kvready/gpu"
)

// Poison is the byte a failed copy leaves in its destination.
const Poison byte = 0xDB

// base is the first device address; 0 is never a valid DevicePtr.
const base gpu.DevicePtr = 0x1_0000_0000

// align is the allocation granularity, like a real allocator's.
const align = 256

// Clock tells the simulated time. Events of a device built WithLatency complete
// once Now has reached their ready time.
type Clock interface {
	Now() time.Time
}

// WallClock is a Clock that reads the system's clock: with WithLatency, a
// simulated device whose copies complete by themselves, as a real GPU's do.
type WallClock struct{}

// Now returns time.Now().
func (WallClock) Now() time.Time { return time.Now() }

// ManualClock is a Clock that moves only when Advance is called. The zero value
// starts at the zero time and is ready to use; NewManualClock starts it at an
// ordinary instant, which callers that measure in Unix nanoseconds (the
// readiness engine) need: the zero time has none.
type ManualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*ManualTimer
}

// NewManualClock returns a manual clock reading start.
func NewManualClock(start time.Time) *ManualClock { return &ManualClock{now: start} }

// Now returns the current simulated time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (a negative d is ignored: time does not
// go back).
func (c *ManualClock) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []func()
	kept := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case t.stopped:
		case !t.at.After(c.now):
			t.stopped = true
			due = append(due, t.f)
		default:
			kept = append(kept, t)
		}
	}
	clear(c.timers[len(kept):])
	c.timers = kept
	c.mu.Unlock()
	for _, f := range due {
		f() // outside the lock: f may read the clock
	}
}

// NewTimer returns a stopped timer that calls f, from the goroutine that
// advances the clock, once the clock has moved the duration of its latest
// Reset past the moment of that Reset (at once, on the resetting goroutine,
// for a duration <= 0). It makes a ManualClock a readiness.TimerClock.
func (c *ManualClock) NewTimer(f func()) interface {
	Reset(d time.Duration)
	Stop()
} {
	return &ManualTimer{c: c, f: f, stopped: true}
}

// ManualTimer is a ManualClock's timer.
type ManualTimer struct {
	c       *ManualClock
	f       func()
	at      time.Time
	stopped bool
}

// Reset arms the timer to fire d from the clock's now, replacing any earlier
// arming.
func (t *ManualTimer) Reset(d time.Duration) {
	c := t.c
	c.mu.Lock()
	if d <= 0 {
		t.stopped = true
		c.remove(t)
		c.mu.Unlock()
		t.f()
		return
	}
	t.at, t.stopped = c.now.Add(d), false
	c.remove(t)
	c.timers = append(c.timers, t)
	c.mu.Unlock()
}

// Stop disarms the timer.
func (t *ManualTimer) Stop() {
	t.c.mu.Lock()
	t.stopped = true
	t.c.remove(t)
	t.c.mu.Unlock()
}

// remove drops t from the armed timers; the caller holds mu.
func (c *ManualClock) remove(t *ManualTimer) {
	for i, x := range c.timers {
		if x == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			return
		}
	}
}

// Option configures a Device.
type Option func(*Device)

// WithLatency makes each queued copy and event complete by itself once clock
// reads at least latency after the moment it was queued (checked when the
// stream is queried or driven); with latency 0, as soon as it is queried.
// Tests still may complete or fail work earlier.
func WithLatency(clock Clock, latency time.Duration) Option {
	return func(d *Device) { d.clock, d.latency = clock, latency }
}

// WithBandwidth makes each stream a copy engine that moves bytesPerSecond:
// the copies queued on one stream run one after another, a copy of n bytes
// taking n/bytesPerSecond of clock time from when the one before it ended (or
// from when it was queued, if the stream was idle), and an event completes
// when everything queued before it did. It is the device of a pipeline whose
// timing is exact in virtual time (layer by layer: a copy of T beside a
// Compute of C). It excludes WithLatency.
func WithBandwidth(clock Clock, bytesPerSecond float64) Option {
	return func(d *Device) { d.clock, d.bandwidth = clock, bytesPerSecond }
}

// Device is one simulated GPU.
type Device struct {
	id        int
	clock     Clock
	latency   time.Duration
	bandwidth float64 // bytes per second; 0 for the latency model

	mu      sync.Mutex
	mem     []byte
	allocs  []span // live allocations, sorted by start
	streams []*Stream
	lost    bool
	reason  string
}

type span struct{ start, end gpu.DevicePtr }

// New returns a simulated device with ordinal id and memBytes bytes of memory.
func New(id int, memBytes int, opts ...Option) (*Device, error) {
	if memBytes <= 0 {
		return nil, fmt.Errorf("sim: device memory size %d; want > 0 bytes", memBytes)
	}
	d := &Device{id: id, mem: make([]byte, memBytes)}
	for _, o := range opts {
		o(d)
	}
	if d.latency < 0 || (d.latency > 0 && d.clock == nil) {
		return nil, fmt.Errorf("sim: WithLatency(%v) needs a non-nil clock and a non-negative latency", d.latency)
	}
	switch {
	case d.bandwidth < 0 || d.bandwidth != d.bandwidth || (d.bandwidth > 0 && d.clock == nil):
		return nil, fmt.Errorf("sim: WithBandwidth(%v) needs a non-nil clock and a positive rate in bytes per second", d.bandwidth)
	case d.bandwidth > 0 && d.latency > 0:
		return nil, errors.New("sim: WithBandwidth and WithLatency exclude each other; want one timing model")
	}
	return d, nil
}

var _ gpu.Device = (*Device)(nil)
var _ gpu.Health = (*Device)(nil)
var _ gpu.RecordQuerier = (*Stream)(nil)

// ID returns the device ordinal.
func (d *Device) ID() int { return d.id }

var streamIDs atomic.Uint64

// NewStream creates a stream. It fails on a lost device.
func (d *Device) NewStream() (gpu.Stream, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lost {
		return nil, d.lostErr("NewStream")
	}
	s := &Stream{dev: d, id: streamIDs.Add(1)}
	d.streams = append(d.streams, s)
	return s, nil
}

// Alloc reserves n bytes (first fit, 256-byte aligned).
func (d *Device) Alloc(n int) (gpu.DevicePtr, error) {
	if n <= 0 {
		return 0, fmt.Errorf("sim: Alloc(%d); want a positive size", n)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lost {
		return 0, d.lostErr("Alloc")
	}
	size := gpu.DevicePtr((n + align - 1) / align * align)
	at := base
	i := 0
	for ; i < len(d.allocs); i++ {
		if d.allocs[i].start-at >= size {
			break
		}
		at = d.allocs[i].end
	}
	if at+size > base+gpu.DevicePtr(len(d.mem)) {
		return 0, fmt.Errorf("sim: Alloc(%d): out of device memory (%d bytes in all)", n, len(d.mem))
	}
	d.allocs = slices.Insert(d.allocs, i, span{at, at + gpu.DevicePtr(n)})
	return at, nil
}

// Free releases an allocation. Freeing an address Alloc did not return, or one
// already freed, is an error and changes nothing.
func (d *Device) Free(p gpu.DevicePtr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	i, ok := slices.BinarySearchFunc(d.allocs, p, func(s span, p gpu.DevicePtr) int { return cmp.Compare(s.start, p) })
	if !ok {
		return fmt.Errorf("sim: Free(%#x): not the start of a live allocation", uint64(p))
	}
	d.allocs = slices.Delete(d.allocs, i, i+1)
	return nil
}

// locate returns the memory [p, p+n) if it lies inside one live allocation.
func (d *Device) locate(p gpu.DevicePtr, n int) ([]byte, error) {
	// The last allocation starting at or below p, searched by hand: every
	// copy and every lease's address check comes here, and the generic
	// search's comparison closure cost more than the rest of the check.
	lo, hi := 0, len(d.allocs)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if d.allocs[mid].start <= p {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	i := lo - 1
	if i < 0 || p+gpu.DevicePtr(n) > d.allocs[i].end || p < d.allocs[i].start {
		return nil, fmt.Errorf("sim: device range [%#x, +%d) is not inside one live allocation", uint64(p), n)
	}
	off := p - base
	return d.mem[off : off+gpu.DevicePtr(n)], nil
}

// Write copies src into device memory now.
func (d *Device) Write(dst gpu.DevicePtr, src []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lost {
		return d.lostErr("Write")
	}
	m, err := d.locate(dst, len(src))
	if err != nil {
		return err
	}
	copy(m, src)
	return nil
}

// Read copies device memory into dst now.
func (d *Device) Read(dst []byte, src gpu.DevicePtr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lost {
		return d.lostErr("Read")
	}
	m, err := d.locate(src, len(dst))
	if err != nil {
		return err
	}
	copy(dst, m)
	return nil
}

// Lose makes the device lost for reason: every event not yet complete reads
// Failed from now on (their copies never happen), and new work is refused with
// gpu.ErrDeviceLost. Losing a lost device again changes nothing.
func (d *Device) Lose(reason string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lost {
		return
	}
	d.lost, d.reason = true, reason
	for _, s := range d.streams {
		s.loseLocked()
	}
}

// Lost implements gpu.Health for this device alone.
func (d *Device) Lost(device int) (bool, string) {
	if device != d.id {
		return false, ""
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lost, d.reason
}

func (d *Device) lostErr(op string) error {
	return fmt.Errorf("sim: %s on device %d: %w: %s", op, d.id, gpu.ErrDeviceLost, d.reason)
}

// CompleteNext completes the next n events of s, in order, performing every copy
// queued before each. It returns how many events it completed (fewer when
// fewer are queued). Copies queued after the last event stay queued.
func (d *Device) CompleteNext(s gpu.Stream, n int) (int, error) {
	return d.resolveNext(s, n, true)
}

// FailNext fails the next n events of s, in order: the copies queued before each
// are not performed and their destinations are filled with Poison. It returns
// how many events it failed.
func (d *Device) FailNext(s gpu.Stream, n int) (int, error) {
	return d.resolveNext(s, n, false)
}

func (d *Device) resolveNext(gs gpu.Stream, n int, ok bool) (int, error) {
	s, isSim := gs.(*Stream)
	if !isSim || s.dev != d {
		return 0, errors.New("sim: the stream does not belong to this device")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	done := 0
	// A failure needs no waited event: what it fails is poisoned either way.
	for done < n && s.n > 0 && (!ok || s.resolvableLocked()) {
		if s.popLocked(ok) {
			done++
		}
	}
	// A trailing copy with no event after it is left queued: nothing can
	// observe it yet, and the next Record covers it.
	return done, nil
}

// CompleteAll completes everything queued on every stream, copies after the
// last event included. It returns how many events it completed.
func (d *Device) CompleteAll() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	done := 0
	// A stream waiting for another's event resolves once that one did: go
	// round until a pass moves nothing (waits never form a cycle, since an
	// event is recorded before anything can wait for it).
	for moved := true; moved; {
		moved = false
		for _, s := range d.streams {
			for s.n > 0 && s.resolvableLocked() {
				if s.popLocked(true) {
					done++
				}
				moved = true
			}
		}
	}
	return done
}

// opKind says what a queued operation is.
type opKind uint8

const (
	opHtoD opKind = iota + 1
	opDtoH
	opRecord
	opCompute // occupies the stream, touches no memory
	opWait    // holds the stream until another stream's event resolved
)

type op struct {
	kind  opKind
	dev   gpu.DevicePtr
	host  []byte
	seq   uint64        // the event: recorded (opRecord) or waited for (opWait)
	on    *Stream       // opWait: the stream the waited event is on
	busy  time.Duration // opCompute: how long it occupies the stream
	ready time.Time
}

// Stream is a simulated stream: a FIFO of copies and event markers.
type Stream struct {
	dev *Device
	id  uint64

	// Guarded by dev.mu.
	ring   []op
	head   int
	n      int
	issued uint64   // the newest event's sequence number
	done   uint64   // every event up to here is resolved (complete or failed)
	failed []uint64 // resolved events that failed, ascending
	taint  bool     // a copy since the last event was lost: that event fails
	// tail is when the newest queued operation is ready (clocked devices).
	tail time.Time
}

var _ gpu.Stream = (*Stream)(nil)

// ID returns the stream's process-unique id.
func (s *Stream) ID() uint64 { return s.id }

// Queued returns how many copies and events are queued and not yet resolved.
func (s *Stream) Queued() int {
	s.dev.mu.Lock()
	defer s.dev.mu.Unlock()
	return s.n
}

// CopyHtoD queues a copy of src to dst; src is read when the copy completes.
func (s *Stream) CopyHtoD(dst gpu.DevicePtr, src []byte) error {
	return s.enqueue(opHtoD, dst, src)
}

// CopyDtoH queues a copy of src into dst; dst is written when the copy completes.
func (s *Stream) CopyDtoH(dst []byte, src gpu.DevicePtr) error {
	return s.enqueue(opDtoH, src, dst)
}

// Record queues an event after everything queued so far.
func (s *Stream) Record() (gpu.Event, error) {
	d := s.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lost {
		return gpu.Event{}, d.lostErr("Record")
	}
	s.issued++
	o := s.reserveLocked()
	o.kind, o.seq = opRecord, s.issued
	s.pushLocked(o)
	return gpu.MakeEvent(s.id, s.issued), nil
}

// RecordQuery records an event after everything queued so far and reports
// its status, as Record then Query would, under one hold of the device's lock
// (gpu.RecordQuerier).
func (s *Stream) RecordQuery() (gpu.Event, gpu.Status, error) {
	d := s.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lost {
		return gpu.Event{}, gpu.Pending, d.lostErr("Record")
	}
	s.issued++
	o := s.reserveLocked()
	o.kind, o.seq = opRecord, s.issued
	s.pushLocked(o)
	return gpu.MakeEvent(s.id, s.issued), s.statusLocked(s.issued), nil
}

// Compute queues work that occupies the stream for d of clock time and
// touches no memory: the simulated kernel of a forward pass, so that copies
// queued behind it (or waiting for an event after it) start when it ended. On
// a device without a clock it is resolved, in order, like a copy.
func (s *Stream) Compute(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("sim: Compute(%v); want a non-negative duration", d)
	}
	dev := s.dev
	dev.mu.Lock()
	defer dev.mu.Unlock()
	if dev.lost {
		return dev.lostErr("Compute")
	}
	o := s.reserveLocked()
	o.kind, o.busy = opCompute, d
	s.pushLocked(o)
	return nil
}

// Wait makes everything queued on s after it wait until ev, an event recorded
// on another stream of the same device, resolved: cuStreamWaitEvent, how a
// copy stream is put behind a compute stream's work. Nothing on ev's stream
// waits. If ev failed, the next event of s fails too (a copy behind failed
// work cannot be trusted). Waiting for ev after it resolved queues nothing.
func (s *Stream) Wait(ev gpu.Event) error {
	d := s.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lost {
		return d.lostErr("Wait")
	}
	var on *Stream
	for _, o := range d.streams {
		if o.id == ev.StreamID() {
			on = o
		}
	}
	switch {
	case ev.IsZero():
		return fmt.Errorf("sim: Wait: %w", gpu.ErrNotRecorded)
	case on == nil:
		return fmt.Errorf("sim: Wait(%v): %w: no stream of device %d issued it", ev, gpu.ErrForeignEvent, d.id)
	case on == s:
		return fmt.Errorf("sim: Wait(%v) on the stream that recorded it; want an event of another stream (a stream already runs in order)", ev)
	case ev.Seq() > on.issued:
		return fmt.Errorf("sim: Wait: %w: %v, but stream %d has recorded only %d events", gpu.ErrUnknownEvent, ev, on.id, on.issued)
	}
	on.advanceLocked()
	if ev.Seq() <= on.done {
		if _, bad := slices.BinarySearch(on.failed, ev.Seq()); bad {
			s.taint = true
		}
		return nil
	}
	ready := on.readyAt(ev.Seq())
	o := s.reserveLocked()
	o.kind, o.seq, o.on, o.ready = opWait, ev.Seq(), on, ready
	s.pushLocked(o)
	return nil
}

// readyAt is when the event seq, still queued on s, is ready (the zero time on
// a device without a clock).
func (s *Stream) readyAt(seq uint64) time.Time {
	for i := range s.n {
		if o := &s.ring[(s.head+i)%len(s.ring)]; o.kind == opRecord && o.seq == seq {
			return o.ready
		}
	}
	return time.Time{}
}

func (s *Stream) enqueue(kind opKind, dev gpu.DevicePtr, host []byte) error {
	d := s.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lost {
		return d.lostErr("copy")
	}
	if _, err := d.locate(dev, len(host)); err != nil {
		return fmt.Errorf("%w: %w", gpu.ErrCopyRefused, err)
	}
	o := s.reserveLocked()
	o.kind, o.dev, o.host = kind, dev, host
	s.pushLocked(o)
	return nil
}

// Addressable reports whether n bytes at p lie inside one live allocation of
// the stream's device.
func (s *Stream) Addressable(p gpu.DevicePtr, n int) error {
	d := s.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lost {
		return d.lostErr("Addressable")
	}
	if n <= 0 {
		return fmt.Errorf("sim: Addressable(%#x, %d): want a positive size", uint64(p), n)
	}
	_, err := d.locate(p, n)
	return err
}

// pushLocked queues o (the slot reserveLocked returned, filled in), setting
// when it is ready on a clocked device: a latency after now; or, on a device
// with a bandwidth, when the stream's queue ahead of it is done and o's bytes
// moved. A Compute and a Wait (whose ready holds the waited event's) also
// start no earlier than the queue ahead of them is done.
func (s *Stream) pushLocked(o *op) {
	if d := s.dev; d.clock != nil {
		if d.latency == 0 && d.bandwidth == 0 && (o.kind == opHtoD || o.kind == opDtoH || o.kind == opRecord) {
			// Ready as soon as what is ahead of it: no clock read. A copy
			// or an event queued behind nothing timed keeps the zero time,
			// which advanceLocked resolves without reading the clock either:
			// a zero-latency device (copies landed by the time they are
			// queried) costs no clock read per operation.
			o.ready = s.tail
			s.n++
			return
		}
		now := d.clock.Now()
		start := now
		if s.tail.After(start) {
			start = s.tail
		}
		switch {
		case o.kind == opCompute:
			o.ready = start.Add(o.busy)
		case o.kind == opWait:
			if o.ready.Before(start) {
				o.ready = start
			}
		case d.bandwidth > 0:
			o.ready = start.Add(time.Duration(float64(len(o.host)) / d.bandwidth * float64(time.Second)))
		case d.latency > 0:
			o.ready = now.Add(d.latency)
		default:
			o.ready = now
		}
		if o.ready.After(s.tail) {
			s.tail = o.ready
		}
	}
	s.n++
}

// reserveLocked returns the zeroed slot after the queue's last operation, to
// be filled and then queued by pushLocked. The operation is written in its
// slot, never built elsewhere and copied in: a copy of the whole operation
// reads back, at once, the narrow stores that built it, which the processor
// cannot forward (every copy and event pays it).
func (s *Stream) reserveLocked() *op {
	if s.n == len(s.ring) {
		size := max(2*len(s.ring), 16)
		ring := make([]op, size)
		for i := range s.n {
			ring[i] = s.ring[(s.head+i)%len(s.ring)]
		}
		s.ring, s.head = ring, 0
	}
	// Indices wrap by a comparison, not %: a division costs more than the
	// rest of a push or a pop, and every copy and event makes one of each.
	i := s.head + s.n
	if i >= len(s.ring) {
		i -= len(s.ring)
	}
	o := &s.ring[i]
	*o = op{}
	return o
}

// popLocked resolves the oldest queued operation, performing (ok) or poisoning
// a copy, completing or failing an event. It reports whether that was an event.
func (s *Stream) popLocked(ok bool) bool {
	o := s.ring[s.head]
	s.ring[s.head] = op{} // drop the host slice reference
	if s.head++; s.head == len(s.ring) {
		s.head = 0
	}
	s.n--
	switch o.kind {
	case opCompute:
		return false
	case opWait:
		if _, bad := slices.BinarySearch(o.on.failed, o.seq); bad || !ok {
			s.taint = true
		}
		return false
	case opRecord:
		if !ok || s.taint {
			s.failed = append(s.failed, o.seq)
		}
		s.taint = false
		s.done = o.seq
		return true
	default:
		m, err := s.dev.locate(o.dev, len(o.host))
		if err != nil {
			// The allocation was freed while the copy was queued: a real
			// device would fault. The copy is lost; the event after it fails.
			s.taint = true
			return false
		}
		switch {
		case !ok && o.kind == opHtoD:
			fill(m, Poison)
		case !ok:
			fill(o.host, Poison)
		case o.kind == opHtoD:
			copy(m, o.host)
		default:
			copy(o.host, m)
		}
		return false
	}
}

func fill(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

func (s *Stream) loseLocked() {
	for s.n > 0 {
		o := s.ring[s.head]
		s.ring[s.head] = op{}
		s.head = (s.head + 1) % len(s.ring)
		s.n--
		if o.kind == opRecord {
			s.failed = append(s.failed, o.seq)
			s.done = o.seq
		}
	}
}

// advanceLocked completes, in order, the operations whose latency has elapsed.
func (s *Stream) advanceLocked() {
	if s.dev.clock == nil || s.n == 0 {
		return
	}
	var now time.Time // read once, and only for an operation with a ready time
	for s.n > 0 {
		if r := s.ring[s.head].ready; !r.IsZero() {
			if now.IsZero() {
				now = s.dev.clock.Now()
			}
			if r.After(now) {
				return
			}
		}
		if !s.resolvableLocked() {
			return
		}
		s.popLocked(true)
	}
}

// resolvableLocked reports whether the oldest queued operation may resolve:
// anything but a Wait whose event has not resolved yet.
func (s *Stream) resolvableLocked() bool {
	o := &s.ring[s.head]
	if o.kind != opWait {
		return true
	}
	o.on.advanceLocked()
	return o.seq <= o.on.done
}

// Query reports ev's status without blocking.
func (s *Stream) Query(ev gpu.Event) (gpu.Status, error) {
	d := s.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := gpu.CheckEvent(ev, s.id, s.issued); err != nil {
		return gpu.Pending, err
	}
	return s.statusLocked(ev.Seq()), nil
}

// statusLocked reports the status of the stream's event seq (one it issued).
func (s *Stream) statusLocked(seq uint64) gpu.Status {
	s.advanceLocked()
	if seq > s.done {
		return gpu.Pending
	}
	if _, bad := slices.BinarySearch(s.failed, seq); bad {
		return gpu.Failed
	}
	return gpu.Complete
}
