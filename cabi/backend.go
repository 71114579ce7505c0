package main

/*
#include "cgo.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
	"weak"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/backend/redis"
	"github.com/kvready/kvready/backend/tiers"
	"github.com/kvready/kvready/contract"
)

// backend is a backend object: a Go backend opened by URL, or one the
// embedder implements through C callbacks (c is then set).
type backend struct {
	fetcher   contract.Fetcher
	publisher contract.Publisher
	put       func(extent string, name contract.Name, row []byte) error
	get       func(extent string, name contract.Name) ([]byte, bool, error)
	close     func() error
	c         *cBackend
	tiers     *tiers.Backend // set for a backend of tiers (kvready_backend_open_tiers)
	peer      *peerSide      // set for a peer backend (kvready_peer_receiver_new, _sender_new)
	mem       *memory
	users     atomic.Int32 // engines using it
	closed    atomic.Bool
}

// openTimeout bounds the connection check of a backend opened by URL.
const openTimeout = 10 * time.Second

//export kvready_backend_open
func kvready_backend_open(rawURL *C.kv_cchar, memh C.uint64_t, out *C.uint64_t) (st C.int) {
	defer guard(0, &st)
	if rawURL == nil || out == nil {
		return fail(0, invalid("kvready_backend_open: url and backend (the out-parameter) are required (NULL given)"))
	}
	m, err := lookup[*memory](uint64(memh), kindMemory)
	if err != nil {
		return fail(0, err)
	}
	b, err := openURL(C.GoString((*C.char)(unsafe.Pointer(rawURL))), m)
	if err != nil {
		return fail(0, err)
	}
	b.mem = m
	m.users.Add(1)
	*out = C.uint64_t(register(kindBackend, b))
	return C.KVREADY_OK
}

// openURL opens a Go backend: mem or a Redis-compatible store (and, in the
// test library only, the fault backends: openFault).
func openURL(raw string, m *memory) (*backend, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, invalid("kvready_backend_open: %q is not a URL: %v; want mem, mem:?capacity=N, mem:?capacity_bytes=N or redis://host:port", raw, err)
	}
	if b, ok, err := openFault(raw, u, m); ok {
		return b, err
	}
	switch {
	case raw == "mem" || u.Scheme == "mem":
		q := u.Query()
		for k := range q {
			if k != "capacity" && k != "capacity_bytes" {
				return nil, invalid("kvready_backend_open %s: unknown parameter %q; want capacity or capacity_bytes", raw, k)
			}
		}
		return openMem(raw, q, m)
	case u.Scheme == "redis" || u.Scheme == "rediss" || u.Scheme == "unix":
		ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
		defer cancel()
		b, err := redis.Open(ctx, raw, m.rows)
		if err != nil {
			status := C.int(C.KVREADY_ERR_BACKEND)
			switch {
			case errors.Is(err, redis.ErrConfig):
				status = C.KVREADY_ERR_CONFIG
			case errors.Is(err, redis.ErrUnavailable):
				status = C.KVREADY_ERR_UNAVAILABLE
			}
			return nil, statusf(status, "kvready_backend_open: %v", err)
		}
		return &backend{
			fetcher: b, publisher: b, close: b.Close,
			put: func(ext string, n contract.Name, row []byte) error {
				ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
				defer cancel()
				return b.Put(ctx, ext, n, row)
			},
			get: func(ext string, n contract.Name) ([]byte, bool, error) {
				ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
				defer cancel()
				return b.Get(ctx, ext, n)
			},
		}, nil
	}
	return nil, invalid("kvready_backend_open: %q: unknown backend; want mem, mem:?capacity=N, mem:?capacity_bytes=N, redis://host:port[/db], rediss://... or unix:///path", raw)
}

// openMem opens backend/mem over m with the capacity the query names, and
// opts (the test library's fault modes).
func openMem(raw string, q url.Values, m *memory, opts ...mem.Option) (*backend, error) {
	capacity, err := memCapacity(raw, q)
	if err != nil {
		return nil, err
	}
	b, err := mem.New(m.rows, append(opts, capacity...)...)
	if err != nil {
		return nil, invalid("kvready_backend_open %s: %v", raw, err)
	}
	return memBackend(b), nil
}

// memCapacity is the store's bounds the query names: capacity=N rows,
// capacity_bytes=N bytes (a local tier is bounded in bytes: its rows are
// whatever size the staging slots are), either, both or none. A bound given
// twice is refused, as backend/redis refuses a repeated key.
func memCapacity(raw string, q url.Values) ([]mem.Option, error) {
	var opts []mem.Option
	for _, k := range []string{"capacity", "capacity_bytes"} {
		vs := q[k]
		if len(vs) == 0 {
			continue
		}
		if len(vs) > 1 {
			return nil, invalid("kvready_backend_open %s: %s given %d times; want it once", raw, k, len(vs))
		}
		n, err := strconv.ParseInt(vs[0], 10, strconv.IntSize)
		if err != nil || n < 0 {
			what := "rows"
			if k == "capacity_bytes" {
				what = "bytes"
			}
			return nil, invalid("kvready_backend_open %s: %s %q; want a number of %s >= 0 (0: unbounded)", raw, k, vs[0], what)
		}
		if k == "capacity" {
			opts = append(opts, mem.WithCapacity(int(n)))
		} else {
			opts = append(opts, mem.WithCapacityBytes(n))
		}
	}
	return opts, nil
}

// memBackend is the cabi backend over a backend/mem store (or a wrapper of
// one with the same direct access).
func memBackend(b interface {
	contract.Fetcher
	contract.Publisher
	Close() error
	Put(string, contract.Name, []byte)
	Get(string, contract.Name) ([]byte, bool)
}) *backend {
	return &backend{
		fetcher: b, publisher: b, close: b.Close,
		put: func(ext string, n contract.Name, row []byte) error { b.Put(ext, n, row); return nil },
		get: func(ext string, n contract.Name) ([]byte, bool, error) { v, ok := b.Get(ext, n); return v, ok, nil },
	}
}

//export kvready_backend_new
func kvready_backend_new(cb *C.kv_cbackend_callbacks, memh C.uint64_t, out *C.uint64_t) (st C.int) {
	defer guard(0, &st)
	if cb == nil || out == nil {
		return fail(0, invalid("kvready_backend_new: callbacks and backend (the out-parameter) are required (NULL given)"))
	}
	m, err := lookup[*memory](uint64(memh), kindMemory)
	if err != nil {
		return fail(0, err)
	}
	var missing []string
	if cb.fetch == nil && cb.publish == nil {
		missing = append(missing, "fetch or publish")
	}
	if cb.poll == nil {
		missing = append(missing, "poll")
	}
	if cb.quiesce == nil {
		missing = append(missing, "quiesce")
	}
	if len(missing) > 0 {
		return fail(0, invalid("kvready_backend_new: the callbacks lack %v; a backend needs fetch and/or publish, poll and quiesce", missing))
	}
	table := C.kv_copy_backend((*C.kvready_backend_callbacks)(unsafe.Pointer(cb)))
	if table == nil {
		return fail(0, statusf(C.KVREADY_ERR_FAILED, "kvready_backend_new: out of C memory"))
	}
	c := &cBackend{cb: table, mem: m, attempts: map[uint64]weak.Pointer[cAttempt]{}, early: map[uint64]struct{}{}}
	b := &backend{c: c, mem: m}
	probes := cb.try_quiesce != nil
	switch {
	case cb.fetch != nil && probes:
		b.fetcher = cProber{c}
	case cb.fetch != nil:
		b.fetcher = c
	}
	switch {
	case cb.publish != nil && probes:
		b.publisher = pubProber{pubOnly{c}}
	case cb.publish != nil:
		b.publisher = pubOnly{c}
	}
	if cb.put != nil {
		b.put = c.Put
	}
	if cb.get != nil {
		b.get = c.Get
	}
	b.close = c.close
	m.users.Add(1)
	*out = C.uint64_t(register(kindBackend, b))
	return C.KVREADY_OK
}

//export kvready_attempt_done
func kvready_attempt_done(h C.uint64_t, attempt C.uint64_t) (st C.int) {
	defer guard(uint64(h), &st)
	b, err := lookup[*backend](uint64(h), kindBackend)
	if err != nil {
		return fail(uint64(h), err)
	}
	if b.c == nil {
		return fail(uint64(h), statusf(C.KVREADY_ERR_UNSUPPORTED, "kvready_attempt_done: this backend is kvready's own; only a backend made by kvready_backend_new reports attempts"))
	}
	return fail(uint64(h), b.c.done(uint64(attempt)))
}

// maxRow bounds a row kvready_backend_put stores (4 GiB: past any slot).
const maxRow = 1 << 32

//export kvready_backend_put
func kvready_backend_put(h C.uint64_t, ext *C.kv_cu8, extLen C.size_t, name *C.kv_cu8, row *C.kv_cvoid, n C.size_t) (st C.int) {
	defer guard(uint64(h), &st)
	b, err := lookup[*backend](uint64(h), kindBackend)
	if err != nil {
		return fail(uint64(h), err)
	}
	if b.put == nil {
		return fail(uint64(h), statusf(C.KVREADY_ERR_UNSUPPORTED, "kvready_backend_put: this backend stores nothing directly (no put callback)"))
	}
	if name == nil {
		return fail(uint64(h), invalid("kvready_backend_put: name is NULL; want %d bytes", contract.NameSize))
	}
	nm, _ := contract.NameFromBytes(bytesOf(unsafe.Pointer(name), contract.NameSize))
	extName, err := inBytes(unsafe.Pointer(ext), extLen, maxDocument, "kvready_backend_put: extent_name")
	if err != nil {
		return fail(uint64(h), err)
	}
	in, err := inBytes(unsafe.Pointer(row), n, maxRow, "kvready_backend_put: row")
	if err != nil {
		return fail(uint64(h), err)
	}
	v := append([]byte(nil), in...)
	if err := b.put(string(extName), nm, v); err != nil {
		return fail(uint64(h), statusf(C.KVREADY_ERR_BACKEND, "kvready_backend_put: %v", err))
	}
	return C.KVREADY_OK
}

//export kvready_backend_get
func kvready_backend_get(h C.uint64_t, ext *C.kv_cu8, extLen C.size_t, name *C.kv_cu8, row unsafe.Pointer, cap C.size_t, n *C.size_t, found *C.int32_t) (st C.int) {
	defer guard(uint64(h), &st)
	b, err := lookup[*backend](uint64(h), kindBackend)
	if err != nil {
		return fail(uint64(h), err)
	}
	if b.get == nil {
		return fail(uint64(h), statusf(C.KVREADY_ERR_UNSUPPORTED, "kvready_backend_get: this backend reads nothing back directly (no get callback)"))
	}
	if name == nil || found == nil {
		return fail(uint64(h), invalid("kvready_backend_get: name and found are required (NULL given)"))
	}
	nm, _ := contract.NameFromBytes(bytesOf(unsafe.Pointer(name), contract.NameSize))
	extName, err := inBytes(unsafe.Pointer(ext), extLen, maxDocument, "kvready_backend_get: extent_name")
	if err != nil {
		return fail(uint64(h), err)
	}
	v, ok, err := b.get(string(extName), nm)
	if err != nil {
		return fail(uint64(h), statusf(C.KVREADY_ERR_BACKEND, "kvready_backend_get: %v", err))
	}
	*found = 0
	if !ok {
		return C.KVREADY_OK
	}
	*found = 1
	if n != nil {
		*n = C.size_t(len(v))
	}
	if !fits(cap, len(v)) || (len(v) > 0 && row == nil) {
		return fail(uint64(h), statusf(C.KVREADY_ERR_BUFFER, "kvready_backend_get: the row is %d bytes; the buffer holds %d (row NULL: %v)", len(v), uint64(cap), row == nil))
	}
	copy(outView((*byte)(row), cap, len(v)), v)
	return C.KVREADY_OK
}

//export kvready_backend_close
func kvready_backend_close(h C.uint64_t) (st C.int) {
	defer guard(uint64(h), &st)
	b, err := lookup[*backend](uint64(h), kindBackend)
	if err != nil {
		return fail(uint64(h), err)
	}
	if u := b.users.Load(); u > 0 {
		return fail(uint64(h), statusf(C.KVREADY_ERR_BUSY, "kvready_backend_close: %d engines still use this backend; free them first (kvready_engine_free)", u))
	}
	unregister(uint64(h))
	return fail(0, b.shut())
}

// shut closes the backend once.
func (b *backend) shut() error {
	if b.closed.Swap(true) {
		return nil
	}
	b.mem.users.Add(-1)
	if err := b.close(); err != nil {
		return statusf(C.KVREADY_ERR_BACKEND, "kvready: closing the backend: %v", err)
	}
	return nil
}

// ---- the embedder's backend ------------------------------------------------

// cBackend is a contract.Fetcher (and, through pubOnly, a Publisher) whose
// methods call the embedder's C callbacks. Its attempts are kept by the
// engine, not here: the table maps attempt ids to weak pointers, and the
// embedder is told to forget an attempt once nothing in Go holds it.
type cBackend struct {
	cb  *C.kvready_backend_callbacks // C memory: a copy of the embedder's table
	mem *memory

	mu       sync.Mutex
	attempts map[uint64]weak.Pointer[cAttempt]
	early    map[uint64]struct{} // done before its submission returned
	closed   bool
}

// maxEarly bounds the attempts reported done before their submission
// returned: more are refused, so a backend that reports unknown attempts
// cannot grow the table without bound.
const maxEarly = 1 << 16

// errBuf is the size of the message buffer handed to a callback.
const errBuf = 512

func (c *cBackend) Fetch(extent contract.CacheExtent, route contract.Route) (contract.Attempt, error) {
	if route != nil {
		return nil, fmt.Errorf("kvready: %w: a route was given, but a backend written through the C ABI opens none", contract.ErrSubmissionRejected)
	}
	return c.submit(0, extent)
}

func (c *cBackend) submit(publish C.int, extent contract.CacheExtent) (contract.Attempt, error) {
	op := "fetch"
	if publish != 0 {
		op = "publish"
	}
	if detached.Load() {
		return nil, fmt.Errorf("kvready: %s: %w: %v", op, contract.ErrSubmissionRejected, errDetached)
	}
	units := make([]C.kvready_unit, extent.Len())
	for i, u := range extent.All() {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&units[i].name[0])), contract.NameSize), u.Name[:])
		units[i].group = C.int32_t(u.LocalGroup)
		units[i].local = C.int32_t(u.Local)
	}
	name := []byte(extent.Name())
	var unitPtr *C.kvready_unit
	if len(units) > 0 {
		unitPtr = &units[0]
	}
	var namePtr *C.uint8_t
	if len(name) > 0 {
		namePtr = (*C.uint8_t)(unsafe.Pointer(&name[0]))
	}
	var id C.uint64_t
	var msg [errBuf]C.char
	last := C.int32_t(0)
	if extent.IsLast() {
		last = 1
	}
	st := C.kv_fetch(c.cb, publish, namePtr, C.size_t(len(name)), unitPtr, C.size_t(len(units)), last, &id, &msg[0], errBuf)
	why := goStringN(&msg[0], errBuf)
	switch {
	case st == C.KVREADY_ERR_REJECTED:
		return nil, fmt.Errorf("kvready: %s: %w: %s", op, contract.ErrSubmissionRejected, orStatus(why, st))
	case st != C.KVREADY_OK:
		return nil, fmt.Errorf("kvready: the embedder's %s failed with its effects unknown: %s", op, orStatus(why, st))
	case id == 0:
		return nil, fmt.Errorf("kvready: the embedder's %s answered KVREADY_OK with attempt 0; want a nonzero attempt id, or KVREADY_ERR_REJECTED", op)
	}
	return c.keep(uint64(id), len(units)), nil
}

func orStatus(msg string, st C.int) string {
	if msg == "" {
		return fmt.Sprintf("status %d, no message", int(st))
	}
	return msg
}

// keep wraps a new attempt id, and arranges for the embedder to be told to
// forget it once nothing in Go holds it.
func (c *cBackend) keep(id uint64, units int) contract.Attempt {
	a := &cAttempt{c: c, id: id, units: units}
	c.mu.Lock()
	if _, ok := c.early[id]; ok {
		delete(c.early, id)
		a.answered = true
	}
	c.attempts[id] = weak.Make(a)
	c.mu.Unlock()
	runtime.AddCleanup(a, c.forget, id)
	if c.cb.notifies != 0 {
		return &notifyingAttempt{a}
	}
	return a
}

// forget runs once nothing in Go holds attempt id.
func (c *cBackend) forget(id uint64) {
	c.mu.Lock()
	if w, ok := c.attempts[id]; ok && w.Value() == nil {
		delete(c.attempts, id)
	}
	closed := c.closed
	c.mu.Unlock()
	if c.cb.forget != nil && !closed && !detached.Load() {
		C.kv_forget(c.cb, C.uint64_t(id))
	}
}

// done records that attempt id has an answer, and notifies whoever waits.
func (c *cBackend) done(id uint64) error {
	c.mu.Lock()
	w, ok := c.attempts[id]
	var a *cAttempt
	if ok {
		a = w.Value()
	}
	if a == nil {
		if len(c.early) >= maxEarly {
			c.mu.Unlock()
			return invalid("kvready_attempt_done: attempt %d is unknown, and %d unknown attempts are already pending; report an attempt after its submission returned it", id, maxEarly)
		}
		c.early[id] = struct{}{}
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	a.mu.Lock()
	a.answered = true
	f := a.notify
	a.notify = nil
	a.mu.Unlock()
	if f != nil {
		f()
	}
	return nil
}

func (c *cBackend) Quiesce(ctx context.Context, attempts []contract.Attempt) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("kvready: Quiesce: %w", err)
	}
	if detached.Load() {
		return false, errDetached
	}
	if len(attempts) == 0 {
		return true, nil
	}
	ids, err := c.ids("Quiesce", attempts)
	if err != nil {
		return false, err
	}
	timeout := time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), 0)
	}
	var proven C.int32_t
	var msg [errBuf]C.char
	st := C.kv_quiesce(c.cb, &ids[0], C.size_t(len(ids)), C.int64_t(timeout), &proven, &msg[0], errBuf)
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("kvready: Quiesce answered after its context ended (a true answer then proves nothing): %w", err)
	}
	if st != C.KVREADY_OK {
		return false, fmt.Errorf("kvready: the embedder's quiesce failed: %s", orStatus(goStringN(&msg[0], errBuf), st))
	}
	return proven != 0, nil
}

// ids returns the embedder's ids of attempts, all of which must be this
// backend's.
func (c *cBackend) ids(method string, attempts []contract.Attempt) ([]C.uint64_t, error) {
	ids := make([]C.uint64_t, len(attempts))
	for i, at := range attempts {
		a := asC(at)
		if a == nil || a.c != c {
			return nil, fmt.Errorf("kvready: %s: attempt %d (%T) is not one of this backend's", method, i, at)
		}
		ids[i] = C.uint64_t(a.id)
	}
	return ids, nil
}

// tryQuiesce asks the embedder's try_quiesce (set: cProber and pubProber
// carry it). An answer outside the three is passed on as it was answered:
// the engine takes it as no answer, proving nothing.
func (c *cBackend) tryQuiesce(attempts []contract.Attempt) (contract.Access, error) {
	if detached.Load() {
		return contract.AccessUnknown, errDetached
	}
	if len(attempts) == 0 {
		return contract.AccessEnded, nil
	}
	ids, err := c.ids("TryQuiesce", attempts)
	if err != nil {
		return contract.AccessUnknown, err
	}
	var access C.int32_t
	var msg [errBuf]C.char
	if st := C.kv_try_quiesce(c.cb, &ids[0], C.size_t(len(ids)), &access, &msg[0], errBuf); st != C.KVREADY_OK {
		return contract.AccessUnknown, fmt.Errorf("kvready: the embedder's try_quiesce failed: %s", orStatus(goStringN(&msg[0], errBuf), st))
	}
	if access < 0 || access > 255 {
		return contract.Access(255), nil
	}
	return contract.Access(access), nil
}

// cProber is a cBackend whose embedder answers proofs without blocking
// (try_quiesce): a contract.QuiesceProber.
type cProber struct{ *cBackend }

func (p cProber) TryQuiesce(attempts []contract.Attempt) (contract.Access, error) {
	return p.tryQuiesce(attempts)
}

// pubProber is pubOnly with try_quiesce.
type pubProber struct{ pubOnly }

func (p pubProber) TryQuiesce(attempts []contract.Attempt) (contract.Access, error) {
	return p.tryQuiesce(attempts)
}

// Settle polls until every attempt has an outcome or ctx ends.
func (c *cBackend) Settle(ctx context.Context, attempts []contract.Attempt) error {
	wait := 50 * time.Microsecond
	for {
		pending := 0
		for _, a := range attempts {
			if a.Poll() == nil {
				pending++
			}
		}
		if pending == 0 {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("kvready: Settle: %d attempts still without an outcome: %w", pending, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Millisecond)
	}
}

// Probe cannot answer more cheaply than a fetch: the C ABI has no probe.
func (c *cBackend) Probe(context.Context, []byte, []contract.Name) (contract.NameSet, bool, error) {
	return contract.NameSet{}, false, nil
}

// OpenRoute refuses: a backend written through the C ABI is single-source.
func (c *cBackend) OpenRoute(map[string]string) (contract.Route, error) {
	return nil, fmt.Errorf("kvready: OpenRoute: %w: a backend written through the C ABI has no routes", errors.ErrUnsupported)
}

// Put stores a row through the embedder's put callback.
func (c *cBackend) Put(extent string, name contract.Name, row []byte) error {
	if detached.Load() {
		return errDetached
	}
	ext := []byte(extent)
	st := C.kv_put(c.cb, ptr8(ext), C.size_t(len(ext)), (*C.uint8_t)(unsafe.Pointer(&name[0])), ptr8(row), C.size_t(len(row)))
	if st != C.KVREADY_OK {
		return fmt.Errorf("kvready: the embedder's put failed with status %d", int(st))
	}
	return nil
}

// Get reads a row back through the embedder's get callback.
func (c *cBackend) Get(extent string, name contract.Name) ([]byte, bool, error) {
	if detached.Load() {
		return nil, false, errDetached
	}
	ext := []byte(extent)
	buf := make([]byte, 4096)
	for range 2 {
		var n C.size_t
		var found C.int32_t
		st := C.kv_get(c.cb, ptr8(ext), C.size_t(len(ext)), (*C.uint8_t)(unsafe.Pointer(&name[0])), ptr8(buf), C.size_t(len(buf)), &n, &found)
		switch {
		case st == C.KVREADY_ERR_BUFFER && int(n) > len(buf):
			buf = make([]byte, int(n))
			continue
		case st != C.KVREADY_OK:
			return nil, false, fmt.Errorf("kvready: the embedder's get failed with status %d", int(st))
		case found == 0:
			return nil, false, nil
		case int(n) > len(buf):
			return nil, false, fmt.Errorf("kvready: the embedder's get said %d bytes into a %d-byte buffer", int(n), len(buf))
		}
		return buf[:n], true, nil
	}
	return nil, false, errors.New("kvready: the embedder's get kept asking for a bigger buffer")
}

func ptr8(b []byte) *C.uint8_t {
	if len(b) == 0 {
		return nil
	}
	return (*C.uint8_t)(unsafe.Pointer(&b[0]))
}

func (c *cBackend) close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	if c.cb.close != nil && !detached.Load() {
		C.kv_backend_close(c.cb)
	}
	// The table stays allocated: attempts the engine still holds (a
	// quarantined lease keeps its attempt for ever) may still be polled.
	return nil
}

// pubOnly makes a cBackend a contract.Publisher.
type pubOnly struct{ *cBackend }

func (p pubOnly) Publish(extent contract.CacheExtent) (contract.Attempt, error) {
	return p.submit(1, extent)
}

// cAttempt is one attempt of the embedder's backend.
type cAttempt struct {
	c     *cBackend
	id    uint64
	units int

	mu       sync.Mutex // serialises polls (the served buffer) and notification
	served   []byte
	answered bool
	notify   func()
}

// notifyingAttempt is a cAttempt of a backend that reports answers
// (kvready_attempt_done): a contract.Notifier, so the engine never polls it
// on a timer.
type notifyingAttempt struct{ *cAttempt }

// Notify calls f once the embedder reported an answer (at once if it did).
// An answer the embedder latched before its submission returned the attempt
// id may never be reported (a binding that learns the id only then): Poll is
// asked once, so that such an answer still calls f — once.
func (a *notifyingAttempt) Notify(f func()) {
	a.mu.Lock()
	if a.answered {
		a.mu.Unlock()
		f()
		return
	}
	a.notify = f
	a.mu.Unlock()
	if a.Poll() == nil {
		return
	}
	a.mu.Lock()
	g := a.notify
	a.notify, a.answered = nil, true
	a.mu.Unlock()
	if g != nil {
		g()
	}
}

func asC(at contract.Attempt) *cAttempt {
	switch a := at.(type) {
	case *cAttempt:
		return a
	case *notifyingAttempt:
		return a.cAttempt
	}
	return nil
}

// Poll asks the embedder. An answer that breaks the contract's shape — an
// error status, an unknown kind, more served names than units — panics, which
// the engine records as a contract violation: nothing the attempt says is
// then trusted.
func (a *cAttempt) Poll() contract.Outcome {
	if detached.Load() {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	// Room for one name more than the extent has: more names than units
	// means a name never asked for, and one is enough to show it (the
	// engine and the conformance kit then see the violation for what it is).
	capNames := a.units + 1
	if a.served == nil {
		a.served = make([]byte, capNames*contract.NameSize)
	}
	var ans C.kvready_answer
	st := C.kv_poll(a.c.cb, C.uint64_t(a.id), &ans, ptr8(a.served), C.size_t(capNames))
	if st != C.KVREADY_OK {
		panic(fmt.Sprintf("kvready: the embedder's poll of attempt %d failed with status %d", a.id, int(st)))
	}
	switch ans.kind {
	case C.KVREADY_PENDING:
		return nil
	case C.KVREADY_DELIVERED:
		n := int(ans.served)
		if n < 0 || n > capNames {
			panic(fmt.Sprintf("kvready: the embedder's poll of attempt %d answered %d served names into room for %d (an extent of %d units)", a.id, uint64(ans.served), capNames, a.units))
		}
		names := make([]contract.Name, n)
		for i := range names {
			copy(names[i][:], a.served[i*contract.NameSize:])
		}
		return contract.Delivered{Served: contract.NewNameSet(names...)}
	case C.KVREADY_ANSWER_FAILED:
		return contract.Failed{Reason: goStringN(&ans.reason[0], len(ans.reason))}
	case C.KVREADY_CANCELLED:
		return contract.Cancelled{ByPeer: ans.by_peer != 0}
	}
	panic(fmt.Sprintf("kvready: the embedder's poll of attempt %d answered kind %d; want KVREADY_PENDING, _DELIVERED, _ANSWER_FAILED or _CANCELLED", a.id, int(ans.kind)))
}

// RequestCancel asks the embedder, once per call, best effort, to stop. A
// disposition other than the two is passed on as it was answered (one that
// does not fit a byte as 0, which is neither): the engine records it on the
// lease as the request's error, and the conformance kit reports it under
// cancel_answer.
func (a *cAttempt) RequestCancel() (contract.CancelDisposition, error) {
	if a.c.cb.cancel == nil || detached.Load() {
		return contract.CancelUnsupported, nil
	}
	var d C.int32_t
	var msg [errBuf]C.char
	st := C.kv_cancel(a.c.cb, C.uint64_t(a.id), &d, &msg[0], errBuf)
	if st != C.KVREADY_OK {
		return 0, fmt.Errorf("kvready: the embedder's cancel failed: %s", orStatus(goStringN(&msg[0], errBuf), st))
	}
	if d < 0 || d > 255 {
		return 0, nil
	}
	return contract.CancelDisposition(d), nil
}

var (
	_ contract.Fetcher       = (*cBackend)(nil)
	_ contract.Publisher     = pubOnly{}
	_ contract.QuiesceProber = cProber{}
	_ contract.QuiesceProber = pubProber{}
	_ contract.Cancellable   = (*cAttempt)(nil)
	_ contract.Notifier      = (*notifyingAttempt)(nil)
)
