package readiness

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/staging"
)

// CoreConfig assembles a Core.
type CoreConfig struct {
	// Memory is the staging memory the core lends, one pool group per local
	// layer group. Required.
	Memory *staging.Memory
	// TokensPerBlock is the number of token positions in one block. Required.
	TokensPerBlock int
	// Attention is each local layer group's attention (window and sink
	// blocks), which readiness is computed per group by; a group it does not
	// reach, and every group when it is nil, is full attention.
	Attention []staging.Attention
	// ExtentName is the extent namespace; empty means staging.ExtentName.
	ExtentName []byte
	// RequestTimeout is the deadline, after the submission, of a request that
	// names none (default 30s).
	RequestTimeout time.Duration
	// DrainGrace is how long access or a local copy may stay unproven after
	// the drain starts — at the request deadline, or earlier on a failure, a
	// cancel, a Quiesce that could not answer true, an escaped submission or
	// a failed copy — before the slots are contained (default 10s).
	DrainGrace time.Duration
	// KeepReleased is how many of the latest released leases stay readable
	// through their handles (Lease, Readiness); default 1024.
	KeepReleased int
	// OnTransition, if set, is called for every move, for tracing. It must not
	// call the core.
	OnTransition func(Transition)
	// Logger receives the few events worth logging (quarantine, containment,
	// ungrantable leases, contract violations, device loss); nil discards.
	Logger *slog.Logger
}

const (
	defaultRequestTimeout = 30 * time.Second
	defaultDrainGrace     = 10 * time.Second
	defaultKeepReleased   = 1024
)

func (c *CoreConfig) validate() []error {
	var errs []error
	if c.Memory == nil {
		errs = append(errs, errors.New("no Memory: want the staging memory from staging.NewMemory or staging.MemoryOver"))
	}
	if c.TokensPerBlock <= 0 {
		errs = append(errs, fmt.Errorf("TokensPerBlock = %d; want a positive number", c.TokensPerBlock))
	}
	if c.Memory != nil && len(c.Attention) > c.Memory.NumGroups() {
		errs = append(errs, fmt.Errorf("the Attention list has %d layer groups; want at most the memory's %d", len(c.Attention), c.Memory.NumGroups()))
	}
	for g, a := range c.Attention {
		if err := a.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("layer group %d's Attention: %w", g, err))
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"RequestTimeout", c.RequestTimeout}, {"DrainGrace", c.DrainGrace}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s = %v; want a non-negative duration (0 means the default)", d.name, d.v))
		}
	}
	if c.KeepReleased < 0 {
		errs = append(errs, fmt.Errorf("KeepReleased = %d; want a non-negative number (0 means the default)", c.KeepReleased))
	}
	return errs
}

