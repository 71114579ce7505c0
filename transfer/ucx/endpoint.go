package ucx

/*
#include <stdlib.h>
#include "kvucx.h"
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/kvready/kvready/transfer"
)

// conn is this transport's one UCP endpoint to one incarnation of a peer,
// shared by every Endpoint Connect hands out for it. One, because UCX pairs
// the k-th endpoint each side opens to the other: a message on a second
// endpoint of the sender would arrive on one the receiver never opened,
// and could not be attributed.
type conn struct {
	t       *Transport
	cep     *C.kvu_ep // nil once UCX's endpoint is closed
	id      uint64
	peer    transfer.Peer
	inc     transfer.Incarnation
	handles int   // Endpoints not yet closed
	err     error // the peer failed (or the transport closed)
	pending map[*request]struct{}
	rkeys   []C.ucp_rkey_h // OneSided: destroyed before the endpoint closes
	puts    uint64         // OneSided: puts posted, numbered from 1
	flushed uint64         // OneSided: puts up to this number completed remotely
	flush   *request       // OneSided: the flush posted to cover puts
	outbox  []*request     // messages Send queued, sent together (sendOutbox)
	outLen  int            // their bytes
	outBuf  []byte         // their copies, one buffer reused once they left: no allocation a message
	queued  bool           // in t.outboxes
}

type peerLife struct {
	peer transfer.Peer
	inc  transfer.Incarnation
}

// endpoint is one handle on a conn: a transfer.Endpoint, with its own
// operations and its own Close.
type endpoint struct {
	t       *Transport
	c       *conn
	closing bool // Close was called: every later operation is refused
	pending map[*request]struct{}
}

var _ transfer.ReportCarrier = (*endpoint)(nil)

// Connect implements transfer.Transport: an endpoint to the incarnation of
// peer whose address AddPeer recorded last. The first opens UCX's endpoint
// (ucp_ep_create, with peer error handling unless Config.NoPeerErrors);
// later ones share it while it works. Messages that arrived before it, on
// the endpoint UCX matched to this one, are checked against it and handed
// to the next Progress.
func (t *Transport) Connect(peer transfer.Peer) (transfer.Endpoint, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.w == nil {
		return nil, fmt.Errorf("%w: transport %s#%d cannot connect", ErrClosed, t.cfg.Name, t.cfg.Incarnation)
	}
	a, ok := t.peers[peer]
	if !ok {
		return nil, fmt.Errorf("ucx: no address for peer %q; AddPeer its Address first", peer)
	}
	c := t.open[peerLife{a.peer, a.inc}]
	if c == nil || c.err != nil || c.cep == nil {
		var err error
		if c, err = t.dial(a); err != nil {
			return nil, err
		}
	}
	c.handles++
	return &endpoint{t: t, c: c, pending: map[*request]struct{}{}}, nil
}

// dial opens UCX's endpoint to a; t.mu is held.
func (t *Transport) dial(a address) (*conn, error) {
	name := C.CString(string(a.peer))
	defer C.free(unsafe.Pointer(name))
	waddr := C.CBytes(a.worker)
	defer C.free(waddr)
	var cep *C.kvu_ep
	if st := C.kvu_connect(t.w, waddr, name, C.uint32_t(len(a.peer)), C.uint64_t(a.inc), &cep); st != C.UCS_OK {
		err := fmt.Errorf("ucx: connecting to %s#%d: %w", a.peer, a.inc, statusErr(C.int(st)))
		if !t.cfg.NoPeerErrors {
			err = fmt.Errorf("%w (no transport in %q that reaches it may report a failed peer: UCX 1.13's shared memory cannot; add tcp, or set Config.NoPeerErrors)", err, t.cfg.Transports)
		}
		return nil, err
	}
	c := &conn{t: t, cep: cep, id: uint64(cep.id), peer: a.peer, inc: a.inc, pending: map[*request]struct{}{}}
	t.conns[c.id] = c
	t.open[peerLife{a.peer, a.inc}] = c
	t.match(c)
	return c, nil
}

// match hands the held messages that came on c's UCP endpoint to the next
// Progress, if they claim c's peer and incarnation; t.mu is held.
func (t *Transport) match(c *conn) {
	handle := uintptr(C.kvu_ep_handle(c.cep))
	kept := t.unheard[:0]
	for _, u := range t.unheard {
		switch {
		case u.handle != handle:
			kept = append(kept, u)
		case u.peer == c.peer && u.inc == c.inc:
			t.ready = append(t.ready, call{peer: u.peer, inc: u.inc, msg: u.msg})
		default:
			t.stats.MsgsRefused++
		}
	}
	clear(t.unheard[len(kept):])
	t.unheard = kept
}

// Peer implements transfer.Endpoint.
func (ep *endpoint) Peer() (transfer.Peer, transfer.Incarnation) { return ep.c.peer, ep.c.inc }

// Err implements transfer.Endpoint: the peer's failure, ErrClosed after
// Close, or nil.
func (ep *endpoint) Err() error {
	ep.t.mu.Lock()
	defer ep.t.mu.Unlock()
	return ep.errLocked()
}

func (ep *endpoint) errLocked() error {
	switch {
	case ep.c.err != nil:
		return ep.c.err
	case ep.closing:
		return fmt.Errorf("%w: the endpoint to %s#%d", ErrClosed, ep.c.peer, ep.c.inc)
	}
	return nil
}

// remoteKey is a key unpacked on one endpoint.
type remoteKey struct {
	ep *endpoint
	k  key
	rk C.ucp_rkey_h // OneSided
}

func (k *remoteKey) Len() int { return int(k.k.len) }

// UnpackKey implements transfer.Endpoint: the key must be one the peer's
// incarnation this endpoint reaches packed, in this transport's mode.
func (ep *endpoint) UnpackKey(packed []byte) (transfer.RemoteKey, error) {
	k, err := decodeKey(packed)
	if err != nil {
		return nil, err
	}
	t := ep.t
	t.mu.Lock()
	defer t.mu.Unlock()
	c := ep.c
	switch {
	case k.owner != c.peer || k.inc != c.inc:
		return nil, fmt.Errorf("ucx: the key belongs to %s#%d; this endpoint reaches %s#%d", k.owner, k.inc, c.peer, c.inc)
	case k.mode != t.cfg.Mode:
		return nil, fmt.Errorf("ucx: a %s key on a %s transport; keys of the transport's own mode expected", k.mode, t.cfg.Mode)
	}
	if err := ep.usable(); err != nil {
		return nil, err
	}
	rk := &remoteKey{ep: ep, k: k}
	if k.mode == OneSided {
		buf := C.CBytes(k.rkey)
		defer C.free(buf)
		if st := C.kvu_rkey_unpack(c.cep, buf, &rk.rk); st != C.UCS_OK {
			return nil, fmt.Errorf("ucx: ucp_ep_rkey_unpack: %w", statusErr(C.int(st)))
		}
		c.rkeys = append(c.rkeys, rk.rk)
	}
	return rk, nil
}

// usable refuses operations on a failed or closed endpoint; t.mu is held.
func (ep *endpoint) usable() error {
	if ep.t.w == nil {
		return fmt.Errorf("%w: the transport", ErrClosed)
	}
	return ep.errLocked()
}

// operand checks a put's or get's key and range; t.mu is held.
func (ep *endpoint) operand(key transfer.RemoteKey, off, n int) (*remoteKey, error) {
	rk, ok := key.(*remoteKey)
	switch {
	case !ok || rk.ep != ep:
		return nil, errors.New("ucx: the key was not unpacked on this endpoint; UnpackKey it here first")
	case off < 0 || uint64(off)+uint64(n) > rk.k.len:
		return nil, fmt.Errorf("ucx: [%d,%d) is outside the remote registration of %d bytes", off, off+n, rk.k.len)
	}
	return rk, ep.usable()
}

// Put implements transfer.Endpoint. src is pinned, and read by UCX, until
// the request completes: Checked, when the owner answered that it applied
// the put; OneSided, when a flush posted after it completed.
func (ep *endpoint) Put(src []byte, key transfer.RemoteKey, off int) (transfer.Request, error) {
	return ep.put(src, key, off, nil)
}

// MaxCarried implements transfer.ReportCarrier: Checked, the room UCX's
// active-message header leaves (at most 1 KiB); OneSided, 0 — a
// one-sided put and a message are not ordered, so nothing rides on a put.
func (ep *endpoint) MaxCarried() int {
	t := ep.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cfg.Mode != Checked || t.w == nil {
		return 0
	}
	return t.maxCarry
}

// PutReport implements transfer.ReportCarrier (Checked mode): msg rides in
// the put's header, and the owner's handler hands it on as a message only
// after it applied the put, in the same Progress; a refused put drops it.
func (ep *endpoint) PutReport(src []byte, key transfer.RemoteKey, off int, msg []byte) (transfer.Request, error) {
	if len(msg) == 0 {
		return nil, errors.New("ucx: an empty report to carry; PutReport carries a report of 1 byte or more, Put none")
	}
	return ep.put(src, key, off, msg)
}

// put posts a put, carrying msg when it is not nil.
func (ep *endpoint) put(src []byte, key transfer.RemoteKey, off int, msg []byte) (transfer.Request, error) {
	t := ep.t
	t.mu.Lock()
	defer t.mu.Unlock()
	rk, err := ep.operand(key, off, len(src))
	if err != nil {
		return nil, err
	}
	t.sendOutbox(ep.c) // the messages Send queued before it leave before it
	var carry unsafe.Pointer
	if msg != nil {
		if t.cfg.Mode != Checked {
			return nil, fmt.Errorf("ucx: a %s put cannot carry a report; a checked transport expected (Put, Flush, then Send)", t.cfg.Mode)
		}
		if most := t.maxCarry; len(msg) > most {
			return nil, fmt.Errorf("ucx: a report of %d bytes on a put; at most %d expected (MaxCarried)", len(msg), most)
		}
		carry = unsafe.Pointer(&msg[0]) // copied into the put's header before the call returns
	}
	r := &request{t: t, kind: reqPut, ep: ep}
	var p unsafe.Pointer
	if len(src) > 0 {
		r.pin.Pin(&src[0])
		p = unsafe.Pointer(&src[0])
	}
	var st C.ucs_status_t
	if t.cfg.Mode == Checked {
		r.seq = t.nextSeq()
		eager := C.int(0)
		if len(src) <= t.cfg.eagerMax() {
			eager = 1
		}
		st = C.kvu_send_put(t.w, ep.c.cep, C.uint64_t(r.seq), C.uint64_t(rk.k.inc), C.uint64_t(rk.k.region),
			C.uint64_t(rk.k.gen), C.uint64_t(off), p, C.size_t(len(src)), carry, C.size_t(len(msg)), eager, &r.op)
	} else {
		r.kind = reqPutOS
		st = C.kvu_put_os(ep.c.cep, p, C.size_t(len(src)), C.uint64_t(rk.k.base+uint64(off)), rk.rk, &r.op)
	}
	return ep.posted(r, st, "put")
}

// Get implements transfer.Endpoint. Checked: dst is written when the
// owner's answer is settled by Progress (the owner read the pages when it
// served the get); OneSided: dst is pinned and written by UCX until the
// request completes.
func (ep *endpoint) Get(dst []byte, key transfer.RemoteKey, off int) (transfer.Request, error) {
	t := ep.t
	t.mu.Lock()
	defer t.mu.Unlock()
	rk, err := ep.operand(key, off, len(dst))
	if err != nil {
		return nil, err
	}
	t.sendOutbox(ep.c)
	r := &request{t: t, kind: reqGet, ep: ep, dst: dst}
	var st C.ucs_status_t
	if t.cfg.Mode == Checked {
		r.seq = t.nextSeq()
		st = C.kvu_send_get(t.w, ep.c.cep, C.uint64_t(r.seq), C.uint64_t(rk.k.inc), C.uint64_t(rk.k.region),
			C.uint64_t(rk.k.gen), C.uint64_t(off), C.uint64_t(len(dst)), &r.op)
	} else {
		r.kind = reqGetOS
		var p unsafe.Pointer
		if len(dst) > 0 {
			r.pin.Pin(&dst[0])
			p = unsafe.Pointer(&dst[0])
		}
		st = C.kvu_get_os(ep.c.cep, p, C.size_t(len(dst)), C.uint64_t(rk.k.base+uint64(off)), rk.rk, &r.op)
	}
	return ep.posted(r, st, "get")
}

// posted files a request UCX accepted, or answers why it did not; t.mu is
// held.
func (ep *endpoint) posted(r *request, st C.ucs_status_t, what string) (transfer.Request, error) {
	t, c := ep.t, ep.c
	if st != C.UCS_OK {
		r.pin.Unpin()
		return nil, fmt.Errorf("ucx: %s to %s#%d: %w", what, c.peer, c.inc, statusErr(C.int(st)))
	}
	if r.kind == reqPutOS {
		c.puts++
		r.seq = c.puts
	}
	if r.seq != 0 && (r.kind == reqPut || r.kind == reqGet) {
		t.answers[r.seq] = r
	}
	ep.pending[r] = struct{}{}
	c.pending[r] = struct{}{}
	t.track(r)
	t.advance(r)
	return r, nil
}

// Send implements transfer.Endpoint: an active message, eager, carrying
// this transport's name and incarnation; msg is copied, and the request
// completes when UCX is done sending it (not when it arrived). Messages
// sent to one peer between two Progress calls leave together, as one
// active message, at the next Progress — or before the next put or get on
// the same UCP endpoint, so that they still leave in the order posted: a
// receiver lending pages to many leases at once offers them all for the
// price of one message.
func (ep *endpoint) Send(msg []byte) (transfer.Request, error) {
	if len(msg) > MaxMessage {
		return nil, fmt.Errorf("ucx: a message of %d bytes; at most %d expected", len(msg), MaxMessage)
	}
	t := ep.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := ep.usable(); err != nil {
		return nil, err
	}
	c := ep.c
	if len(c.outbox) == maxBundled || c.outLen+len(msg) > MaxMessage {
		t.sendOutbox(c)
	}
	at := len(c.outBuf)
	c.outBuf = append(c.outBuf, msg...)
	r := &request{t: t, kind: reqMsg, ep: ep, queued: true, msg: c.outBuf[at:len(c.outBuf):len(c.outBuf)]}
	c.outbox = append(c.outbox, r)
	c.outLen += len(msg)
	if !c.queued {
		c.queued = true
		t.outboxes = append(t.outboxes, c)
	}
	ep.pending[r] = struct{}{}
	c.pending[r] = struct{}{}
	t.track(r)
	return r, nil
}

// sendOutboxes sends every message queued since the last call; t.mu is
// held.
func (t *Transport) sendOutboxes() {
	for _, c := range t.outboxes {
		c.queued = false
		t.sendOutbox(c)
	}
	clear(t.outboxes)
	t.outboxes = t.outboxes[:0]
}

// sendOutbox sends the messages queued on c: one alone as it is, several
// as one bundle (appendBundle), whose requests complete together; t.mu is
// held.
func (t *Transport) sendOutbox(c *conn) {
	box := t.box[:0] // reused: sendOutbox runs under t.mu, never within itself
	defer func() { clear(box); t.box = box[:0] }()
	for _, r := range c.outbox {
		if !r.done { // finished meanwhile: its endpoint failed
			box = append(box, r)
		}
	}
	clear(c.outbox)
	c.outbox, c.outLen = c.outbox[:0], 0
	// The messages' bytes are read until kvu_send_msg returns (it copies);
	// after that nothing refers to them (every r.msg is cleared below).
	defer func() { c.outBuf = c.outBuf[:0] }()
	if len(box) == 0 {
		return
	}
	if err := c.err; err != nil || c.cep == nil {
		if err == nil {
			err = fmt.Errorf("%w: the endpoint to %s#%d", ErrClosed, c.peer, c.inc)
		}
		for _, r := range box {
			r.queued, r.msg = false, nil
			r.finish(err)
		}
		return
	}
	data, count := box[0].msg, 0
	if len(box) > 1 {
		// Framed as appendBundle frames, into a buffer the transport reuses.
		buf := t.bundle[:0]
		for _, r := range box {
			buf = binary.BigEndian.AppendUint32(buf, uint32(len(r.msg)))
			buf = append(buf, r.msg...)
		}
		t.bundle = buf
		data, count = buf, len(box)
		t.stats.MsgsBundled += uint64(count)
	}
	var p unsafe.Pointer
	if len(data) > 0 {
		p = unsafe.Pointer(&data[0]) // copied before the call returns
	}
	b := &batch{}
	st := C.kvu_send_msg(t.w, c.cep, p, C.size_t(len(data)), C.uint64_t(count), &b.op)
	if st != C.UCS_OK {
		b.done, b.err = true, fmt.Errorf("ucx: message to %s#%d: %w", c.peer, c.inc, statusErr(C.int(st)))
	}
	for _, r := range box {
		r.queued, r.msg, r.batch = false, nil, b
		t.advance(r)
	}
}

// Flush implements transfer.Endpoint: Checked, it completes when the owner
// answered every put and get posted on the endpoint before it; OneSided,
// it is ucp_ep_flush_nbx (which covers the shared UCP endpoint).
func (ep *endpoint) Flush() (transfer.Request, error) {
	t := ep.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := ep.usable(); err != nil {
		return nil, err
	}
	if t.cfg.Mode == OneSided {
		return ep.c.flushOS(), nil
	}
	r := &request{t: t, kind: reqFlush, ep: ep, waits: rma(ep.pending)}
	t.track(r)
	t.advance(r)
	return r, nil
}

// flushOS posts ucp_ep_flush_nbx covering every put posted on c so far;
// t.mu is held.
func (c *conn) flushOS() *request {
	t := c.t
	r := &request{t: t, kind: reqFlush, conn: c, seq: c.puts}
	if st := C.kvu_ep_flush(c.cep, &r.op); st != C.UCS_OK {
		r.finish(fmt.Errorf("ucx: flush to %s#%d: %w", c.peer, c.inc, statusErr(C.int(st))))
		return r
	}
	t.track(r)
	t.advance(r)
	return r
}

// rma lists the puts and gets among rs; t.mu is held.
func rma(rs map[*request]struct{}) []*request {
	var out []*request
	for r := range rs {
		if r.kind != reqMsg && r.kind != reqFlush && r.kind != reqClose {
			out = append(out, r)
		}
	}
	return out
}

// Close implements transfer.Endpoint: later operations on it are refused at
// once; the request completes when every put and get posted on it before
// completed (as Flush) and, if it was the last Endpoint to its peer's
// incarnation, UCX closed the endpoint (ucp_ep_close_nbx, flushing). A
// failed endpoint answers its error.
func (ep *endpoint) Close() (transfer.Request, error) {
	t := ep.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := ep.usable(); err != nil {
		return nil, err
	}
	ep.closing = true
	t.sendOutbox(ep.c) // what it sent before its Close leaves
	r := &request{t: t, kind: reqClose, ep: ep, waits: rma(ep.pending)}
	t.track(r)
	t.advance(r)
	return r, nil
}

// closeNow lets go of ep's share of its conn once the puts and gets its
// Close waited for completed, closing UCX's endpoint (flushing) if it was
// the last; t.mu is held.
func (ep *endpoint) closeNow(r *request) {
	c := ep.c
	c.handles--
	if c.handles > 0 {
		r.finish(nil)
		return
	}
	if c.cep == nil {
		r.finish(c.err)
		return
	}
	c.t.sendOutbox(c) // another Endpoint's messages, queued since its Close
	c.dropKeys()
	st := C.kvu_ep_close(c.t.w, c.cep, 0, &r.op)
	c.forget()
	if st != C.UCS_OK {
		r.finish(fmt.Errorf("ucx: closing the endpoint to %s#%d: %w", c.peer, c.inc, statusErr(C.int(st))))
	}
}

// forget takes c out of the tables once UCX's endpoint is closing: nothing
// arrives on it any more; t.mu is held.
func (c *conn) forget() {
	t := c.t
	c.cep = nil
	delete(t.conns, c.id)
	if t.open[peerLife{c.peer, c.inc}] == c {
		delete(t.open, peerLife{c.peer, c.inc})
	}
}

// dropKeys destroys the conn's unpacked rkeys, which must go before it.
func (c *conn) dropKeys() {
	for _, rk := range c.rkeys {
		C.kvu_rkey_destroy(rk)
	}
	c.rkeys = nil
}
