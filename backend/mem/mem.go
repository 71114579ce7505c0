// Package mem is an in-process, content-addressed backend: the default backend
// of the demo and of the engine's tests. It implements contract.Fetcher,
// contract.Publisher and contract.PoolRegistrar over a map from (extent name,
// unit name) to row bytes.
//
// It behaves like a real transfer library where it matters: a fetch writes
// staging rows from its own goroutine, after a configurable delay, and its
// outcome is observable through the Attempt before Quiesce can prove that the
// goroutine has stopped touching memory. It keeps the extent it was handed and
// resolves the units lazily, on that goroutine, after the delay and the gate:
// a backend may read an extent long after the submission, so the caller must
// not rebuild it before Quiesce answered true.
//
// Faults a correct backend may exhibit (misses, partial delivery, failures,
// cancels, rejected submissions, quiescence that is unprovable, slow or not
// yet established, access that goes on after the outcome) are injected per
// submission by Mode, so a readiness engine can be tested against each.
// Behaviours that break the contract on purpose (for the conformance kit's
// own tests) are not here: backend/mem/memtest wraps this backend with them.
//
// Every attempt is cancellable (contract.Cancellable, +cancel-request-v1) and
// tells when its outcome is known (contract.Notifier). A cancellation request
// suppresses a delivery that has not started yet: it ends Cancelled (a local
// cancel) without ever touching memory. A delivery already running finishes
// as it would have, and its outcome stays.
//
// The store is unbounded unless WithCapacity (rows) or WithCapacityBytes
// (bytes) bounds it; then it evicts the least recently used rows, and a fetch
// of an evicted name is a miss.
package mem

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvready/kvready/backend/notify"
	"github.com/kvready/kvready/backend/pools"
	"github.com/kvready/kvready/contract"
)

// Memory resolves a unit's local coordinates to its staging row. The engine's
// staging provides it. Row is called from the backend's goroutines, possibly
// long after the submission (and, for TornUntilQuiesce, again on every pass
// until Quiesce), so it must be safe for concurrent use; the returned slice is
// the row itself, not a copy.
type Memory interface {
	Row(localGroup, local int) ([]byte, bool)
}

// Poison is the byte that failed and cancelled deliveries write.
const Poison byte = 0xEE

// Op is the kind of call a Policy is asked about.
type Op int

// The operations a Policy sees.
const (
	OpFetch Op = iota
	OpPublish
	OpProbe
)

// String names the operation.
func (o Op) String() string {
	switch o {
	case OpFetch:
		return "fetch"
	case OpPublish:
		return "publish"
	case OpProbe:
		return "probe"
	}
	return fmt.Sprintf("op(%d)", int(o))
}

// Call describes one submission or probe, for a Policy, a delay or a gate.
type Call struct {
	Op     Op
	Extent string // the extent name (for a probe, the name probed)
	Seq    uint64 // 1 for the backend's first call, then 2, ...
	Units  int    // how many units the extent (or probe) had when it was submitted
}

// Option configures a Backend.
type Option func(*Backend)

// WithMode makes every call behave as m (the default is Normal).
func WithMode(m Mode) Option {
	return func(b *Backend) { b.policy = func(Call) Mode { return m } }
}

// WithPolicy chooses each call's mode, per name or per call. For OpProbe only
// Fail matters (the probe returns an error); every other mode answers from the
// store.
func WithPolicy(p func(Call) Mode) Option {
	return func(b *Backend) { b.policy = p }
}

// WithDelay makes each delivery wait delay(call) on its goroutine before it
// touches memory. The default is no delay. Keep test delays short.
func WithDelay(delay func(Call) time.Duration) Option {
	return func(b *Backend) { b.delay = delay }
}

// WithGate makes each delivery wait, on its goroutine and before touching
// memory, until the channel gate(call) is closed (a nil channel: no wait). It
// lets a test hold deliveries in flight without sleeping.
func WithGate(gate func(Call) <-chan struct{}) Option {
	return func(b *Backend) { b.gate = gate }
}

// WithSlowQuiesce sets how much longer Quiesce takes for SlowQuiesce attempts
// (default 20ms).
func WithSlowQuiesce(d time.Duration) Option {
	return func(b *Backend) { b.slow = d }
}

