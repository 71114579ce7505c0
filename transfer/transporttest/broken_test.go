package transporttest

import (
	"errors"
	"sync"

	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/sim"
)

// fault is one way a broken transport breaks the contract: each is a
// wrapper around transfer/sim, which is otherwise correct.
type fault uint8

const (
	putEarly              fault = iota + 1 // a put's request completes before the put lands
	getEarly                               // a get's request completes before the get reads
	onePast                                // a put writes one byte past its range
	flushEarly                             // an endpoint flush completes at once
	workerFlushEarly                       // a worker flush completes at once
	fenceLies                              // Revoke answers fenced, over a revocation that leaks
	revokeIgnored                          // Revoke answers new-only and revokes nothing
	putsNeverComplete                      // a put's request never completes
	testBlocks                             // Request.Test blocks
	progressBlocks                         // Progress blocks
	wrongIncarnation                       // a message is attributed to another incarnation
	alteredMessage                         // a message arrives with a byte changed
	closeKeepsOpen                         // Close flushes, and the endpoint goes on working
	staleSelf                              // a restarted process answers its first incarnation
	noEndpointError                        // the EndpointError handler is never called
	oldKeyAliased                          // a key of a dead life reaches its name's new life's memory
	foreignKeyAliased                      // another process's key reaches this peer's memory
	panicsOnGarbage                        // UnpackKey panics on bytes it did not pack
	handlerOutside                         // a message is handed to the receiver's handler from Send
	clipsOutOfBounds                       // a put or get past the registration is clipped, not refused
	errStaysNil                            // an endpoint's Err stays nil after its peer died
	peerStale                              // an endpoint names its peer's first incarnation
	refusesKeys                            // UnpackKey refuses every key but of a first registration
	lenOffByOne                            // a registration's Len is one short
	flapping                               // a request answers done, then not done
	nilRequest                             // a get answers neither a request nor an error
	revokeFlips                            // a second Revoke answers otherwise
	refusesGets                            // every get fails: a transport that does not do the work
	putBlocks                              // Put blocks
	spuriousEndpointError                  // EndpointError names a live process
	dropsMessages                          // Send answers done and sends nothing
	duplicatesMessages                     // every message is sent twice
)

var faultNames = map[fault]string{
	putEarly: "put-early", getEarly: "get-early", onePast: "one-past", flushEarly: "flush-early",
	workerFlushEarly: "worker-flush-early", fenceLies: "fence-lies", revokeIgnored: "revoke-ignored",
	putsNeverComplete: "puts-never-complete", testBlocks: "test-blocks", progressBlocks: "progress-blocks",
	wrongIncarnation: "wrong-incarnation", alteredMessage: "altered-message", closeKeepsOpen: "close-keeps-open",
	staleSelf: "stale-self", noEndpointError: "no-endpoint-error", oldKeyAliased: "old-key-aliased",
	foreignKeyAliased: "foreign-key-aliased", panicsOnGarbage: "panics-on-garbage",
	handlerOutside: "handler-outside-progress", clipsOutOfBounds: "clips-out-of-bounds",
	errStaysNil: "err-stays-nil", peerStale: "peer-stale", refusesKeys: "refuses-keys", lenOffByOne: "len-off-by-one",
	flapping: "flapping", nilRequest: "nil-request", revokeFlips: "revoke-flips", refusesGets: "refuses-gets",
	putBlocks: "put-blocks", spuriousEndpointError: "spurious-endpoint-error",
	dropsMessages: "drops-messages", duplicatesMessages: "duplicates-messages",
}

func (f fault) String() string { return faultNames[f] }

// brokenNet is transfer/sim with one fault. block is closed when the test
// ends, releasing calls that block.
type brokenNet struct {
	simNet
	fault fault
	block chan struct{}
	mu    sync.Mutex
	first map[transfer.Peer]transfer.Incarnation
	keys  map[string]keyOf           // every key packed, by its bytes
	regs  map[transfer.Peer][][]byte // the current life's keys, by registration
	nodes map[transfer.Peer]*brokenTransport
}

type keyOf struct {
	name  transfer.Peer
	inc   transfer.Incarnation
	index int
}

func brokenHarness(f fault, faults sim.Faults, block chan struct{}) Harness {
	return func(seed uint64) (Net, error) {
		n, err := sim.New(seed, faults)
		if err != nil {
			return nil, err
		}
		return &brokenNet{simNet: simNet{n}, fault: f, block: block, first: map[transfer.Peer]transfer.Incarnation{},
			keys: map[string]keyOf{}, regs: map[transfer.Peer][][]byte{}, nodes: map[transfer.Peer]*brokenTransport{}}, nil
	}
}

func (n *brokenNet) Join(name transfer.Peer) (transfer.Transport, error) {
	tr, err := n.simNet.Join(name)
	if err != nil {
		return nil, err
	}
	_, inc := tr.Self()
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.first[name]; !ok {
		n.first[name] = inc
	}
	n.regs[name] = nil
	b := &brokenTransport{Transport: tr, net: n}
	n.nodes[name] = b
	return b, nil
}

