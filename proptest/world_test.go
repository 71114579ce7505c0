package proptest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
	"unsafe"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/readiness"
)

// The world the model suite and the bug zoo share: real staging memory, a
// scripted synchronous backend whose every answer the test decides, a spy on
// the simulated device's stream, and a manual clock. The backend and the spy
// only observe and record; the checks compare bytes and recorded facts, never
// the engine's own account of itself.

const (
	slotBytes = 16
	tpb       = 32 // tokens per block
)

// Byte patterns. Every write identifies its writer (which lease, which row),
// so a write that lands on somebody else's slot is visible in the bytes.
const (
	tagCanary  byte = 0xCA // a free slot
	tagStamp   byte = 0x57 // a lent slot, as the manager received it
	tagContent byte = 0xC0 // the content of a row's name
	tagLate    byte = 0xEE // a write by a transfer that has not ended
)

// pattern is a row of slotBytes bytes naming its writer.
func pattern(tag byte, serial, row int) []byte {
	b := make([]byte, slotBytes)
	for i := range b {
		switch i % 4 {
		case 0:
			b[i] = tag
		case 1:
			b[i] = byte(serial)
		case 2:
			b[i] = byte(serial >> 8)
		default:
			b[i] = byte(row)
		}
	}
	return b
}

func fill(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

func filled(b []byte, v byte) bool {
	for _, x := range b {
		if x != v {
			return false
		}
	}
	return true
}

// rowID is a row of a lease: its layer group and block.
func rowID(g, b int) int { return g*16 + b }

// nameOf is the content name of block b of group g of the lease with serial.
func nameOf(serial, g, b int) contract.Name {
	var n contract.Name
	n[0], n[1], n[2], n[3], n[4] = 0x4B, byte(serial), byte(serial>>8), byte(g), byte(b)
	return n
}

// parseName inverts nameOf.
func parseName(n contract.Name) (serial, g, b int, ok bool) {
	if n[0] != 0x4B {
		return 0, 0, 0, false
	}
	return int(n[1]) | int(n[2])<<8, int(n[3]), int(n[4]), true
}

// newClock returns the suite's manual clock, at an ordinary instant.
func newClock() *sim.ManualClock { return sim.NewManualClock(time.Unix(1_800_000_000, 0)) }

// quiesceMode is what the scripted backend answers when asked whether an
// attempt's access ended.
type quiesceMode uint8

const (
	quiesceTrue  quiesceMode = iota // access ends now: the answer is true
	quiesceFalse                    // cannot be established
	quiesceError                    // the call fails
)

// attempt is one scripted delivery.
type attempt struct {
	serial  int
	publish bool
	units   []contract.Unit
	asked   contract.NameSet

	outcome  contract.Outcome // what Poll answers now (nil: pending)
	answers  []contract.Outcome
	first    contract.Outcome // the first answer Poll gave
	changed  int              // answers Poll gave that differ from the first
	extra    bool             // the first answer served a name not asked for
	mode     quiesceMode
	ended    bool // Quiesce answered true: it never touches memory again
	endedAt  int
	unproven bool // Quiesce answered false or an error for this attempt
	unprovAt int
	dirty    bool // it wrote into its destinations before any outcome
	late     int  // late writes made

	round     *int // the engine round in progress
	firstAt   int  // the round Poll first answered in
	changedAt int  // the round before which the test changed the answer; -1: never
}

// Poll answers the scripted outcome and records what it answered.
func (a *attempt) Poll() contract.Outcome {
	if a.outcome == nil {
		return nil
	}
	if a.first == nil {
		a.first, a.firstAt = a.outcome, *a.round
		if d, ok := a.outcome.(contract.Delivered); ok {
			for n := range d.Served.All() {
				if !a.asked.Has(n) {
					a.extra = true
				}
			}
		}
	} else if !sameOutcome(a.first, a.outcome) {
		a.changed++
	}
	a.answers = append(a.answers, a.outcome)
	return a.outcome
}

// scripted is a synchronous backend: it answers at once, exactly as the test
// scripted, and writes staging memory only when the test says so.
type scripted struct {
	mem    *readiness.Memory
	round  *int                              // the engine round in progress, for recording when answers were given
	reject map[int]bool                      // serials whose submission is rejected
	byID   map[int]*attempt                  // serial -> attempt
	device func(serial int, g, b int) []byte // what a publish must find staged
	faults []string                          // contract facts the engine broke, seen from the backend
	store  map[contract.Name][]byte          // what publications stored
}

func newScripted(mem *readiness.Memory, round *int) *scripted {
	return &scripted{mem: mem, round: round, reject: map[int]bool{}, byID: map[int]*attempt{}, store: map[contract.Name][]byte{}}
}

var (
	_ contract.Fetcher   = (*scripted)(nil)
	_ contract.Publisher = (*scripted)(nil)
)

func (s *scripted) submit(ext contract.CacheExtent, publish bool) (contract.Attempt, error) {
	if ext.Len() == 0 {
		return nil, fmt.Errorf("scripted: empty extent: %w", contract.ErrSubmissionRejected)
	}
	serial, _, _, ok := parseName(ext.Unit(0).Name)
	if !ok {
		return nil, fmt.Errorf("scripted: unknown name: %w", contract.ErrSubmissionRejected)
	}
	if s.reject[serial] {
		return nil, fmt.Errorf("scripted: lease %d: %w", serial, contract.ErrSubmissionRejected)
	}
	a := &attempt{serial: serial, publish: publish, units: ext.Units(), round: s.round, changedAt: -1}
	names := make([]contract.Name, len(a.units))
	for i, u := range a.units {
		names[i] = u.Name
		if publish && s.device != nil {
			_, g, b, _ := parseName(u.Name)
			row, _ := s.mem.Row(u.LocalGroup, u.Local)
			if want := s.device(serial, g, b); string(row) != string(want) {
				s.faults = append(s.faults, fmt.Sprintf("lease %d published row (%d,%d) before its device->staging copy landed: staging %x, device %x", serial, g, b, row, want))
			}
		}
	}
	a.asked = contract.NewNameSet(names...)
	s.byID[serial] = a
	return a, nil
}

func (s *scripted) Fetch(ext contract.CacheExtent, route contract.Route) (contract.Attempt, error) {
	return s.submit(ext, false)
}

func (s *scripted) Publish(ext contract.CacheExtent) (contract.Attempt, error) {
	return s.submit(ext, true)
}

// Quiesce answers from each attempt's scripted mode: true for the whole list
// only if every attempt's access ends now.
func (s *scripted) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	var err error
	ok := true
	for _, x := range list {
		a := x.(*attempt)
		switch a.mode {
		case quiesceError:
			err = errors.New("scripted quiesce error")
			a.unproven, a.unprovAt = true, *s.round
		case quiesceFalse:
			ok = false
			a.unproven, a.unprovAt = true, *s.round
		}
	}
	if err != nil {
		return false, err
	}
	if !ok {
		return false, nil
	}
	for _, x := range list {
		a := x.(*attempt)
		if !a.ended {
			a.ended, a.endedAt = true, *s.round
		}
	}
	return true, nil
}

