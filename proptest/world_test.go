package proptest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/staging"
)

// The world the model suite and the bug zoo share: real staging memory, an
// adversarial backend that does everything the contract allows, a spy on the
// simulated device's stream, and a manual clock. The backend and the spy only
// observe and record; the checks compare bytes and recorded facts, never the
// engine's account of itself.

const (
	slotBytes = 16
	tpb       = 32 // tokens per block
)

// Byte patterns. Every write names its writer (which lease, which row), so a
// write that lands on somebody else's slot is visible in the bytes.
const (
	tagCanary  byte = 0xCA // a free slot
	tagStamp   byte = 0x57 // a lent slot, as the manager received it
	tagContent byte = 0xC0 // the content of a row's name
	tagLate    byte = 0xEE // a write by a transfer that has not ended
	tagDevice  byte = 0xDE // a fetch's device row before anything arrives
)

// pattern is a row of slotBytes bytes naming its writer. Every four bytes
// also name their place in the row, so that bytes moved from another part of
// the row (a layer's span copied from the wrong offset) show.
func pattern(tag byte, serial, row int) []byte {
	b := make([]byte, slotBytes)
	for i := range b {
		switch i % 4 {
		case 0:
			b[i] = tag
		case 1:
			b[i] = byte(serial)
		case 2:
			b[i] = byte(serial>>8) ^ byte(i/4)<<5
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
func rowID(g, b int) int { return g*64 + b }

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

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// quiesceMode is how the adversarial backend answers Quiesce for an attempt.
type quiesceMode uint8

const (
	quiesceTrue    quiesceMode = iota // access ends now: true
	quiesceFalse                      // cannot be established (yet)
	quiesceError                      // the call fails
	quiesceBlock                      // waits until the test opens the gate, or the context ends
	quiesceTimeout                    // waits until the context ends
	quiesceNotYet                     // false for the next notYet calls, then true
)

func (q quiesceMode) String() string {
	return [...]string{"true", "false", "error", "block", "timeout", "not-yet"}[q]
}

// attempt is one delivery the adversarial backend accepted. Every field is
// guarded by the backend's mutex: the engine's goroutines poll and quiesce it.
type attempt struct {
	serial  int
	publish bool
	// held is the extent exactly as the engine handed it: the backend keeps it
	// and resolves its units lazily, at every write, as a real backend may.
	held  contract.CacheExtent
	units []contract.Unit // a copy made at submission: held must never change (rule 6)
	asked contract.NameSet

	outcome contract.Outcome // what Poll answers now (nil: pending)
	first   contract.Outcome // the first answer Poll gave
	extra   bool             // the first answer served a name not asked for
	changes int              // answers Poll gave that differ from the first
	polled  int

	mode     quiesceMode
	notYet   int
	gate     chan struct{}
	ended    bool // Quiesce answered true: it never touches memory again
	torn     bool // it wrote torn bytes into served rows after its outcome; it rewrites them before ending
	unproven int  // Quiesce calls that proved nothing
	calls    int
	// changedBeforeEnd is set when Poll's answer differed from the first at the
	// moment Quiesce answered true: the engine must catch it then.
	changedBeforeEnd bool
	late             int // late writes made
	// Cancellation requests (+cancel-request-v1): how the attempt answers
	// them, how many it got, and whether one came after its proof.
	cancelMode  cancelMode
	cancels     int
	cancelAfter bool // a request came after Quiesce answered true
}

// cancelMode is how an attempt answers RequestCancel.
type cancelMode uint8

const (
	cancelRequested cancelMode = iota // a best-effort request was made
	cancelUnsupported
	cancelFails  // RequestCancel returns an error
	cancelPanics // RequestCancel panics
)

// adversary is a backend that does everything the contract allows: it keeps
// the extent it was handed and reads it late, writes until Quiesce says true,
// blocks, times out, answers false and then true, and changes its answer
// within its kind when the test says so. It never breaks the contract itself,
// except when a test asks it to serve names it was not asked for.
type adversary struct {
	// mu guards everything below and the staging bytes the backend writes;
	// a pointer, so that the tier doubles of a tiered world share one lock
	// (tiers_world_test.go) and the model's reads exclude all of them.
	mu      *sync.Mutex
	mem     *staging.Memory
	reject  map[int]bool // serials whose submission is rejected
	escape  map[int]bool // serials whose submission fails without an attempt
	cancel  map[int]cancelMode
	quiesce map[int]quiesceMode // each serial's first Quiesce mode (the zero mode answers true)
	instant map[int]bool        // serials answered before the submission returns (a local hit)
	byID    map[int]*attempt
	device  func(serial, g, b int) []byte // what a publish must find staged
	// staged, if set, names the bytes of a row of group g that a publish
	// of the lease with serial copies from the device (nil: the whole row):
	// a layerwise publish copies its layers' spans (SPEC §4 rule 16).
	staged   func(serial, g int) []staging.Span
	faults   []string                 // contract facts the engine broke, seen from the backend
	store    map[contract.Name][]byte // what publications stored
	quiesces int
	// retired: the case is over and its staging may be freed (retire); a
	// call the engine abandoned (a Quiesce past its context, say) may still
	// return on an engine goroutine, and must not touch freed memory.
	retired bool
}

// retire ends the backend's access to staging for good, once the case is
// over: after it returns, none of its calls reads or writes a row, so the
// case may free its staging (the CUDA model's pinned slabs, which the next
// case's allocation may reuse at once).
func (b *adversary) retire() {
	b.mu.Lock()
	b.retired = true
	b.mu.Unlock()
}

// rowLocked is staging row (g, s), unless the backend is retired.
func (b *adversary) rowLocked(g, s int) ([]byte, bool) {
	if b.retired {
		return nil, false
	}
	return b.mem.Row(g, s)
}

func newAdversary(m *staging.Memory) *adversary {
	return &adversary{mu: &sync.Mutex{}, mem: m, reject: map[int]bool{}, escape: map[int]bool{}, instant: map[int]bool{}, cancel: map[int]cancelMode{}, quiesce: map[int]quiesceMode{},
		byID: map[int]*attempt{}, store: map[contract.Name][]byte{}}
}

var (
	_ contract.Fetcher   = (*adversary)(nil)
	_ contract.Publisher = (*adversary)(nil)
)

func (b *adversary) fault(format string, args ...any) {
	b.faults = append(b.faults, fmt.Sprintf(format, args...))
}

func (b *adversary) submit(ext contract.CacheExtent, publish bool) (contract.Attempt, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ext.Len() == 0 {
		return nil, fmt.Errorf("adversary: empty extent: %w", contract.ErrSubmissionRejected)
	}
	if b.retired {
		return nil, fmt.Errorf("adversary: the case is over: %w", contract.ErrSubmissionRejected)
	}
	serial, _, _, ok := parseName(ext.Unit(0).Name)
	if !ok {
		return nil, fmt.Errorf("adversary: unknown name: %w", contract.ErrSubmissionRejected)
	}
	if b.reject[serial] {
		return nil, fmt.Errorf("adversary: lease %d: %w", serial, contract.ErrSubmissionRejected)
	}
	if _, dup := b.byID[serial]; dup {
		b.fault("lease %d was submitted twice", serial)
	}
	a := &attempt{serial: serial, publish: publish, held: ext, units: ext.Units(), cancelMode: b.cancel[serial], mode: b.quiesce[serial]}
	if a.mode == quiesceBlock {
		a.gate = make(chan struct{})
	}
	names := make([]contract.Name, len(a.units))
	for i, u := range a.units {
		names[i] = u.Name
		if publish && b.device != nil {
			_, g, blk, _ := parseName(u.Name)
			row, _ := b.rowLocked(u.LocalGroup, u.Local)
			want := b.device(serial, g, blk)
			var spans []staging.Span
			if b.staged != nil {
				spans = b.staged(serial, g)
			}
			if spans == nil {
				spans = []staging.Span{{Offset: 0, Size: len(row)}}
			}
			for _, sp := range spans {
				if string(row[sp.Offset:sp.End()]) != string(want[sp.Offset:sp.End()]) {
					b.fault("lease %d published row (%d,%d) before its device->staging copy of bytes %d..%d landed: staging %x, device %x", serial, g, blk, sp.Offset, sp.End(), row, want)
					break
				}
			}
		}
	}
	a.asked = contract.NewNameSet(names...)
	b.byID[serial] = a
	if b.instant[serial] && !b.escape[serial] {
		// Served from a local cache: written, and answered, before the call
		// returns; the access itself still ends only when Quiesce says so.
		a.outcome = contract.Delivered{Served: a.asked}
		b.writeServedLocked(a)
	}
	if b.escape[serial] {
		// Something escaped — this attempt may still write — but the caller
		// gets no attempt to quiesce.
		return nil, fmt.Errorf("adversary: lease %d: the transport failed after posting the transfer", serial)
	}
	return advAttempt{b: b, a: a}, nil
}

func (b *adversary) Fetch(ext contract.CacheExtent, _ contract.Route) (contract.Attempt, error) {
	return b.submit(ext, false)
}

func (b *adversary) Publish(ext contract.CacheExtent) (contract.Attempt, error) {
	return b.submit(ext, true)
}

// advAttempt is what the engine holds: a handle through which Poll takes the
// backend's lock.
type advAttempt struct {
	b *adversary
	a *attempt
}

func (h advAttempt) Poll() contract.Outcome {
	h.b.mu.Lock()
	defer h.b.mu.Unlock()
	a := h.a
	a.polled++
	if a.outcome == nil {
		return nil
	}
	if a.first == nil {
		a.first = a.outcome
		if d, ok := a.outcome.(contract.Delivered); ok {
			for n := range d.Served.All() {
				if !a.asked.Has(n) {
					a.extra = true
				}
			}
		}
	} else if !sameOutcome(a.first, a.outcome) {
		a.changes++
	}
	return a.outcome
}

// RequestCancel records the request and answers as the attempt's mode says:
// it never changes the outcome or ends access (the contract's promise), so
// the engine must not take it for either.
func (h advAttempt) RequestCancel() (contract.CancelDisposition, error) {
	h.b.mu.Lock()
	a := h.a
	a.cancels++
	if a.ended {
		a.cancelAfter = true
	}
	mode := a.cancelMode
	h.b.mu.Unlock()
	switch mode {
	case cancelUnsupported:
		return contract.CancelUnsupported, nil
	case cancelFails:
		return 0, errors.New("adversary: cancel refused by the transport")
	case cancelPanics:
		panic("adversary: RequestCancel panicked")
	}
	return contract.CancelRequested, nil
}

var _ contract.Cancellable = advAttempt{}

// Quiesce answers from each attempt's mode: true for the whole list only if
// every attempt's access ends now.
func (b *adversary) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	b.mu.Lock()
	b.quiesces++
	var wait []chan struct{}
	blocked := false
	for _, x := range list {
		h, ok := x.(advAttempt)
		if !ok {
			b.mu.Unlock()
			return false, fmt.Errorf("adversary: Quiesce: attempt %T was not returned by this backend", x)
		}
		a := h.a
		a.calls++
		switch a.mode {
		case quiesceBlock:
			if a.gate != nil {
				wait = append(wait, a.gate)
			}
		case quiesceTimeout:
			blocked = true
		}
	}
	b.mu.Unlock()
	if blocked {
		<-ctx.Done()
		b.unproven(list)
		return false, ctx.Err()
	}
	for _, g := range wait {
		select {
		case <-g:
		case <-ctx.Done():
			b.unproven(list)
			return false, ctx.Err()
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := ctx.Err(); err != nil {
		b.unprovenLocked(list)
		return false, err
	}
	return b.answerLocked(list)
}

// answerLocked answers for attempts none of which waits: true for the whole
// list only if every attempt's access ends now, with its effects.
func (b *adversary) answerLocked(list []contract.Attempt) (bool, error) {
	ok := true
	var err error
	for _, x := range list {
		a := x.(advAttempt).a
		switch a.mode {
		case quiesceError:
			err = errors.New("adversary: quiesce error")
		case quiesceFalse:
			ok = false
		case quiesceNotYet:
			if a.notYet > 0 {
				a.notYet--
				ok = false
			}
		}
	}
	if err != nil || !ok {
		b.unprovenLocked(list)
		return false, err
	}
	b.endLocked(list)
	return true, nil
}

// endLocked declares the listed attempts' access over, as a true answer does.
func (b *adversary) endLocked(list []contract.Attempt) {
	for _, x := range list {
		a := x.(advAttempt).a
		if a.ended {
			continue
		}
		if a.torn {
			// The lagging write finishes: the served rows hold their content
			// before access is declared over.
			b.writeServedLocked(a)
			a.torn = false
		}
		a.ended = true
		if a.first != nil && !sameOutcome(a.first, a.outcome) {
			a.changedBeforeEnd = true
		}
	}
}

// probing is the adversary with a non-blocking probe beside its Quiesce
// (contract.QuiesceProber): an attempt whose Quiesce would block or wait out
// its context answers unknown, and goes to the runner's workers; any other
// answers now, as its Quiesce would, with the same effects.
type probing struct{ *adversary }

var _ contract.QuiesceProber = probing{}

func (p probing) TryQuiesce(list []contract.Attempt) (contract.Access, error) {
	b := p.adversary
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, x := range list {
		h, ok := x.(advAttempt)
		if !ok {
			return contract.AccessUnknown, fmt.Errorf("adversary: TryQuiesce: attempt %T was not returned by this backend", x)
		}
		if m := h.a.mode; m == quiesceBlock && h.a.gate != nil || m == quiesceTimeout {
			return contract.AccessUnknown, nil
		}
	}
	b.quiesces++
	for _, x := range list {
		x.(advAttempt).a.calls++
	}
	if ok, err := b.answerLocked(list); !ok {
		return contract.AccessUnproven, err
	}
	return contract.AccessEnded, nil
}

func (b *adversary) unproven(list []contract.Attempt) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.unprovenLocked(list)
}

func (b *adversary) unprovenLocked(list []contract.Attempt) {
	for _, x := range list {
		x.(advAttempt).a.unproven++
	}
}

func (b *adversary) Settle(context.Context, []contract.Attempt) error { return nil }

func (b *adversary) Probe(context.Context, []byte, []contract.Name) (contract.NameSet, bool, error) {
	return contract.NameSet{}, false, nil
}

func (b *adversary) OpenRoute(map[string]string) (contract.Route, error) {
	return nil, fmt.Errorf("adversary: %w", errors.ErrUnsupported)
}

// writeUnit writes bytes into the destination of unit i as the backend now
// resolves it — from the extent it holds, lazily.
func (b *adversary) writeUnitLocked(a *attempt, i int, p []byte) {
	u := a.held.Unit(i)
	if row, ok := b.rowLocked(u.LocalGroup, u.Local); ok {
		copy(row, p)
	}
}

// writeServedLocked writes the content of every row the current outcome
// serves (a fetch), or stores what a publication reads now.
func (b *adversary) writeServedLocked(a *attempt) {
	d, ok := a.outcome.(contract.Delivered)
	if !ok {
		return
	}
	for i := range a.held.Len() {
		u := a.held.Unit(i)
		if !d.Served.Has(u.Name) {
			continue
		}
		if a.publish {
			if row, ok := b.rowLocked(u.LocalGroup, u.Local); ok {
				b.store[u.Name] = append([]byte(nil), row...)
			}
			continue
		}
		_, g, blk, _ := parseName(u.Name)
		b.writeUnitLocked(a, i, pattern(tagContent, a.serial, rowID(g, blk)))
	}
}

// deliver writes (or reads) the served rows and sets the outcome.
func (b *adversary) deliver(a *attempt, served []contract.Name) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a.outcome = contract.Delivered{Served: contract.NewNameSet(served...)}
	b.writeServedLocked(a)
}

// set sets the outcome without writing.
func (b *adversary) set(a *attempt, o contract.Outcome) {
	b.mu.Lock()
	a.outcome = o
	b.mu.Unlock()
}

// lateWrite is a transfer that goes on touching memory: legal until Quiesce
// answers true, and exactly what a slot recycled too early is hit by. After a
// Delivered outcome it tears the served rows (rewritten before it ends).
func (b *adversary) lateWrite(a *attempt) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if a.ended {
		return
	}
	a.late++
	if a.publish {
		// A publication still reading its sources stores what they hold now.
		for i := range a.held.Len() {
			u := a.held.Unit(i)
			if row, ok := b.rowLocked(u.LocalGroup, u.Local); ok {
				b.store[u.Name] = append([]byte(nil), row...)
			}
		}
		return
	}
	if _, ok := a.outcome.(contract.Delivered); ok {
		a.torn = true
	}
	for i := range a.held.Len() {
		b.writeUnitLocked(a, i, pattern(tagLate, a.serial, 0xFF))
	}
}

// heldChanged reports an attempt whose held extent no longer says what it
// said at submission: the engine rebuilt what it had handed out.
func (b *adversary) heldChanged() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, a := range b.byID {
		if a.ended {
			continue // the engine may reuse it once access is proven over
		}
		for i, u := range a.units {
			if a.held.Len() != len(a.units) || a.held.Unit(i) != u {
				out = append(out, fmt.Sprintf("lease %d: the extent its backend holds was rebuilt in place: unit %d was %+v", a.serial, i, u))
				break
			}
		}
	}
	return out
}