// brokenTransport is one sim node with the net's fault.
type brokenTransport struct {
	transfer.Transport
	net      *brokenNet
	mu       sync.Mutex
	handlers transfer.Handlers
}

func (b *brokenTransport) Self() (transfer.Peer, transfer.Incarnation) {
	name, inc := b.Transport.Self()
	if b.net.fault == staleSelf {
		b.net.mu.Lock()
		defer b.net.mu.Unlock()
		return name, b.net.first[name]
	}
	return name, inc
}

func (b *brokenTransport) Register(mem []byte) (transfer.Memory, error) {
	m, err := b.Transport.Register(mem)
	if err != nil {
		return nil, err
	}
	name, inc := b.Transport.Self()
	b.net.mu.Lock()
	defer b.net.mu.Unlock()
	b.net.keys[string(m.PackedKey())] = keyOf{name: name, inc: inc, index: len(b.net.regs[name])}
	b.net.regs[name] = append(b.net.regs[name], m.PackedKey())
	return &brokenMemory{Memory: m, fault: b.net.fault}, nil
}

func (m *brokenMemory) Len() int {
	if m.fault == lenOffByOne {
		return m.Memory.Len() - 1
	}
	return m.Memory.Len()
}

func (b *brokenTransport) SetHandlers(h transfer.Handlers) {
	b.mu.Lock()
	b.handlers = h
	b.mu.Unlock()
	switch b.net.fault {
	case wrongIncarnation:
		inner := h.Message
		h.Message = func(from transfer.Peer, inc transfer.Incarnation, msg []byte) { inner(from, inc+1, msg) }
	case alteredMessage:
		inner := h.Message
		h.Message = func(from transfer.Peer, inc transfer.Incarnation, msg []byte) {
			altered := append([]byte(nil), msg...)
			altered[len(altered)-1] ^= 1
			inner(from, inc, altered)
		}
	case noEndpointError:
		h.EndpointError = nil
	}
	b.Transport.SetHandlers(h)
}

func (b *brokenTransport) Progress() int {
	if b.net.fault == progressBlocks {
		<-b.net.block
	}
	n := b.Transport.Progress()
	if b.net.fault == spuriousEndpointError {
		b.mu.Lock()
		h := b.handlers
		b.mu.Unlock()
		name, inc := b.Transport.Self()
		h.EndpointError(name, inc, errors.New("broken: spurious"))
	}
	return n
}

func (b *brokenTransport) Flush() transfer.Request {
	if b.net.fault == workerFlushEarly {
		return done{}
	}
	return wrapRequest(b.Transport.Flush(), b.net)
}

func (b *brokenTransport) Connect(peer transfer.Peer) (transfer.Endpoint, error) {
	ep, err := b.Transport.Connect(peer)
	if err != nil {
		return nil, err
	}
	return &brokenEndpoint{Endpoint: ep, net: b.net, from: b}, nil
}

func (e *brokenEndpoint) Err() error {
	if e.net.fault == errStaysNil {
		return nil
	}
	return e.Endpoint.Err()
}

func (e *brokenEndpoint) Peer() (transfer.Peer, transfer.Incarnation) {
	name, inc := e.Endpoint.Peer()
	if e.net.fault == peerStale {
		e.net.mu.Lock()
		defer e.net.mu.Unlock()
		return name, e.net.first[name]
	}
	return name, inc
}

type brokenMemory struct {
	transfer.Memory
	fault   fault
	revoked int
}

func (m *brokenMemory) Revoke() (transfer.Revocation, error) {
	switch m.fault {
	case revokeIgnored:
		return transfer.RevokedNewOnly, nil
	case fenceLies:
		if _, err := m.Memory.Revoke(); err != nil {
			return 0, err
		}
		return transfer.RevokedFenced, nil
	case revokeFlips:
		m.revoked++
		how, err := m.Memory.Revoke()
		if m.revoked > 1 && how == transfer.RevokedFenced {
			how = transfer.RevokedNewOnly
		}
		return how, err
	}
	return m.Memory.Revoke()
}

type brokenEndpoint struct {
	transfer.Endpoint
	net  *brokenNet
	from *brokenTransport
}

// brokenKey remembers the registration's length for clipping.
type brokenKey struct{ transfer.RemoteKey }