func (s *scripted) Settle(ctx context.Context, list []contract.Attempt) error { return nil }

func (s *scripted) Probe(ctx context.Context, name []byte, units []contract.Name) (contract.NameSet, bool, error) {
	return contract.NameSet{}, false, nil
}

func (s *scripted) OpenRoute(map[string]string) (contract.Route, error) {
	return nil, fmt.Errorf("scripted: %w", errors.ErrUnsupported)
}

// write puts bytes into the attempt's destination for unit u.
func (s *scripted) write(u contract.Unit, b []byte) {
	row, ok := s.mem.Row(u.LocalGroup, u.Local)
	if ok {
		copy(row, b)
	}
}

// deliver writes the served rows' content and sets the outcome.
func (s *scripted) deliver(a *attempt, served []contract.Name) {
	set := contract.NewNameSet(served...)
	for _, u := range a.units {
		switch {
		case !set.Has(u.Name):
		case a.publish:
			s.read(u)
		default:
			_, g, b, _ := parseName(u.Name)
			s.write(u, pattern(tagContent, a.serial, rowID(g, b)))
		}
	}
	a.outcome = contract.Delivered{Served: set}
}

// read stores what the publication reads from unit u's source slot now.
func (s *scripted) read(u contract.Unit) {
	if row, ok := s.mem.Row(u.LocalGroup, u.Local); ok {
		s.store[u.Name] = append([]byte(nil), row...)
	}
}

// lateRead is a publication still reading its sources after its outcome:
// what it stores is what the slots hold now.
func (s *scripted) lateRead(a *attempt) {
	for _, u := range a.units {
		s.read(u)
	}
}

