package readiness

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/internal/grow"
	"github.com/kvready/kvready/staging"
)

// Core is kvready's lifecycle engine without I/O: like etcd raft's RawNode it
// applies evidence to the compiled lifecycle table and hands back, through
// [Core.Ready], the work the evidence calls for — submissions, copies, access
// proofs to ask for, cancel requests, containment signals. It starts no
// goroutine, calls no backend and touches no device; its clock is the one its
// caller gives it in Tick. Every method must be called from one goroutine.
//
// Evidence enters through one door, [Core.Step] (the owner's requests —
// Release, Cancel, Close — go through the same door): it is classified, the
// table answers, and on a refusal nothing is touched. Only an accepted move or
// latch stores a reason, settles the lease, and performs the effects the table
// declares for the states entered.
//
// Package readiness's Engine is the runner that drives a Core with goroutines;
// it is what most managers embed. Drive a Core directly to fit kvready into an
// event loop of your own, or to step it deterministically.
type Core struct {
	cfg   Config
	table *fsm.Table
	mem   *staging.Memory
	parts staging.Parts
	alloc *staging.Allocator
	claim *staging.Claim // the memory's, held until HandOver or a halt (SPEC §4 rule 17)
	// spans[g][k] are the byte spans, in a slot of memory group g, of the
	// k-th layer in the core's layer order (ascending layer id across the
	// groups); nil where group g has no such layer.
	spans [][][]staging.Span

	leases []lease
	gens   []uint32 // gens[id] is record id's generation (see ticket): the allocator reads this column
	spare  []uint32 // retired records, reused last-in first-out (their caches are warm)
	// bodies holds each record's body at the record's index (Core.body), in
	// chunks of bodyChunk.
	bodies []*[bodyChunk]body
	// kept is a ring of the latest KeepReleased leases the owner is done with
	// (released, or quarantined and then released), so that their handles stay
	// readable after their records are reused or parked.
	kept     []keptLease
	keptNext int
	builder  staging.ExtentBuilder
	timers   timerHeap
	grants   []staging.Ticket
	hopeless []staging.Ticket
	runs     []staging.Run
	masks    [][]bool // scratch: served masks classified, taken by the lease only if the table accepts
	follow   []followUp
	// Admission: the line of staged leases waiting for the backend's bound,
	// and how many submissions are outstanding.
	admitLine   []Handle
	admitHead   int
	outstanding int

	ready  Ready
	moves  uint64
	now    int64
	closed bool
	lost   bool
	// exposed: a lease was ever handed to a backend, so a report whose
	// leases are all settled says QUIESCED_SUCCESS, not NOT_EXPOSED.
	exposed bool
	halted  error
	stats   Stats
	// byCause counts moves by cause while counting is set.
	counting bool
	byCause  [causeSlots]uint64
}

// followUp is evidence an effect produced about its own lease (staging refused
// to build the extent), applied through the door once the current step is
// done.
type followUp struct {
	id uint32
	ev Evidence
}

// NewCore assembles a core: the lifecycle without I/O, driven by its
// caller (etcd raft's RawNode beside Engine's Node). It reads the lifecycle's
// settings of cfg — Memory, TokensPerBlock, the durations, the policy,
// Layers, Logger, OnTransition — and ignores the runner's (backends, stream,
// clock, callbacks). It refuses a config missing what it needs, naming every
// problem at once, and memory another live engine or core holds (wrapping
// staging.ErrMemoryClaimed, naming the holder): the core claims its memory
// until HandOver, or until it halts (SPEC §4 rule 17).
func NewCore(cfg Config) (*Core, error) {
	if err := cfg.validate(false); err != nil {
		return nil, err
	}
	return newCore(cfg.withDefaults(), "core")
}

