package ucx

/*
#cgo LDFLAGS: -lucp -lucs
#include <stdlib.h>
#include "kvucx.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/kvready/kvready/transfer"
)

// Mode says how puts and gets reach a registration.
type Mode uint8

const (
	// Checked (the zero value): a put or get travels as an active message
	// that the owner's Progress applies only after checking the
	// registration it names (live, its generation, the bounds) and the
	// endpoint it came on. Nothing else writes the pages, so Revoke fences
	// on every UCX transport: once it returns, no byte lands.
	Checked Mode = iota
	// OneSided: ucp_put_nbx and ucp_get_nbx into memory mapped with
	// ucp_mem_map, as UCX moves them. Revoke unmaps and
	// answers RevokedNewOnly — and over tcp and shared memory UCX refuses
	// not even later operations (see docs/ucx.md): a writer's access ends
	// only on its own evidence.
	OneSided
)

// String names the mode.
func (m Mode) String() string {
	switch m {
	case Checked:
		return "checked"
	case OneSided:
		return "one-sided"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// MaxMessage is the largest active message Send takes: reports are small,
// and a message is always sent eagerly, so it never waits for the receiver.
const MaxMessage = 64 << 10

// progressRounds bounds the ucp_worker_progress calls one Progress makes.
const progressRounds = 64

// maxUnheard bounds the messages held from endpoints not yet matched.
const maxUnheard = 256

// Errors the transport wraps.
var (
	// ErrClosed: the transport or the endpoint was closed.
	ErrClosed = errors.New("ucx: closed")
	// ErrPeerFailed: UCX reported the endpoint's peer failed.
	ErrPeerFailed = errors.New("ucx: the peer's endpoint failed")
	// ErrRevoked: the owner has no live registration the key names.
	ErrRevoked = errors.New("ucx: the remote registration was revoked")
	// ErrRefused: the owner refused a put or a get for another reason.
	ErrRefused = errors.New("ucx: the owner refused the operation")
)

// Config is one transport's identity and UCX settings.
type Config struct {
	// Name and Incarnation: the process and its life (transfer.Peer,
	// transfer.Incarnation >= 1), carried in the address and in every
	// message, and checked against the endpoint a message arrives on.
	Name        transfer.Peer
	Incarnation transfer.Incarnation
	// Transports is UCX_TLS for this transport alone (set with
	// ucp_config_modify, so it does not touch the environment): "tcp",
	// "sm", "tcp,cma"… Empty: the environment's UCX_TLS, read when New
	// runs, else UCX's own choice.
	Transports string
	// Mode is how puts and gets reach a registration: Checked (default) or
	// OneSided.
	Mode Mode
	// NoPeerErrors creates endpoints without peer error handling
	// (UCP_ERR_HANDLING_MODE_NONE). UCX 1.13's shared-memory transports
	// (posix, sysv) cannot report a failed peer, so an endpoint that asks
	// for it is never made over them; set this to use them. Then a dead
	// peer is never reported: EndpointError is not called.
	NoPeerErrors bool
	// Bounce receives every rendezvous put (Checked) into a buffer of the
	// transport's own, copied into the registration once all of it came
	// and the registration checked again. It is what happens anyway unless
	// Transports names only tcp, self and shared memory (sm, posix, sysv,
	// cma): there the owner's own worker writes everything that arrives,
	// in its Progress — over shared memory because this transport sets
	// UCX's rendezvous to the receiver's get (RNDV_SCHEME=get_zcopy: the
	// owner reads the writer's buffer with process_vm_readv, never the
	// writer's process_vm_writev into the owner's pages; verified on UCX
	// 1.13, and only set there: on another version shared memory keeps the
	// bounce buffer) — so a rendezvous put whose registration checked out
	// at its arrival is received straight into the pages, one copy fewer,
	// and Revoke waits for it (RevokeWait).
	Bounce bool
	// RevokeWait bounds how long Revoke waits for rendezvous puts still
	// being received straight into the registration (default 2 s); past
	// it, Revoke answers RevokedNewOnly and leaves the memory pinned for
	// the life of the process: a writer stopped mid-transfer (SIGSTOP)
	// may resume and finish writing it.
	RevokeWait time.Duration
	// EagerMax: a Checked put of at most EagerMax bytes is sent eager
	// (UCP_AM_SEND_FLAG_EAGER) — its header and data in one stream, no
	// rendezvous handshake — to land in UCX's receive buffer and be copied
	// into the registration by the owner's handler after its checks, whole
	// or not at all. 0 means DefaultEagerMax; negative, none: UCX's own
	// threshold chooses (over tcp it sends a 64 KiB put by rendezvous).
	// It is the writer's choice; the owner receives either. Only this
	// transport's puts are affected, never another UCX context's.
	EagerMax int
}

// DefaultEagerMax is Config.EagerMax's default: at 64 KiB over tcp an
// eager put moved more pages through the engine between two processes
// than UCX's rendezvous (docs/ucx.md, "Eager below a threshold").
const DefaultEagerMax = 64 << 10

// eagerMax answers the largest put sent eager, Config.EagerMax resolved.
func (c Config) eagerMax() int {
	switch {
	case c.EagerMax == 0:
		return DefaultEagerMax
	case c.EagerMax < 0:
		return -1
	}
	return c.EagerMax
}

// defaultRevokeWait is Config.RevokeWait's default: far longer than a
// rendezvous of the §5 page sizes takes between two live processes.
const defaultRevokeWait = 2 * time.Second

// direct answers whether a rendezvous put may be received straight into its
// registration: only where every transport is one whose data the owner's
// own progress writes — tcp and self, and shared memory with the
// receiver's get (rndvGet) — never where UCX_TLS is the environment's or
// names another transport (RDMA's put is the writer's NIC's).
func (c Config) direct() bool {
	if c.Mode != Checked || c.Bounce || c.Transports == "" {
		return false
	}
	for _, tl := range strings.Split(c.Transports, ",") {
		if tl != "tcp" && tl != "self" && !sharedMemory(tl) {
			return false
		}
	}
	return true
}

// rndvGet answers whether this transport sets UCX's rendezvous to the
// receiver's get: a Checked one over shared memory, so that no cma
// rendezvous is the writer's process_vm_writev into the owner's pages.
func (c Config) rndvGet() bool {
	if c.Mode != Checked {
		return false
	}
	for _, tl := range strings.Split(c.Transports, ",") {
		if sharedMemory(tl) {
			return true
		}
	}
	return false
}

// sharedMemory answers whether tl is one of UCX 1.13's shared-memory
// transports measured here (sm is posix, sysv and cma on this machine;
// knem and xpmem, which it would also name, are not installed).
func sharedMemory(tl string) bool {
	switch tl {
	case "sm", "posix", "sysv", "cma":
		return true
	}
	return false
}

func (c Config) validate() error {
	var errs []error
	switch {
	case c.Name == "":
		errs = append(errs, errors.New("Name is empty; a peer name of 1 to 255 bytes expected"))
	case len(c.Name) > transfer.MaxPeerLen:
		errs = append(errs, fmt.Errorf("Name is %d bytes; at most %d expected", len(c.Name), transfer.MaxPeerLen))
	}
	if c.Incarnation == 0 {
		errs = append(errs, errors.New("Incarnation is 0; an incarnation >= 1 expected"))
	}
	if c.RevokeWait < 0 {
		errs = append(errs, fmt.Errorf("RevokeWait is %v; 0 (the default, %v) or more expected", c.RevokeWait, defaultRevokeWait))
	}
	if c.Mode != Checked && c.Mode != OneSided {
		errs = append(errs, fmt.Errorf("Mode is %s; checked or one-sided expected", c.Mode))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ucx: bad Config: %w", err)
	}
	return nil
}

// Transport is a transfer.Transport over one UCP context and worker. It is
// safe for concurrent use: one lock serialises every call into UCX (the
// worker is UCS_THREAD_MODE_SERIALIZED), and Progress calls the handlers
// outside it, on the caller's goroutine.
//
// Memory: Register pins the slice it is given (runtime.Pinner), so the Go
// garbage collector never moves or frees memory UCX may touch. A Checked
// registration is unpinned when Revoke returns (nothing writes it after);
// a OneSided one stays pinned for the life of the process, because no
// evidence UCX gives proves a one-sided writer stopped. Put sources and Get
// destinations are pinned until their request completes.
//
// Nothing happens unless someone calls Progress: data, reports, answers and
// endpoint errors arrive there, and a checked put lands only in the owner's
// Progress.
type Transport struct {
	mu       sync.Mutex
	w        *C.kvu_worker // nil once closed
	cfg      Config
	handlers transfer.Handlers
	address  []byte

	peers    map[transfer.Peer]address
	conns    map[uint64]*conn    // UCP endpoints not yet closed, by the C record's id
	open     map[peerLife]*conn  // the one Connect shares, per peer incarnation
	answers  map[uint64]*request // checked puts and gets waiting for the owner's answer
	live     map[*request]struct{}
	regions  map[*memory]struct{}
	unheard  []unheard
	ready    []call
	one      [1][]byte  // unbundle's answer for a message that bundles nothing
	box      []*request // sendOutbox's requests to send, reused
	evN      C.size_t   // drain's events, as the last kvu_progress answered them
	evs      *C.kvu_event
	maxCarry int    // kvu_max_carry, fixed when the worker opened
	bundle   []byte // sendOutbox's framing of several messages, reused: kvu_send_msg copies it
	seq      uint64
	stats    Stats
	dead     []*C.kvu_op // abandoned at Close, freed after the worker is gone

	outboxes []*conn // conns with messages Send queued, sent at the next Progress
}

// Stats counts what a transport saw, for tests and operators. Nothing in it
// is read from a session.
type Stats struct {
	PutsApplied    uint64 // puts written into this transport's registrations
	PutsRefused    uint64 // puts this transport refused as the owner, any reason
	PutsLate       uint64 // of those, naming a revoked registration
	GetsServed     uint64
	GetsRefused    uint64
	MsgsRefused    uint64 // malformed, misaddressed, or claiming another identity than their endpoint's
	MsgsUnheard    uint64 // held from an endpoint never matched, and dropped
	AnswersRefused uint64 // acks and get answers not from the endpoint their request went on
	Contained      uint64 // rendezvous buffers kept for ever after a failed receive
	ReportsCarried uint64 // reports puts carried, handed on once their put was applied
	ReportsDropped uint64 // reports puts carried, dropped with their put refused or failed
	PutsRendezvous uint64 // puts that came by rendezvous, whose receive began
	PutsDirect     uint64 // of those, received straight into a registration (Config.Bounce)
	RevokesWaited  uint64 // revocations that waited for such a put still arriving, then fenced
	RevokesNewOnly uint64 // Checked revocations whose wait ran out (RevokeWait): RevokedNewOnly
	AcksSent       uint64 // answers to puts sent, each answering every put one Progress settled from its endpoint
	MsgsBundled    uint64 // messages Send queued that left in one active message with others
}

type unheard struct {
	handle uintptr
	peer   transfer.Peer
	inc    transfer.Incarnation
	msg    []byte
}

type call struct {
	peer transfer.Peer
	inc  transfer.Incarnation
	msg  []byte
	err  error // an endpoint error when set
}

var _ transfer.Transport = (*Transport)(nil)

// New opens a UCP context and worker for one process incarnation.
func New(cfg Config) (*Transport, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	tls := C.CString(cfg.Transports)
	defer C.free(unsafe.Pointer(tls))
	name := C.CString(string(cfg.Name))
	defer C.free(unsafe.Pointer(name))
	var w *C.kvu_worker
	rma := C.int(0)
	if cfg.Mode == OneSided {
		rma = 1
	}
	peerErrors := C.int(1)
	if cfg.NoPeerErrors {
		peerErrors = 0
	}
	direct := C.int(0)
	if cfg.direct() {
		direct = 1
	}
	rndvGet := C.int(0)
	if cfg.rndvGet() {
		rndvGet = 1
	}
	if cfg.RevokeWait == 0 {
		cfg.RevokeWait = defaultRevokeWait
	}
	if st := C.kvu_open(&w, tls, rma, peerErrors, direct, rndvGet, name, C.uint32_t(len(cfg.Name)), C.uint64_t(cfg.Incarnation), nil); st != 0 {
		return nil, fmt.Errorf("ucx: opening a worker over transports %q: %w", cfg.Transports, statusErr(C.int(st)))
	}
	t := &Transport{
		w: w, cfg: cfg,
		peers:   map[transfer.Peer]address{},
		conns:   map[uint64]*conn{},
		open:    map[peerLife]*conn{},
		answers: map[uint64]*request{},
		live:    map[*request]struct{}{},
		regions: map[*memory]struct{}{},
	}
	var p unsafe.Pointer
	var n C.size_t
	if st := C.kvu_address(w, &p, &n); st != C.UCS_OK {
		C.kvu_close(w)
		return nil, fmt.Errorf("ucx: reading the worker address: %w", statusErr(C.int(st)))
	}
	t.address = address{peer: cfg.Name, inc: cfg.Incarnation, worker: C.GoBytes(p, C.int(n))}.append(nil)
	C.kvu_address_release(w, p)
	t.maxCarry = int(C.kvu_max_carry(w)) // fixed at kvu_open: read once, not on every put
	return t, nil
}

// Self implements transfer.Transport.
func (t *Transport) Self() (transfer.Peer, transfer.Incarnation) {
	return t.cfg.Name, t.cfg.Incarnation
}

// Mode is the transport's mode.
func (t *Transport) Mode() Mode { return t.cfg.Mode }

// Address is what a peer passes to AddPeer to reach this transport: the
// name, the incarnation and the UCP worker address. The caller carries it
// out of band (a pipe, a file, a control channel).
func (t *Transport) Address() []byte { return append([]byte(nil), t.address...) }

// AddPeer records a peer's Address, answering whose it is. A later
// incarnation replaces an earlier one (Connect then reaches the new life;
// endpoints to the old one are untouched). An address for an older
// incarnation than the one recorded, or a different address for the same
// incarnation, is refused and changes nothing.
func (t *Transport) AddPeer(addr []byte) (transfer.Peer, transfer.Incarnation, error) {
	a, err := decodeAddress(addr)
	if err != nil {
		return "", 0, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.peers[a.peer]; ok {
		switch {
		case a.inc < old.inc:
			return "", 0, fmt.Errorf("ucx: an address for %s#%d is older than the recorded #%d; the latest incarnation expected", a.peer, a.inc, old.inc)
		case a.inc == old.inc && string(a.worker) != string(old.worker):
			return "", 0, fmt.Errorf("ucx: a second, different address for %s#%d; one address per incarnation expected", a.peer, a.inc)
		}
	}
	t.peers[a.peer] = a
	return a.peer, a.inc, nil
}

// SetHandlers implements transfer.Transport.
func (t *Transport) SetHandlers(h transfer.Handlers) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.handlers = h
}

// Progress implements transfer.Transport: it runs ucp_worker_progress a
// bounded number of times (never blocking), settles what the handlers
// recorded — checked puts applied, answers matched to their requests,
// endpoint errors — and then, outside the lock, hands each message and
// endpoint error to its handler. It answers how many things happened.
func (t *Transport) Progress() int {
	t.mu.Lock()
	if t.w == nil {
		t.mu.Unlock()
		return 0
	}
	t.sendOutboxes()
	// kvu_progress answers the events too, and frees those the last one
	// answered (drain read them all), so that a Progress makes one call into
	// C whether or not it found any.
	n := int(C.kvu_progress(t.w, progressRounds, t.evN, &t.evs, &t.evN))
	n += t.drain()
	t.sweepDead()
	calls, h := t.ready, t.handlers
	t.ready = nil
	t.mu.Unlock()
	for _, c := range calls {
		switch {
		case c.err != nil && h.EndpointError != nil:
			h.EndpointError(c.peer, c.inc, c.err)
		case c.err == nil && h.Message != nil:
			h.Message(c.peer, c.inc, c.msg)
		}
	}
	return n + len(calls)
}

// drain settles the events the handlers recorded, t.evN of them at t.evs
// (as the kvu_progress just before it answered; the next one frees them,
// told how many were read);
// t.mu is held. The count and the events are written into t, not locals: a
// local passed by address escapes, one allocation every Progress — and the
// figure's owner progresses many times a page.
func (t *Transport) drain() int {
	n := int(t.evN)
	if n == 0 {
		return 0
	}
	for _, ev := range unsafe.Slice(t.evs, n) {
		var data []byte
		if ev.len > 0 {
			data = C.GoBytes(ev.data, C.int(ev.len))
		}
		switch ev.kind {
		case C.KVU_EV_MSG:
			c := t.conns[uint64(ev.ep_id)]
			for _, m := range t.unbundle(data, uint64(ev.seq)) {
				if c != nil {
					t.ready = append(t.ready, call{peer: c.peer, inc: c.inc, msg: m})
				}
			}
		case C.KVU_EV_MSG_UNKNOWN:
			peer, inc := transfer.Peer(C.GoStringN(&ev.name[0], C.int(ev.name_len))), transfer.Incarnation(ev.inc)
			for _, m := range t.unbundle(data, uint64(ev.seq)) {
				t.hold(unheard{handle: uintptr(ev.reply_ep), peer: peer, inc: inc, msg: m})
			}
		case C.KVU_EV_PUT_DONE, C.KVU_EV_GET_DONE:
			t.answered(uint64(ev.ep_id), uint64(ev.seq), ev.kind == C.KVU_EV_GET_DONE, int32(ev.status), data)
		case C.KVU_EV_EP_ERROR:
			if c := t.conns[uint64(ev.ep_id)]; c != nil {
				t.fail(c, fmt.Errorf("%w: %s#%d: %w", ErrPeerFailed, c.peer, c.inc, statusErr(C.int(ev.status))))
			}
		}
	}
	return n
}

// unbundle answers the messages an active message carried: data itself
// (count 0), or the count messages it bundles; a malformed bundle is
// refused whole; t.mu is held.
func (t *Transport) unbundle(data []byte, count uint64) [][]byte {
	if count == 0 {
		t.one[0] = data // read before the next unbundle: no slice a message
		return t.one[:]
	}
	msgs, err := splitBundle(data, int(min(count, maxBundled+1)))
	if err != nil {
		t.stats.MsgsRefused++
		return nil
	}
	return msgs
}

// hold keeps a message from an endpoint this transport did not open until
// Connect opens the same one; the oldest is dropped beyond maxUnheard.
func (t *Transport) hold(u unheard) {
	if len(t.unheard) == maxUnheard {
		t.unheard = t.unheard[1:]
		t.stats.MsgsUnheard++
	}
	t.unheard = append(t.unheard, u)
}

// answered matches an owner's answer to the request it names, only if it
// came on the endpoint the request went out on.
func (t *Transport) answered(epID, seq uint64, get bool, status int32, data []byte) {
	r := t.answers[seq]
	if r == nil || r.ep.c.id != epID || (r.kind == reqGet) != get {
		t.stats.AnswersRefused++
		return
	}
	delete(t.answers, seq)
	r.answered = true
	switch {
	case status != 0:
		r.ansErr = refusal(status)
	case get && len(data) != len(r.dst):
		r.ansErr = fmt.Errorf("%w: the owner answered %d bytes for a get of %d", ErrRefused, len(data), len(r.dst))
	case get:
		copy(r.dst, data)
	}
	t.advance(r)
}

// fail records a UCP endpoint's failure, closes it by force and queues the
// handler call: once per peer incarnation, for every Endpoint sharing it.
func (t *Transport) fail(c *conn, err error) {
	if c.err != nil {
		return
	}
	c.err = err
	t.ready = append(t.ready, call{peer: c.peer, inc: c.inc, err: err})
	t.forceClose(c)
	for r := range c.pending {
		t.advance(r)
	}
}

// forceClose closes c's UCP endpoint at once; t.mu is held.
func (t *Transport) forceClose(c *conn) {
	if c.cep == nil {
		return
	}
	c.dropKeys()
	var op *C.kvu_op
	if C.kvu_ep_close(t.w, c.cep, 1, &op) == C.UCS_OK {
		t.dead = append(t.dead, op) // freed once it completes or at Close
	}
	c.forget()
}

// Flush implements transfer.Transport: it completes when every put and get
// posted on any endpoint before it completed remotely. Checked: when the
// owner answered each; OneSided: ucp_worker_flush_nbx.
func (t *Transport) Flush() transfer.Request {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := &request{t: t, kind: reqFlush}
	if t.w == nil {
		r.finish(ErrClosed)
		return r
	}
	if t.cfg.Mode == OneSided {
		var op *C.kvu_op
		if st := C.kvu_worker_flush(t.w, &op); st != C.UCS_OK {
			r.finish(fmt.Errorf("ucx: worker flush: %w", statusErr(C.int(st))))
			return r
		}
		r.op = op
	} else {
		r.waits = rma(t.live)
	}
	t.track(r)
	t.advance(r)
	return r
}

// Stats answers what the transport counted so far.
func (t *Transport) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.merged()
}

// merged adds the C handlers' counts to Go's; t.mu is held.
func (t *Transport) merged() Stats {
	s := t.stats
	if t.w != nil {
		c := C.kvu_get_stats(t.w)
		s.PutsApplied += uint64(c.puts_applied)
		s.PutsRefused += uint64(c.puts_refused)
		s.PutsLate += uint64(c.puts_late)
		s.GetsServed += uint64(c.gets_served)
		s.GetsRefused += uint64(c.gets_refused)
		s.MsgsRefused += uint64(c.msgs_refused)
		s.AnswersRefused += uint64(c.answers_refused)
		s.Contained += uint64(c.bounces_contained)
		s.ReportsCarried += uint64(c.reports_carried)
		s.ReportsDropped += uint64(c.reports_dropped)
		s.PutsRendezvous += uint64(c.puts_rndv)
		s.PutsDirect += uint64(c.puts_direct)
		s.RevokesWaited += uint64(c.revokes_waited)
		s.RevokesNewOnly += uint64(c.revokes_unfenced)
		s.AcksSent += uint64(c.acks_sent)
	}
	return s
}

// closeRounds bounds the progress Close makes while endpoints close.
const closeRounds = 10000

// Close closes every endpoint by force, ends every registration (a Checked
// one fenced; a OneSided one unmapped, its memory left pinned), fails every
// request still open with ErrClosed, and destroys the worker and context.
// Later calls answer ErrClosed; Close is idempotent.
func (t *Transport) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.w == nil {
		return nil
	}
	for _, c := range t.conns {
		if c.err == nil {
			c.err = ErrClosed
		}
		t.forceClose(c)
	}
	for i := 0; i < closeRounds && t.anyInFlight(); i++ {
		C.kvu_progress(t.w, 1, 0, nil, nil) // frees nothing: kvu_close does
	}
	for r := range t.live {
		r.abandon()
		r.finish(ErrClosed)
	}
	for _, op := range t.dead {
		C.kvu_op_abandon(op)
	}
	for m := range t.regions {
		_ = m.end() // the worker goes next: an unmap that failed frees nothing less
	}
	t.stats = t.merged()
	C.kvu_close(t.w)
	t.w = nil
	for _, op := range t.dead {
		C.kvu_op_free(op)
	}
	t.dead = nil
	return nil
}

// sweepDead frees the forced closes that completed; t.mu is held.
func (t *Transport) sweepDead() {
	kept := t.dead[:0]
	for _, op := range t.dead {
		if C.kvu_op_settle(op) != C.UCS_INPROGRESS {
			continue
		}
		kept = append(kept, op)
	}
	clear(t.dead[len(kept):])
	t.dead = kept
}

func (t *Transport) anyInFlight() bool {
	for _, op := range t.dead {
		if C.kvu_op_test(op) == 0 {
			return true
		}
	}
	for r := range t.live {
		if r.op != nil && C.kvu_op_test(r.op) == 0 {
			return true
		}
		if b := r.batch; b != nil && b.op != nil && C.kvu_op_test(b.op) == 0 {
			return true
		}
	}
	return false
}

func (t *Transport) track(r *request) {
	if !r.done {
		t.live[r] = struct{}{}
	}
}

// nextSeq numbers a checked put or get; the zero value is never issued.
func (t *Transport) nextSeq() uint64 {
	t.seq++
	return t.seq
}

// statusErr turns a UCX status into an error naming it.
func statusErr(st C.int) error {
	return &StatusError{Code: int(st), Text: C.GoString(C.ucs_status_string(C.ucs_status_t(st)))}
}

// StatusError is a UCX status code that is not UCS_OK.
type StatusError struct {
	Code int
	Text string
}

// Error names the status: "ucx status -80 (Endpoint timeout)".
func (e *StatusError) Error() string { return fmt.Sprintf("ucx status %d (%s)", e.Code, e.Text) }

// refusal turns an owner's answer code into an error.
func refusal(status int32) error {
	switch status {
	case C.KVU_REFUSE_REVOKED:
		return ErrRevoked
	case C.KVU_REFUSE_BOUNDS:
		return fmt.Errorf("%w: outside the registration", ErrRefused)
	case C.KVU_REFUSE_ENDPOINT:
		return fmt.Errorf("%w: it came on an endpoint the owner did not open (the owner must Connect back)", ErrRefused)
	case C.KVU_REFUSE_IDENTITY:
		return fmt.Errorf("%w: the sender is not the peer of its endpoint", ErrRefused)
	case C.KVU_REFUSE_TARGET:
		return fmt.Errorf("%w: addressed to another incarnation of the owner", ErrRefused)
	case C.KVU_REFUSE_TRANSFER:
		return fmt.Errorf("%w: the data could not be received", ErrRefused)
	}
	if status < 0 {
		return fmt.Errorf("%w: %w", ErrRefused, statusErr(C.int(status)))
	}
	return fmt.Errorf("%w: code %d", ErrRefused, status)
}

// forever keeps OneSided registrations pinned for the life of the process.
var forever struct {
	mu   sync.Mutex
	pins []*runtime.Pinner
}
