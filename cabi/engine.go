package main

/*
#include "cgo.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// engine is an engine object: a readiness.Engine, the objects it uses, the
// wake descriptor (the engine's OnWake makes it readable, from whichever
// goroutine signals: no goroutine forwards Wake to it), and what the owner has
// not read yet (leases that moved, containments, recoveries).
type engine struct {
	h         uint64
	eng       *readiness.Engine
	mem       *memory
	fetcher   *backend
	publisher *backend
	dev       *device

	wake  *wakeFD
	freed atomic.Bool

	// waiting is held, shared, while a wait (kvready_wait, _sync,
	// _engine_shutdown) runs rounds — any number of threads may wait at once
	// (SPEC §4 rule 18) — so that kvready_engine_free from another thread
	// never touches the engine under them; life is every such wait's parent
	// context, cancelled by the free, so that the waiting threads return at
	// once.
	waiting sync.RWMutex
	life    context.Context
	kill    context.CancelFunc

	// st guards the events the engine's callbacks leave for the owner
	// (contained, recovered): the callbacks run on whichever thread's call
	// ran the round, under the engine's own lock, and the owner reads them
	// from any thread. Nothing calls the engine holding st. The change
	// record (chLease, chState, pos) is written for every move, several
	// times a lease, so it is kept under the engine's own exclusion instead
	// (moved runs inside it; takeChanges enters it, readiness.Engine.Exclusive):
	// one lock a read rather than one a move.
	st sync.Mutex
	// lendMu guards rows, the scratch a request's rows are read into.
	lendMu sync.Mutex

	// Leases that moved since the owner last read them, each once with its
	// latest state; pos[lease index] is 1 + its position in chLease.
	chLease []uint64
	chState []int32
	pos     []int32

	// Events the owner has not read, each queue bounded by maxEvents: the
	// engine's counters (kvready_stats) and its log keep every one.
	contained []readiness.Containment
	recovered []uint64
	rows      []staging.Row // scratch for Lend (the core copies the rows)
}

// maxRows bounds one request's rows: more is refused before anything is read.
const maxRows = 1 << 24

// maxDuration bounds each duration of an engine's config, and maxDeadline a
// request's deadline (Unix ns): the engine adds them to the clock, and the
// drain grace to a deadline, in int64 nanoseconds, which must not wrap.
const (
	maxDuration = 1 << 61
	maxDeadline = 1 << 62
)

// maxEvents bounds each queue of events waiting for the owner (containments,
// recoveries): an owner that never reads them costs no more than this.
const maxEvents = 1 << 16

//export kvready_engine_new
func kvready_engine_new(cfg *C.kv_cconfig, out *C.uint64_t) (st C.int) {
	defer guard(0, &st)
	if cfg == nil || out == nil {
		return fail(0, invalid("kvready_engine_new: config and engine (the out-parameter) are required (NULL given)"))
	}
	e, err := newEngine((*C.kvready_engine_config)(unsafe.Pointer(cfg)))
	if err != nil {
		return fail(0, err)
	}
	*out = C.uint64_t(e.h)
	return C.KVREADY_OK
}

func newEngine(c *C.kvready_engine_config) (*engine, error) {
	m, err := lookup[*memory](uint64(c.memory), kindMemory)
	if err != nil {
		return nil, fmt.Errorf("kvready_engine_new: config.memory: %w", err)
	}
	if m.staged == nil {
		return nil, invalid("kvready_engine_new: config.memory is the conformance kit's memory; an engine lends staging memory from kvready_memory_over")
	}
	d, err := lookup[*device](uint64(c.device), kindDevice)
	if err != nil {
		return nil, fmt.Errorf("kvready_engine_new: config.device: %w", err)
	}
	e := &engine{mem: m, dev: d}
	e.life, e.kill = context.WithCancel(context.Background())
	for _, side := range []struct {
		h    C.uint64_t
		name string
		dst  **backend
	}{{c.fetcher, "fetcher", &e.fetcher}, {c.publisher, "publisher", &e.publisher}} {
		if side.h == 0 {
			continue
		}
		b, err := lookup[*backend](uint64(side.h), kindBackend)
		if err != nil {
			return nil, fmt.Errorf("kvready_engine_new: config.%s: %w", side.name, err)
		}
		if b.mem != m {
			return nil, invalid("kvready_engine_new: config.%s was opened over another staging memory than config.memory; a backend resolves units in the engine's memory", side.name)
		}
		*side.dst = b
	}
	tokensPerBlock := int(c.tokens_per_block)
	var layers [][]staging.LayerSpans
	if c.layout != nil || c.layout_len != 0 {
		if c.layout == nil || c.layout_len > 1<<24 {
			return nil, invalid("kvready_engine_new: config.layout_len %d with layout NULL: %v; want a layout document of at most 16 MiB, or NULL and 0 for whole-slot copies", uint64(c.layout_len), c.layout == nil)
		}
		l, err := staging.ParseLayout(C.GoBytes(unsafe.Pointer(c.layout), C.int(c.layout_len)))
		if err != nil {
			return nil, invalid("kvready_engine_new: config.layout: %v", err)
		}
		switch {
		case tokensPerBlock == 0:
			tokensPerBlock = l.TokensPerBlock
		case tokensPerBlock != l.TokensPerBlock:
			return nil, invalid("kvready_engine_new: config.tokens_per_block %d, but config.layout has %d; want them equal (or 0: the layout's)", tokensPerBlock, l.TokensPerBlock)
		}
		if layers, err = readiness.LayersOf(l); err != nil {
			return nil, invalid("kvready_engine_new: config.layout: %v", err)
		}
	}
	rc := readiness.Config{
		Memory:       m.staged,
		Layers:       layers,
		OnTransition: e.moved,
		Stream:       d.stream,
		Health:       d.health,
		OnContainment: func(ct readiness.Containment) {
			e.st.Lock()
			defer e.st.Unlock()
			if len(e.contained) < maxEvents {
				e.contained = append(e.contained, ct)
			}
		},
		OnRecovery: func(l readiness.Handle) {
			e.st.Lock()
			defer e.st.Unlock()
			if len(e.recovered) < maxEvents {
				e.recovered = append(e.recovered, l.Uint64())
			}
		},
	}
	if err := settingsFromC(c, &rc); err != nil {
		return nil, err
	}
	rc.TokensPerBlock = tokensPerBlock
	if e.fetcher != nil {
		if e.fetcher.fetcher == nil {
			return nil, invalid("kvready_engine_new: config.fetcher cannot fetch (its callbacks have no fetch)")
		}
		rc.Fetcher = e.fetcher.fetcher
	}
	if e.publisher != nil {
		if e.publisher.publisher == nil {
			return nil, invalid("kvready_engine_new: config.publisher cannot publish (its callbacks have no publish)")
		}
		rc.Publisher = e.publisher.publisher
	}
	w, err := openWake()
	if err != nil {
		return nil, err
	}
	rc.OnWake = w.signal
	eng, err := readiness.New(rc)
	if err != nil {
		w.close()
		if errors.Is(err, staging.ErrMemoryClaimed) {
			return nil, statusf(C.KVREADY_ERR_BUSY, "kvready_engine_new: config.memory: %v", err)
		}
		return nil, invalid("kvready_engine_new: %v", err)
	}
	e.eng, e.wake = eng, w
	m.users.Add(1)
	d.users.Add(1)
	for _, b := range []*backend{e.fetcher, e.publisher} {
		if b != nil {
			b.users.Add(1)
		}
	}
	e.h = register(kindEngine, e)
	return e, nil
}

// underWait runs fn, which waits on the engine's Wake (kvready_wait, _sync,
// _engine_shutdown), under the waiting lock, so that a free from another
// thread never touches the engine under it. It returns errFreed, without
// running fn, once the engine was freed.
func (e *engine) underWait(name string, fn func()) error {
	e.waiting.RLock()
	defer e.waiting.RUnlock()
	if e.freed.Load() {
		return e.freedWhile(name)
	}
	fn()
	return nil
}

// owner is the handle a wait's error is kept under: the engine's, or the
// calling thread's (0) once the engine was freed under the wait (its handle's
// errors go with it).
func (e *engine) owner() uint64 {
	if e.life.Err() != nil { // killed only by a free that goes through
		return 0
	}
	return e.h
}

// freedWhile is what a wait answers when the engine was freed under it.
func (e *engine) freedWhile(name string) error {
	return statusf(C.KVREADY_ERR_CLOSED, "%s: engine %#x was freed (kvready_engine_free) while this thread waited", name, e.h)
}

// waitCtx bounds a wait by timeout_ns and by the engine's life.
func (e *engine) waitCtx(name string, ns C.int64_t) (context.Context, context.CancelFunc, error) {
	if ns <= 0 {
		return nil, nil, invalid("%s: timeout %d ns; want a positive bound (every wait is bounded)", name, ns)
	}
	ctx, cancel := context.WithTimeout(e.life, time.Duration(ns))
	return ctx, cancel, nil
}

// waited runs fn, a wait, under the waiting lock, and answers CLOSED when
// the engine was freed under it and fn failed for that.
func (e *engine) waited(name string, fn func() error) error {
	var err error
	if perr := e.underWait(name, func() { err = fn() }); perr != nil {
		return perr
	}
	if err != nil && e.life.Err() != nil {
		return e.freedWhile(name)
	}
	return err
}

// moved records a move, on the owner goroutine: each lease once, with its
// latest state. It runs inside the engine's exclusion (OnTransition), which
// guards the change record.
func (e *engine) moved(t readiness.Transition) {
	h, idx := t.Lease.Uint64(), t.Lease.Index()
	if idx < len(e.pos) {
		if p := e.pos[idx] - 1; p >= 0 && e.chLease[p] == h {
			e.chState[p] = int32(t.To)
			return
		}
	}
	for len(e.pos) <= idx {
		e.pos = append(e.pos, 0)
	}
	e.chLease = append(e.chLease, h)
	e.chState = append(e.chState, int32(t.To))
	e.pos[idx] = int32(len(e.chLease))
}

// takeChanges moves up to cap recorded leases into the caller's arrays and
// returns how many it wrote and how many are left. A caller that passes no
// arrays does not want them: the record is dropped, so that it never grows
// for an owner that does not read it.
func (e *engine) takeChanges(leases *C.uint64_t, states *C.int32_t, cap C.size_t) (n, rest int) {
	e.eng.Exclusive(func() { n, rest = e.takeChangesExclusive(leases, states, cap) })
	return n, rest
}

// takeChangesExclusive is takeChanges inside the engine's exclusion.
func (e *engine) takeChangesExclusive(leases *C.uint64_t, states *C.int32_t, cap C.size_t) (int, int) {
	if leases == nil || states == nil || cap == 0 {
		for _, h := range e.chLease {
			e.pos[readiness.HandleOf(h).Index()] = 0
		}
		e.chLease, e.chState = e.chLease[:0], e.chState[:0]
		return 0, 0
	}
	ls := outView((*uint64)(unsafe.Pointer(leases)), cap, len(e.chLease))
	ss := outView((*int32)(unsafe.Pointer(states)), cap, len(e.chLease))
	n := copy(ls, e.chLease)
	copy(ss, e.chState)
	for _, h := range e.chLease[:n] {
		e.pos[readiness.HandleOf(h).Index()] = 0
	}
	rest := copy(e.chLease, e.chLease[n:])
	copy(e.chState, e.chState[n:])
	e.chLease, e.chState = e.chLease[:rest], e.chState[:rest]
	for i, h := range e.chLease {
		e.pos[readiness.HandleOf(h).Index()] = int32(i + 1)
	}
	return n, rest
}

// engineOf finds the engine h names.
func engineOf(h C.uint64_t) (*engine, error) {
	e, err := lookup[*engine](uint64(h), kindEngine)
	if err == nil && e.freed.Load() {
		err = statusf(C.KVREADY_ERR_BAD_HANDLE, "kvready: engine %#x was freed", uint64(h))
	}
	return e, err
}

//export kvready_engine_wake_fd
func kvready_engine_wake_fd(h C.uint64_t, fd *C.int32_t) (st C.int) {
	defer guard(uint64(h), &st)
	e, err := engineOf(h)
	if err != nil {
		return fail(uint64(h), err)
	}
	if fd == nil {
		return fail(uint64(h), invalid("kvready_engine_wake_fd: fd is NULL"))
	}
	*fd = C.int32_t(e.wake.r)
	return C.KVREADY_OK
}

//export kvready_progress
func kvready_progress(h C.uint64_t, round *C.kvready_round, leases *C.uint64_t, states *C.int32_t, cap C.size_t) (st C.int) {
	defer guard(uint64(h), &st)
	e, err := engineOf(h)
	if err != nil {
		return fail(uint64(h), err)
	}
	e.progressPeers()
	e.wake.drain()
	moves := e.eng.Progress()
	n, rest := e.takeChanges(leases, states, cap)
	if round != nil {
		round.moves = C.int64_t(moves)
		round.changed = C.int64_t(n)
		round.more = C.int64_t(rest)
		e.st.Lock()
		round.containments = C.int64_t(len(e.contained))
		round.recoveries = C.int64_t(len(e.recovered))
		e.st.Unlock()
		round.halted = cbool(e.eng.Err() != nil)
		round.drained = cbool(e.eng.Report().Drained)
	}
	return C.KVREADY_OK
}

// progressPeers runs one bounded round of each peer backend the engine
// uses, before the engine's own round, so that an owner running rounds
// drives UCX too: what arrived (reports, offers) is evidence the round can
// take at once.
func (e *engine) progressPeers() {
	for i, b := range []*backend{e.fetcher, e.publisher} {
		if b == nil || b.peer == nil || b.closed.Load() || (i == 1 && b == e.fetcher) {
			continue
		}
		b.peer.progress()
	}
}

func cbool(b bool) C.int32_t {
	if b {
		return 1
	}
	return 0
}

//export kvready_changes
func kvready_changes(h C.uint64_t, leases *C.uint64_t, states *C.int32_t, cap C.size_t, n *C.size_t) (st C.int) {
	defer guard(uint64(h), &st)
	e, err := engineOf(h)
	if err != nil {
		return fail(uint64(h), err)
	}
	k, _ := e.takeChanges(leases, states, cap)
	if n != nil {
		*n = C.size_t(k)
	}
	return C.KVREADY_OK
}

// A kvready_row's name is read as a contract.Name in place: this does not
// compile unless the two have the same size.
var _ = [1]struct{}{}[unsafe.Sizeof(C.kvready_row{}.name)-contract.NameSize]

// request converts one C request; rows go to the engine's scratch.
func (e *engine) request(r *C.kvready_request) (readiness.Request, error) {
	var req readiness.Request
	switch r.kind {
	case C.KVREADY_FETCH:
		req.Kind = readiness.Fetch
	case C.KVREADY_PUBLISH:
		req.Kind = readiness.Publish
	default:
		return req, fmt.Errorf("%w: kind %d; want KVREADY_FETCH (1) or KVREADY_PUBLISH (2)", readiness.ErrInvalidRequest, int(r.kind))
	}
	if r.n_rows > maxRows || (r.n_rows > 0 && r.rows == nil) {
		return req, fmt.Errorf("%w: %d rows at %p; want 1 to %d rows and a rows pointer", readiness.ErrInvalidRequest, uint64(r.n_rows), r.rows, maxRows)
	}
	// Each row is read in place and written in place (no row value copied
	// twice a lease, as a range and an append did: a third of the call's own
	// work, callgrind, issue #40).
	n := int(r.n_rows)
	if cap(e.rows) < n {
		e.rows = make([]staging.Row, n)
	}
	e.rows = e.rows[:n]
	if n > 0 {
		crs := unsafe.Slice(r.rows, n)
		for i := range crs {
			cr, row := &crs[i], &e.rows[i]
			row.Name = *(*contract.Name)(unsafe.Pointer(&cr.name[0]))
			row.Group, row.Block, row.Device = int(cr.group), int(cr.block), gpu.DevicePtr(cr.device)
		}
	}
	req.Rows = e.rows
	req.KnownBlocks = int(r.known_blocks)
	req.IsLast = r.is_last != 0
	switch r.layerwise {
	case 0:
	case 1:
		req.Layerwise = true
	default:
		return req, fmt.Errorf("%w: layerwise %d; want 0 or 1", readiness.ErrInvalidRequest, int(r.layerwise))
	}
	if r.deadline_unix_ns < 0 || r.deadline_unix_ns > maxDeadline {
		return req, fmt.Errorf("%w: deadline_unix_ns %d; want 0 (the request timeout) or a Unix time in ns up to %d (2^62: the year 2116)", readiness.ErrInvalidRequest, int64(r.deadline_unix_ns), int64(maxDeadline))
	}
	if r.deadline_unix_ns != 0 {
		req.Deadline = time.Unix(0, int64(r.deadline_unix_ns))
	}
	return req, nil
}

func (e *engine) lend(r *C.kvready_request) (uint64, error) {
	e.lendMu.Lock()
	defer e.lendMu.Unlock()
	req, err := e.request(r)
	if err != nil {
		return 0, err
	}
	lh, err := e.eng.Lend(req)
	return lh.Uint64(), err
}

//export kvready_lend
func kvready_lend(h C.uint64_t, req *C.kv_crequest, lease *C.uint64_t) (st C.int) {
	defer guard(uint64(h), &st)
	e, err := engineOf(h)
	if err != nil {
		return fail(uint64(h), err)
	}
	if req == nil || lease == nil {
		return fail(uint64(h), invalid("kvready_lend: request and lease (the out-parameter) are required (NULL given)"))
	}
	lh, err := e.lend((*C.kvready_request)(unsafe.Pointer(req)))
	if err != nil {
		return fail(uint64(h), err)
	}
	*lease = C.uint64_t(lh)
	return C.KVREADY_OK
}

//export kvready_lend_many
func kvready_lend_many(h C.uint64_t, reqs *C.kv_crequest, n C.size_t, leases *C.uint64_t, statuses *C.int32_t) (st C.int) {
	defer guard(uint64(h), &st)
	e, err := engineOf(h)
	if err != nil {
		return fail(uint64(h), err)
	}
	if n == 0 {
		return C.KVREADY_OK
	}
	if reqs == nil || leases == nil || n > maxRows {
		return fail(uint64(h), invalid("kvready_lend_many: %d requests; requests and leases are required (NULL given) and at most %d", n, maxRows))
	}
	rs := unsafe.Slice((*C.kvready_request)(unsafe.Pointer(reqs)), int(n))
	ls := unsafe.Slice((*uint64)(unsafe.Pointer(leases)), int(n))
	var ss []int32
	if statuses != nil {
		ss = unsafe.Slice((*int32)(unsafe.Pointer(statuses)), int(n))
	}
	first := C.int(C.KVREADY_OK)
	for i := range rs {
		lh, err := e.lend(&rs[i])
		ls[i] = lh
		s := fail(uint64(h), err)
		if ss != nil {
			ss[i] = int32(s)
		}
		if first == C.KVREADY_OK {
			first = s
		}
	}
	return first
}

// each applies fn to one lease or to many, as release, cancel and retry do.
func each(h C.uint64_t, leases *C.kv_cu64, n C.size_t, statuses *C.int32_t, name string, fn func(*engine, readiness.Handle) error) C.int {
	e, err := engineOf(h)
	if err != nil {
		return fail(uint64(h), err)
	}
	if n > 0 && leases == nil || n > maxRows {
		return fail(uint64(h), invalid("%s: %d leases; leases is required (NULL given) and at most %d", name, n, maxRows))
	}
	if n == 0 {
		return C.KVREADY_OK
	}
	ls := unsafe.Slice((*uint64)(unsafe.Pointer(leases)), int(n))
	var ss []int32
	if statuses != nil {
		ss = unsafe.Slice((*int32)(unsafe.Pointer(statuses)), int(n))
	}
	first := C.int(C.KVREADY_OK)
	for i, l := range ls {
		s := fail(uint64(h), fn(e, readiness.HandleOf(l)))
		if ss != nil {
			ss[i] = int32(s)
		}
		if first == C.KVREADY_OK {
			first = s
		}
	}
	return first
}

func release(e *engine, l readiness.Handle) error { return e.eng.Release(l) }

// kvready_release is each's one-lease case written out: called once a lease,
// it skips the walk's slice, status array and indirect call (about 100
// instructions of a call, callgrind, issue #40), and answers as each would.
//
//export kvready_release
func kvready_release(h C.uint64_t, lease C.uint64_t) (st C.int) {
	defer guard(uint64(h), &st)
	e, err := engineOf(h)
	if err != nil {
		return fail(uint64(h), err)
	}
	return fail(uint64(h), e.eng.Release(readiness.HandleOf(uint64(lease))))
}

//export kvready_release_many
func kvready_release_many(h C.uint64_t, leases *C.kv_cu64, n C.size_t, statuses *C.int32_t) (st C.int) {
	defer guard(uint64(h), &st)
	return each(h, leases, n, statuses, "kvready_release_many", release)
}

//export kvready_cancel
func kvready_cancel(h C.uint64_t, lease C.uint64_t) (st C.int) {
	defer guard(uint64(h), &st)
	return each(h, (*C.kv_cu64)(unsafe.Pointer(&lease)), 1, nil, "kvready_cancel",
		func(e *engine, l readiness.Handle) error { _, err := e.eng.Cancel(l); return err })
}

//export kvready_cancel_with_result
func kvready_cancel_with_result(h C.uint64_t, lease C.uint64_t, out *C.kvready_cancel_result) (st C.int) {
	defer guard(uint64(h), &st)
	e, err := engineOf(h)
	if err != nil {
		return fail(uint64(h), err)
	}
	if out == nil {
		return fail(uint64(h), invalid("kvready_cancel_with_result: result is NULL"))
	}
	r, err := e.eng.Cancel(readiness.HandleOf(uint64(lease)))
	// Written whatever the engine answered: a refusal's answer (already
	// terminal, not found, rejected) is what the caller asked for.
	*out = C.kvready_cancel_result{logical: C.int32_t(r.Logical), physical: C.int32_t(r.Physical),
		retryable: cbool(r.Retryable), safe_to_reuse: cbool(r.SafeToReuse())}
	cArray(out.reason[:], r.Reason)
	return fail(uint64(h), err)
}

//export kvready_retry
func kvready_retry(h C.uint64_t, lease C.uint64_t) (st C.int) {
	defer guard(uint64(h), &st)
	return each(h, (*C.kv_cu64)(unsafe.Pointer(&lease)), 1, nil, "kvready_retry",
		func(e *engine, l readiness.Handle) error { return e.eng.Retry(l) })
}

// fillInfo writes a LeaseInfo into the C struct.
func fillInfo(dst *C.kvready_lease_info, info readiness.LeaseInfo) {
	dst.lease = C.uint64_t(info.Handle.Uint64())
	dst.kind = C.int32_t(info.Kind)
	dst.state = C.int32_t(info.State)
	dst.outcome = C.int32_t(info.Outcome)
	dst.by_peer = cbool(info.ByPeer)
	dst.release_requested = cbool(info.ReleaseRequested)
	dst.ungrantable = cbool(info.Ungrantable)
	dst.exposed = cbool(info.Exposed)
	dst.fenced = cbool(info.Fenced)
	dst.cancel_disposition = C.int32_t(info.CancelDisposition)
	dst.rows = C.int32_t(info.Rows)
	dst.contained = cbool(info.Contained)
	dst.physical = C.int32_t(info.Disposition)
	dst.reason_len = C.uint64_t(len(info.Reason))
	cArray(dst.reason[:], info.Reason)
	cArray(dst.cancel_error[:], info.CancelError)
}

//export kvready_lease_infos
func kvready_lease_infos(h C.uint64_t, leases *C.kv_cu64, n C.size_t, infos *C.kvready_lease_info, statuses *C.int32_t) (st C.int) {
	defer guard(uint64(h), &st)
	if n > 0 && infos == nil {
		return fail(uint64(h), invalid("kvready_lease_infos: infos is NULL for %d leases", n))
	}
	var out []C.kvready_lease_info
	if n > 0 && n <= maxRows {
		out = unsafe.Slice(infos, int(n))
	}
	i := 0
	return each(h, leases, n, statuses, "kvready_lease_infos", func(e *engine, l readiness.Handle) error {
		info, err := e.eng.Lease(l)
		if err == nil {
			fillInfo(&out[i], info)
		}
		i++
		return err
	})
}

//export kvready_readiness
func kvready_readiness(h C.uint64_t, lease C.uint64_t, iv *C.kvready_interval) (st C.int) {
	defer guard(uint64(h), &st)
	e, err := engineOf(h)
	if err != nil {
		return fail(uint64(h), err)
	}
	if iv == nil {
		return fail(uint64(h), invalid("kvready_readiness: interval is NULL"))
	}
	r, err := e.eng.Readiness(readiness.HandleOf(uint64(lease)))
	if err != nil {
		return fail(uint64(h), err)
	}
	iv.restart_floor = C.int64_t(r.RestartFloor)
	iv.usable_until = C.int64_t(r.UsableUntil)
	return C.KVREADY_OK
}

//export kvready_layers
func kvready_layers(h C.uint64_t, n *C.int32_t) (st C.int) {
	defer guard(uint64(h), &st)
	e, err := engineOf(h)
	if err != nil {
		return fail(uint64(h), err)
	}
	if n == nil {
		return fail(uint64(h), invalid("kvready_layers: n (the out-parameter) is NULL"))
	}
	*n = C.int32_t(e.eng.Layers())
	return C.KVREADY_OK
}

//export kvready_layer_ready
func kvready_layer_ready(h C.uint64_t, lease C.uint64_t, layer C.int32_t, status *C.int32_t, iv *C.kvready_interval) (st C.int) {
	defer guard(uint64(h), &st)
	e, err := engineOf(h)
	if err != nil {
		return fail(uint64(h), err)
	}
	if status == nil {
		return fail(uint64(h), invalid("kvready_layer_ready: status (the out-parameter) is NULL"))
	}
	r, ls, err := e.eng.LayerReadiness(readiness.HandleOf(uint64(lease)), int(layer))
	if err != nil {
		return fail(uint64(h), err)
	}
	*status = C.int32_t(ls)
	if iv != nil {
		iv.restart_floor = C.int64_t(r.RestartFloor)
		iv.usable_until = C.int64_t(r.UsableUntil)
	}
	return C.KVREADY_OK
}

//export kvready_wait_layer
func kvready_wait_layer(h C.uint64_t, lease C.uint64_t, layer C.int32_t, timeout C.int64_t, iv *C.kvready_interval) (st C.int) {
	defer guard(uint64(h), &st)
	e, err := engineOf(h)
	if err != nil {
		return fail(uint64(h), err)
	}
	ctx, cancel, err := e.waitCtx("kvready_wait_layer", timeout)
	if err != nil {
		return fail(uint64(h), err)
	}
	defer cancel()
	var r staging.Interval
	err = e.waited("kvready_wait_layer", func() (err error) {
		r, err = e.eng.WaitLayer(ctx, readiness.HandleOf(uint64(lease)), int(layer))
		return err
	})
	if err == nil && iv != nil {
		iv.restart_floor = C.int64_t(r.RestartFloor)
		iv.usable_until = C.int64_t(r.UsableUntil)
	}
	return fail(e.owner(), err)
}

//export kvready_layer_computed
func kvready_layer_computed(h C.uint64_t, lease C.uint64_t, layer C.int32_t, event C.uint64_t) (st C.int) {
	defer guard(uint64(h), &st)
	e, err := engineOf(h)
	if err != nil {
		return fail(uint64(h), err)
	}
	var after gpu.Event
	if event != 0 {
		if after, err = e.dev.event(uint64(event), "kvready_layer_computed"); err != nil {
			return fail(uint64(h), err)
		}
	}
	err = e.eng.Computed(readiness.HandleOf(uint64(lease)), int(layer), after)
	if errors.Is(err, readiness.ErrRefused) {
		// The lifecycle refuses a layer where the lease stands (not granted
		// yet, or past its copies): a misuse, as kvready.h says, not a failure.
		err = invalid("kvready_layer_computed: %v; want a granted layerwise publish (kvready_wait with KVREADY_UNTIL_GRANTED first)", err)
	}
	return fail(uint64(h), err)
}

//export kvready_arrived
func kvready_arrived(h C.uint64_t, lease C.uint64_t, groups, blocks *C.int32_t, cap C.size_t, n *C.size_t) (st C.int) {
	defer guard(uint64(h), &st)
	e, err := engineOf(h)
	if err != nil {
		return fail(uint64(h), err)
	}
	gb, err := e.eng.Arrived(readiness.HandleOf(uint64(lease)), nil)
	if err != nil {
		return fail(uint64(h), err)
	}
	total := 0
	for _, g := range gb {
		total += len(g.Blocks)
	}
	if n != nil {
		*n = C.size_t(total)
	}
	if !fits(cap, total) || (total > 0 && (groups == nil || blocks == nil)) {
		return fail(uint64(h), statusf(C.KVREADY_ERR_BUFFER, "kvready_arrived: %d blocks arrived; the arrays hold %d (groups or blocks NULL: %v)", total, uint64(cap), groups == nil || blocks == nil))
	}
	if total == 0 {
		return C.KVREADY_OK
	}
	gs := outView((*int32)(unsafe.Pointer(groups)), cap, total)
	bs := outView((*int32)(unsafe.Pointer(blocks)), cap, total)
	k := 0
	for _, g := range gb {
		for _, b := range g.Blocks {
			gs[k], bs[k] = int32(g.Group), int32(b)
			k++
		}
	}
	return C.KVREADY_OK
}

//export kvready_wait
func kvready_wait(h C.uint64_t, lease C.uint64_t, until C.int32_t, timeout C.int64_t, info *C.kvready_lease_info) (st C.int) {
	defer guard(uint64(h), &st)
	e, err := engineOf(h)
	if err != nil {
		return fail(uint64(h), err)
	}
	if until != C.KVREADY_UNTIL_SETTLED && until != C.KVREADY_UNTIL_RELEASED && until != C.KVREADY_UNTIL_GRANTED {
		return fail(uint64(h), invalid("kvready_wait: until %d; want KVREADY_UNTIL_SETTLED (1), KVREADY_UNTIL_RELEASED (2) or KVREADY_UNTIL_GRANTED (3)", int(until)))
	}
	ctx, cancel, err := e.waitCtx("kvready_wait", timeout)
	if err != nil {
		return fail(uint64(h), err)
	}
	defer cancel()
	var li readiness.LeaseInfo
	err = e.waited("kvready_wait", func() (err error) {
		li, err = e.eng.Wait(ctx, readiness.HandleOf(uint64(lease)), readiness.Until(until))
		return err
	})
	if info != nil && li.Handle.Uint64() != 0 {
		fillInfo(info, li)
	}
	return fail(e.owner(), err)
}

//export kvready_sync
func kvready_sync(h C.uint64_t, timeout C.int64_t, moves *C.int64_t) (st C.int) {
	defer guard(uint64(h), &st)
	e, err := engineOf(h)
	if err != nil {
		return fail(uint64(h), err)
	}
	ctx, cancel, err := e.waitCtx("kvready_sync", timeout)
	if err != nil {
		return fail(uint64(h), err)
	}
	defer cancel()
	var n int
	err = e.waited("kvready_sync", func() (err error) { n, err = e.eng.Sync(ctx); return err })
	if moves != nil {
		*moves = C.int64_t(n)
	}
	return fail(e.owner(), err)
}

//export kvready_count
func kvready_count(h C.uint64_t, state C.int32_t, count *C.int64_t) (st C.int) {
	defer guard(uint64(h), &st)
	e, err := engineOf(h)
	if err != nil {
		return fail(uint64(h), err)
	}
	if state < 0 || state >= C.int32_t(readiness.NumStates) || count == nil {
		return fail(uint64(h), invalid("kvready_count: state %d (count NULL: %v); want 0 to %d and a count", int(state), count == nil, readiness.NumStates-1))
	}
	*count = C.int64_t(e.eng.Count(readiness.State(state)))
	return C.KVREADY_OK
}

//export kvready_engine_stats
func kvready_engine_stats(h C.uint64_t, out *C.kvready_stats) (st C.int) {
	defer guard(uint64(h), &st)
	e, err := engineOf(h)
	if err != nil {
		return fail(uint64(h), err)
	}
	if out == nil {
		return fail(uint64(h), invalid("kvready_engine_stats: stats is NULL"))
	}
	*out = statsToC(e.eng.Stats())
	return C.KVREADY_OK
}

// statsToC is s in C: each counter in the kvready_stats field of its name in
// snake case (TestEveryCounterReachesC walks readiness.Stats to hold it so).
func statsToC(s readiness.Stats) C.kvready_stats {
	var out C.kvready_stats
	for i, v := range s.Leases {
		out.leases[i] = C.int64_t(v)
	}
	for i, v := range s.Outcomes {
		out.outcomes[i] = C.uint64_t(v)
	}
	out.lent, out.released, out.quarantined_leases = C.uint64_t(s.Lent), C.uint64_t(s.Released), C.uint64_t(s.QuarantinedLeases)
	out.slots_free, out.slots_held, out.slots_quarantined = C.int64_t(s.SlotsFree), C.int64_t(s.SlotsHeld), C.int64_t(s.SlotsQuarantined)
	out.refused, out.stale_evidence, out.violations, out.unproven = C.uint64_t(s.Refused), C.uint64_t(s.StaleEvidence), C.uint64_t(s.Violations), C.uint64_t(s.Unproven)
	out.quiesce_calls, out.quiesce_retries, out.quiesce_timeouts = C.uint64_t(s.QuiesceCalls), C.uint64_t(s.QuiesceRetries), C.uint64_t(s.QuiesceTimeouts)
	out.cancel_requests, out.cancel_errors = C.uint64_t(s.CancelRequests), C.uint64_t(s.CancelErrors)
	out.ungrantable, out.containments, out.invariant_breaches = C.uint64_t(s.Ungrantable), C.uint64_t(s.Containments), C.uint64_t(s.InvariantBreaches)
	out.recovered = C.uint64_t(s.Recovered)
	out.outstanding, out.max_outstanding = C.int64_t(s.Outstanding), C.int64_t(s.MaxOutstanding)
	out.halted = cbool(s.Halted)
	out.fetcher_faults, out.publisher_faults = cFaults(s.FetcherFaults), cFaults(s.PublisherFaults)
	out.handoffs, out.quiesce_probes = C.uint64_t(s.Handoffs), C.uint64_t(s.QuiesceProbes)
	out.slots_inherited = C.int64_t(s.SlotsInherited)
	return out
}

func cFaults(f readiness.BackendFaults) C.kvready_backend_faults {
	return C.kvready_backend_faults{violations: C.uint64_t(f.Violations), panics: C.uint64_t(f.Panics),
		repeated_completions: C.uint64_t(f.RepeatedCompletions), early_completions: C.uint64_t(f.EarlyCompletions)}
}

//export kvready_containments
func kvready_containments(h C.uint64_t, out *C.kvready_containment, cap C.size_t, n *C.size_t) (st C.int) {
	defer guard(uint64(h), &st)
	e, err := engineOf(h)
	if err != nil {
		return fail(uint64(h), err)
	}
	e.st.Lock()
	defer e.st.Unlock()
	dst := outView(out, cap, len(e.contained))
	k := len(dst)
	if k > 0 {
		for i, c := range e.contained[:k] {
			dst[i].lease = C.uint64_t(c.Lease.Uint64())
			dst[i].slots = C.int64_t(c.Slots)
			dst[i].deadline_unix_ns = C.int64_t(c.Deadline.UnixNano())
			cArray(dst[i].reason[:], c.Reason)
		}
		rest := copy(e.contained, e.contained[k:])
		clear(e.contained[rest:])
		e.contained = e.contained[:rest]
	}
	if n != nil {
		*n = C.size_t(k)
	}
	return C.KVREADY_OK
}

//export kvready_recoveries
func kvready_recoveries(h C.uint64_t, out *C.uint64_t, cap C.size_t, n *C.size_t) (st C.int) {
	defer guard(uint64(h), &st)
	e, err := engineOf(h)
	if err != nil {
		return fail(uint64(h), err)
	}
	e.st.Lock()
	defer e.st.Unlock()
	k := copy(outView((*uint64)(unsafe.Pointer(out)), cap, len(e.recovered)), e.recovered)
	if k > 0 {
		rest := copy(e.recovered, e.recovered[k:])
		e.recovered = e.recovered[:rest]
	}
	if n != nil {
		*n = C.size_t(k)
	}
	return C.KVREADY_OK
}

func fillReport(dst *C.kvready_report, r readiness.Report) {
	*dst = C.kvready_report{}
	for i, v := range r.Held {
		dst.held[i] = C.int64_t(v)
	}
	dst.slots_held, dst.slots_quarantined = C.int64_t(r.SlotsHeld), C.int64_t(r.SlotsQuarantined)
	dst.drained, dst.halted = cbool(r.Drained), cbool(r.Halted != nil)
	if r.Halted != nil {
		cArray(dst.halt_reason[:], r.Halted.Error())
	}
	dst.in_doubt, dst.physical, dst.safe_to_release = C.int64_t(r.InDoubt), C.int32_t(r.Physical), cbool(r.SafeToRelease())
}

//export kvready_engine_close
func kvready_engine_close(h C.uint64_t, report *C.kvready_report) (st C.int) {
	defer guard(uint64(h), &st)
	e, err := engineOf(h)
	if err != nil {
		return fail(uint64(h), err)
	}
	e.wake.drain()
	r := e.eng.Close()
	if report != nil {
		fillReport(report, r)
	}
	return C.KVREADY_OK
}

//export kvready_engine_shutdown
func kvready_engine_shutdown(h C.uint64_t, timeout C.int64_t, report *C.kvready_report) (st C.int) {
	defer guard(uint64(h), &st)
	e, err := engineOf(h)
	if err != nil {
		return fail(uint64(h), err)
	}
	ctx, cancel, err := e.waitCtx("kvready_engine_shutdown", timeout)
	if err != nil {
		return fail(uint64(h), err)
	}
	defer cancel()
	var r readiness.Report
	err = e.waited("kvready_engine_shutdown", func() (err error) { r, err = e.eng.Shutdown(ctx); return err })
	if report != nil {
		fillReport(report, r)
	}
	return fail(e.owner(), err)
}

//export kvready_engine_report
func kvready_engine_report(h C.uint64_t, report *C.kvready_report) (st C.int) {
	defer guard(uint64(h), &st)
	e, err := engineOf(h)
	if err != nil {
		return fail(uint64(h), err)
	}
	if report == nil {
		return fail(uint64(h), invalid("kvready_engine_report: report is NULL"))
	}
	fillReport(report, e.eng.Report())
	return C.KVREADY_OK
}

//export kvready_engine_free
func kvready_engine_free(h C.uint64_t, force C.int32_t) (st C.int) {
	defer guard(uint64(h), &st)
	e, err := engineOf(h)
	if err != nil {
		return fail(uint64(h), err)
	}
	if !e.waiting.TryLock() {
		// Another thread waits on the engine (kvready_wait, _sync,
		// _engine_shutdown): the engine is not read under it.
		if force == 0 {
			return fail(uint64(h), statusf(C.KVREADY_ERR_BUSY,
				"kvready_engine_free: another thread is waiting on this engine (kvready_wait, kvready_sync or kvready_engine_shutdown); pass force to free it, and that wait returns KVREADY_ERR_CLOSED"))
		}
		e.kill() // that wait returns now, CLOSED
		e.waiting.Lock()
	}
	defer e.waiting.Unlock()
	if e.freed.Load() {
		return fail(uint64(h), statusf(C.KVREADY_ERR_BAD_HANDLE, "kvready: engine %#x was freed", uint64(h)))
	}
	r := e.eng.Report()
	if !r.Drained && force == 0 {
		return fail(uint64(h), statusf(C.KVREADY_ERR_BUSY,
			"kvready_engine_free: the engine has not drained (%d slots still held, %d quarantined); shut it down first (kvready_engine_shutdown), or pass force", r.SlotsHeld, r.SlotsQuarantined))
	}
	if !r.Drained {
		e.eng.Close() // admission stops; what is held stays held: nothing is freed early
	}
	e.freed.Store(true)
	e.kill()
	e.wake.close()
	unregister(uint64(h))
	if r.Drained {
		// Objects the engine used are free to close now; an engine abandoned
		// undrained keeps them, since its goroutines may still use them.
		e.mem.users.Add(-1)
		e.dev.users.Add(-1)
		for _, b := range []*backend{e.fetcher, e.publisher} {
			if b != nil {
				b.users.Add(-1)
			}
		}
	}
	return C.KVREADY_OK
}
