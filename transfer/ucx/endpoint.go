package ucx

/*
#include <stdlib.h>
#include "kvucx.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/kvready/kvready/transfer"
)

// endpoint is a connection to one incarnation of one peer.
type endpoint struct {
	t       *Transport
	cep     *C.kvu_ep // nil once UCX's endpoint is closed
	id      uint64
	peer    transfer.Peer
	inc     transfer.Incarnation
	closing bool  // Close was called: every later operation is refused
	err     error // the endpoint failed (or the transport closed)
	pending map[*request]struct{}
	rkeys   []C.ucp_rkey_h // OneSided: destroyed before the endpoint closes
	puts    uint64         // OneSided: puts posted, numbered from 1
	flushed uint64         // OneSided: puts up to this number completed remotely
	flush   *request       // OneSided: the flush posted to cover puts
}

var _ transfer.Endpoint = (*endpoint)(nil)

// Connect implements transfer.Transport: an endpoint (ucp_ep_create) to the
// incarnation of peer whose address AddPeer recorded last, with peer error
// handling unless Config.NoPeerErrors. Messages that arrived before it, on
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
	ep := &endpoint{t: t, cep: cep, id: uint64(cep.id), peer: a.peer, inc: a.inc, pending: map[*request]struct{}{}}
	t.eps[ep.id] = ep
	t.match(ep)
	return ep, nil
}

// match hands the held messages that came on ep's UCP endpoint to the next
// Progress, if they claim ep's peer and incarnation; t.mu is held.
func (t *Transport) match(ep *endpoint) {
	handle := uintptr(C.kvu_ep_handle(ep.cep))
	kept := t.unheard[:0]
	for _, u := range t.unheard {
		switch {
		case u.handle != handle:
			kept = append(kept, u)
		case u.peer == ep.peer && u.inc == ep.inc:
			t.ready = append(t.ready, call{peer: u.peer, inc: u.inc, msg: u.msg})
		default:
			t.stats.MsgsRefused++
		}
	}
	clear(t.unheard[len(kept):])
	t.unheard = kept
}

// Peer implements transfer.Endpoint.
func (ep *endpoint) Peer() (transfer.Peer, transfer.Incarnation) { return ep.peer, ep.inc }

// Err implements transfer.Endpoint: the peer's failure, ErrClosed after
// Close, or nil.
func (ep *endpoint) Err() error {
	ep.t.mu.Lock()
	defer ep.t.mu.Unlock()
	return ep.errLocked()
}

func (ep *endpoint) errLocked() error {
	switch {
	case ep.err != nil:
		return ep.err
	case ep.closing:
		return fmt.Errorf("%w: the endpoint to %s#%d", ErrClosed, ep.peer, ep.inc)
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
	switch {
	case k.owner != ep.peer || k.inc != ep.inc:
		return nil, fmt.Errorf("ucx: the key belongs to %s#%d; this endpoint reaches %s#%d", k.owner, k.inc, ep.peer, ep.inc)
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
		if st := C.kvu_rkey_unpack(ep.cep, buf, &rk.rk); st != C.UCS_OK {
			return nil, fmt.Errorf("ucx: ucp_ep_rkey_unpack: %w", statusErr(C.int(st)))
		}
		ep.rkeys = append(ep.rkeys, rk.rk)
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
	t := ep.t
	t.mu.Lock()
	defer t.mu.Unlock()
	rk, err := ep.operand(key, off, len(src))
	if err != nil {
		return nil, err
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
		st = C.kvu_send_put(t.w, ep.cep, C.uint64_t(r.seq), C.uint64_t(rk.k.inc), C.uint64_t(rk.k.region),
			C.uint64_t(rk.k.gen), C.uint64_t(off), p, C.size_t(len(src)), &r.op)
	} else {
		r.kind = reqPutOS
		st = C.kvu_put_os(ep.cep, p, C.size_t(len(src)), C.uint64_t(rk.k.base+uint64(off)), rk.rk, &r.op)
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
	r := &request{t: t, kind: reqGet, ep: ep, dst: dst}
	var st C.ucs_status_t
	if t.cfg.Mode == Checked {
		r.seq = t.nextSeq()
		st = C.kvu_send_get(t.w, ep.cep, C.uint64_t(r.seq), C.uint64_t(rk.k.inc), C.uint64_t(rk.k.region),
			C.uint64_t(rk.k.gen), C.uint64_t(off), C.uint64_t(len(dst)), &r.op)
	} else {
		r.kind = reqGetOS
		var p unsafe.Pointer
		if len(dst) > 0 {
			r.pin.Pin(&dst[0])
			p = unsafe.Pointer(&dst[0])
		}
		st = C.kvu_get_os(ep.cep, p, C.size_t(len(dst)), C.uint64_t(rk.k.base+uint64(off)), rk.rk, &r.op)
	}
	return ep.posted(r, st, "get")
}

// posted files a request UCX accepted, or answers why it did not; t.mu is
// held.
func (ep *endpoint) posted(r *request, st C.ucs_status_t, what string) (transfer.Request, error) {
	t := ep.t
	if st != C.UCS_OK {
		r.pin.Unpin()
		return nil, fmt.Errorf("ucx: %s to %s#%d: %w", what, ep.peer, ep.inc, statusErr(C.int(st)))
	}
	if r.kind == reqPutOS {
		ep.puts++
		r.seq = ep.puts
	}
	if r.seq != 0 && (r.kind == reqPut || r.kind == reqGet) {
		t.answers[r.seq] = r
	}
	ep.pending[r] = struct{}{}
	t.track(r)
	t.advance(r)
	return r, nil
}

// Send implements transfer.Endpoint: an active message, eager, carrying
// this transport's name and incarnation; msg is copied, and the request
// completes when UCX is done sending it (not when it arrived).
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
	r := &request{t: t, kind: reqMsg, ep: ep}
	var p unsafe.Pointer
	if len(msg) > 0 {
		p = unsafe.Pointer(&msg[0]) // copied before the call returns
	}
	st := C.kvu_send_msg(t.w, ep.cep, p, C.size_t(len(msg)), &r.op)
	return ep.posted(r, st, "message")
}

// Flush implements transfer.Endpoint: Checked, it completes when the owner
// answered every put and get posted on the endpoint before it; OneSided,
// it is ucp_ep_flush_nbx.
func (ep *endpoint) Flush() (transfer.Request, error) {
	t := ep.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := ep.usable(); err != nil {
		return nil, err
	}
	return ep.flushLocked(), nil
}

func (ep *endpoint) flushLocked() *request {
	t := ep.t
	r := &request{t: t, kind: reqFlush, ep: ep}
	if t.cfg.Mode == OneSided {
		r.seq = ep.puts
		if st := C.kvu_ep_flush(ep.cep, &r.op); st != C.UCS_OK {
			r.finish(fmt.Errorf("ucx: flush to %s#%d: %w", ep.peer, ep.inc, statusErr(C.int(st))))
			return r
		}
	} else {
		r.waits = ep.rma()
	}
	t.track(r)
	t.advance(r)
	return r
}

// rma lists the puts and gets in flight on ep; t.mu is held.
func (ep *endpoint) rma() []*request {
	var rs []*request
	for r := range ep.pending {
		if r.kind != reqMsg && r.kind != reqFlush {
			rs = append(rs, r)
		}
	}
	return rs
}

// Close implements transfer.Endpoint: later operations are refused at
// once; the request completes when every put and get posted before it
// completed (as Flush) and UCX closed the endpoint (ucp_ep_close_nbx,
// flushing). A failed endpoint answers its error.
func (ep *endpoint) Close() (transfer.Request, error) {
	t := ep.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := ep.usable(); err != nil {
		return nil, err
	}
	ep.closing = true
	r := &request{t: t, kind: reqClose, ep: ep, waits: ep.rma()}
	t.track(r)
	t.advance(r)
	return r, nil
}

// closeNow closes UCX's endpoint, flushing, once the puts and gets a Close
// waited for completed; t.mu is held.
func (ep *endpoint) closeNow(r *request) {
	if ep.cep == nil {
		r.finish(ep.errLocked())
		return
	}
	ep.dropKeys()
	st := C.kvu_ep_close(ep.t.w, ep.cep, 0, &r.op)
	ep.cep = nil
	if st != C.UCS_OK {
		r.finish(fmt.Errorf("ucx: closing the endpoint to %s#%d: %w", ep.peer, ep.inc, statusErr(C.int(st))))
	}
}

// dropKeys destroys the endpoint's unpacked rkeys, which must go before it.
func (ep *endpoint) dropKeys() {
	for _, rk := range ep.rkeys {
		C.kvu_rkey_destroy(rk)
	}
	ep.rkeys = nil
}
