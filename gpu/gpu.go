// Package gpu is where copy-completion evidence comes from: device memory,
// streams of asynchronous copies, and events recorded after them.
//
// The readiness engine never trusts that a copy has landed because it was
// queued, because time passed, or because a request ended. It trusts an
// [Event] that a [Stream] reports [Complete]. Events on one stream complete in
// queue order, which lets [Completions] poll only the oldest outstanding events:
// a progress round costs O(events that completed + 1), not O(events in flight).
//
// A never-recorded Event (the zero value) never reads as complete: the CUDA
// driver answers success for an event that was created but never recorded, and
// treating that answer as evidence would recycle memory a copy still touches.
//
// Implementations: package gpu/sim (a deterministic simulated device whose
// completion order tests control), gpu/cuda (the CUDA driver API loaded at run
// time) and gpu/nvml (device health from NVML).
package gpu

import (
	"errors"
	"fmt"
)

// DevicePtr is an address in device memory.
type DevicePtr uint64

// Status is what an event's query established.
type Status uint8

const (
	// Pending: the event has not completed yet; ask again later.
	Pending Status = iota
	// Complete: every operation queued on the stream before the event has
	// finished, and its memory effects are visible.
	Complete
	// Failed: the operations before the event did not provably finish (a
	// driver error, a lost device). The memory they touch holds undefined
	// contents and must be treated as still possibly accessed.
	Failed
)