// WithCapacity bounds the store to units rows (0, the default, is unbounded;
// a negative capacity is refused by New). Storing a new row in a full store
// evicts the least recently used one. A Put, a publication and a fetch that
// serves a row count as uses of it; Get, Probe and a fetch that finds a row
// but does not serve it (Partial) do not. An evicted name is a miss for every
// later fetch and probe, never a failure. The store then holds at most units
// rows, besides the rows that deliveries in flight have already read.
func WithCapacity(units int) Option {
	return func(b *Backend) { b.capacity = units }
}

// WithCapacityBytes bounds the bytes of the rows the store holds together (0,
// the default, is unbounded; a negative bound is refused by New). Storing a
// row that does not fit evicts the least recently used rows until it does,
// counting each in Evictions, exactly as WithCapacity does for rows (the two
// bounds may be combined). A row larger than the whole bound is never
// stored: a publication reports it unaccepted (not served), never failed.
// Bytes reports what the store holds.
func WithCapacityBytes(n int64) Option {
	return func(b *Backend) { b.maxBytes = n }
}

// WithQuiesceNotYet sets how many calls to Quiesce answer false for a
// QuiesceNotYet attempt before one can answer true (default 2; a negative
// count is refused by New; 0 makes the mode behave like Normal).
func WithQuiesceNotYet(n int) Option {
	return func(b *Backend) { b.notYet = n }
}

// WithTornInterval sets how long a TornUntilQuiesce attempt waits between its
// passes over the served rows (default 100µs). With d <= 0 it only yields the
// processor between passes.
func WithTornInterval(d time.Duration) Option {
	return func(b *Backend) { b.tornEvery = d }
}

// Backend is the in-process backend. Create it with New and end it with Close.
type Backend struct {
	mem       Memory
	policy    func(Call) Mode
	delay     func(Call) time.Duration
	gate      func(Call) <-chan struct{}
	slow      time.Duration
	capacity  int
	maxBytes  int64
	notYet    int
	tornEvery time.Duration

	seq        atomic.Uint64
	suppressed atomic.Uint64
	wg         sync.WaitGroup
	closed     chan struct{}
	closing    sync.Once
	tornPasses atomic.Uint64

	mu    sync.Mutex
	store store

	pools pools.Registry // locks itself
}

var (
	_ contract.Fetcher       = (*Backend)(nil)
	_ contract.Publisher     = (*Backend)(nil)
	_ contract.PoolRegistrar = (*Backend)(nil)
	_ contract.QuiesceProber = (*Backend)(nil)
	_ contract.Cancellable   = (*attempt)(nil)
	_ contract.Notifier      = (*attempt)(nil)
)

// New returns a backend that resolves staging rows through mem.
func New(mem Memory, opts ...Option) (*Backend, error) {
	if mem == nil {
		return nil, errors.New("mem: New: Memory is nil; want the staging rows the backend reads and writes")
	}
	b := &Backend{
		mem:       mem,
		policy:    func(Call) Mode { return Normal },
		slow:      20 * time.Millisecond,
		notYet:    2,
		tornEvery: 100 * time.Microsecond,
		closed:    make(chan struct{}),
	}
	for _, o := range opts {
		o(b)
	}
	var errs []error
	if b.policy == nil {
		errs = append(errs, errors.New("mem: New: WithPolicy(nil); want a function choosing each call's mode"))
	}
	if b.capacity < 0 {
		errs = append(errs, fmt.Errorf("mem: New: WithCapacity(%d); want 0 (unbounded) or a positive number of rows", b.capacity))
	}
	if b.maxBytes < 0 {
		errs = append(errs, fmt.Errorf("mem: New: WithCapacityBytes(%d); want 0 (unbounded) or a positive number of bytes", b.maxBytes))
	}
	if b.notYet < 0 {
		errs = append(errs, fmt.Errorf("mem: New: WithQuiesceNotYet(%d); want a count of false answers >= 0", b.notYet))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	b.store.init(b.capacity, b.maxBytes)
	return b, nil
}

// Close ends the backend: deliveries still waiting are abandoned (reported
// Failed, touching nothing), TornUntilQuiesce passes stop (leaving the true
// content in place), and Close
// returns once every goroutine of the backend has ended. Later submissions are
// rejected. Close is idempotent.
func (b *Backend) Close() error {
	b.closing.Do(func() { close(b.closed) })
	b.wg.Wait()
	return nil
}

// Put stores a copy of row under (extent, name), as a publication would. It
// counts as a use of the row; with a capacity, a new row in a full store
// evicts the least recently used one.
func (b *Backend) Put(extent string, name contract.Name, row []byte) {
	b.mu.Lock()
	buf := b.store.buffer(len(row))
	b.mu.Unlock()
	copy(buf, row)
	b.mu.Lock()
	b.store.put(key{extent, name}, buf)
	b.mu.Unlock()
}

// Get returns a copy of the row stored under (extent, name). It inspects the
// store without counting as a use: it never changes which row is evicted next.
func (b *Backend) Get(extent string, name contract.Name) ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.store.peek(key{extent, name})
	if !ok {
		return nil, false
	}
	return append([]byte(nil), e.row.b...), true
}