// spyCopy is one copy queued on the stream, and the staging slot it touches.
type spyCopy struct {
	slot slotID
	// dev is the device row the copy touches (unique per lease row, so it
	// names the lease), found by range: a layer's copy covers n bytes at off
	// inside it (SPEC §4 rule 16).
	dev      gpu.DevicePtr
	off, n   int
	toDevice bool
	event    int // index into events once recorded; -1 before
}

// span is the part of its device row the copy covers.
func (c spyCopy) span() staging.Span { return staging.Span{Offset: c.off, Size: c.n} }

type spyEvent struct {
	copies []int // indexes into copies
	status gpu.Status
	at     int // how many copies had been queued when it was recorded
}

// slotID names one staging slot.
type slotID struct{ g, s int }

// spy wraps the simulated stream: it records which staging slots each queued
// copy touches and which events complete or fail, so the model knows which
// local copies are in flight without asking the engine; onCopy lets the model
// judge each staging→device copy at the moment it is queued.
type spy struct {
	gpu.Stream
	dev    modelDevice
	mem    *staging.Memory
	bases  []uintptr
	copies []spyCopy
	byRow  map[gpu.DevicePtr][]int // indexes into copies, by device row
	events []spyEvent
	next   int // the oldest unresolved event
	onCopy func(c spyCopy)
	// rowOf names the device row an address lies in, and the address's
	// offset in it; without it every copy is a whole row at its start.
	rowOf func(p gpu.DevicePtr) (row gpu.DevicePtr, off int)
}