// newCore assembles a core from a config already validated, defaults filled
// in. It claims the memory (claim.go) for an engine or a core driven by hand
// (kind): its allocator starts with the slots earlier engines left out of
// circulation quarantined.
func newCore(cfg Config, kind string) (*Core, error) {
	claim, err := claimMemory(cfg.Memory, kind)
	if err != nil {
		return nil, err
	}
	c := &Core{cfg: cfg, table: fsm.Lifecycle(), mem: cfg.Memory, parts: cfg.Memory.Parts(), alloc: claim.Allocator(), claim: claim, spans: layerOrder(cfg)}
	if err := c.alloc.NameTicketsBy(&c.gens); err != nil {
		claim.End()
		return nil, fmt.Errorf("readiness: %s: the memory's allocator: %w", kind, err) // a new claim's allocator has issued nothing
	}
	return c, nil
}

// layerOrder lays the config's layers out in the core's layer order: every
// layer id of every group, ascending. Without Layers the whole slot is the
// one layer.
func layerOrder(cfg Config) [][][]staging.Span {
	groups := cfg.Memory.NumGroups()
	out := make([][][]staging.Span, groups)
	if len(cfg.Layers) == 0 {
		for g := range out {
			out[g] = [][]staging.Span{{{Offset: 0, Size: cfg.Memory.Group(g).SlotBytes}}}
		}
		return out
	}
	var ids []int
	for _, layers := range cfg.Layers {
		for _, ls := range layers {
			ids = append(ids, ls.Layer)
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	for g, layers := range cfg.Layers {
		out[g] = make([][]staging.Span, len(ids))
		for _, ls := range layers {
			k, _ := slices.BinarySearch(ids, ls.Layer)
			out[g][k] = slices.Clone(ls.Spans)
		}
	}
	return out
}

// Layers returns the number of layers a fetch's copies go in: layer k is the
// k-th layer id, ascending, of Config.Layers; 1 without Layers (the whole
// slot).
func (c *Core) Layers() int { return len(c.spans[0]) }

// Config returns the core's config, defaults filled in.
func (c *Core) Config() Config { return c.cfg }

// Tick tells the core the time. Deadlines, containment deadlines, Quiesce
// calls that outlived their timeout and retries that came due fire now —
// before any evidence reported after the Tick, so that a proof arriving at the
// containment deadline itself never releases anything. Then the allocator's
// grants are taken.
func (c *Core) Tick(now time.Time) { c.tickAt(now.UnixNano()) }

// tickAt is Tick at now nanoseconds since the Unix epoch.
func (c *Core) tickAt(now int64) {
	c.now = now
	if c.halted != nil {
		return
	}
	c.expire()
	c.pump()
}

// Now returns the time of the latest Tick.
func (c *Core) Now() time.Time { return time.Unix(0, c.now) }

// NextDue returns the earliest time at which a Tick will fire something (a
// deadline, a containment deadline, a Quiesce timeout, a retry), and false
// when nothing is armed. A runner sleeps until then, or until evidence
// arrives.
func (c *Core) NextDue() (time.Time, bool) {
	at, ok := c.timers.next()
	if !ok || c.halted != nil {
		return time.Time{}, false
	}
	return time.Unix(0, at), true
}

// Ready returns the work the core asks for. The Ready is the core's and is
// reused: take its work, call Advance, perform it, then report the evidence.
func (c *Core) Ready() *Ready { return &c.ready }

// HasReady reports whether the core asks for any work.
func (c *Core) HasReady() bool { return !c.ready.Empty() }

// Advance acknowledges that the work in Ready was taken: the next Ready holds
// only what evidence reported afterwards asks for.
func (c *Core) Advance() { c.ready.reset() }

// Err returns why the core halted (an *InvariantError or a *FatalError,
// wrapped with ErrHalted), or nil while it runs.
func (c *Core) Err() error {
	if c.halted == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrHalted, c.halted)
}

// Moves returns the number of moves made since the core was assembled.
func (c *Core) Moves() uint64 { return c.moves }

// Lend asks for a lease. Bad input is refused with an error wrapping
// ErrInvalidRequest (or ErrUngrantable: quarantine left no run that could ever
// hold it) and changes nothing. The lease waits for slots in arrival order.
// Grants are taken in rounds — at the next Tick, or with the evidence
// reported after it — never inside an owner's call, so that a lease is staged
// on the clock of the round that will submit it.
func (c *Core) Lend(req Request) (Handle, error) {
	switch {
	case c.halted != nil:
		return Handle{}, c.Err()
	case c.closed:
		return Handle{}, ErrClosed
	case c.lost:
		return Handle{}, fmt.Errorf("%w: no lease can copy to or from it", ErrDeviceLost)
	}
	if n := len(c.spare); n > 0 {
		if id := c.spare[n-1]; c.leases[id].inUse || uint8(c.gens[id]) == c.leases[id].retired {
			c.halt("a retired record was about to be reused without a new generation: its old handles would reach the new lease", id)
			return Handle{}, c.Err()
		}
	}
	next := uint32(len(c.leases))
	if n := len(c.spare); n > 0 {
		next = c.spare[n-1]
	}
	b, err := c.newBody(req, next)
	if err != nil {
		return Handle{}, err
	}
	if int(next) == len(c.gens) {
		// A new record's generation, 1, is in the column the allocator
		// reads before the ticket named after it is (NameTicketsBy).
		c.gens = grow.Len(c.gens, int(next)+1)
		c.gens[next] = 1
	}
	if err := c.alloc.RequestTicket(staging.TicketOf(next, c.gens[next]), b.counts); err != nil {
		c.clearBody(b)
		c.gens = c.gens[:len(c.leases)] // a refusal adds no record
		if errors.Is(err, staging.ErrStaleTicket) {
			// The allocator expects at each index the generation after the
			// request it retired there, which is the record's: a refusal
			// means the two went apart.
			c.haltWith(&InvariantError{What: "the allocator refused the ticket named after a lease record: " + err.Error()})
			c.stats.InvariantBreaches++
			return Handle{}, c.Err()
		}
		if errors.Is(err, staging.ErrUngrantable) {
			return Handle{}, fmt.Errorf("readiness: %w", err)
		}
		return Handle{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	id := c.newRecord()
	l := &c.leases[id]
	l.m = fsm.Slot{State: fsm.Waiting}
	l.kind, l.result, l.inUse = req.Kind, fsm.NoResult, true
	b.lentAt = c.now
	c.stats.Leases[fsm.Waiting]++
	c.stats.Lent++
	return Handle{id: id, gen: c.gens[id]}, nil
}

// newRecord returns a record for a new lease: the latest retired one, else a
// new one.
func (c *Core) newRecord() uint32 {
	if n := len(c.spare); n > 0 {
		id := c.spare[n-1]
		c.spare = c.spare[:n-1]
		return id
	}
	id := len(c.leases)
	c.leases = grow.Len(c.leases, id+1) // its generation, 1, is in gens already (Lend)
	c.timers.grow(len(c.leases))
	return uint32(id)
}

// Release says the owner is done with the lease. The slots return to the
// allocator only once it is logically complete — access proven over and every
// local copy landed; until then the release is latched and nothing more is
// copied into its device rows. Releasing a quarantined lease is the owner
// giving up its claim: it is accepted, its slots never return, and its handle
// stays readable (state quarantined) as a released lease's does. A stale
// handle, or a lease already released, is refused and changes nothing.
func (c *Core) Release(h Handle) error {
	if err := c.owner(h, Evidence{What: ownerReleased, Lease: h}); err != nil {
		return fmt.Errorf("readiness: release of %v: %w", h, err)
	}
	return nil
}

// Cancel cancels, locally, a lease still waiting for its outcome: the lease
// latches Cancelled (not by the peer) at once — an outcome the engine has not
// yet observed loses to it. A submitted lease's drain starts, and on the next
// round the backend is asked, once and best effort, to stop; that proves
// nothing about access: the slots return only once Quiesce answers true. A
// lease not yet submitted (waiting, granted, staged) is withdrawn (SPEC §2):
// no request is sent, there being no attempt, and its slots return at once —
// a publish's once its device→staging copies landed — without the owner's
// release (its handle then reads as released). A submission already handed
// out (admitted) goes ahead, and the cancel follows its answer. A stale
// handle, or a lease whose outcome is already latched, refuses it, saying
// why, and nothing changes.
//
// The result answers the logical and the physical result apart (SPEC §4
// rule 19, the reference's CancelResult), and is filled whatever the error:
// accepted (the error is nil) with the lease's disposition right after the
// cancel — NOT_EXPOSED for a lease withdrawn, ACTIVE or QUIESCING for one
// whose backend may still touch its memory; ALREADY_TERMINAL for a lease
// whose outcome or fence is latched or that is already released (and kept:
// Config.KeepReleased), with its disposition; NOT_FOUND for a handle the core
// cannot name, IN_DOUBT; REJECTED once the core halted. The error is the
// refusal, as ever: errors.Is finds ErrStaleHandle, ErrRefused or ErrHalted.
func (c *Core) Cancel(h Handle) (CancelResult, error) {
	// The reason is kept even where the cancel is latched (a publish's copies
	// landing, a submission being answered): it says why the lease ends.
	if err := c.owner(h, Evidence{What: ownerCancelled, Lease: h}); err != nil {
		err = fmt.Errorf("readiness: cancel of %v: %w", h, err)
		return c.cancelRefused(h, err), err
	}
	return c.cancelAccepted(h), nil
}

// Computed reports layer (0..Layers()-1, the layer order of the fetch's
// copies) of the layerwise publish h computed (SPEC §4 rule 16): its
// device→staging copies of every row are queued at the next Ready, behind
// behind — an event on the owner's compute stream, which the caller's stream
// waits for (Ready.Layers' Behind) — or at once for the zero Event. Layers
// are reported in order, once each, while the lease is granted (a lease
// still waiting for its slots refuses it: report once it is granted). The
// publish is submitted when every layer landed in staging; releasing,
// cancelling or closing it before every layer was reported withdraws it:
// no more layers are taken, nothing is submitted, and the slots return once
// the copies already queued landed. Anything else is refused with an error
// wrapping ErrInvalidRequest (or the table's refusal) and changes nothing.
func (c *Core) Computed(h Handle, layer int, behind gpu.Event) error {
	if c.halted != nil {
		return c.Err()
	}
	id, err := c.lookup(h)
	if err != nil {
		return fmt.Errorf("readiness: layer %d of %v computed: %w", layer, h, err)
	}
	l := &c.leases[id]
	b := c.body(id)
	bad := func(format string, args ...any) error {
		return fmt.Errorf("readiness: layer %d of %v computed: %w: "+format, append([]any{layer, h, ErrInvalidRequest}, args...)...)
	}
	withdrawn := l.m.Latched.Has(fsm.ReleaseRequested) || l.m.Latched.Has(fsm.Close) || l.m.Latched.Has(fsm.CancelRequested)
	switch {
	case l.kind != Publish || !b.byLayer:
		return bad("the lease is not a layerwise publish (Request.Layerwise): its copies are not reported layer by layer")
	case layer < 0 || layer >= c.Layers():
		return bad("the engine's layers are 0..%d", c.Layers()-1)
	case l.m.State != fsm.Granted:
	case withdrawn:
		return bad("the publish was withdrawn (released, cancelled or closed): it takes no more layers")
	case layer < int(b.queued):
		return bad("layer %d was already reported computed", layer)
	case layer > int(b.queued):
		return bad("the next layer is %d: layers are reported in order", b.queued)
	}
	if err := c.owner(h, Evidence{What: ownerComputed, Lease: h, Layer: layer, behind: behind}); err != nil {
		return fmt.Errorf("readiness: layer %d of %v computed: %w", layer, h, err)
	}
	return nil
}

// Retry asks Quiesce again, at the next round, whether the lease's access has
// ended — an explicit evidence retry. The core retries by itself with
// back-off; Retry asks now. It changes nothing for a lease whose proof is not
// awaited, or whose Quiesce call is outstanding.
func (c *Core) Retry(h Handle) error {
	if c.halted != nil {
		return c.Err()
	}
	id, err := c.lookup(h)
	if err != nil {
		return err
	}
	// Where no proof is awaited the table refuses the retry: it changes
	// nothing, and there is nothing to report. Like the owner's other calls
	// it takes no grant and fires no deadline: those wait for a round.
	_ = c.enter(id, &Evidence{What: ownerRetried, Lease: h})
	return c.Err()
}

// AwaitingProof reports whether the lease still needs its access proven: the
// backend returned an attempt and the lease is where its proof is awaited.
func (c *Core) AwaitingProof(h Handle) bool {
	id, err := c.lookup(h)
	return err == nil && c.awaitingProof(&c.leases[id])
}

func (c *Core) awaitingProof(l *lease) bool {
	return l.m.Marks.Has(fsm.Attempted) && c.table.Exposed(l.m.State)
}

// Close stops admission: Lend then fails with ErrClosed. Every lease is told
// through the door: waiting ones are released at once, those still waiting
// for an outcome are cancelled locally (their backend asked to stop, once),
// and every other one is released once it is fenced and its copies landed —
// or contained at its containment deadline. Close never frees quarantined or
// unproven memory. Calling it again changes nothing.
func (c *Core) Close() {
	if c.closed || c.halted != nil {
		return
	}
	c.closed = true
	for i := range c.leases {
		id := uint32(i)
		if l := &c.leases[id]; l.inUse && !l.m.State.Terminal() {
			_ = c.enter(id, &Evidence{What: ownerClosed, Lease: c.handle(id)})
		}
	}
}

// Closed reports whether Close was called.
func (c *Core) Closed() bool { return c.closed }

// Lost reports whether the device was reported lost.
func (c *Core) Lost() bool { return c.lost }

// Drained reports that a closed core holds no lease that can still change:
// every lease is released or quarantined.
func (c *Core) Drained() bool {
	if !c.closed {
		return false
	}
	for s := range fsm.NumStates {
		if c.stats.Leases[s] > 0 && !s.Terminal() {
			return false
		}
	}
	return true
}

// owner takes an owner's request through the door.
func (c *Core) owner(h Handle, ev Evidence) error {
	if c.halted != nil {
		return c.Err()
	}
	id, err := c.lookup(h)
	if err != nil {
		if k, ok := c.released(h); ok {
			if k.m.State == fsm.Quarantined {
				return fmt.Errorf("%w: %v is quarantined and already released: its owner gave up its claim", ErrStaleHandle, h)
			}
			return fmt.Errorf("%w: %v is already released", ErrStaleHandle, h)
		}
		return err
	}
	// Grants and deadlines are taken in rounds (Tick, Step), never inside an
	// owner's call: a lease is staged on the clock of the round that submits
	// it.
	return c.enter(id, &ev)
}

// lookup resolves a handle to a record that still carries its lease.
func (c *Core) lookup(h Handle) (uint32, error) {
	if h.gen == 0 || int(h.id) >= len(c.leases) {
		return 0, fmt.Errorf("%w: %v was never issued", ErrStaleHandle, h)
	}
	l, gen := &c.leases[h.id], c.gens[h.id]
	if !l.inUse || gen != h.gen {
		return 0, fmt.Errorf("%w: %v was retired (the record is now at generation %d)", ErrStaleHandle, h, gen)
	}
	if uint8(gen) == l.retired {
		// retire moved the generation on; Lend checked it at reuse.
		c.halt("a live record carries the generation it retired: the old lease's handles reach it", h.id)
		return 0, c.Err()
	}
	return h.id, nil
}

func (c *Core) handle(id uint32) Handle { return Handle{id: id, gen: c.gens[id]} }

// carries reports whether h names the lease its record carries now: false
// once the lease was retired or parked.
func (c *Core) carries(h Handle) bool {
	return h.gen != 0 && int(h.id) < len(c.leases) && c.leases[h.id].inUse && c.gens[h.id] == h.gen
}