// Len reports how many rows the store holds; with a capacity, never more than
// it.
func (b *Backend) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.store.m)
}

// Bytes reports how many bytes the stored rows hold together; with
// WithCapacityBytes, never more than it.
func (b *Backend) Bytes() int64 { return b.store.bytes.Load() }

// Evictions reports how many rows the capacity has evicted so far. Replacing
// a row under the same name is not an eviction.
func (b *Backend) Evictions() uint64 { return b.store.evictions.Load() }

// Suppressed reports how many deliveries a cancellation request stopped before
// they started: each ended Cancelled{ByPeer: false} without touching memory.
// Repeated requests for one attempt count once; a request that came after its
// delivery started counts nothing.
func (b *Backend) Suppressed() uint64 { return b.suppressed.Load() }

// TornPasses reports how many passes TornUntilQuiesce attempts have made over
// their served rows after reporting the outcome: for a fetch, rewrites
// (alternately Poison and the true content); for a publication, re-reads.
func (b *Backend) TornPasses() uint64 { return b.tornPasses.Load() }

// Fetch submits a fetch of the extent's units into their staging rows. The
// backend keeps extent and reads its units on the delivery's goroutine, after
// the delay and the gate (and, for TornUntilQuiesce, again on every pass until
// Quiesce): the caller must not rebuild it in place before Quiesce answered
// true.
func (b *Backend) Fetch(extent contract.CacheExtent, route contract.Route) (contract.Attempt, error) {
	if route != nil {
		return nil, fmt.Errorf("mem: Fetch: %w: a route was given, but this single-source backend opens none", contract.ErrSubmissionRejected)
	}
	return b.submit(OpFetch, extent)
}

// Publish submits a publication of the extent's staging rows into the store.
// Like Fetch, it keeps extent and resolves its units lazily on the delivery's
// goroutine.
func (b *Backend) Publish(extent contract.CacheExtent) (contract.Attempt, error) {
	return b.submit(OpPublish, extent)
}

func (b *Backend) submit(op Op, extent contract.CacheExtent) (contract.Attempt, error) {
	call := Call{Op: op, Extent: extent.Name(), Seq: b.seq.Add(1), Units: extent.Len()}
	select {
	case <-b.closed:
		return nil, fmt.Errorf("mem: %s %q: %w: the backend is closed", op, call.Extent, contract.ErrSubmissionRejected)
	default:
	}
	mode := b.policy(call)
	if !mode.Valid() {
		return nil, fmt.Errorf("mem: %s %q: %w: the policy chose %v, which is not a mode", op, call.Extent, contract.ErrSubmissionRejected, mode)
	}
	if mode == Reject {
		return nil, fmt.Errorf("mem: %s %q: %w: injected rejection", op, call.Extent, contract.ErrSubmissionRejected)
	}
	a := &attempt{b: b, mode: mode, ready: make(chan struct{}), done: make(chan struct{}), cancel: make(chan struct{})}
	if mode == TornUntilQuiesce {
		a.stop = make(chan struct{})
	}
	b.wg.Add(1)
	go b.run(a, call, extent)
	return a, nil
}

