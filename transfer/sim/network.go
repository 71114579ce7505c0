package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/kvready/kvready/transfer"
)

// Faults are the adversarial knobs. The zero value is a well-behaved
// network: operations complete in any order a real one allows (puts in any
// order, a message after the puts posted before it on its endpoint, a flush
// after everything before it), and every message arrives once.
type Faults struct {
	// ReportsOvertakeData lets a message arrive before puts posted earlier
	// on its endpoint land — writes that land after their report — as UCX
	// allows unless the sender flushed between them.
	ReportsOvertakeData bool
	// LoseDone, MaskDone, DuplicateDone and ReplayDone are the chances, each
	// in [0, 1], that a DONE sent is lost; withheld for a while (masked:
	// delivered 1 to 64 steps later); delivered twice; or delivered again
	// much later (64 to 512 steps), after the session it names is over and
	// its pages re-lent.
	LoseDone, MaskDone, DuplicateDone, ReplayDone float64
	// PutsOutliveSender lets puts and messages a node posted still land
	// after it died (an RDMA NIC finishes what was posted); without it they
	// are dropped when it dies.
	PutsOutliveSender bool
	// RevocationLeaks makes Memory.Revoke answer RevokedNewOnly: later puts
	// are refused, but ones already posted still land (shared memory
	// written with process_vm_writev). Without it Revoke fences: puts not
	// yet landed are dropped.
	RevocationLeaks bool
}

func (f Faults) validate() error {
	for _, p := range []struct {
		name string
		v    float64
	}{{"LoseDone", f.LoseDone}, {"MaskDone", f.MaskDone}, {"DuplicateDone", f.DuplicateDone}, {"ReplayDone", f.ReplayDone}} {
		if !(p.v >= 0 && p.v <= 1) {
			return fmt.Errorf("sim: Faults.%s is %v; a chance in [0, 1] expected", p.name, p.v)
		}
	}
	return nil
}

// Stats counts what the network did, for tests and checkers. Nothing in it
// is read from a session's state.
type Stats struct {
	Landed         int // puts that wrote into registered memory
	LateLandings   int // of those, puts that landed in memory whose registration was already revoked
	Dropped        int // puts and gets that never landed: fenced by a revocation, their memory or sender gone
	Refused        int // operations refused at posting: a revoked key, a dead peer, a closed endpoint
	Messages       int // messages handed to a handler
	LostDone       int
	MaskedDone     int
	DuplicatedDone int
	ReplayedDone   int
	LateSubmits    int // puts a SubmitsLate writer posted after its DONE
}

// ErrRevoked is the error of an operation refused, or dropped, because its
// memory's registration was revoked.
var ErrRevoked = errors.New("sim: the remote registration was revoked")

// ErrPeerDead is the error of an operation whose peer (or poster) died.
var ErrPeerDead = errors.New("sim: the peer died")

// Network is the simulated fabric every Node is joined to: deterministic
// from its seed. Nothing happens on its own: each Step performs one pending
// action — a put lands, a get reads, a message arrives, a flush completes, a
// writer makes its next move — chosen by the seeded generator among those a
// real network could perform next. Node methods may be called from any
// goroutine; what happens depends only on the seed and the calls' order.
type Network struct {
	mu      sync.Mutex
	rng     *rand.Rand
	faults  Faults
	step    uint64
	nodes   []*Node
	eps     []*endpoint
	ops     []*op // posted, not finished, in posting order
	later   []*op // masked and replayed messages, each due at its step
	regions []*region
	writers []*Writer
	nextInc transfer.Incarnation
	nextID  uint64
	stats   Stats
}

// New makes a network whose every choice follows seed.
func New(seed uint64, f Faults) (*Network, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	return &Network{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), faults: f}, nil
}

// Stats returns the counts so far.
func (n *Network) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// Join starts a process named name with a new incarnation. A live process of
// that name must not exist: Restart replaces one.
func (n *Network) Join(name transfer.Peer) (*Node, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if name == "" {
		return nil, errors.New("sim: a node needs a name")
	}
	if nd := n.live(name); nd != nil {
		return nil, fmt.Errorf("sim: node %q is alive (incarnation %d); Restart it to start a new incarnation", name, nd.inc)
	}
	n.nextInc++
	nd := &Node{net: n, name: name, inc: n.nextInc}
	n.nodes = append(n.nodes, nd)
	return nd, nil
}

// Restart kills the live process named name, as Kill does, and starts a new
// incarnation of it.
func (n *Network) Restart(name transfer.Peer) (*Node, error) {
	if err := n.Kill(name); err != nil {
		return nil, err
	}
	return n.Join(name)
}

// Kill ends the live process named name. Its endpoints fail, and every node
// connected to it is told (an EndpointError at its next Progress); its
// writers stop; its registered memory is gone. Operations it posted still
// land only under PutsOutliveSender.
func (n *Network) Kill(name transfer.Peer) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	nd := n.live(name)
	if nd == nil {
		return fmt.Errorf("sim: no live node %q to kill", name)
	}
	nd.dead = true
	for _, ep := range n.eps {
		switch {
		case ep.from == nd && !ep.to.dead:
			ep.to.inbox = append(ep.to.inbox, event{lost: true, from: nd.name, inc: nd.inc})
		case ep.to == nd && !ep.from.dead:
			ep.from.inbox = append(ep.from.inbox, event{lost: true, from: nd.name, inc: nd.inc})
		}
	}
	for _, o := range n.ops {
		if o.from == nd && !n.faults.PutsOutliveSender {
			n.finish(o, ErrPeerDead)
		}
	}
	n.sweep()
	return nil
}