// lateWrite is a transfer that goes on touching memory: legal until Quiesce
// answers true, and exactly what a slot recycled too early gets hit by.
func (s *scripted) lateWrite(a *attempt) {
	for _, u := range a.units {
		s.write(u, pattern(tagLate, a.serial, 0xFF))
	}
	a.late++
	if a.outcome == nil {
		a.dirty = true
	}
}

// spyCopy is one copy queued on the stream, and the staging slot it touches.
type spyCopy struct {
	slot  slotID
	dev   gpu.DevicePtr // the device row: unique per lease row, so it names the lease
	event int           // index into events once recorded; -1 before
}

type spyEvent struct {
	copies []int // indexes into copies
	status gpu.Status
}

// slotID names one staging slot.
type slotID struct{ g, s int }

// spy wraps the simulated stream: it records which staging slots each queued
// copy touches and which events complete or fail, so the model knows which
// local copies are in flight without asking the engine.
type spy struct {
	gpu.Stream
	dev    *sim.Device
	mem    *readiness.Memory
	bases  []uintptr
	copies []spyCopy
	events []spyEvent
	next   int // the oldest unresolved event
}

func newSpy(dev *sim.Device, inner gpu.Stream, mem *readiness.Memory) *spy {
	sp := &spy{Stream: inner, dev: dev, mem: mem}
	for g := range mem.Groups() {
		row, _ := mem.Row(g, 0)
		sp.bases = append(sp.bases, uintptr(unsafe.Pointer(unsafe.SliceData(row))))
	}
	return sp
}

func (sp *spy) slotOf(host []byte) slotID {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(host)))
	for g, base := range sp.bases {
		n := uintptr(sp.mem.Groups()[g].Slots * slotBytes)
		if p >= base && p < base+n {
			return slotID{g, int(p-base) / slotBytes}
		}
	}
	return slotID{-1, -1}
}

func (sp *spy) CopyHtoD(dst gpu.DevicePtr, src []byte) error {
	if err := sp.Stream.CopyHtoD(dst, src); err != nil {
		return err
	}
	sp.copies = append(sp.copies, spyCopy{slot: sp.slotOf(src), dev: dst, event: -1})
	return nil
}

func (sp *spy) CopyDtoH(dst []byte, src gpu.DevicePtr) error {
	if err := sp.Stream.CopyDtoH(dst, src); err != nil {
		return err
	}
	sp.copies = append(sp.copies, spyCopy{slot: sp.slotOf(dst), dev: src, event: -1})
	return nil
}

func (sp *spy) Record() (gpu.Event, error) {
	ev, err := sp.Stream.Record()
	if err != nil {
		return ev, err
	}
	e := spyEvent{status: gpu.Pending}
	for i := range sp.copies {
		if sp.copies[i].event == -1 {
			sp.copies[i].event = len(sp.events)
			e.copies = append(e.copies, i)
		}
	}
	sp.events = append(sp.events, e)
	return ev, nil
}

// pending reports whether an event is waiting to resolve.
func (sp *spy) pending() bool { return sp.next < len(sp.events) }

// resolve completes (ok) or fails the oldest pending event on the device and
// returns the device rows its copies touch.
func (sp *spy) resolve(ok bool) []gpu.DevicePtr {
	if !sp.pending() {
		return nil
	}
	var err error
	if ok {
		_, err = sp.dev.CompleteNext(sp.Stream, 1)
	} else {
		_, err = sp.dev.FailNext(sp.Stream, 1)
	}
	if err != nil {
		panic(err)
	}
	e := &sp.events[sp.next]
	sp.next++
	e.status = gpu.Failed
	if ok {
		e.status = gpu.Complete
	}
	var rows []gpu.DevicePtr
	for _, c := range e.copies {
		rows = append(rows, sp.copies[c].dev)
	}
	return rows
}

// lose marks every pending event failed, as a lost device does, and returns
// the device rows their copies touch.
func (sp *spy) lose() []gpu.DevicePtr {
	var rows []gpu.DevicePtr
	for sp.pending() {
		e := &sp.events[sp.next]
		sp.next++
		e.status = gpu.Failed
		for _, c := range e.copies {
			rows = append(rows, sp.copies[c].dev)
		}
	}
	for _, c := range sp.copies {
		if c.event == -1 {
			rows = append(rows, c.dev)
		}
	}
	return rows
}

// inFlight reports whether a queued copy to or from device row p has not
// completed.
func (sp *spy) inFlight(p gpu.DevicePtr) bool {
	for _, c := range sp.copies {
		if c.dev != p {
			continue
		}
		if c.event == -1 || sp.events[c.event].status == gpu.Pending {
			return true
		}
	}
	return false
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