func newSpy(dev modelDevice, inner gpu.Stream, mem *staging.Memory) *spy {
	sp := &spy{Stream: inner, dev: dev, mem: mem, byRow: map[gpu.DevicePtr][]int{}}
	for g := range mem.NumGroups() {
		row, _ := mem.Row(g, 0)
		sp.bases = append(sp.bases, uintptr(unsafe.Pointer(unsafe.SliceData(row))))
	}
	return sp
}

func (sp *spy) slotOf(host []byte) slotID {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(host)))
	for g, base := range sp.bases {
		grp := sp.mem.Group(g)
		n := uintptr(grp.Slots * grp.SlotBytes)
		if p >= base && p < base+n {
			return slotID{g, int(p-base) / grp.SlotBytes}
		}
	}
	return slotID{-1, -1}
}

func (sp *spy) CopyHtoD(dst gpu.DevicePtr, src []byte) error {
	if err := sp.Stream.CopyHtoD(dst, src); err != nil {
		return err
	}
	sp.add(sp.copyAt(dst, src, true))
	return nil
}

func (sp *spy) CopyDtoH(dst []byte, src gpu.DevicePtr) error {
	if err := sp.Stream.CopyDtoH(dst, src); err != nil {
		return err
	}
	sp.add(sp.copyAt(src, dst, false))
	return nil
}

