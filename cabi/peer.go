package main

/*
#include "cgo.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/kvready/kvready/backend/peer"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/ucx"
)

// Peer transfers over UCX: a transport object (transfer/ucx), and peer
// backends over it (backend/peer's Receiver and Sender) that an engine uses
// as its fetcher or publisher. kvready.h's "peer transfers" section is the
// caller's documentation.

// transport is a transport object.
type transport struct {
	tr    *ucx.Transport
	users atomic.Int32 // peer backends over it
}

// peerSide is what a backend object keeps of its Receiver or Sender.
type peerSide struct {
	tr   *transport
	recv *peer.Receiver // exactly one of recv and send
	send *peer.Sender
	caps transfer.Capabilities

	mu  sync.Mutex
	eps []transfer.Endpoint // a sender's endpoints to its receivers, opened at connect
}

// Bounds on a plan a caller passes: more is refused before anything is read.
const (
	maxPlanGroups  = 1 << 10
	maxPlanIDs     = math.MaxUint16 // backend/peer's bound on a plan's pages
	maxPlanWriters = 64
)

//export kvready_ucx_new
func kvready_ucx_new(cfg *C.kv_cucx_config, out *C.uint64_t) (st C.int) {
	defer guard(0, &st)
	if cfg == nil || out == nil {
		return fail(0, invalid("kvready_ucx_new: config and transport (the out-parameter) are required (NULL given)"))
	}
	c, err := ucxConfigFromC((*C.kvready_ucx_config)(unsafe.Pointer(cfg)))
	if err != nil {
		return fail(0, err)
	}
	tr, err := ucx.New(c)
	if err != nil {
		return fail(0, statusf(C.KVREADY_ERR_UNAVAILABLE, "kvready_ucx_new: %v", err))
	}
	*out = C.uint64_t(register(kindTransport, &transport{tr: tr}))
	return C.KVREADY_OK
}

// ucxConfigFromC reads and checks a kvready_ucx_config, naming every
// mistake at once.
func ucxConfigFromC(c *C.kvready_ucx_config) (ucx.Config, error) {
	var out ucx.Config
	var bad []string
	if c.name == nil {
		bad = append(bad, "name is NULL; want a peer name of 1 to 255 bytes")
	} else if n, ok := boundedString(c.name, transfer.MaxPeerLen); !ok {
		bad = append(bad, fmt.Sprintf("name is over %d bytes; want a peer name of 1 to %d bytes", transfer.MaxPeerLen, transfer.MaxPeerLen))
	} else if n == "" {
		bad = append(bad, fmt.Sprintf("name is empty; want a peer name of 1 to %d bytes", transfer.MaxPeerLen))
	} else {
		out.Name = transfer.Peer(n)
	}
	if c.incarnation == 0 {
		bad = append(bad, "incarnation 0; want >= 1 (a restarted process takes a larger one)")
	}
	out.Incarnation = transfer.Incarnation(c.incarnation)
	if c.transports != nil {
		tls, ok := boundedString(c.transports, 1024)
		if !ok {
			bad = append(bad, "transports is over 1024 bytes; want a UCX_TLS list such as \"tcp\" or \"sm\"")
		}
		out.Transports = tls
	}
	switch c.mode {
	case C.KVREADY_UCX_CHECKED:
		out.Mode = ucx.Checked
	case C.KVREADY_UCX_ONE_SIDED:
		out.Mode = ucx.OneSided
	default:
		bad = append(bad, fmt.Sprintf("mode %d; want KVREADY_UCX_CHECKED (0) or KVREADY_UCX_ONE_SIDED (1)", int(c.mode)))
	}
	switch c.no_peer_errors {
	case 0, 1:
		out.NoPeerErrors = c.no_peer_errors == 1
	default:
		bad = append(bad, fmt.Sprintf("no_peer_errors %d; want 0 or 1", int(c.no_peer_errors)))
	}
	if len(bad) > 0 {
		return out, invalid("kvready_ucx_new: config: %s", joinMistakes(bad))
	}
	return out, nil
}

// boundedString reads a NUL-terminated C string of at most max bytes, never
// past max+1 bytes; ok is false when no NUL came by then.
func boundedString(p *C.kv_cchar, max int) (string, bool) {
	b := unsafe.Slice((*byte)(unsafe.Pointer(p)), max+1)
	for i, c := range b {
		if c == 0 {
			return string(b[:i]), true
		}
	}
	return string(b[:max]), false
}

// joinMistakes lists every mistake found, in the order found.
func joinMistakes(bad []string) string { return strings.Join(bad, "; ") }

//export kvready_ucx_address
func kvready_ucx_address(h C.uint64_t, buf *C.uint8_t, cap C.size_t, n *C.size_t) (st C.int) {
	defer guard(uint64(h), &st)
	t, err := lookup[*transport](uint64(h), kindTransport)
	if err != nil {
		return fail(uint64(h), err)
	}
	return writeBytes(uint64(h), "kvready_ucx_address", t.tr.Address(), buf, cap, n)
}

// writeBytes writes b into a caller buffer, reporting its length; a buffer
// too small is KVREADY_ERR_BUFFER and is left untouched.
func writeBytes(h uint64, what string, b []byte, buf *C.uint8_t, cap C.size_t, n *C.size_t) C.int {
	if n != nil {
		*n = C.size_t(len(b))
	}
	if !fits(cap, len(b)) || buf == nil {
		return fail(h, statusf(C.KVREADY_ERR_BUFFER, "%s: the buffer holds %d bytes (NULL: %v); %d needed", what, uint64(cap), buf == nil, len(b)))
	}
	copy(outView((*byte)(unsafe.Pointer(buf)), cap, len(b)), b)
	return C.KVREADY_OK
}

// maxBlob bounds an address or an advertisement a caller passes in.
const maxBlob = 1 << 16

//export kvready_ucx_add_peer
func kvready_ucx_add_peer(h C.uint64_t, addr *C.kv_cu8, n C.size_t, name *C.char, nameCap C.size_t, inc *C.uint64_t) (st C.int) {
	defer guard(uint64(h), &st)
	t, err := lookup[*transport](uint64(h), kindTransport)
	if err != nil {
		return fail(uint64(h), err)
	}
	b, err := inBytes(unsafe.Pointer(addr), n, maxBlob, "kvready_ucx_add_peer: address")
	if err != nil {
		return fail(uint64(h), err)
	}
	if name != nil && !fits(nameCap, transfer.MaxPeerLen+1) {
		return fail(uint64(h), statusf(C.KVREADY_ERR_BUFFER, "kvready_ucx_add_peer: name holds %d bytes; want KVREADY_PEER_NAME_SIZE (%d), or NULL", uint64(nameCap), transfer.MaxPeerLen+1))
	}
	p, life, err := t.tr.AddPeer(append([]byte(nil), b...))
	if err != nil {
		return fail(uint64(h), invalid("kvready_ucx_add_peer: %v", err))
	}
	if name != nil {
		cString(name, nameCap, string(p))
	}
	if inc != nil {
		*inc = C.uint64_t(life)
	}
	return C.KVREADY_OK
}

//export kvready_ucx_close
func kvready_ucx_close(h C.uint64_t) (st C.int) {
	defer guard(uint64(h), &st)
	t, err := lookup[*transport](uint64(h), kindTransport)
	if err != nil {
		return fail(uint64(h), err)
	}
	if u := t.users.Load(); u > 0 {
		return fail(uint64(h), statusf(C.KVREADY_ERR_BUSY, "kvready_ucx_close: %d peer backends still use this transport; close them first (kvready_backend_close)", u))
	}
	unregister(uint64(h))
	if err := t.tr.Close(); err != nil {
		return fail(0, statusf(C.KVREADY_ERR_BACKEND, "kvready_ucx_close: %v", err))
	}
	return C.KVREADY_OK
}

// The defaults of kvready_peer_config: the deadlines and bounds a manager
// starts from. A session's timeout + grace stays within the engine's
// default request_timeout + drain_grace, so that with both defaults the
// receiver, not the engine, decides when a transfer gave up.
const (
	defaultPeerTimeout    = 20 * time.Second
	defaultPeerGrace      = 10 * time.Second
	defaultPeerWindow     = time.Hour
	defaultPeerSessions   = 64
	defaultPeerTombstones = 64
)

func peerDefaults() C.kvready_peer_config {
	var c C.kvready_peer_config
	c.timeout_ns = C.int64_t(defaultPeerTimeout)
	c.grace_ns = C.int64_t(defaultPeerGrace)
	c.window_ns = C.int64_t(defaultPeerWindow)
	c.sessions = defaultPeerSessions
	c.tombstones = defaultPeerTombstones
	c.leased = 1
	return c
}

//export kvready_peer_config_defaults
func kvready_peer_config_defaults(config *C.kvready_peer_config) (st C.int) {
	defer guard(0, &st)
	if config == nil {
		return fail(0, invalid("kvready_peer_config_defaults: config is NULL"))
	}
	*config = peerDefaults()
	return C.KVREADY_OK
}

// peerSettings is a kvready_peer_config read and checked: every mistake at
// once; a duration or a bound of 0 takes its default.
type peerSettings struct {
	tr                   *transport
	timeout, grace, poll time.Duration
	limits               transfer.Limits
	leased               bool
}

func peerSettingsFromC(name string, c *C.kvready_peer_config, receiver bool) (peerSettings, error) {
	d := peerDefaults()
	var s peerSettings
	var bad []string
	t, err := lookup[*transport](uint64(c.transport), kindTransport)
	if err != nil {
		bad = append(bad, "transport: "+err.Error())
	}
	s.tr = t
	dur := func(field string, v, def C.int64_t) time.Duration {
		switch {
		case v == 0:
			return time.Duration(def)
		case v < 0 || v > maxDuration:
			bad = append(bad, fmt.Sprintf("%s %d; want 0 (the default, %v) or a positive number of ns up to 2^61", field, int64(v), time.Duration(def)))
		}
		return time.Duration(v)
	}
	s.timeout = dur("timeout_ns", c.timeout_ns, d.timeout_ns)
	s.grace = dur("grace_ns", c.grace_ns, d.grace_ns)
	s.limits.Window = dur("window_ns", c.window_ns, d.window_ns)
	if c.poll_ns < 0 || c.poll_ns > maxDuration {
		bad = append(bad, fmt.Sprintf("poll_ns %d; want 0 (the owner progresses) or a positive interval in ns", int64(c.poll_ns)))
	}
	s.poll = time.Duration(c.poll_ns)
	for _, b := range []struct {
		field string
		v     C.int32_t
		def   C.int32_t
		dst   *int
	}{{"sessions", c.sessions, d.sessions, &s.limits.Sessions}, {"tombstones", c.tombstones, d.tombstones, &s.limits.Tombstones}} {
		switch {
		case b.v == 0:
			*b.dst = int(b.def)
		case b.v < 0 || b.v > 1<<20:
			bad = append(bad, fmt.Sprintf("%s %d; want 0 (the default, %d) or 1 to 2^20", b.field, int(b.v), int(b.def)))
		default:
			*b.dst = int(b.v)
		}
	}
	switch {
	case c.leased == 0 || c.leased == 1:
		s.leased = receiver && c.leased == 1 // a sender registers nothing of its own
	default:
		bad = append(bad, fmt.Sprintf("leased %d; want 1 (each session under its own registration) or 0", int(c.leased)))
	}
	if len(bad) > 0 {
		return s, invalid("%s: config: %s", name, joinMistakes(bad))
	}
	return s, nil
}

//export kvready_peer_receiver_new
func kvready_peer_receiver_new(cfg *C.kv_cpeer_config, memh C.uint64_t, out *C.uint64_t) (st C.int) {
	defer guard(0, &st)
	return newPeerBackend("kvready_peer_receiver_new", cfg, memh, out, true)
}

//export kvready_peer_sender_new
func kvready_peer_sender_new(cfg *C.kv_cpeer_config, memh C.uint64_t, out *C.uint64_t) (st C.int) {
	defer guard(0, &st)
	return newPeerBackend("kvready_peer_sender_new", cfg, memh, out, false)
}

func newPeerBackend(name string, cfg *C.kv_cpeer_config, memh C.uint64_t, out *C.uint64_t, receiver bool) C.int {
	if cfg == nil || out == nil {
		return fail(0, invalid("%s: config and backend (the out-parameter) are required (NULL given)", name))
	}
	m, err := lookup[*memory](uint64(memh), kindMemory)
	if err != nil {
		return fail(0, err)
	}
	if m.staged == nil {
		return fail(0, invalid("%s: memory is the conformance kit's; a peer backend lends staging memory from kvready_memory_over", name))
	}
	s, err := peerSettingsFromC(name, (*C.kvready_peer_config)(unsafe.Pointer(cfg)), receiver)
	if err != nil {
		return fail(0, err)
	}
	if s.tr.users.Add(1) != 1 {
		s.tr.users.Add(-1)
		return fail(0, statusf(C.KVREADY_ERR_BUSY, "%s: the transport already serves a peer backend; want one transport per backend (a backend sets the transport's handlers)", name))
	}
	self, inc := s.tr.tr.Self()
	side := &peerSide{tr: s.tr, caps: transfer.Capabilities{Peer: self, Incarnation: inc, Version: transfer.ProtocolVersion, Supported: transfer.KnownCapabilities}}
	slot := func(u contract.Unit) []byte { row, _ := m.rows.Row(u.LocalGroup, u.Local); return row }
	b := &backend{mem: m}
	if receiver {
		side.recv, err = peer.NewReceiver(peer.ReceiverConfig{
			Transport: s.tr.tr, Capabilities: side.caps, Slot: slot, Leased: s.leased,
			Timeout: s.timeout, Grace: s.grace, Limits: s.limits, Poll: s.poll,
		})
		b.fetcher = side.recv
	} else {
		side.send, err = peer.NewSender(peer.SenderConfig{
			Transport: s.tr.tr, Capabilities: side.caps, Slot: slot,
			Timeout: s.timeout, Limits: s.limits, Poll: s.poll,
		})
		if err == nil {
			b.publisher = side.send
		}
	}
	if err != nil {
		s.tr.users.Add(-1)
		return fail(0, invalid("%s: %v", name, err))
	}
	b.peer = side
	b.close = side.close
	m.users.Add(1)
	*out = C.uint64_t(register(kindBackend, b))
	return C.KVREADY_OK
}

// progress is one bounded round of the Receiver's or Sender's Progress.
func (p *peerSide) progress() int {
	if p.recv != nil {
		return p.recv.Progress()
	}
	return p.send.Progress()
}

// close stops the backend (its driver, later submissions), closes the
// endpoints it opened and lets the transport go.
func (p *peerSide) close() error {
	var err error
	if p.recv != nil {
		err = p.recv.Close()
	} else {
		err = p.send.Close()
	}
	p.mu.Lock()
	eps := p.eps
	p.eps = nil
	p.mu.Unlock()
	for _, ep := range eps {
		_, _ = ep.Close() // a failed endpoint is closed all the same; nothing is owed on it
	}
	p.tr.users.Add(-1)
	return err
}

// peerOf finds the peer backend h names.
func peerOf(h C.uint64_t, name string) (*peerSide, error) {
	b, err := lookup[*backend](uint64(h), kindBackend)
	if err != nil {
		return nil, err
	}
	if b.peer == nil {
		return nil, statusf(C.KVREADY_ERR_UNSUPPORTED, "%s: backend %#x is not a peer backend (kvready_peer_receiver_new, kvready_peer_sender_new)", name, uint64(h))
	}
	if b.closed.Load() {
		return nil, statusf(C.KVREADY_ERR_BAD_HANDLE, "%s: backend %#x was closed", name, uint64(h))
	}
	return b.peer, nil
}

//export kvready_peer_capabilities
func kvready_peer_capabilities(h C.uint64_t, buf *C.uint8_t, cap C.size_t, n *C.size_t) (st C.int) {
	defer guard(uint64(h), &st)
	p, err := peerOf(h, "kvready_peer_capabilities")
	if err != nil {
		return fail(uint64(h), err)
	}
	b, err := transfer.AppendCapabilities(nil, p.caps)
	if err != nil {
		return fail(uint64(h), invalid("kvready_peer_capabilities: %v", err))
	}
	return writeBytes(uint64(h), "kvready_peer_capabilities", b, buf, cap, n)
}

//export kvready_peer_connect
func kvready_peer_connect(h C.uint64_t, caps *C.kv_cu8, n C.size_t) (st C.int) {
	defer guard(uint64(h), &st)
	p, err := peerOf(h, "kvready_peer_connect")
	if err != nil {
		return fail(uint64(h), err)
	}
	b, err := inBytes(unsafe.Pointer(caps), n, maxBlob, "kvready_peer_connect: capabilities")
	if err != nil {
		return fail(uint64(h), err)
	}
	remote, err := transfer.DecodeCapabilities(append([]byte(nil), b...))
	if err != nil {
		return fail(uint64(h), invalid("kvready_peer_connect: %v; want the bytes the peer's kvready_peer_capabilities wrote", err))
	}
	return fail(uint64(h), p.connect(remote))
}

// connect negotiates with remote. A sender first opens its endpoint to that
// life: a UCX worker hears a message only on an endpoint it opened
// (docs/ucx.md), and the receiver's offer may come before any put.
func (p *peerSide) connect(remote transfer.Capabilities) error {
	if p.recv != nil {
		if _, err := p.recv.Connect(remote); err != nil {
			return statusf(C.KVREADY_ERR_REJECTED, "kvready_peer_connect: %v", err)
		}
		return nil
	}
	ep, err := p.tr.tr.Connect(remote.Peer)
	if err != nil {
		return invalid("kvready_peer_connect: connecting to %s#%d: %v (add its address first: kvready_ucx_add_peer)", remote.Peer, remote.Incarnation, err)
	}
	if _, err := p.send.Connect(remote); err != nil {
		_, _ = ep.Close()
		return statusf(C.KVREADY_ERR_REJECTED, "kvready_peer_connect: %v", err)
	}
	p.mu.Lock()
	p.eps = append(p.eps, ep)
	p.mu.Unlock()
	return nil
}

//export kvready_peer_expect
func kvready_peer_expect(h C.uint64_t, cp *C.kv_cpeer_plan, pages *C.kvready_peer_page, cap C.size_t, n *C.size_t) (st C.int) {
	defer guard(uint64(h), &st)
	p, err := peerOf(h, "kvready_peer_expect")
	if err != nil {
		return fail(uint64(h), err)
	}
	if cp == nil {
		return fail(uint64(h), invalid("kvready_peer_expect: plan is NULL"))
	}
	plan, send, err := planFromC((*C.kvready_peer_plan)(unsafe.Pointer(cp)), p.recv != nil)
	if err != nil {
		return fail(uint64(h), err)
	}
	// Validate and size first: a plan refused, or a buffer too small, records
	// nothing.
	var listed []peer.Page
	if p.recv != nil {
		listed, err = plan.Pages()
	} else {
		listed, err = send.Pages()
	}
	if err != nil {
		return fail(uint64(h), invalid("kvready_peer_expect: %v", err))
	}
	if n != nil {
		*n = C.size_t(len(listed))
	}
	if !fits(cap, len(listed)) || pages == nil {
		return fail(uint64(h), statusf(C.KVREADY_ERR_BUFFER, "kvready_peer_expect: pages holds %d entries (NULL: %v); the plan has %d pages", uint64(cap), pages == nil, len(listed)))
	}
	if p.recv != nil {
		listed, err = p.recv.Expect(plan)
	} else {
		listed, err = p.send.Expect(send)
	}
	if err != nil {
		return fail(uint64(h), statusf(C.KVREADY_ERR_REJECTED, "kvready_peer_expect: %v", err))
	}
	out := outView((*C.kvready_peer_page)(unsafe.Pointer(pages)), cap, len(listed))
	for i, pg := range listed {
		var c C.kvready_peer_page
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&c.name[0])), contract.NameSize), pg.Name[:])
		c.group, c.index, c.id = C.int32_t(pg.Group), C.int32_t(pg.Index), C.int64_t(pg.ID)
		c.kind, c.block, c.end = C.int32_t(pg.Kind), C.int32_t(pg.Block), C.int64_t(pg.End)
		out[i] = c
	}
	return C.KVREADY_OK
}

// planFromC reads a kvready_peer_plan as the side's plan (a receiver's Plan
// or a sender's SendPlan), refusing a field of the other side's and counts
// past their bounds, every mistake at once. The plan's own checks are
// Pages'.
func planFromC(c *C.kvready_peer_plan, receiver bool) (peer.Plan, peer.SendPlan, error) {
	var bad []string
	groups, err := inView((*C.kvready_chunk_group)(unsafe.Pointer(c.groups)), C.size_t(c.n_groups), maxPlanGroups, "groups")
	if err != nil {
		bad = append(bad, err.Error())
	}
	var tg []transfer.Group
	for g, cg := range groups {
		ids, err := inView((*C.int64_t)(unsafe.Pointer(cg.ids)), C.size_t(cg.n_ids), maxPlanIDs, fmt.Sprintf("groups[%d].ids", g))
		if err != nil {
			bad = append(bad, err.Error())
			continue
		}
		grp := transfer.Group{Kind: transfer.CacheKind(cg.kind)}
		if cg.kind != C.KVREADY_CACHE_PAGED && cg.kind != C.KVREADY_CACHE_STATE {
			bad = append(bad, fmt.Sprintf("groups[%d].kind %d; want KVREADY_CACHE_PAGED (1) or KVREADY_CACHE_STATE (2)", g, int(cg.kind)))
		}
		for _, id := range ids {
			if id < 0 || int64(id) > math.MaxInt32 {
				bad = append(bad, fmt.Sprintf("groups[%d]: id %d; want 0 to 2^31-1", g, int64(id)))
				break
			}
			grp.Blocks = append(grp.Blocks, int(id))
		}
		tg = append(tg, grp)
	}
	if c.is_last != 0 && c.is_last != 1 {
		bad = append(bad, fmt.Sprintf("is_last %d; want 0 or 1", int(c.is_last)))
	}
	chunk, err := transfer.NewChunk(tg, transfer.TokenRange{Start: int64(c.token_start), End: int64(c.token_end)}, c.is_last == 1)
	if err != nil {
		bad = append(bad, err.Error())
	}
	var writers []transfer.AccessorID
	ws, err := inView((*C.kvready_accessor)(unsafe.Pointer(c.writers)), C.size_t(c.n_writers), maxPlanWriters, "writers")
	if err != nil {
		bad = append(bad, err.Error())
	}
	for i := range ws {
		a, err := accessorFromC(&ws[i], fmt.Sprintf("writers[%d]", i))
		if err != nil {
			bad = append(bad, err.Error())
		}
		writers = append(writers, a)
	}
	var as transfer.AccessorID
	var to string
	var share []peer.PageRef
	if receiver {
		if c.to != nil || c.as.peer != nil || c.as.rank != 0 || c.as.role != 0 || c.share != nil || c.n_share != 0 {
			bad = append(bad, "to, as and share are a sender's; want them zero (NULL) in a receiver's plan")
		}
	} else {
		if c.writers != nil || c.n_writers != 0 {
			bad = append(bad, "writers are a receiver's; want NULL and 0 in a sender's plan (as names this process's accessor)")
		}
		if c.to == nil {
			bad = append(bad, "to is NULL; want the receiver's peer name")
		} else if s, ok := boundedString(c.to, transfer.MaxPeerLen); ok {
			to = s
		} else {
			bad = append(bad, fmt.Sprintf("to is over %d bytes", transfer.MaxPeerLen))
		}
		if as, err = accessorFromC(&c.as, "as"); err != nil {
			bad = append(bad, err.Error())
		}
		refs, err := inView((*C.kvready_page_ref)(unsafe.Pointer(c.share)), C.size_t(c.n_share), maxPlanIDs, "share")
		if err != nil {
			bad = append(bad, err.Error())
		}
		for _, r := range refs {
			share = append(share, peer.PageRef{Group: int(r.group), Index: int(r.index)})
		}
	}
	if len(bad) > 0 {
		return peer.Plan{}, peer.SendPlan{}, invalid("kvready_peer_expect: plan: %s", joinMistakes(bad))
	}
	req, att := transfer.RequestID(c.request), transfer.AttemptID(c.attempt)
	return peer.Plan{Request: req, Attempt: att, Writers: writers, Chunk: chunk, BlockTokens: int(c.block_tokens)},
		peer.SendPlan{Request: req, Attempt: att, To: transfer.Peer(to), As: as, Chunk: chunk, BlockTokens: int(c.block_tokens), Share: share},
		nil
}

func accessorFromC(a *C.kvready_accessor, field string) (transfer.AccessorID, error) {
	var bad []string
	var out transfer.AccessorID
	if a.peer == nil {
		bad = append(bad, field+".peer is NULL")
	} else if s, ok := boundedString(a.peer, transfer.MaxPeerLen); !ok {
		bad = append(bad, fmt.Sprintf("%s.peer is over %d bytes", field, transfer.MaxPeerLen))
	} else {
		out.Peer = transfer.Peer(s)
	}
	if a.rank < 0 || a.rank > math.MaxUint16 {
		bad = append(bad, fmt.Sprintf("%s.rank %d; want 0 to 65535", field, int(a.rank)))
	}
	out.Rank = uint16(a.rank)
	if a.role != C.KVREADY_ROLE_KV && a.role != C.KVREADY_ROLE_AUX {
		bad = append(bad, fmt.Sprintf("%s.role %d; want KVREADY_ROLE_KV (1) or KVREADY_ROLE_AUX (2)", field, int(a.role)))
	}
	out.Role = transfer.Role(a.role)
	if len(bad) > 0 {
		return out, errors.New(joinMistakes(bad))
	}
	return out, nil
}

//export kvready_peer_forget
func kvready_peer_forget(h C.uint64_t, req C.uint64_t, att C.uint32_t, as *C.kv_caccessor, forgotten *C.int32_t) (st C.int) {
	defer guard(uint64(h), &st)
	p, err := peerOf(h, "kvready_peer_forget")
	if err != nil {
		return fail(uint64(h), err)
	}
	key := transfer.SessionKey{Request: transfer.RequestID(req), Attempt: transfer.AttemptID(att)}
	var ok bool
	switch {
	case p.recv != nil && as != nil:
		return fail(uint64(h), invalid("kvready_peer_forget: a receiver's plan is named by request and attempt; want as NULL"))
	case p.recv != nil:
		ok = p.recv.Forget(key)
	case as == nil:
		return fail(uint64(h), invalid("kvready_peer_forget: a sender's plan is named by request, attempt and the accessor it writes as; as is NULL"))
	default:
		a, err := accessorFromC((*C.kvready_accessor)(unsafe.Pointer(as)), "as")
		if err != nil {
			return fail(uint64(h), invalid("kvready_peer_forget: %v", err))
		}
		ok = p.send.Forget(key, a)
	}
	if forgotten != nil {
		*forgotten = cbool(ok)
	}
	return C.KVREADY_OK
}

//export kvready_peer_progress
func kvready_peer_progress(h C.uint64_t, events *C.int64_t) (st C.int) {
	defer guard(uint64(h), &st)
	p, err := peerOf(h, "kvready_peer_progress")
	if err != nil {
		return fail(uint64(h), err)
	}
	k := p.progress()
	if events != nil {
		*events = C.int64_t(k)
	}
	return C.KVREADY_OK
}

//export kvready_peer_outcome
func kvready_peer_outcome(h C.uint64_t, req C.uint64_t, att C.uint32_t, out *C.kvready_transfer_outcome, found *C.int32_t) (st C.int) {
	defer guard(uint64(h), &st)
	p, err := peerOf(h, "kvready_peer_outcome")
	if err != nil {
		return fail(uint64(h), err)
	}
	if p.recv == nil {
		return fail(uint64(h), statusf(C.KVREADY_ERR_UNSUPPORTED, "kvready_peer_outcome: a sender keeps no transfer outcome; its publish lease's outcome is the engine's (kvready_lease_infos)"))
	}
	if out == nil || found == nil {
		return fail(uint64(h), invalid("kvready_peer_outcome: outcome and found are required (NULL given)"))
	}
	o, ok := p.recv.Outcome(transfer.SessionKey{Request: transfer.RequestID(req), Attempt: transfer.AttemptID(att)})
	var c C.kvready_transfer_outcome
	switch o := o.(type) {
	case transfer.Delivered:
		c.kind, c.token_end = C.KVREADY_TRANSFER_DELIVERED, C.int64_t(o.TokenEnd)
	case transfer.Failed:
		c.kind = C.KVREADY_TRANSFER_FAILED
		cArray(c.reason[:], o.Reason)
	case transfer.Cancelled:
		c.kind, c.by_peer = C.KVREADY_TRANSFER_CANCELLED, cbool(o.ByPeer)
	}
	*found = cbool(ok && o != nil)
	*out = c
	return C.KVREADY_OK
}

//export kvready_peer_backend_stats
func kvready_peer_backend_stats(h C.uint64_t, out *C.kvready_peer_stats) (st C.int) {
	defer guard(uint64(h), &st)
	p, err := peerOf(h, "kvready_peer_backend_stats")
	if err != nil {
		return fail(uint64(h), err)
	}
	if out == nil {
		return fail(uint64(h), invalid("kvready_peer_backend_stats: stats is NULL"))
	}
	*out = p.stats()
	return C.KVREADY_OK
}

func (p *peerSide) stats() C.kvready_peer_stats {
	if p.recv != nil {
		return receiverStatsToC(p.recv.Stats())
	}
	return senderStatsToC(p.send.Stats())
}

// settledOf is how many sessions a submit-to-settled histogram counted.
func settledOf(b [peer.LatencyBuckets]uint64) C.uint64_t {
	var n uint64
	for _, v := range b {
		n += v
	}
	return C.uint64_t(n)
}

// receiverStatsToC is what kvready_peer_backend_stats answers for a
// receiver; the counters it leaves out are peerStatsNotInC's (peer_test.go).
func receiverStatsToC(s peer.ReceiverStats) C.kvready_peer_stats {
	var c C.kvready_peer_stats
	c.in_flight, c.in_doubt = C.uint64_t(s.InFlight), C.uint64_t(s.InDoubt)
	c.delivered, c.failed, c.cancelled = C.uint64_t(s.Delivered), C.uint64_t(s.Failed), C.uint64_t(s.Cancelled)
	c.settled, c.rejected, c.peers_lost = settledOf(s.Settle), C.uint64_t(s.Rejected), C.uint64_t(s.PeersLost)
	c.evidence, c.refused = C.uint64_t(s.Evidence), C.uint64_t(s.Refused)
	c.revocations, c.fenced = C.uint64_t(s.Revocations), C.uint64_t(s.Fenced)
	return c
}

// senderStatsToC is receiverStatsToC for a sender: its dropped offers are
// the refused field.
func senderStatsToC(s peer.SenderStats) C.kvready_peer_stats {
	var c C.kvready_peer_stats
	c.in_flight = C.uint64_t(s.InFlight)
	c.delivered, c.failed, c.cancelled = C.uint64_t(s.Delivered), C.uint64_t(s.Failed), C.uint64_t(s.Cancelled)
	c.settled, c.rejected, c.peers_lost = settledOf(s.Settle), C.uint64_t(s.Rejected), C.uint64_t(s.PeersLost)
	c.refused, c.offers, c.puts = C.uint64_t(s.Dropped), C.uint64_t(s.Offers), C.uint64_t(s.Puts)
	return c
}