func (e *brokenEndpoint) UnpackKey(packed []byte) (transfer.RemoteKey, error) {
	if e.net.fault == refusesKeys {
		e.net.mu.Lock()
		owner, known := e.net.keys[string(packed)]
		e.net.mu.Unlock()
		if known && owner.index > 0 {
			return nil, errors.New("broken: unknown key")
		}
	}
	k, err := e.Endpoint.UnpackKey(packed)
	if err == nil {
		return brokenKey{k}, nil
	}
	n := e.net
	n.mu.Lock()
	owner, known := n.keys[string(packed)]
	peer, _ := e.Endpoint.Peer()
	alias := n.regs[peer]
	n.mu.Unlock()
	switch {
	case n.fault == panicsOnGarbage && !known:
		panic("unpack: not a key")
	case !known || len(alias) == 0:
		return nil, err
	case n.fault == oldKeyAliased && owner.name == peer, n.fault == foreignKeyAliased && owner.name != peer:
		k, aerr := e.Endpoint.UnpackKey(alias[owner.index%len(alias)])
		if aerr != nil {
			return nil, err
		}
		return brokenKey{k}, nil
	}
	return nil, err
}

func inner(k transfer.RemoteKey) transfer.RemoteKey {
	if b, ok := k.(brokenKey); ok {
		return b.RemoteKey
	}
	return k
}

func (e *brokenEndpoint) Put(src []byte, key transfer.RemoteKey, off int) (transfer.Request, error) {
	k := inner(key)
	switch e.net.fault {
	case onePast:
		if off+len(src) < k.Len() {
			src = append(src[:len(src):len(src)], 0x5A)
		}
	case clipsOutOfBounds:
		src, off = clip(src, off, k.Len())
	}
	if e.net.fault == putBlocks {
		<-e.net.block
	}
	req, err := e.Endpoint.Put(src, k, off)
	if err != nil {
		return nil, err
	}
	switch e.net.fault {
	case putEarly:
		return done{}, nil
	case putsNeverComplete:
		return never{}, nil
	}
	return wrapRequest(req, e.net), nil
}

func (e *brokenEndpoint) Get(dst []byte, key transfer.RemoteKey, off int) (transfer.Request, error) {
	k := inner(key)
	if e.net.fault == clipsOutOfBounds {
		dst, off = clip(dst, off, k.Len())
	}
	switch e.net.fault {
	case refusesGets:
		return nil, errors.New("broken: gets are not supported")
	case nilRequest:
		return nil, nil
	}
	req, err := e.Endpoint.Get(dst, k, off)
	if err != nil {
		return nil, err
	}
	if e.net.fault == getEarly {
		return done{}, nil
	}
	return wrapRequest(req, e.net), nil
}

// clip cuts buf at [off, off+len) to the registration's [0, size).
func clip(buf []byte, off, size int) ([]byte, int) {
	if off < 0 {
		buf = buf[min(-off, len(buf)):]
		off = 0
	}
	if off+len(buf) > size {
		buf = buf[:max(size-off, 0)]
	}
	return buf, off
}

func (e *brokenEndpoint) Send(msg []byte) (transfer.Request, error) {
	if e.net.fault == handlerOutside {
		peer, inc := e.Endpoint.Peer()
		e.net.mu.Lock()
		to := e.net.nodes[peer]
		e.net.mu.Unlock()
		if _, toInc := to.Transport.Self(); toInc == inc {
			to.mu.Lock()
			h := to.handlers
			to.mu.Unlock()
			name, self := e.from.Transport.Self()
			h.Message(name, self, msg)
			return done{}, nil
		}
	}
	switch e.net.fault {
	case dropsMessages:
		return done{}, nil
	case duplicatesMessages:
		if _, err := e.Endpoint.Send(msg); err != nil {
			return nil, err
		}
	}
	req, err := e.Endpoint.Send(msg)
	if err != nil {
		return nil, err
	}
	return wrapRequest(req, e.net), nil
}

func (e *brokenEndpoint) Flush() (transfer.Request, error) {
	if e.net.fault == flushEarly {
		if _, err := e.Endpoint.Flush(); err != nil {
			return nil, err
		}
		return done{}, nil
	}
	req, err := e.Endpoint.Flush()
	if err != nil {
		return nil, err
	}
	return wrapRequest(req, e.net), nil
}

func (e *brokenEndpoint) Close() (transfer.Request, error) {
	if e.net.fault == closeKeepsOpen {
		return e.Endpoint.Flush()
	}
	req, err := e.Endpoint.Close()
	if err != nil {
		return nil, err
	}
	return wrapRequest(req, e.net), nil
}

// done is a request that says it completed, whatever happened.
type done struct{}

func (done) Test() (bool, error) { return true, nil }

// never is a request that never completes.
type never struct{}

func (never) Test() (bool, error) { return false, nil }

// blocking is a request whose Test blocks until the test ends.
type blocking struct{ block chan struct{} }

func (b blocking) Test() (bool, error) {
	<-b.block
	return false, nil
}

// flaps answers done once, then not done.
type flaps struct {
	transfer.Request
	asked bool
}

func (f *flaps) Test() (bool, error) {
	done, err := f.Request.Test()
	if done && f.asked {
		return false, nil
	}
	f.asked = f.asked || done
	return done, err
}

func wrapRequest(req transfer.Request, n *brokenNet) transfer.Request {
	switch n.fault {
	case testBlocks:
		return blocking{n.block}
	case flapping:
		return &flaps{Request: req}
	}
	return req
}