// copyAt describes a copy of host's bytes to or from device address p.
func (sp *spy) copyAt(p gpu.DevicePtr, host []byte, toDevice bool) spyCopy {
	row, off := p, 0
	if sp.rowOf != nil {
		row, off = sp.rowOf(p)
	}
	return spyCopy{slot: sp.slotOf(host), dev: row, off: off, n: len(host), toDevice: toDevice, event: -1}
}

func (sp *spy) add(c spyCopy) {
	if sp.onCopy != nil {
		sp.onCopy(c)
	}
	sp.byRow[c.dev] = append(sp.byRow[c.dev], len(sp.copies))
	sp.copies = append(sp.copies, c)
}

func (sp *spy) Record() (gpu.Event, error) {
	ev, err := sp.Stream.Record()
	if err != nil {
		return ev, err
	}
	e := spyEvent{status: gpu.Pending, at: len(sp.copies)}
	for i := range sp.copies {
		if sp.copies[i].event == -1 {
			sp.copies[i].event = len(sp.events)
			e.copies = append(e.copies, i)
		}
	}
	sp.events = append(sp.events, e)
	if os.Getenv("MODEL_DEBUG") != "" {
		fmt.Printf("  spy: recorded event %d after %d copies\n", len(sp.events)-1, len(sp.copies))
	}
	return ev, nil
}