func (n *Network) live(name transfer.Peer) *Node {
	for _, nd := range n.nodes {
		if nd.name == name && !nd.dead {
			return nd
		}
	}
	return nil
}

// finish completes o with err (nil: it happened), counting a put or get
// that never landed as dropped.
func (n *Network) finish(o *op, err error) {
	if o.done {
		return
	}
	o.done, o.err = true, err
	if err != nil && (o.kind == opPut || o.kind == opGet) {
		n.stats.Dropped++
	}
}

// sweep forgets finished operations.
func (n *Network) sweep() {
	kept := n.ops[:0]
	for _, o := range n.ops {
		if !o.done {
			kept = append(kept, o)
		}
	}
	clear(n.ops[len(kept):])
	n.ops = kept
}

// Step performs one pending action, chosen by the seeded generator among
// those that may happen next, and reports false when there was none.
func (n *Network) Step() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.step++
	n.due()
	ready, movers := n.candidates()
	for len(ready)+len(movers) == 0 {
		// Nothing can happen now: let time pass to whatever is next due — a
		// withheld message, a writer's late submission — or stop.
		next, ok := n.nextDue()
		if !ok {
			return false
		}
		n.step = next
		n.due()
		ready, movers = n.candidates()
	}
	total := len(ready) + len(movers)
	if i := n.rng.IntN(total); i < len(ready) {
		n.perform(ready[i])
	} else {
		movers[i-len(ready)].move()
	}
	n.sweep()
	return true
}

// candidates are the operations that may complete now and the writers that
// may move now, in posting and spawning order.
func (n *Network) candidates() (ready []*op, movers []*Writer) {
	for _, o := range n.ops {
		if n.eligible(o) {
			ready = append(ready, o)
		}
	}
	for _, w := range n.writers {
		if w.canMove() {
			movers = append(movers, w)
		}
	}
	return ready, movers
}

// nextDue is the earliest later step at which a delayed message or a
// lingering writer becomes due.
func (n *Network) nextDue() (uint64, bool) {
	var next uint64
	found := false
	consider := func(at uint64) {
		if at > n.step && (!found || at < next) {
			next, found = at, true
		}
	}
	for _, o := range n.later {
		consider(o.at)
	}
	for _, w := range n.writers {
		if w.phase == lingering && !w.spec.Node.dead {
			consider(w.lateAt)
		}
	}
	return next, found
}

// Run performs up to max steps and answers how many it performed.
func (n *Network) Run(max int) int {
	for i := range max {
		if !n.Step() {
			return i
		}
	}
	return max
}

// ReleaseAll makes every masked or replayed message due now, so a test can
// force the late deliveries it wants to see.
func (n *Network) ReleaseAll() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	released := len(n.later)
	for _, o := range n.later {
		o.at = 0
	}
	n.due()
	return released
}

// due moves the delayed messages whose step has come into the pending
// operations.
func (n *Network) due() {
	kept := n.later[:0]
	for _, o := range n.later {
		if o.at <= n.step {
			n.ops = append(n.ops, o)
		} else {
			kept = append(kept, o)
		}
	}
	clear(n.later[len(kept):])
	n.later = kept
}

// eligible says whether o may complete next: a put or get at any time; a
// message once every put and get posted before it on its endpoint is done
// (at any time under ReportsOvertakeData); a flush once every put and get
// before it on its endpoint (or, for a worker flush, its node) is done.
func (n *Network) eligible(o *op) bool {
	switch o.kind {
	case opPut, opGet:
		return true
	case opMsg:
		return n.faults.ReportsOvertakeData || o.replay || !n.dataBefore(o, false)
	}
	return !n.dataBefore(o, o.ep == nil)
}

func (n *Network) dataBefore(o *op, wholeNode bool) bool {
	for _, p := range n.ops {
		if p.seq >= o.seq || p.done || (p.kind != opPut && p.kind != opGet) {
			continue
		}
		if p.ep == o.ep || (wholeNode && p.from == o.from) {
			return true
		}
	}
	return false
}

// MayWrite is the oracle: whether anything can still write into m, by the
// network's own record — a put posted into it that has not landed or been
// dropped, or a live writer holding its key that will post into it again while the
// registration is not revoked. It never reads a session's state.
func (n *Network) MayWrite(m transfer.Memory) bool {
	r, ok := m.(*region)
	if !ok {
		return true // not ours: nothing is known, so nothing is promised
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, o := range n.ops {
		if o.kind == opPut && o.region == r && !o.done {
			return true
		}
	}
	if r.revoked {
		return false
	}
	for _, w := range n.writers {
		if w.willPostTo(r) {
			return true
		}
	}
	return false
}
