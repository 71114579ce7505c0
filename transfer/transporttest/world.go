package transporttest

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/kvready/kvready/transfer"
	"pgregory.net/rapid"
)

// lifeID names one incarnation of one process.
type lifeID struct {
	name transfer.Peer
	inc  transfer.Incarnation
}

func (id lifeID) String() string { return fmt.Sprintf("%s#%d", id.name, id.inc) }

// life is one incarnation of a process and what the kit gave it.
type life struct {
	id      lifeID
	tr      transfer.Transport
	dead    bool
	regions []*region
	eps     []*endpoint
	errs    map[lifeID]int // EndpointError calls it received, by the life they named
}

// region is one registration and the kit's record of what it must hold.
type region struct {
	owner     *life
	index     int
	mem       transfer.Memory
	buf       []byte // the registered memory, read by the kit
	want      []byte // what buf holds where no operation may write: canaries, then what landed
	packed    []byte
	revoked   bool
	revokedAt uint64
	frozen    []byte // after a fencing revocation: buf as Revoke left it, for ever
}

func (r *region) String() string {
	return fmt.Sprintf("region %d of %s (%d bytes)", r.index, r.owner.id, len(r.buf))
}

// endpoint is one endpoint the kit opened, and the keys unpacked on it.
type endpoint struct {
	from, to *life
	ep       transfer.Endpoint
	keys     map[*region]transfer.RemoteKey
	closed   bool
	n        int // its number among its owner's, for messages
}

func (e *endpoint) String() string {
	return fmt.Sprintf("endpoint %d of %s to %s", e.n, e.from.id, e.to.id)
}

// open says whether the endpoint must work: not closed, its peer alive.
func (e *endpoint) open() bool { return !e.closed && !e.to.dead }

// message is one message the kit sent.
type message struct {
	from, to *life
	via      *endpoint
	rule     string // the rule it breaks by arriving; "" when it must arrive
	failed   bool   // its request completed with an error, its peer gone
	arrived  int
}

// event is what a handler was given, kept until the kit reads it.
type event struct {
	to      *life
	from    lifeID
	msg     []byte
	lost    bool
	err     error
	outside bool // the handler ran outside a Progress of its own transport
}

// world is one trial: the network, every life, and the kit's record.
type world struct {
	cfg         config
	rt          *rapid.T
	net         Net
	killer      Killer
	g           *guard
	rng         *rand.Rand
	live        map[transfer.Peer]*life
	lives       []*life
	incs        map[transfer.Peer][]transfer.Incarnation
	regions     []*region
	ops         []*op // posted and not settled, forbidden, or loose
	gets        []*op // every get, for the destination watch
	puts        []*op // every put, for the source watch
	msgs        map[string]*message
	clock       uint64
	progressing atomic.Pointer[life]
	mu          sync.Mutex
	events      []event
}

func newWorld(rt *rapid.T, net Net, cfg config, seed uint64) *world {
	w := &world{
		cfg: cfg, rt: rt, net: net, g: newGuard(cfg.callBound),
		rng:  rand.New(rand.NewPCG(seed, seed^0x5bd1e9955bd1e995)),
		live: map[transfer.Peer]*life{}, incs: map[transfer.Peer][]transfer.Incarnation{},
		msgs: map[string]*message{},
	}
	w.killer, _ = net.(Killer)
	return w
}

// fail ends the trial with v; runTrial recovers it.
func (w *world) fail(v *Violation) { panic(v) }

// call runs f under the guard, failing the trial if it blocked or panicked.
func (w *world) call(what, rule string, f func()) {
	if v := w.g.do(what, rule, f); v != nil {
		w.fail(v)
	}
}

func (w *world) tick() uint64 { w.clock++; return w.clock }

// bytes returns n bytes from the trial's generator.
func (w *world) bytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(w.rng.Uint32())
	}
	return b
}

func (w *world) liveLives() []*life {
	return slices.SortedFunc(maps.Values(w.live), func(a, b *life) int { return cmp.Compare(a.id.name, b.id.name) })
}

// draw picks one of n things, labelled; n must be positive.
func (w *world) draw(n int, label string) int { return rapid.IntRange(0, n-1).Draw(w.rt, label) }

// runTrial plays one drawn trial over a fresh network and answers the first
// violation, or nil.
func runTrial(rt *rapid.T, h Harness, cfg config) (err error) {
	seed := rapid.Uint64().Draw(rt, "seed")
	net, herr := h(seed)
	if herr != nil || net == nil {
		return violation(RuleHarness, "the harness made no network (seed %d): %v", seed, herr)
	}
	w := newWorld(rt, net, cfg, seed)
	defer func() {
		p := recover()
		if cerr := w.close(); cerr != nil && p == nil {
			err = cerr
		}
		if p == nil {
			return
		}
		v, ok := p.(*Violation)
		if !ok {
			panic(p) // the kit's own bug, or rapid's: not the transport's
		}
		err = v
	}()
	w.play()
	return nil
}

func (w *world) play() {
	w.cfg.counts.add("trials")
	for i := range rapid.IntRange(2, 4).Draw(w.rt, "processes") {
		w.join(transfer.Peer(fmt.Sprintf("p%d", i)))
	}
	for range rapid.IntRange(1, w.cfg.actions).Draw(w.rt, "actions") {
		w.act()
		w.cfg.counts.add("actions")
		w.checkMemory()
	}
	w.drain()
	w.checkMemory()
}

// close ends the network and the guard; a network that fails to close is
// the harness's violation.
func (w *world) close() (err error) {
	defer w.g.close()
	if w.g.stuck != "" {
		return nil
	}
	var cerr error
	if v := w.g.do("Net.Close", RuleHarness, func() { cerr = w.net.Close() }); v != nil {
		return v
	}
	if cerr != nil {
		return violation(RuleHarness, "Net.Close: %v", cerr)
	}
	return nil
}