// pending reports whether an event is waiting to resolve.
func (sp *spy) pending() bool { return sp.next < len(sp.events) }

// resolve completes (ok) or fails the oldest pending event on the device and
// returns its copies.
func (sp *spy) resolve(ok bool) []spyCopy {
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
	if os.Getenv("MODEL_DEBUG") != "" {
		fmt.Printf("  spy: resolved event %d (ok %v)\n", sp.next, ok)
	}
	e := &sp.events[sp.next]
	sp.next++
	e.status = gpu.Failed
	if ok {
		e.status = gpu.Complete
	}
	var out []spyCopy
	for _, c := range e.copies {
		out = append(out, sp.copies[c])
	}
	return out
}

// unresolved returns the copies whose event has not resolved (or was never
// recorded).
func (sp *spy) unresolved() []spyCopy {
	var out []spyCopy
	for _, c := range sp.copies {
		if c.event == -1 || sp.events[c.event].status == gpu.Pending {
			out = append(out, c)
		}
	}
	return out
}

// lose marks every pending event failed, as a lost device does, and returns
// the copies that never landed.
func (sp *spy) lose() []spyCopy {
	out := sp.unresolved()
	for sp.pending() {
		sp.events[sp.next].status = gpu.Failed
		sp.next++
	}
	return out
}

