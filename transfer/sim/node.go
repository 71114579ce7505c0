package sim

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/kvready/kvready/transfer"
)

// Node is one incarnation of a simulated process: a transfer.Transport.
type Node struct {
	net      *Network
	name     transfer.Peer
	inc      transfer.Incarnation
	dead     bool
	handlers transfer.Handlers
	inbox    []event
}

var _ transfer.Transport = (*Node)(nil)

// event is what Progress hands a handler: a message, or a lost peer.
type event struct {
	lost bool
	from transfer.Peer
	inc  transfer.Incarnation
	msg  []byte
}

type opKind uint8

const (
	opPut opKind = iota + 1
	opGet
	opMsg
	opFlush
)

// op is one operation in flight; it is the Request its poster tests.
type op struct {
	net    *Network
	kind   opKind
	seq    uint64
	from   *Node
	ep     *endpoint // nil for a worker flush
	region *region   // put, get
	off    int
	buf    []byte // put: the source, read when it lands; get: the destination
	msg    []byte
	to     *Node
	closes bool   // a flush that closes its endpoint
	replay bool   // a replayed copy: due at its step, whatever was posted before
	at     uint64 // masked or replayed: the step it is due
	done   bool
	err    error
}

// Test implements transfer.Request.
func (o *op) Test() (bool, error) {
	o.net.mu.Lock()
	defer o.net.mu.Unlock()
	return o.done, o.err
}

// region is one registration: a transfer.Memory.
type region struct {
	net     *Network
	id      uint64
	node    *Node
	mem     []byte
	revoked bool
	how     transfer.Revocation
}

const keyMagic = "SIMK"

// PackedKey implements transfer.Memory: the region's id and owner's
// incarnation, so a key outlives neither.
func (r *region) PackedKey() []byte {
	b := append([]byte(keyMagic), make([]byte, 16)...)
	binary.BigEndian.PutUint64(b[4:], r.id)
	binary.BigEndian.PutUint64(b[12:], uint64(r.node.inc))
	return b
}

// Len implements transfer.Memory.
func (r *region) Len() int { return len(r.mem) }

// Revoke implements transfer.Memory. It fences — puts not yet landed are
// dropped — unless the network's RevocationLeaks is set; either way later
// puts are refused.
func (r *region) Revoke() (transfer.Revocation, error) {
	n := r.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if r.revoked {
		return r.how, nil
	}
	r.revoked, r.how = true, transfer.RevokedFenced
	if n.faults.RevocationLeaks {
		r.how = transfer.RevokedNewOnly
		return r.how, nil
	}
	for _, o := range n.ops {
		if o.region == r {
			n.finish(o, ErrRevoked)
		}
	}
	n.sweep()
	return r.how, nil
}

type remoteKey struct{ r *region }

func (k remoteKey) Len() int { return len(k.r.mem) }

// endpoint is a connection from one node to one incarnation of another.
type endpoint struct {
	net      *Network
	from, to *Node
	closed   bool
}

// Self implements transfer.Transport.
func (nd *Node) Self() (transfer.Peer, transfer.Incarnation) { return nd.name, nd.inc }

// Register implements transfer.Transport. The memory is the caller's: puts
// write into it, gets read from it, when they happen.
func (nd *Node) Register(mem []byte) (transfer.Memory, error) {
	n := nd.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if nd.dead {
		return nil, fmt.Errorf("%w: node %s#%d cannot register memory", ErrPeerDead, nd.name, nd.inc)
	}
	n.nextID++
	r := &region{net: n, id: n.nextID, node: nd, mem: mem}
	n.regions = append(n.regions, r)
	return r, nil
}

// Connect implements transfer.Transport.
func (nd *Node) Connect(peer transfer.Peer) (transfer.Endpoint, error) {
	n := nd.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if nd.dead {
		return nil, fmt.Errorf("%w: node %s#%d cannot connect", ErrPeerDead, nd.name, nd.inc)
	}
	to := n.live(peer)
	if to == nil {
		return nil, fmt.Errorf("sim: no live node %q to connect to", peer)
	}
	ep := &endpoint{net: n, from: nd, to: to}
	n.eps = append(n.eps, ep)
	return ep, nil
}

// SetHandlers implements transfer.Transport.
func (nd *Node) SetHandlers(h transfer.Handlers) {
	nd.net.mu.Lock()
	defer nd.net.mu.Unlock()
	nd.handlers = h
}

