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

// Device is one simulated GPU.
type Device struct {
	id      int
	clock   Clock
	latency time.Duration

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
	return d, nil
}

var _ gpu.Device = (*Device)(nil)
var _ gpu.Health = (*Device)(nil)

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
	i, found := slices.BinarySearchFunc(d.allocs, p, func(s span, p gpu.DevicePtr) int { return cmp.Compare(s.start, p) })
	if !found {
		i--
	}
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
	for done < n && s.n > 0 {
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
	for _, s := range d.streams {
		for s.n > 0 {
			if s.popLocked(true) {
				done++
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
)

type op struct {
	kind  opKind
	dev   gpu.DevicePtr
	host  []byte
	seq   uint64 // for opRecord
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
	return s.enqueue(op{kind: opHtoD, dev: dst, host: src})
}

// CopyDtoH queues a copy of src into dst; dst is written when the copy completes.
func (s *Stream) CopyDtoH(dst []byte, src gpu.DevicePtr) error {
	return s.enqueue(op{kind: opDtoH, dev: src, host: dst})
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
	s.pushLocked(op{kind: opRecord, seq: s.issued})
	return gpu.MakeEvent(s.id, s.issued), nil
}

func (s *Stream) enqueue(o op) error {
	d := s.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lost {
		return d.lostErr("copy")
	}
	if _, err := d.locate(o.dev, len(o.host)); err != nil {
		return fmt.Errorf("%w: %w", gpu.ErrCopyRefused, err)
	}
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

func (s *Stream) pushLocked(o op) {
	if s.dev.latency > 0 {
		o.ready = s.dev.clock.Now().Add(s.dev.latency)
	}
	if s.n == len(s.ring) {
		size := max(2*len(s.ring), 16)
		ring := make([]op, size)
		for i := range s.n {
			ring[i] = s.ring[(s.head+i)%len(s.ring)]
		}
		s.ring, s.head = ring, 0
	}
	s.ring[(s.head+s.n)%len(s.ring)] = o
	s.n++
}

// popLocked resolves the oldest queued operation, performing (ok) or poisoning
// a copy, completing or failing an event. It reports whether that was an event.
func (s *Stream) popLocked(ok bool) bool {
	o := s.ring[s.head]
	s.ring[s.head] = op{} // drop the host slice reference
	s.head = (s.head + 1) % len(s.ring)
	s.n--
	switch o.kind {
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
	now := s.dev.clock.Now()
	for s.n > 0 && !s.ring[s.head].ready.After(now) {
		s.popLocked(true)
	}
}

// Query reports ev's status without blocking.
func (s *Stream) Query(ev gpu.Event) (gpu.Status, error) {
	d := s.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := gpu.CheckEvent(ev, s.id, s.issued); err != nil {
		return gpu.Pending, err
	}
	s.advanceLocked()
	if ev.Seq() > s.done {
		return gpu.Pending, nil
	}
	if _, bad := slices.BinarySearch(s.failed, ev.Seq()); bad {
		return gpu.Failed, nil
	}
	return gpu.Complete, nil
}