// attempt is one delivery. Its goroutine sets the outcome once and closes
// done when it can no longer touch memory.
type attempt struct {
	b     *Backend
	mode  Mode
	out   atomic.Pointer[outcomeBox]
	ready chan struct{} // closed once out is set
	done  chan struct{} // closed once the goroutine stops touching memory

	// Cancellation (+cancel-request-v1). phase gains phaseBegun when the
	// delivery decides to run and phaseCancel at the first RequestCancel; an
	// atomic Or sets each, so exactly one of the two comes first: a cancel
	// that comes first suppresses the delivery, one that comes second changes
	// nothing. cancel is closed by the first RequestCancel, to wake a
	// delivery held by its delay or gate.
	phase  atomic.Uint32
	cancel chan struct{}

	// Notify's callbacks, called when the outcome is set.
	notify notify.List

	// QuiesceNotYet: how many calls to Quiesce have counted against it.
	quiesceCalls atomic.Int64
	// TornUntilQuiesce: closed (once) by the first Quiesce that lists it.
	stop     chan struct{}
	stopping atomic.Bool

	// Set by the goroutine before done is closed; read after done.
	sink byte // what TornUntilQuiesce's publication re-reads fold into
}

type outcomeBox struct{ o contract.Outcome }

// Poll returns the outcome, or nil while the delivery is in flight. It never
// blocks.
func (a *attempt) Poll() contract.Outcome {
	box := a.out.Load()
	if box == nil {
		return nil
	}
	return box.o
}

// The bits of attempt.phase.
const (
	phaseBegun  uint32 = 1 << iota // the delivery decided to run (or to end untouched)
	phaseCancel                    // a cancellation was requested
)

// settle sets the outcome, once, and then calls the callbacks Notify was given
// before it, on the settling goroutine.
func (a *attempt) settle(o contract.Outcome) {
	a.out.Store(&outcomeBox{o})
	close(a.ready)
	a.notify.Fire()
}

// begin decides, once, whether the delivery may start touching memory: false
// when a cancellation was requested first.
func (a *attempt) begin() bool { return a.phase.Or(phaseBegun)&phaseCancel == 0 }

// RequestCancel asks, best effort, that the delivery stop, and answers
// contract.CancelRequested, every time. It never blocks and starts no work:
// it marks the attempt and wakes a delivery held by its delay or gate. A
// delivery that has not started when the first request arrives never starts:
// it ends Cancelled{ByPeer: false} without touching memory (and counts in
// Suppressed). One that has started finishes as it would have: its outcome,
// whatever it is, stays, and its memory access ends only when it would have
// (TornUntilQuiesce passes go on until Quiesce). A request never rolls back a
// publication, never touches memory, and never changes what Quiesce answers or
// has answered. Repeated requests do nothing more.
func (a *attempt) RequestCancel() (contract.CancelDisposition, error) {
	if a.phase.Or(phaseCancel)&phaseCancel == 0 {
		close(a.cancel)
	}
	return contract.CancelRequested, nil
}

// Notify calls f, once, when the attempt has an outcome: at once, before
// Notify returns, if Poll already answers one; otherwise on the delivery's
// goroutine right after the outcome is set, before it goes on (a failed
// fetch's poisoning, torn passes). Each call's f is called once; a nil f is
// ignored. f must not block.
func (a *attempt) Notify(f func()) { a.notify.Add(f) }

// NotifyCallee is Notify(c.Notified) without making the method value
// (notify.CalleeNotifier): a stack of tiers over mem registers each lease
// this way, and a method value would be an allocation a lease.
func (a *attempt) NotifyCallee(c notify.Callee) { a.notify.AddCallee(c) }

// stopPasses asks a TornUntilQuiesce attempt to end its passes; idempotent.
func (a *attempt) stopPasses() {
	if a.stop != nil && a.stopping.CompareAndSwap(false, true) {
		close(a.stop)
	}
}