// Progress implements transfer.Transport: it hands every event that arrived
// to its handler, outside the network's lock, and answers how many.
func (nd *Node) Progress() int {
	n := nd.net
	n.mu.Lock()
	events, h := nd.inbox, nd.handlers
	nd.inbox = nil
	if nd.dead {
		events = nil
	}
	n.stats.Messages += len(events)
	n.mu.Unlock()
	for _, ev := range events {
		switch {
		case ev.lost && h.EndpointError != nil:
			h.EndpointError(ev.from, ev.inc, fmt.Errorf("%w: %s#%d", ErrPeerDead, ev.from, ev.inc))
		case !ev.lost && h.Message != nil:
			h.Message(ev.from, ev.inc, ev.msg)
		}
	}
	return len(events)
}

// Flush implements transfer.Transport: a worker flush.
func (nd *Node) Flush() transfer.Request {
	n := nd.net
	n.mu.Lock()
	defer n.mu.Unlock()
	o := n.post(&op{kind: opFlush, from: nd})
	if nd.dead {
		n.finish(o, ErrPeerDead)
	}
	return o
}

// post numbers o and queues it.
func (n *Network) post(o *op) *op {
	n.nextID++
	o.net, o.seq = n, n.nextID
	n.ops = append(n.ops, o)
	return o
}

// Peer implements transfer.Endpoint.
func (ep *endpoint) Peer() (transfer.Peer, transfer.Incarnation) { return ep.to.name, ep.to.inc }

// Err implements transfer.Endpoint.
func (ep *endpoint) Err() error {
	ep.net.mu.Lock()
	defer ep.net.mu.Unlock()
	return ep.err()
}

func (ep *endpoint) err() error {
	switch {
	case ep.to.dead:
		return fmt.Errorf("%w: %s#%d", ErrPeerDead, ep.to.name, ep.to.inc)
	case ep.from.dead:
		return fmt.Errorf("%w: this node %s#%d", ErrPeerDead, ep.from.name, ep.from.inc)
	case ep.closed:
		return errClosed
	}
	return nil
}

var errClosed = errors.New("sim: endpoint closed")

// UnpackKey implements transfer.Endpoint: the key must be one the peer's
// incarnation this endpoint reaches packed.
func (ep *endpoint) UnpackKey(packed []byte) (transfer.RemoteKey, error) {
	n := ep.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(packed) != 20 || string(packed[:4]) != keyMagic {
		return nil, fmt.Errorf("sim: a packed key is %q and 16 bytes; given %d bytes", keyMagic, len(packed))
	}
	id, inc := binary.BigEndian.Uint64(packed[4:]), transfer.Incarnation(binary.BigEndian.Uint64(packed[12:]))
	for _, r := range n.regions {
		if r.id == id {
			if r.node != ep.to || inc != ep.to.inc {
				return nil, fmt.Errorf("sim: key of region %d belongs to %s#%d; this endpoint reaches %s#%d", id, r.node.name, inc, ep.to.name, ep.to.inc)
			}
			return remoteKey{r}, nil
		}
	}
	return nil, fmt.Errorf("sim: no region %d", id)
}

// Put implements transfer.Endpoint. src is read when the put lands.
func (ep *endpoint) Put(src []byte, key transfer.RemoteKey, off int) (transfer.Request, error) {
	return ep.rma(opPut, src, key, off)
}

// Get implements transfer.Endpoint. dst is written when the get lands.
func (ep *endpoint) Get(dst []byte, key transfer.RemoteKey, off int) (transfer.Request, error) {
	return ep.rma(opGet, dst, key, off)
}

func (ep *endpoint) rma(kind opKind, buf []byte, key transfer.RemoteKey, off int) (transfer.Request, error) {
	ep.net.mu.Lock()
	defer ep.net.mu.Unlock()
	o, err := ep.rmaLocked(kind, buf, key, off)
	if err != nil {
		return nil, err // a nil *op in a Request would not read as nil
	}
	return o, nil
}

func (ep *endpoint) rmaLocked(kind opKind, buf []byte, key transfer.RemoteKey, off int) (*op, error) {
	n := ep.net
	k, ok := key.(remoteKey)
	switch {
	case !ok || k.r.node != ep.to:
		return nil, errors.New("sim: the key was not unpacked on this endpoint")
	case off < 0 || off+len(buf) > len(k.r.mem):
		return nil, fmt.Errorf("sim: [%d,%d) is outside the remote region of %d bytes", off, off+len(buf), len(k.r.mem))
	}
	if err := ep.err(); err != nil {
		n.stats.Refused++
		return nil, err
	}
	if k.r.revoked {
		n.stats.Refused++
		return nil, fmt.Errorf("%w: region %d", ErrRevoked, k.r.id)
	}
	return n.post(&op{kind: kind, from: ep.from, ep: ep, region: k.r, off: off, buf: buf}), nil
}

