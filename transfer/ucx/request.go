package ucx

/*
#include "kvucx.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/kvready/kvready/transfer"
)

type reqKind uint8

const (
	reqMsg   reqKind = iota + 1
	reqPut           // Checked: done when the owner answered
	reqGet           // Checked: done when the owner's answer (with the data) arrived
	reqPutOS         // OneSided: done when a flush posted after it completed
	reqGetOS         // OneSided: done when UCX wrote dst
	reqFlush         // an endpoint's or the worker's flush
	reqClose         // an endpoint's close: its puts and gets, then UCX's close
)

// request is one operation in flight: a transfer.Request.
type request struct {
	t     *Transport
	kind  reqKind
	ep    *endpoint // nil for a worker flush, and a OneSided put's own flush
	conn  *conn     // a OneSided flush: the UCP endpoint it covers
	op    *C.kvu_op // UCX's part while it is in flight
	opOK  bool      // UCX's part completed...
	opErr error     // ...with this error

	seq      uint64 // Checked put/get: the answer it waits for; OneSided put: its number on ep; OneSided flush: the puts it covers
	answered bool
	ansErr   error
	dst      []byte
	pin      runtime.Pinner
	waits    []*request // flush and close: the operations before it

	queued bool   // a message Send queued, not yet handed to UCX
	msg    []byte // its copy, until then
	batch  *batch // a message, once handed to UCX: the active message carrying it

	done bool
	err  error
}

var _ transfer.Request = (*request)(nil)

// batch is one active message carrying one or more queued messages: their
// requests complete together, when UCX is done sending it.
type batch struct {
	op   *C.kvu_op
	done bool
	err  error
}

// poll settles the batch's send; t.mu is held.
func (b *batch) poll() bool {
	if b.done || b.op == nil {
		b.done = true
		return true
	}
	if !settleOp(b.op, &b.err) {
		return false
	}
	b.op, b.done = nil, true
	return true
}

// settleOp answers whether op is over; if it is, it records op's failure in
// *err (leaving *err as it was on success) and op is freed.
func settleOp(op *C.kvu_op, err *error) bool {
	st := C.kvu_op_settle(op)
	if st == C.UCS_INPROGRESS {
		return false
	}
	if st != C.UCS_OK {
		*err = statusErr(C.int(st))
	}
	return true
}

// Test implements transfer.Request: it never blocks and never progresses
// the worker; it reads what the last Progress settled, and UCX's own state
// of the request (ucp_request_check_status).
func (r *request) Test() (bool, error) {
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	if !r.done && r.t.w != nil {
		r.t.advance(r)
	}
	return r.done, r.err
}

// poll settles UCX's part of r; t.mu is held. It answers whether that part
// is over.
func (r *request) poll() bool {
	if r.op == nil {
		return true
	}
	if !settleOp(r.op, &r.opErr) {
		return false
	}
	r.op = nil
	r.opOK = r.opErr == nil
	return true
}

// advance moves r as far as what is known allows; t.mu is held.
func (t *Transport) advance(r *request) {
	if r.done {
		return
	}
	switch r.kind {
	case reqMsg:
		t.advanceMsg(r)
	case reqGetOS:
		if r.poll() {
			r.finish(r.opErr)
		}
	case reqPut, reqGet:
		t.advanceChecked(r)
	case reqPutOS:
		t.advancePutOS(r)
	case reqFlush:
		t.advanceFlush(r)
	case reqClose:
		t.advanceClose(r)
	}
}

// advanceMsg: a message is done when UCX is done sending the active
// message carrying it; one still queued ends with its endpoint's failure.
func (t *Transport) advanceMsg(r *request) {
	switch {
	case r.queued:
		if err := r.ep.c.err; err != nil {
			r.queued, r.msg = false, nil
			r.finish(err)
		}
	case r.batch != nil:
		if r.batch.poll() {
			r.finish(r.batch.err)
		}
	}
}

// advanceChecked: a checked put or get is done once UCX sent it (the source
// is no longer read) and the owner answered — or the endpoint failed, and
// no answer will come.
func (t *Transport) advanceChecked(r *request) {
	if !r.poll() {
		return
	}
	switch {
	case r.answered:
		r.finish(r.ansErr)
	case r.opErr != nil && rejected(r.opErr) && r.ep.c.err == nil:
		// The owner refused a rendezvous: its answer, with the reason,
		// follows on the same endpoint.
	case r.opErr != nil:
		delete(t.answers, r.seq)
		r.finish(r.opErr)
	case r.ep.c.err != nil:
		delete(t.answers, r.seq)
		r.finish(r.ep.c.err)
	}
}

func rejected(err error) bool {
	var st *StatusError
	return errors.As(err, &st) && st.Code == C.UCS_ERR_REJECTED
}

// advancePutOS: a one-sided put completed locally is done once a flush of
// its endpoint posted after it completed (UCX's put request completes
// when the source may be reused, not when the data landed).
func (t *Transport) advancePutOS(r *request) {
	if !r.poll() {
		return
	}
	c := r.ep.c
	switch {
	case r.opErr != nil:
		r.finish(r.opErr)
		return
	case c.flushed >= r.seq:
		r.finish(nil)
		return
	case c.err != nil:
		r.finish(c.err)
		return
	case c.cep == nil:
		r.finish(fmt.Errorf("%w: the endpoint to %s#%d", ErrClosed, c.peer, c.inc))
		return
	}
	if c.flush == nil || c.flush.done {
		c.flush = c.flushOS()
	}
	t.advance(c.flush)
	switch {
	case c.flushed >= r.seq:
		r.finish(nil)
	case c.flush.done && c.flush.err != nil:
		r.finish(c.flush.err)
	}
}

func (t *Transport) advanceFlush(r *request) {
	if r.op != nil {
		if !r.poll() {
			return
		}
		if r.opErr == nil && r.conn != nil && r.seq > r.conn.flushed {
			r.conn.flushed = r.seq
		}
		r.finish(r.opErr)
		return
	}
	if !t.waited(r) {
		return
	}
	var err error
	if r.ep != nil && r.ep.c.err != nil {
		err = r.ep.c.err
	}
	r.finish(err)
}

func (t *Transport) advanceClose(r *request) {
	if r.op == nil && !r.opOK {
		if !t.waited(r) {
			return
		}
		r.ep.closeNow(r)
		if r.done {
			return
		}
	}
	if r.poll() {
		r.finish(r.opErr)
	}
}

// waited advances the operations r waits for, in turn, and answers whether all are
// done.
//
// It stops at the first request not done: the answer is no whatever the
// rest, and each of them is advanced by its own Test, by the answer that
// settles it, or by a later call here once those before it are done. A
// flush waits for every put in flight on its endpoint, so advancing them
// all on every Test made a sender with n pages in flight test n² puts a
// round.
func (t *Transport) waited(r *request) bool {
	for len(r.waits) > 0 {
		w := r.waits[0]
		t.advance(w)
		if !w.done {
			return false
		}
		r.waits[0] = nil
		r.waits = r.waits[1:]
	}
	return true
}

// finish ends r: unpinned, out of the tables; t.mu is held.
func (r *request) finish(err error) {
	if r.done {
		return
	}
	r.done, r.err = true, err
	r.pin.Unpin()
	r.waits = nil
	delete(r.t.live, r)
	if r.ep != nil {
		delete(r.ep.pending, r)
		delete(r.ep.c.pending, r)
	}
}

// abandon gives up UCX's part of r before the worker is destroyed: its
// memory is freed with the worker's dead ops; t.mu is held.
func (r *request) abandon() {
	if b := r.batch; b != nil && b.op != nil {
		C.kvu_op_abandon(b.op)
		r.t.dead = append(r.t.dead, b.op)
		b.op, b.done, b.err = nil, true, ErrClosed
	}
	if r.op == nil {
		return
	}
	C.kvu_op_abandon(r.op)
	r.t.dead = append(r.t.dead, r.op)
	r.op = nil
}