// String names the status.
func (s Status) String() string {
	switch s {
	case Pending:
		return "pending"
	case Complete:
		return "complete"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Event marks a point in one stream's queue: everything queued on that stream
// before it. It is a small comparable value (the stream's process-unique id and
// a per-stream sequence number starting at 1), so it never aliases a recycled
// driver handle. The zero Event is a never-recorded event.
type Event struct {
	stream uint64
	seq    uint64
}

// MakeEvent builds the event with sequence number seq (>= 1) on the stream whose
// id is stream. It is for Stream implementations; callers get events from
// [Stream.Record].
func MakeEvent(stream, seq uint64) Event { return Event{stream: stream, seq: seq} }

// IsZero reports a never-recorded event. Query on it returns ErrNotRecorded.
func (e Event) IsZero() bool { return e.seq == 0 }

// StreamID returns the id of the stream the event was recorded on (0 for a
// never-recorded event).
func (e Event) StreamID() uint64 { return e.stream }

// Seq returns the event's sequence number on its stream: 1 for the first event
// recorded, then 2, and so on; 0 for a never-recorded event.
func (e Event) Seq() uint64 { return e.seq }

// String describes the event for messages.
func (e Event) String() string {
	if e.IsZero() {
		return "event(never recorded)"
	}
	return fmt.Sprintf("event(stream %d #%d)", e.stream, e.seq)
}

// Stream is an in-order queue of asynchronous copies on one device. A Stream is
// used by one goroutine at a time (the engine's owner goroutine); its
// implementations are nonetheless safe for concurrent use.
type Stream interface {
	// ID returns the stream's process-unique id, the one its events carry.
	ID() uint64
	// CopyHtoD queues a host-to-device copy and returns without waiting. src
	// must stay valid and unchanged until an event recorded after the copy
	// reads Complete.
	CopyHtoD(dst DevicePtr, src []byte) error
	// CopyDtoH queues a device-to-host copy and returns without waiting. dst
	// must not be read or reused until an event recorded after the copy reads
	// Complete.
	CopyDtoH(dst []byte, src DevicePtr) error
	// Record returns an event after everything queued so far.
	Record() (Event, error)
	// Query reports the event's status without blocking. A never-recorded
	// event is ErrNotRecorded, an event of another stream ErrForeignEvent, and
	// an event this stream never issued ErrUnknownEvent; none of these ever
	// reads as Complete.
	Query(Event) (Status, error)
	// Addressable reports, without queuing anything, whether n bytes at p are
	// device memory this stream can copy to and from; the error says why not.
	// The readiness engine asks it when a lease is lent, so that a request it
	// could never stage is refused at the door.
	Addressable(p DevicePtr, n int) error
}

// RecordQuerier is a [Stream] that records an event and queries it in one
// call: RecordQuery returns what Record would, and the event's status as a
// Query right after it would answer (Pending whenever the error is not nil).
// The readiness engine uses it for the event after a round's copies, which it
// queries at once (a copy may land as fast as it is asked): the simulated
// device then takes its lock once for both, not twice, once a round.
//
// A wrapper that embeds a stream implementing it and overrides Record or
// Query must override RecordQuery too (or hide it): the engine calls
// RecordQuery instead of the two whenever the stream has it.
type RecordQuerier interface {
	RecordQuery() (Event, Status, error)
}

// Waiter is a [Stream] that can be put behind an event of another stream of
// its device, as cuStreamWaitEvent does: what is queued on it after Wait
// starts only once that event resolved, and nothing on the other stream
// waits. It is how a layerwise publish's copies follow the manager's compute
// (SPEC §4 rule 16). Wait itself never blocks. An event the stream cannot
// wait for (never recorded, unknown, of another device) is an error, and
// nothing is queued.
type Waiter interface {
	Wait(Event) error
}

// Device is one GPU's memory and streams.
type Device interface {
	// ID returns the device ordinal, the one Health answers for.
	ID() int
	// NewStream creates a stream on the device.
	NewStream() (Stream, error)
	// Alloc reserves n > 0 bytes of device memory.
	Alloc(n int) (DevicePtr, error)
	// Free releases memory returned by Alloc.
	Free(DevicePtr) error
	// Write copies src to device memory synchronously (tests, simulated managers).
	Write(dst DevicePtr, src []byte) error
	// Read copies device memory into dst synchronously.
	Read(dst []byte, src DevicePtr) error
}

// Health answers, without blocking, whether a device has been lost. The
// engine's owner goroutine asks it; a lost device's in-flight copies can never
// be proven finished, so their memory is quarantined.
type Health interface {
	// Lost reports whether the device is known lost, and why.
	Lost(device int) (lost bool, reason string)
}

var (
	// ErrNotRecorded is returned by Query for the zero Event.
	ErrNotRecorded = errors.New("gpu: event was never recorded; a never-recorded event is never evidence of completion")
	// ErrForeignEvent is returned by Query for an event of another stream.
	ErrForeignEvent = errors.New("gpu: event belongs to another stream")
	// ErrUnknownEvent is returned by Query for an event its stream never issued.
	ErrUnknownEvent = errors.New("gpu: event was not issued by this stream")
	// ErrCopyRefused is wrapped by a copy the device refused before it was
	// queued (an address it cannot reach, host memory it cannot copy from
	// asynchronously, an invalid argument): nothing touches its memory, and
	// no event needs to prove anything about it. Any other copy error may
	// have queued work.
	ErrCopyRefused = errors.New("gpu: copy refused before it was queued")
	// ErrDeviceLost is wrapped by operations on a lost device.
	ErrDeviceLost = errors.New("gpu: device lost")
	// ErrNoDriver is wrapped by an open that found no usable GPU driver.
	ErrNoDriver = errors.New("gpu: no GPU driver")
)

// CheckEvent validates ev for Query on the stream whose id is stream and that
// has issued events 1..issued. Stream implementations share it so that every
// one refuses the same misuse the same way.
func CheckEvent(ev Event, stream, issued uint64) error {
	switch {
	case ev.IsZero():
		return ErrNotRecorded
	case ev.stream != stream:
		return fmt.Errorf("%w: %v queried on stream %d", ErrForeignEvent, ev, stream)
	case ev.seq > issued:
		return fmt.Errorf("%w: %v, but stream %d has recorded only %d events", ErrUnknownEvent, ev, stream, issued)
	}
	return nil
}