func (b *Backend) run(a *attempt, call Call, ext contract.CacheExtent) {
	defer b.wg.Done()
	defer close(a.done)
	open := b.hold(a, call)
	if !a.begin() {
		// Cancelled before the delivery touched anything: it never will.
		b.suppressed.Add(1)
		a.settle(contract.Cancelled{ByPeer: false})
		return
	}
	if !open {
		a.settle(contract.Failed{Reason: "backend closed before the delivery started"})
		return
	}
	// The units are resolved only now, after the delay and the gate, from the
	// extent as it is now: a backend may keep what it was handed and read it
	// long after the submission. A unit without a usable row fails the whole
	// delivery before anything is written.
	rows := make([][]byte, ext.Len())
	for i, u := range ext.All() {
		row, ok := b.mem.Row(u.LocalGroup, u.Local)
		if !ok {
			a.settle(contract.Failed{Reason: fmt.Sprintf("unit %d: no staging row at (local_group %d, local %d)", i, u.LocalGroup, u.Local)})
			return
		}
		rows[i] = row
	}

	switch a.mode {
	case Miss:
		a.settle(contract.Delivered{})
		return
	case Fail, CancelLocal, CancelByPeer:
		switch a.mode {
		case Fail:
			a.settle(contract.Failed{Reason: "injected failure"})
		default:
			a.settle(contract.Cancelled{ByPeer: a.mode == CancelByPeer})
		}
		if call.Op == OpFetch { // access goes on after the outcome: destinations become undefined
			for _, row := range rows {
				fill(row, Poison)
			}
		}
		return
	}

	var hits []int    // unit indexes served (fetch) or stored (publish)
	var data [][]byte // fetch: the stored rows, read once, by unit index
	if call.Op == OpFetch {
		data = make([][]byte, len(rows))
		var reason string
		var held []*row
		hits, held, reason = b.load(a.mode, ext, rows, data)
		defer b.unread(held) // after the last pass of a torn delivery too
		if reason != "" {
			a.settle(contract.Failed{Reason: reason})
			return
		}
	} else {
		hits = make([]int, len(rows))
		for i := range hits {
			hits[i] = i
		}
		hits = b.keep(ext, rows, servedPart(a.mode, hits))
	}

	names := make([]contract.Name, 0, len(hits))
	for _, i := range hits {
		if call.Op == OpFetch {
			copy(rows[i], data[i])
		}
		names = append(names, ext.Unit(i).Name)
	}
	a.settle(contract.Delivered{Served: contract.NewNameSet(names...)})
	if a.mode == TornUntilQuiesce {
		b.tear(a, call.Op, ext, hits, data)
	}
}

// servedPart is the part of the hits a mode serves.
func servedPart(m Mode, hits []int) []int {
	if m == Partial {
		return hits[:(len(hits)+1)/2]
	}
	return hits
}

// load looks up every unit of a fetch under one lock: it fills data with the
// stored rows the mode serves, returns their unit indexes and counts them as
// uses. A stored row whose size differs from its staging row fails the
// delivery (a non-empty reason) before anything is used or written.
//
// The rows it hands out stay marked as read (their bytes are not recycled)
// until unread is given held, once the delivery stopped reading them.
func (b *Backend) load(m Mode, ext contract.CacheExtent, rows, data [][]byte) (hits []int, held []*row, reason string) {
	// Everything the lookup fills is allocated before the lock: an
	// allocation under it may stop to assist the garbage collector while
	// every other delivery queues behind it (64 fetches in flight spent ten
	// times longer waiting for the lock than with these made first).
	var entBuf [4]*entry
	ents := entBuf[:0]
	if len(rows) > len(entBuf) {
		ents = make([]*entry, 0, len(rows))
	}
	hits = make([]int, 0, len(rows))
	held = make([]*row, 0, len(rows))
	name := ext.Name()
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, staged := range rows {
		e, ok := b.store.peek(key{name, ext.Unit(i).Name})
		if !ok {
			continue
		}
		if len(e.row.b) != len(staged) {
			return nil, nil, fmt.Sprintf("unit %d: stored row has %d bytes, staging row %d", i, len(e.row.b), len(staged))
		}
		hits = append(hits, i)
		ents = append(ents, e)
	}
	hits = servedPart(m, hits)
	for j, i := range hits {
		held = append(held, ents[j].row)
		b.store.read(held[j])
		data[i] = held[j].b
		b.store.use(ents[j])
	}
	return hits, held, ""
}

// unread ends the reads load began.
func (b *Backend) unread(held []*row) {
	if len(held) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range held {
		b.store.unread(r)
	}
}