func (c *CoreConfig) applyDefaults() {
	if c.RequestTimeout == 0 {
		c.RequestTimeout = defaultRequestTimeout
	}
	if c.DrainGrace == 0 {
		c.DrainGrace = defaultDrainGrace
	}
	if c.KeepReleased == 0 {
		c.KeepReleased = defaultKeepReleased
	}
	if len(c.ExtentName) == 0 {
		c.ExtentName = []byte(staging.ExtentName)
	}
	c.ExtentName = slices.Clone(c.ExtentName)
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// Core is kvready's lifecycle engine without I/O: like etcd raft's RawNode it
// applies evidence to the compiled lifecycle table and hands back, through
// [Core.Ready], the work the evidence calls for — submissions, copies, access
// proofs to ask for, containment signals. It starts no goroutine, calls no
// backend and touches no device; its clock is the one its caller gives it in
// Tick. Every method must be called from one goroutine.
//
// [Engine] is the runner that drives a Core with goroutines; it is what most
// managers embed. Drive a Core directly to fit kvready into an event loop of
// your own, or to step it deterministically.
type Core struct {
	cfg   CoreConfig
	table *fsm.Table
	mem   *staging.Memory
	parts staging.Parts
	alloc *staging.Allocator

	leases []lease
	free   []uint32 // retired records, reused last-in first-out (their caches are warm)
	bodies []*body  // bodies ready for a new lease
	// kept is a ring of the latest KeepReleased released leases, so that their
	// handles stay readable after their records are reused.
	kept     []keptLease
	keptNext int
	byTicket []uint32 // lease id by ticket index
	builder  staging.ExtentBuilder
	timers   timerHeap
	grants   []staging.Ticket
	hopeless []staging.Ticket
	runs     []staging.Run

	ready  Ready
	moves  uint64
	now    int64
	closed bool
	lost   bool
	stats  Stats
	// byCause counts moves by cause while counting is set (an Observer is).
	counting bool
	byCause  [causeSlots]uint64
}

// NewCore assembles a core. It refuses a config missing what it needs, naming
// every problem at once.
func NewCore(cfg CoreConfig) (*Core, error) {
	if errs := cfg.validate(); len(errs) > 0 {
		return nil, fmt.Errorf("readiness: invalid config: %w", errors.Join(errs...))
	}
	return newCore(cfg)
}

func newCore(cfg CoreConfig) (*Core, error) {
	cfg.applyDefaults()
	slots := make([]int, cfg.Memory.NumGroups())
	for g := range slots {
		slots[g] = cfg.Memory.Group(g).Slots
	}
	alloc, err := staging.NewAllocator(slots)
	if err != nil {
		return nil, fmt.Errorf("readiness: %w", err)
	}
	c := &Core{cfg: cfg, table: fsm.Lifecycle(), mem: cfg.Memory, parts: cfg.Memory.Parts(), alloc: alloc}
	c.stats.FenceLatency.init()
	c.stats.ReadyLatency.init()
	return c, nil
}

// Tick tells the core the time. Deadlines and containment deadlines that are
// due fire now — before any evidence reported after the Tick, so that a proof
// arriving at the containment deadline itself never releases anything.
func (c *Core) Tick(now time.Time) {
	c.now = now.UnixNano()
	c.expire()
	c.pump()
}

// Ready returns the work the core asks for. The Ready is the core's and is
// reused: perform its work, then call Advance before reporting evidence.
func (c *Core) Ready() *Ready { return &c.ready }

// HasReady reports whether the core asks for any work.
func (c *Core) HasReady() bool { return !c.ready.Empty() }

// Advance acknowledges that the work in Ready was taken: the next Ready holds
// only what evidence reported afterwards asks for.
func (c *Core) Advance() { c.ready.reset() }

// Now returns the time of the latest Tick.
func (c *Core) Now() time.Time { return time.Unix(0, c.now) }

// Lend asks for a lease. Bad input is refused with an error wrapping
// ErrInvalidRequest (or ErrUngrantable: quarantine left no run that could ever
// hold it) and changes nothing. The lease waits for slots in arrival order.
// Grants are taken in rounds — at the next Tick, or with the evidence
// reported after it — never inside an owner's call, so that a lease is staged
// on the clock of the round that will submit it.
func (c *Core) Lend(req Request) (Handle, error) {
	switch {
	case c.closed:
		return Handle{}, ErrClosed
	case c.lost:
		return Handle{}, fmt.Errorf("%w: no lease can copy to or from it", ErrDeviceLost)
	}
	b, err := c.newBody(req)
	if err != nil {
		return Handle{}, err
	}
	t, err := c.alloc.Request(b.counts)
	if err != nil {
		c.putBody(b)
		if errors.Is(err, staging.ErrUngrantable) {
			return Handle{}, fmt.Errorf("readiness: %w", err)
		}
		return Handle{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	id := c.newRecord()
	l := &c.leases[id]
	l.m = fsm.Slot{State: fsm.Waiting}
	l.kind, l.flags, l.result, l.ticket, l.body = req.Kind, inUse, fsm.NoResult, t, b
	for len(c.byTicket) <= t.Index() {
		c.byTicket = append(c.byTicket, 0)
	}
	c.byTicket[t.Index()] = id
	b.lentAt = c.now
	c.stats.Leases[fsm.Waiting]++
	c.stats.Lent++
	return Handle{id: id, gen: l.gen}, nil
}

// newRecord returns a record for a new lease: the latest retired one, else a
// new one.
func (c *Core) newRecord() uint32 {
	if n := len(c.free); n > 0 {
		id := c.free[n-1]
		c.free = c.free[:n-1]
		return id
	}
	c.leases = append(c.leases, lease{gen: 1})
	c.timers.grow(len(c.leases))
	return uint32(len(c.leases) - 1)
}

// retire ends a released lease's hold on its record: what its handle can
// still read goes to the kept ring, its body is reused, and its generation
// moves on so that the handle never reaches the record's next lease.
func (c *Core) retire(id uint32) {
	l := &c.leases[id]
	b := l.body
	if c.cfg.KeepReleased > 0 {
		k := keptLease{h: c.handle(id), kind: l.kind, result: l.result, rows: int32(len(b.rows)),
			byPeer: b.byPeer, reason: b.reason, interval: b.interval,
			answered: l.flags&answered != 0, ungrantable: l.m.Latched.Has(fsm.SlotsUnavailable)}
		if len(c.kept) < c.cfg.KeepReleased {
			c.kept = append(c.kept, k)
		} else {
			c.kept[c.keptNext] = k
			c.keptNext = (c.keptNext + 1) % len(c.kept)
		}
	}
	c.recycle(id)
	gen := l.gen + 1
	if gen == 0 {
		gen = 1 // generation 0 is never issued, so the zero Handle is always stale
	}
	*l = lease{gen: gen}
	c.free = append(c.free, id)
}

// recycle hands a retired record's body back for reuse. Its extent will be
// rebuilt in place, so this is where the ownership invariant must hold: a
// backend was either never handed the extent or has been proven done with it.
func (c *Core) recycle(id uint32) {
	l := &c.leases[id]
	if l.body == nil {
		return
	}
	if l.flags&parked != 0 || (l.flags&exposed != 0 && l.m.State != fsm.Released) {
		// A quarantined lease keeps what its backend was handed for ever.
		c.breach("a body still held by a backend was about to be reused", id)
		return
	}
	c.putBody(l.body)
	l.body = nil
}

// keptLease is what a released lease's handle can still read.
type keptLease struct {
	h           Handle
	kind        Kind
	result      fsm.Result
	byPeer      bool
	answered    bool
	ungrantable bool
	rows        int32
	reason      string
	interval    staging.Interval
}

// released finds a released lease that is still kept.
func (c *Core) released(h Handle) (*keptLease, bool) {
	if h.gen == 0 {
		return nil, false
	}
	for i := range c.kept {
		if c.kept[i].h == h {
			return &c.kept[i], true
		}
	}
	return nil, false
}

// lookup resolves a handle to a record that still carries its lease.
func (c *Core) lookup(h Handle) (uint32, error) {
	if h.gen == 0 || int(h.id) >= len(c.leases) {
		return 0, fmt.Errorf("%w: %v was never issued", ErrStaleHandle, h)
	}
	l := &c.leases[h.id]
	if l.flags&inUse == 0 || (l.gen != h.gen && !mutant("ignore-generation")) {
		return 0, fmt.Errorf("%w: %v was retired (the record is now at generation %d)", ErrStaleHandle, h, l.gen)
	}
	return h.id, nil
}

// evidence resolves the handle evidence names; stale evidence is counted and
// refused.
func (c *Core) evidence(h Handle) (uint32, error) {
	id, err := c.lookup(h)
	if err != nil {
		c.stats.StaleEvidence++
	}
	return id, err
}

// Release says the owner is done with the lease. The slots return to the
// allocator only once it is logically complete — access proven over and every
// local copy landed; until then the release is latched and nothing more is
// copied into its device rows. Releasing a quarantined lease retires its
// handle; its slots never return. A stale handle, or a lease already
// released, is refused and changes nothing.
func (c *Core) Release(h Handle) error {
	id, err := c.lookup(h)
	if err != nil {
		if _, ok := c.released(h); ok {
			return fmt.Errorf("%w: %v is already released", ErrStaleHandle, h)
		}
		return err
	}
	if err := c.fire(id, fsm.ReleaseRequested); err != nil {
		return fmt.Errorf("readiness: release of %v: %w", h, err)
	}
	return nil
}

// Cancel cancels a submitted lease still waiting for its outcome, locally:
// the lease latches Cancelled (not by the peer) at once, as a cancel the
// owner made, and its drain starts. It proves nothing about access: the
// slots return only once Quiesce answers true. A lease in another state
// refuses it, saying why.
func (c *Core) Cancel(h Handle) error {
	id, err := c.lookup(h)
	if err != nil {
		return err
	}
	c.leases[id].body.reason = "cancelled locally by the owner"
	c.leases[id].body.byPeer = false
	if err := c.fire(id, fsm.OutcomeCancelled); err != nil {
		return fmt.Errorf("readiness: cancel of %v: %w", h, err)
	}
	return nil
}

// Close stops admission: Lend then fails with ErrClosed. Every lease is told:
// waiting ones are released at once, those still waiting for an outcome get a
// local Cancelled outcome, and every other one is released once it is fenced
// and its copies landed — or contained at its containment deadline. Close
// never frees quarantined or unproven memory. Calling it again changes
// nothing.
func (c *Core) Close() {
	if c.closed {
		return
	}
	c.closed = true
	for i := range c.leases {
		id := uint32(i)
		l := &c.leases[id]
		if l.flags&inUse == 0 || l.m.State.Terminal() {
			continue
		}
		gen := l.gen
		if l.m.State == fsm.Requested && !mutant("close-no-cancel") {
			// Leases still waiting for an outcome get a local Cancelled at once.
			l.body.reason, l.body.byPeer = "engine closed: cancelled locally", false
			_ = c.fire(id, fsm.OutcomeCancelled)
			if l.gen != gen || l.flags&inUse == 0 {
				continue // its latched proof and release retired it at once
			}
		}
		_ = c.fire(id, fsm.Close)
	}
}

// Closed reports whether Close was called.
func (c *Core) Closed() bool { return c.closed }

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

// Lease describes the lease h names. The latest KeepReleased released leases
// stay readable (State released).
func (c *Core) Lease(h Handle) (LeaseInfo, error) {
	id, err := c.lookup(h)
	if err != nil {
		if k, ok := c.released(h); ok {
			return LeaseInfo{Handle: h, Kind: k.kind, State: fsm.Released, Outcome: k.result, ByPeer: k.byPeer,
				Reason: k.reason, Ungrantable: k.ungrantable, Rows: int(k.rows), Exposed: k.result != fsm.NoResult && k.result != fsm.Rejection}, nil
		}
		return LeaseInfo{}, err
	}
	l := &c.leases[id]
	info := LeaseInfo{
		Handle: h, Kind: l.kind, State: l.m.State, Outcome: l.result,
		ReleaseRequested: l.m.Latched.Has(fsm.ReleaseRequested),
		Ungrantable:      l.m.Latched.Has(fsm.SlotsUnavailable),
		Exposed:          l.flags&exposed != 0,
	}
	if b := l.body; b != nil {
		info.ByPeer, info.Reason, info.Rows = b.byPeer, b.reason, len(b.rows)
	}
	return info, nil
}

// Runs appends to dst the staging runs the lease holds (one per pool group it
// uses) and returns it. A lease that holds no slots — waiting, released or
// quarantined — adds none.
func (c *Core) Runs(h Handle, dst []staging.Run) ([]staging.Run, error) {
	id, err := c.lookup(h)
	if err != nil {
		return dst, err
	}
	l := &c.leases[id]
	if !c.table.Holding(l.m.State) {
		return dst, nil
	}
	return c.alloc.Runs(l.ticket, dst)
}

// Readiness returns where a fetched request may resume: answerable once every
// local copy has landed (logically_complete), and still after the release.
// With full attention the interval starts at 0 (full attention releases no
// block below the prefix) and ends at TokensPerBlock × the end of the
// contiguous run of blocks, from KnownBlocks, whose rows arrived in every layer
// group. A window group (CoreConfig.Attention) needs only its sinks and its
// window at the resume position (staging.WindowedReadinessOfView). A miss or a
// failure answers what was already known: [0, KnownBlocks × TokensPerBlock]
// with full attention; the lease's outcome says which it was.
func (c *Core) Readiness(h Handle) (staging.Interval, error) {
	id, err := c.lookup(h)
	if err != nil {
		k, ok := c.released(h)
		switch {
		case !ok:
			return staging.Interval{}, err
		case k.kind != Fetch:
			return staging.Interval{}, fmt.Errorf("%w: %v is a publish; readiness is a fetch's answer", ErrNotReady, h)
		case !k.answered:
			return staging.Interval{}, fmt.Errorf("%w: %v was released before its copies landed", ErrNotReady, h)
		}
		return k.interval, nil
	}
	l := &c.leases[id]
	switch {
	case l.kind != Fetch:
		return staging.Interval{}, fmt.Errorf("%w: %v is a publish; readiness is a fetch's answer", ErrNotReady, h)
	case l.flags&answered == 0 || !c.table.Answerable(l.m.State):
		return staging.Interval{}, fmt.Errorf("%w: %v is %v; readiness is answered once every local copy has landed", ErrNotReady, h, l.m.State)
	}
	return l.body.interval, nil
}

// pump takes the allocator's grants and applies them. It runs only in rounds
// (Tick and evidence), after the clock was read: a lease is staged, and its
// deadline judged, on the clock of the round that submits it.
func (c *Core) pump() {
	for {
		c.grants = c.alloc.TakeGrants(c.grants[:0])
		if len(c.grants) == 0 {
			return
		}
		for _, t := range c.grants {
			id := c.byTicket[t.Index()]
			if l := &c.leases[id]; l.flags&inUse == 0 || l.ticket != t {
				continue
			}
			_ = c.fire(id, fsm.SlotsGranted)
		}
	}
}

// findHopeless marks every waiting lease that quarantine has made impossible
// to grant: left in line it would block every lease behind it for ever.
func (c *Core) findHopeless() {
	if mutant("stall-by-fragmentation") {
		return
	}
	c.hopeless = c.alloc.HopelessTickets(c.hopeless[:0])
	for _, t := range c.hopeless {
		id := c.byTicket[t.Index()]
		if l := &c.leases[id]; l.flags&inUse == 0 || l.ticket != t {
			continue
		}
		c.leases[id].body.reason = "can never be granted: quarantine left no contiguous run of slots long enough"
		_ = c.fire(id, fsm.SlotsUnavailable)
	}
}

// breach records an invariant the table's guarantees rule out. It is reported
// loudly and never a reason to free memory.
func (c *Core) breach(what string, id uint32) {
	c.stats.InvariantBreaches++
	c.cfg.Logger.Error("kvready: invariant breached; nothing is freed", slog.String("what", what), slog.Uint64("lease", uint64(id)))
}

// mustNot records an allocator refusal that the table's guarantees rule out.
func (c *Core) mustNot(err error, op string, id uint32) {
	if err != nil {
		c.breach("allocator refused "+op+": "+err.Error(), id)
	}
}