// Flush implements transfer.Endpoint.
func (ep *endpoint) Flush() (transfer.Request, error) { return ep.flush(false) }

// Close implements transfer.Endpoint: a flush, after which the endpoint
// refuses every operation.
func (ep *endpoint) Close() (transfer.Request, error) { return ep.flush(true) }

func (ep *endpoint) flush(closes bool) (transfer.Request, error) {
	ep.net.mu.Lock()
	defer ep.net.mu.Unlock()
	o, err := ep.flushLocked(closes)
	if err != nil {
		return nil, err
	}
	return o, nil
}

func (ep *endpoint) flushLocked(closes bool) (*op, error) {
	n := ep.net
	if err := ep.err(); err != nil {
		n.stats.Refused++
		return nil, err
	}
	o := n.post(&op{kind: opFlush, from: ep.from, ep: ep, closes: closes})
	if closes {
		ep.closed = true
	}
	return o, nil
}

// Send implements transfer.Endpoint. A message that decodes as a DONE
// meets the network's DONE faults.
func (ep *endpoint) Send(msg []byte) (transfer.Request, error) {
	ep.net.mu.Lock()
	defer ep.net.mu.Unlock()
	if err := ep.sendLocked(msg); err != nil {
		return nil, err
	}
	// The message is buffered: its request completes at once, whatever
	// becomes of the message (UCX's UCS_OK from a buffered send).
	return &op{net: ep.net, kind: opMsg, done: true}, nil
}

func (ep *endpoint) sendLocked(msg []byte) error {
	n := ep.net
	if err := ep.err(); err != nil {
		n.stats.Refused++
		return err
	}
	n.sendFaulty(&op{kind: opMsg, from: ep.from, ep: ep, to: ep.to, msg: append([]byte(nil), msg...)})
	return nil
}

// sendFaulty queues a message, applying the DONE faults to a DONE.
func (n *Network) sendFaulty(o *op) {
	ev, err := transfer.DecodeEvidence(o.msg)
	if err != nil || ev.Kind != transfer.Done {
		n.post(o)
		return
	}
	f := n.faults
	if n.rng.Float64() < f.ReplayDone {
		n.stats.ReplayedDone++
		n.delay(o, 64+n.rng.Uint64N(449), true)
	}
	switch {
	case n.rng.Float64() < f.LoseDone:
		n.stats.LostDone++
	case n.rng.Float64() < f.MaskDone:
		n.stats.MaskedDone++
		n.delay(o, 1+n.rng.Uint64N(64), false)
	default:
		n.post(o)
	}
	if n.rng.Float64() < f.DuplicateDone {
		n.stats.DuplicatedDone++
		n.post(&op{kind: opMsg, from: o.from, ep: o.ep, to: o.to, msg: o.msg})
	}
}

// delay keeps a copy of o to deliver `after` steps from now.
func (n *Network) delay(o *op, after uint64, replay bool) {
	c := *o
	c.replay, c.at = replay, n.step+after
	n.nextID++
	c.net, c.seq = n, n.nextID
	n.later = append(n.later, &c)
}

// perform makes o happen.
func (n *Network) perform(o *op) {
	switch o.kind {
	case opPut, opGet:
		n.land(o)
	case opMsg:
		if !o.to.dead {
			o.to.inbox = append(o.to.inbox, event{from: o.from.name, inc: o.from.inc, msg: o.msg})
		}
		n.finish(o, nil)
	case opFlush:
		var err error
		if o.ep != nil {
			if err = o.ep.err(); errors.Is(err, errClosed) {
				err = nil // the endpoint's own close: what it flushed landed
			}
		}
		n.finish(o, err)
	}
}

// land performs a put or get: the bytes move now, read from the source at
// this moment (a source changed before its put landed shows it).
func (n *Network) land(o *op) {
	r := o.region
	switch {
	case r.node.dead:
		n.finish(o, fmt.Errorf("%w: the memory's owner %s#%d", ErrPeerDead, r.node.name, r.node.inc))
		return
	case r.revoked && r.how.Fences():
		n.finish(o, ErrRevoked)
		return
	}
	if o.kind == opPut {
		copy(r.mem[o.off:], o.buf)
		n.stats.Landed++
		if r.revoked {
			n.stats.LateLandings++
		}
	} else {
		copy(o.buf, r.mem[o.off:o.off+len(o.buf)])
	}
	n.finish(o, nil)
}