// keep stores copies of the listed staging rows of a publication, under one
// lock, and returns the unit indexes it stored (a row larger than the byte
// bound is not).
func (b *Backend) keep(ext contract.CacheExtent, rows [][]byte, hits []int) []int {
	copies := make([][]byte, len(hits))
	b.mu.Lock()
	for j, i := range hits {
		copies[j] = b.store.buffer(len(rows[i]))
	}
	b.mu.Unlock()
	for j, i := range hits {
		copy(copies[j], rows[i])
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	stored := hits[:0]
	for j, i := range hits {
		if b.store.put(key{ext.Name(), ext.Unit(i).Name}, copies[j]) {
			stored = append(stored, i)
		}
	}
	return stored
}

// tear is TornUntilQuiesce's access after the outcome: pass after pass over
// the served rows, resolved again from the extent each time, until Quiesce
// stops it or the backend closes. A fetch pass writes Poison and the true
// content in turn; a publication pass only reads. The goroutine ends with the
// true content in place, so done (what Quiesce waits for) follows the last
// write.
func (b *Backend) tear(a *attempt, op Op, ext contract.CacheExtent, served []int, data [][]byte) {
	if len(served) == 0 {
		return // nothing was served: there is nothing to touch
	}
	var tick *time.Timer
	if b.tornEvery > 0 {
		tick = time.NewTimer(b.tornEvery)
		defer tick.Stop()
	}
	torn := false
	for {
		torn = !torn
		b.pass(a, op, ext, served, data, torn)
		b.tornPasses.Add(1)
		if tick == nil {
			select {
			case <-a.stop:
			case <-b.closed:
			default:
				runtime.Gosched()
				continue
			}
			break
		}
		tick.Reset(b.tornEvery)
		select {
		case <-a.stop:
		case <-b.closed:
		case <-tick.C:
			continue
		}
		break
	}
	if torn && op == OpFetch {
		b.pass(a, op, ext, served, data, false)
	}
}

// pass touches each served row once: a fetch writes Poison (torn) or the true
// content; a publication reads the row.
func (b *Backend) pass(a *attempt, op Op, ext contract.CacheExtent, served []int, data [][]byte, torn bool) {
	for _, i := range served {
		u := ext.Unit(i)
		row, ok := b.mem.Row(u.LocalGroup, u.Local)
		if !ok {
			continue
		}
		switch {
		case op == OpPublish:
			for _, x := range row {
				a.sink ^= x
			}
		case torn:
			fill(row, Poison)
		default:
			copy(row, data[i])
		}
	}
}

// hold waits for the call's delay and gate, or until a's cancellation is
// requested; false means the backend closed.
func (b *Backend) hold(a *attempt, call Call) bool {
	if b.delay != nil {
		if d := b.delay(call); d > 0 {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
			case <-a.cancel:
				return true
			case <-b.closed:
				return false
			}
		}
	}
	if b.gate != nil {
		if g := b.gate(call); g != nil {
			select {
			case <-g:
			case <-a.cancel:
			case <-b.closed:
				return false
			}
		}
	}
	return true
}

func fill(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

// attempts checks that every listed attempt came from this backend.
func (b *Backend) attempts(method string, list []contract.Attempt) ([]*attempt, error) {
	as := make([]*attempt, len(list))
	for i, x := range list {
		a, ok := x.(*attempt)
		if !ok || a == nil || a.b != b {
			return nil, fmt.Errorf("mem: %s: attempt %d (%T) was not returned by this backend", method, i, x)
		}
		as[i] = a
	}
	return as, nil
}

// Quiesce answers true once none of the listed attempts can touch memory again.
// It waits only on the listed attempts, honouring ctx; a ctx already done, or
// done while waiting, is an error, never true.
//
// Per mode: QuiesceError answers an error and QuiesceFalse false, for ever;
// SlowQuiesce takes longer; a QuiesceNotYet attempt makes the call answer
// false at once while it has false answers left; a TornUntilQuiesce attempt
// is told to stop its passes, and the call waits for them to end.
func (b *Backend) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	as, err := b.attempts("Quiesce", list)
	if err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("mem: Quiesce: %w", err)
	}
	answer := true
	var slow bool
	for i, a := range as {
		switch a.mode {
		case QuiesceError:
			return false, fmt.Errorf("mem: Quiesce: attempt %d: injected quiesce error", i)
		case QuiesceFalse:
			answer = false
		case SlowQuiesce:
			slow = true
		}
	}
	notYet := false
	for _, a := range as {
		switch a.mode {
		case QuiesceNotYet:
			if a.quiesceCalls.Add(1) <= int64(b.notYet) {
				notYet = true
			}
		case TornUntilQuiesce:
			a.stopPasses()
		}
	}
	if notYet {
		return false, nil
	}
	for i, a := range as {
		select {
		case <-a.done:
		case <-ctx.Done():
			return false, fmt.Errorf("mem: Quiesce: waiting for attempt %d: %w", i, ctx.Err())
		}
	}
	if slow && answer {
		t := time.NewTimer(b.slow)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("mem: Quiesce: %w", err)
	}
	return answer, nil
}