// inFlight reports whether a queued copy to or from device row p has not
// completed.
func (sp *spy) inFlight(p gpu.DevicePtr) bool {
	for _, i := range sp.byRow[p] {
		if c := sp.copies[i]; c.event == -1 || sp.events[c.event].status == gpu.Pending {
			return true
		}
	}
	return false
}

// landedCopy reports whether copy i completed on the device.
func (sp *spy) landedCopy(i int) bool {
	c := sp.copies[i]
	return c.event >= 0 && sp.events[c.event].status == gpu.Complete
}

// covered reports whether the staging→device copies into row p that
// completed cover every byte of spans (offsets in the row).
func (sp *spy) covered(p gpu.DevicePtr, spans []staging.Span) bool {
	for _, want := range spans {
		for at := want.Offset; at < want.End(); at++ {
			hit := false
			for _, i := range sp.byRow[p] {
				c := sp.copies[i]
				if c.toDevice && at >= c.off && at < c.off+c.n && sp.landedCopy(i) {
					hit = true
					break
				}
			}
			if !hit {
				return false
			}
		}
	}
	return true
}

// issued reports whether a staging→device copy into row p was queued.
func (sp *spy) issued(p gpu.DevicePtr) bool {
	for _, i := range sp.byRow[p] {
		if sp.copies[i].toDevice {
			return true
		}
	}
	return false
}

// sameOutcome reports whether two outcomes are the same answer (the model
// suite compares answers with it).
func sameOutcome(x, y contract.Outcome) bool {
	if a, ok := x.(contract.Delivered); ok {
		b, ok := y.(contract.Delivered)
		return ok && a.Served.Equal(b.Served)
	}
	return x == y
}