// join starts a life of name with one to three registrations.
func (w *world) join(name transfer.Peer) {
	var tr transfer.Transport
	var err error
	w.call(fmt.Sprintf("Join(%q)", name), RuleHarness, func() { tr, err = w.net.Join(name) })
	if err != nil || tr == nil {
		w.fail(violation(RuleHarness, "Join(%q) answered no transport: %v", name, err))
	}
	var self transfer.Peer
	var inc transfer.Incarnation
	w.call("Self", RulePostNeverBlocks, func() { self, inc = tr.Self() })
	switch {
	case self != name:
		w.fail(violation(RuleIncarnation, "the process joined as %q names itself %q", name, self))
	case inc == 0:
		w.fail(violation(RuleIncarnation, "%q has incarnation 0; an incarnation >= 1 names a life", name))
	case slices.Contains(w.incs[name], inc):
		w.fail(violation(RuleIncarnation, "a new life of %q has incarnation %d, which its earlier life %s had", name, inc, lifeID{name, inc}))
	}
	if len(w.incs[name]) > 0 {
		w.cfg.counts.add("new life")
	}
	w.incs[name] = append(w.incs[name], inc)
	l := &life{id: lifeID{name, inc}, tr: tr, errs: map[lifeID]int{}}
	w.live[name] = l
	w.lives = append(w.lives, l)
	w.call("SetHandlers", RulePostNeverBlocks, func() { tr.SetHandlers(w.handlers(l)) })
	for range rapid.IntRange(1, 3).Draw(w.rt, "registrations") {
		w.register(l)
	}
}

// register registers fresh memory of l, filled with random canaries.
func (w *world) register(l *life) {
	size := rapid.IntRange(1, 512).Draw(w.rt, "registration size")
	buf := w.bytes(size)
	var mem transfer.Memory
	var err error
	w.call("Register", RulePostNeverBlocks, func() { mem, err = l.tr.Register(buf) })
	if err != nil || mem == nil {
		w.fail(violation(RuleRegister, "%s could not register %d bytes: %v", l.id, size, err))
	}
	var n int
	var packed []byte
	w.call("Memory.Len", RulePostNeverBlocks, func() { n, packed = mem.Len(), mem.PackedKey() })
	if n != size {
		w.fail(violation(RuleRegister, "a registration of %d bytes on %s has Len %d", size, l.id, n))
	}
	r := &region{owner: l, index: len(l.regions), mem: mem, buf: buf, want: slices.Clone(buf), packed: slices.Clone(packed)}
	l.regions = append(l.regions, r)
	w.regions = append(w.regions, r)
}

// handlers are l's: they only record, for the kit to read after Progress.
func (w *world) handlers(l *life) transfer.Handlers {
	return transfer.Handlers{
		Message: func(from transfer.Peer, inc transfer.Incarnation, msg []byte) {
			w.push(event{to: l, from: lifeID{from, inc}, msg: slices.Clone(msg), outside: w.progressing.Load() != l})
		},
		EndpointError: func(peer transfer.Peer, inc transfer.Incarnation, err error) {
			w.push(event{to: l, from: lifeID{peer, inc}, lost: true, err: err, outside: w.progressing.Load() != l})
		},
	}
}

func (w *world) push(ev event) {
	w.mu.Lock()
	w.events = append(w.events, ev)
	w.mu.Unlock()
}

// handleEvents judges what the handlers were given.
func (w *world) handleEvents() {
	w.mu.Lock()
	evs := w.events
	w.events = nil
	w.mu.Unlock()
	for _, ev := range evs {
		what := "Message"
		if ev.lost {
			what = "EndpointError"
		}
		if ev.outside {
			w.fail(violation(RuleHandlers, "%s's %s handler was called outside its Progress", ev.to.id, what))
		}
		if ev.lost {
			w.lost(ev)
		} else {
			w.arrived(ev)
		}
	}
}

func (w *world) arrived(ev event) {
	m, ok := w.msgs[string(ev.msg)]
	switch {
	case !ok:
		w.fail(violation(RuleMessageIntact, "%s received %d bytes from %s that no process sent: altered or invented", ev.to.id, len(ev.msg), ev.from))
	case m.to != ev.to:
		w.fail(violation(RuleMessageIntact, "a message sent to %s arrived at %s", m.to.id, ev.to.id))
	case m.from.id != ev.from:
		w.fail(violation(RuleMessageIntact, "a message %s sent arrived at %s attributed to %s", m.from.id, ev.to.id, ev.from))
	case m.rule != "":
		w.fail(violation(m.rule, "a message sent on %s, which had to refuse it, arrived at %s", m.via, ev.to.id))
	case m.arrived > 0:
		w.fail(violation(RuleMessageOnce, "a message %s sent arrived at %s a second time", m.from.id, ev.to.id))
	}
	m.arrived++
	w.cfg.counts.add("message arrived")
}

func (w *world) lost(ev event) {
	var named *life
	for _, l := range w.lives {
		if l.id == ev.from {
			named = l
		}
	}
	switch {
	case named == nil:
		w.fail(violation(RuleEndpointError, "%s's EndpointError named %s, which never lived", ev.to.id, ev.from))
	case !named.dead:
		w.fail(violation(RuleEndpointError, "%s's EndpointError named %s, which is alive", ev.to.id, ev.from))
	case ev.err == nil:
		w.fail(violation(RuleEndpointError, "%s's EndpointError named %s with a nil error", ev.to.id, ev.from))
	}
	ev.to.errs[ev.from]++
}