// TryQuiesce answers Quiesce's question without waiting
// (contract.QuiesceProber): AccessEnded once every listed attempt's goroutine
// has stopped touching memory, AccessUnproven where Quiesce would answer false
// (QuiesceFalse), AccessUnknown while a delivery is still running, and for the
// modes whose answer only Quiesce's own path gives (SlowQuiesce,
// QuiesceNotYet, TornUntilQuiesce). An injected QuiesceError is an error, as
// Quiesce's.
func (b *Backend) TryQuiesce(list []contract.Attempt) (contract.Access, error) {
	as, err := b.attempts("TryQuiesce", list)
	if err != nil {
		return contract.AccessUnknown, err
	}
	unproven := false
	for i, a := range as {
		switch a.mode {
		case QuiesceError:
			return contract.AccessUnknown, fmt.Errorf("mem: TryQuiesce: attempt %d: injected quiesce error", i)
		case QuiesceFalse:
			unproven = true
		case SlowQuiesce, QuiesceNotYet, TornUntilQuiesce:
			return contract.AccessUnknown, nil
		}
	}
	if unproven {
		return contract.AccessUnproven, nil
	}
	for _, a := range as {
		select {
		case <-a.done:
		default:
			return contract.AccessUnknown, nil
		}
	}
	return contract.AccessEnded, nil
}

// Drain waits until every listed attempt's goroutine has ended — every write
// it will make has landed — honouring ctx. Unlike Quiesce it proves nothing
// and consumes no answer of any mode: it is for simulations and tests that
// need a delivery's writes at a known instant. An attempt of TornUntilQuiesce
// ends only once Quiesce stops it.
func (b *Backend) Drain(ctx context.Context, list []contract.Attempt) error {
	as, err := b.attempts("Drain", list)
	if err != nil {
		return err
	}
	for i, a := range as {
		select {
		case <-a.done:
		case <-ctx.Done():
			return fmt.Errorf("mem: Drain: waiting for attempt %d: %w", i, ctx.Err())
		}
	}
	return nil
}

// Settle waits until every listed attempt has an outcome, honouring ctx. It
// proves nothing about memory access.
func (b *Backend) Settle(ctx context.Context, list []contract.Attempt) error {
	as, err := b.attempts("Settle", list)
	if err != nil {
		return err
	}
	return notify.Settle(ctx, "mem: Settle", len(as), func(i int) <-chan struct{} { return as[i].ready })
}

// Probe reports which units the store holds under the extent name, which may
// be any bytes, the empty name included (an extent's name may be empty). It
// always answers (answered is true) unless the policy injects Fail, which is
// an error.
// It is advisory: a row it reports may be evicted before a later fetch. It
// does not count as a use of the rows.
func (b *Backend) Probe(ctx context.Context, name []byte, units []contract.Name) (contract.NameSet, bool, error) {
	if err := ctx.Err(); err != nil {
		return contract.NameSet{}, false, fmt.Errorf("mem: Probe: %w", err)
	}
	call := Call{Op: OpProbe, Extent: string(name), Seq: b.seq.Add(1), Units: len(units)}
	if b.policy(call) == Fail {
		return contract.NameSet{}, false, fmt.Errorf("mem: Probe %q: injected failure", call.Extent)
	}
	var hits []contract.Name
	b.mu.Lock()
	for _, n := range units {
		if _, ok := b.store.peek(key{call.Extent, n}); ok {
			hits = append(hits, n)
		}
	}
	b.mu.Unlock()
	return contract.NewNameSet(hits...), true, nil
}

// OpenRoute refuses: this is a single-source backend.
func (b *Backend) OpenRoute(hint map[string]string) (contract.Route, error) {
	return nil, fmt.Errorf("mem: OpenRoute: %w: the in-process backend has a single source and no routes", errors.ErrUnsupported)
}

// RegisterPool registers [address, address+size). A zero address, a
// non-positive size, a span that wraps around, or one overlapping a live
// registration is refused and registers nothing (see [pools.Registry]).
func (b *Backend) RegisterPool(address uintptr, size int) (contract.Registration, error) {
	r, err := b.pools.Register(address, size)
	if err != nil {
		return nil, fmt.Errorf("mem: %w", err)
	}
	return r, nil
}

// Registered reports how many pool registrations are live.
func (b *Backend) Registered() int { return b.pools.Live() }
