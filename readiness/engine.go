package readiness

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/staging"
)

// Engine lends staging slots and decides, from the evidence, when each lease is
// ready and when its slots may be reused. All its methods must be called from
// one owner goroutine.
type Engine struct {
	cfg   Config
	table *fsm.Table
	alloc *staging.Allocator
	mem   *Memory
	parts staging.Parts
	slabs [][]byte

	leases   []lease
	free     []uint32 // retired lease ids, ready for reuse
	bodies   []*body  // recycled bodies
	byTicket []uint32 // lease id by ticket index, for waiting leases
	builder  staging.ExtentBuilder

	watch *watcher
	quiet *quiescer
	// Copies queued in one round share one event: a stream completes in
	// order, so the event after the round's last copy proves all of them.
	copies      gpu.Completions[int32] // event → index into copyBatches
	copyBatches [][]ref
	freeBatches []int32
	openBatch   int32                   // batch collecting this round's copies, or -1
	onCopy      func(int32, gpu.Status) // e.batchDone, bound once so polling never allocates
	// The backends' Quiesce methods, bound once: a method value made per call
	// would allocate.
	quiesceFetch, quiescePublish quiesceFunc

	deadlines timerHeap
	drains    timerHeap

	// Work gathered during a round and handed to the background goroutines
	// at its end.
	toWatch    []watchItem
	inline     []watchItem // Inline: attempts polled by Progress itself
	qFetch     *batch
	qPublish   *batch
	quiescing  int // Quiesce entries handed out and not yet answered
	grants     []staging.Ticket
	outcomes   []outcomeMsg
	answers    []*batch
	runs       []staging.Run
	lost       bool
	closed     bool
	stopped    bool
	now        int64
	stats      Stats
	roundMoves int
}

// New assembles an engine: it allocates the staging memory of every pool group
// and starts the background goroutines that observe the backend.
func New(cfg Config) (*Engine, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.applyDefaults()
	cfg.ExtentName = slices.Clone(cfg.ExtentName)
	groups := cfg.Memory.groups
	slots := make([]int, len(groups))
	for g, grp := range groups {
		slots[g] = grp.Slots
	}
	alloc, err := staging.NewAllocator(slots)
	if err != nil {
		return nil, fmt.Errorf("readiness: %w", err)
	}
	e := &Engine{
		cfg:   cfg,
		table: fsm.Lifecycle(),
		alloc: alloc,
		mem:   cfg.Memory,
		parts: cfg.Memory.parts,
		slabs: cfg.Memory.slabs,
	}
	if cfg.Inline {
		e.quiet = startQuiescer(0, cfg.DrainGrace)
		e.watch = &watcher{in: newMailbox[watchItem](), out: newMailbox[outcomeMsg]()}
	} else {
		e.quiet = startQuiescer(cfg.QuiesceWorkers, cfg.DrainGrace)
		e.watch = startWatcher()
	}
	e.onCopy = e.batchDone
	e.openBatch = -1
	e.now = cfg.Clock.Now().UnixNano()
	if cfg.Fetcher != nil {
		e.quiesceFetch = cfg.Fetcher.Quiesce
	}
	if cfg.Publisher != nil {
		e.quiescePublish = cfg.Publisher.Quiesce
	}
	e.stats.FenceLatency.init()
	e.stats.ReadyLatency.init()
	return e, nil
}

// Lend asks for a lease. Bad input is refused with an error wrapping
// ErrInvalidRequest and changes nothing. The lease waits for slots in arrival
// order; it is granted and submitted in a later Progress.
//
// Lend does not read the clock: a request without a Deadline gets
// RequestTimeout from the time of the last Progress round (or of New), which
// keeps the lending path cheap. The deadline starts to matter at submission.
func (e *Engine) Lend(req Request) (Handle, error) {
	switch {
	case e.closed:
		return Handle{}, ErrClosed
	case e.lost:
		return Handle{}, fmt.Errorf("%w: device %d; no lease can copy to or from it", ErrDeviceLost, e.cfg.Device)
	}
	b, err := e.newBody(req)
	if err != nil {
		return Handle{}, err
	}
	t, err := e.alloc.Request(b.counts)
	if err != nil {
		e.recycle(b)
		return Handle{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	id := e.newLease()
	l := &e.leases[id]
	l.m = fsm.Slot{State: fsm.Waiting}
	l.kind, l.flags, l.ticket, l.body = req.Kind, inUse, t, b
	for len(e.byTicket) <= t.Index() {
		e.byTicket = append(e.byTicket, 0)
	}
	e.byTicket[t.Index()] = id
	b.lentAt = e.now
	b.deadline = req.Deadline.UnixNano()
	if req.Deadline.IsZero() {
		b.deadline = e.now + int64(e.cfg.RequestTimeout)
	}
	e.stats.Leases[fsm.Waiting]++
	e.stats.Lent++
	return Handle{id: id, gen: l.gen}, nil
}

// newBody validates req and copies it into a recycled body, grouping rows by
// layer group.
func (e *Engine) newBody(req Request) (*body, error) {
	bad := func(format string, args ...any) (*body, error) {
		return nil, fmt.Errorf("%w: "+format, append([]any{ErrInvalidRequest}, args...)...)
	}
	switch req.Kind {
	case Fetch:
		if e.cfg.Fetcher == nil {
			return bad("a fetch, but the engine has no Fetcher")
		}
	case Publish:
		if e.cfg.Publisher == nil {
			return bad("a publish, but the engine has no Publisher")
		}
	default:
		return bad("kind %v; want Fetch or Publish", req.Kind)
	}
	if len(req.Rows) == 0 {
		return bad("no rows; a lease moves at least one row")
	}
	if req.KnownBlocks < 0 {
		return bad("KnownBlocks = %d; want >= 0", req.KnownBlocks)
	}
	for i, r := range req.Rows {
		if r.Group < 0 || r.Group >= len(e.mem.groups) {
			return bad("row %d: layer group %d; the engine has groups 0..%d", i, r.Group, len(e.mem.groups)-1)
		}
		if r.Block < 0 {
			return bad("row %d: block ordinal %d; want >= 0", i, r.Block)
		}
	}
	b := e.takeBody()
	b.rows = append(b.rows[:0], req.Rows...)
	if !slices.IsSortedFunc(b.rows, byGroup) {
		slices.SortStableFunc(b.rows, byGroup)
	}
	b.names, b.ordinals, b.addrs, b.counts = b.names[:0], b.ordinals[:0], b.addrs[:0], b.counts[:0]
	for range e.mem.groups {
		b.counts = append(b.counts, 0)
	}
	for i, r := range b.rows {
		if i > 0 && b.rows[i-1].Group == r.Group && b.rows[i-1].Block >= r.Block {
			e.recycle(b)
			return bad("layer group %d: blocks %d then %d; within a group blocks must increase", r.Group, b.rows[i-1].Block, r.Block)
		}
		b.names = append(b.names, r.Name)
		b.ordinals = append(b.ordinals, r.Block)
		b.addrs = append(b.addrs, 0) // placed when slots are granted
		b.counts[r.Group]++
	}
	b.groupRun = b.groupRun[:0]
	start := 0
	for g, n := range b.counts {
		if n == 0 {
			continue
		}
		b.groupRun = append(b.groupRun, staging.GroupRun{
			LayerGroup: g,
			Ordinals:   b.ordinals[start : start+n : start+n],
			Names:      b.names[start : start+n : start+n],
			Addresses:  b.addrs[start : start+n : start+n],
			Part:       g,
		})
		start += n
	}
	if err := b.view.Reset(b.groupRun); err != nil {
		e.recycle(b)
		return bad("%w", err)
	}
	if err := b.view.Duplicate(); err != nil {
		e.recycle(b)
		return bad("%w", err)
	}
	b.first, b.isLast = req.KnownBlocks, req.IsLast
	return b, nil
}

func byGroup(x, y Row) int { return x.Group - y.Group }

func (e *Engine) takeBody() *body {
	if n := len(e.bodies); n > 0 {
		b := e.bodies[n-1]
		e.bodies = e.bodies[:n-1]
		return b
	}
	return &body{}
}

func (e *Engine) recycle(b *body) {
	b.latched, b.reason, b.interval = nil, "", staging.Interval{}
	e.bodies = append(e.bodies, b)
}

func (e *Engine) newLease() uint32 {
	if n := len(e.free); n > 0 {
		id := e.free[n-1]
		e.free = e.free[:n-1]
		return id
	}
	e.leases = append(e.leases, lease{gen: 1})
	return uint32(len(e.leases) - 1)
}

// retire forgets a released (or quarantined and released) lease: its handle
// goes stale and its record may carry a later lease.
func (e *Engine) retire(id uint32) {
	l := &e.leases[id]
	e.stats.Leases[l.m.State]--
	e.deadlines.disarm(id)
	e.drains.disarm(id)
	if l.body != nil {
		e.recycle(l.body)
	}
	gen := l.gen + 1
	if gen == 0 {
		gen = 1 // generation 0 is never issued, so the zero Handle is always stale
	}
	*l = lease{gen: gen}
	e.free = append(e.free, id)
}

// lookup resolves a handle, refusing a stale one.
func (e *Engine) lookup(h Handle) (uint32, error) {
	if int(h.id) >= len(e.leases) || h.gen == 0 {
		return 0, fmt.Errorf("%w: %v was never issued", ErrStaleHandle, h)
	}
	l := &e.leases[h.id]
	if l.flags&inUse == 0 || (l.gen != h.gen && !mutant("ignore-generation")) {
		return 0, fmt.Errorf("%w: %v was released (the record is now at generation %d)", ErrStaleHandle, h, l.gen)
	}
	return h.id, nil
}

func (e *Engine) live(r ref) bool {
	return int(r.id) < len(e.leases) && e.leases[r.id].flags&inUse != 0 && e.leases[r.id].gen == r.gen
}

// Release says the manager is done with the lease. The slots return to the
// allocator only once the lease is fenced; until then the request is latched
// and the handle stays valid. Releasing a quarantined lease retires its handle
// and leaves its slots out of circulation for ever. A stale handle is refused
// and changes nothing.
func (e *Engine) Release(h Handle) error {
	id, err := e.lookup(h)
	if err != nil {
		return err
	}
	if e.leases[id].m.State == fsm.Quarantined {
		e.retire(id)
		return nil
	}
	if err := e.fire(id, fsm.ReleaseRequested); err != nil {
		return fmt.Errorf("readiness: release of %v: %w", h, err)
	}
	return nil
}

// LeaseInfo describes a lease as the engine sees it.
type LeaseInfo struct {
	Handle  Handle
	Kind    Kind
	State   fsm.State
	Outcome OutcomeKind
	// Reason says why the lease failed or was quarantined.
	Reason string
	// ReleaseRequested reports a latched release request.
	ReleaseRequested bool
	// Ungrantable reports a waiting lease taken out of the line because
	// quarantine left too few slots ever to grant it; release it.
	Ungrantable bool
	Rows        int
}

// Lease describes the lease h names.
func (e *Engine) Lease(h Handle) (LeaseInfo, error) {
	id, err := e.lookup(h)
	if err != nil {
		return LeaseInfo{}, err
	}
	l := &e.leases[id]
	return LeaseInfo{
		Handle: h, Kind: l.kind, State: l.m.State, Outcome: l.outcome, Reason: l.body.reason,
		ReleaseRequested: l.m.Latched.Has(fsm.ReleaseRequested), Rows: len(l.body.rows),
		Ungrantable: l.flags&hopeless != 0,
	}, nil
}

// Runs appends to dst the staging runs the lease holds (one per pool group it
// uses) and returns it; a lease still waiting holds none.
func (e *Engine) Runs(h Handle, dst []staging.Run) ([]staging.Run, error) {
	id, err := e.lookup(h)
	if err != nil {
		return dst, err
	}
	l := &e.leases[id]
	if l.m.State == fsm.Waiting || l.m.State == fsm.Quarantined {
		return dst, nil
	}
	return e.alloc.Runs(l.ticket, dst)
}

// Readiness returns where a fetched request may resume: answerable once the
// outcome is latched and the local copies have landed (logically_complete or
// access_fenced). A miss and a failure both answer the empty extension
// [KnownBlocks×T, KnownBlocks×T]; the outcome kind says which it was.
func (e *Engine) Readiness(h Handle) (staging.Interval, error) {
	id, err := e.lookup(h)
	if err != nil {
		return staging.Interval{}, err
	}
	l := &e.leases[id]
	if l.kind != Fetch {
		return staging.Interval{}, fmt.Errorf("%w: %v is a publish; readiness is a fetch's answer", ErrNotReady, h)
	}
	if s := l.m.State; s != fsm.LogicallyComplete && s != fsm.AccessFenced {
		return staging.Interval{}, fmt.Errorf("%w: %v is %v; readiness is answered in logically_complete and access_fenced", ErrNotReady, h, s)
	}
	return l.body.interval, nil
}

// fire applies an event, then redelivers latched evidence until none applies.
// A refusal changes nothing and is returned.
func (e *Engine) fire(id uint32, ev fsm.Event) error {
	l := &e.leases[id]
	step, err := e.table.Fire(&l.m, ev)
	if err != nil {
		e.stats.Refused++
		return err
	}
	if step.Kind != fsm.Move {
		return nil
	}
	gen := l.gen
	e.moved(id, step)
	for l.m.Latched != 0 && l.gen == gen && l.flags&inUse != 0 {
		step, ok := e.table.Redeliver(&l.m)
		if !ok {
			break
		}
		e.moved(id, step)
	}
	return nil
}

// moved performs what entering a state entails: bookkeeping, and for the two
// states that end a lease's hold on memory, the allocator's part.
func (e *Engine) moved(id uint32, step fsm.Step) {
	l := &e.leases[id]
	e.roundMoves++
	e.stats.Leases[step.From]--
	e.stats.Leases[step.To]++
	if step.From == fsm.Requested {
		e.deadlines.disarm(id) // the outcome (or the deadline itself) is latched
	}
	if e.cfg.OnTransition != nil {
		e.cfg.OnTransition(Transition{Lease: Handle{id: id, gen: l.gen}, From: step.From, To: step.To, Cause: step.Event})
	}
	switch step.To {
	case fsm.LogicallyComplete:
		e.answerReadiness(l)
	case fsm.AccessFenced:
		e.drains.disarm(id)
		if l.body.exposeAt != 0 {
			e.stats.FenceLatency.add(e.now - l.body.exposeAt)
		}
	case fsm.Quarantined:
		e.drains.disarm(id)
		e.quarantine(id, step)
	case fsm.Released:
		switch {
		case step.From != fsm.Waiting:
			e.mustNot(e.alloc.Free(l.ticket), "free", id)
		case l.flags&hopeless != 0:
			// Its request was cancelled when it became hopeless.
		case e.alloc.Granted(l.ticket):
			// Granted inside Lend or another lease's release, before a round
			// took the grant: never exposed nor copied to, so straight back.
			e.mustNot(e.alloc.Free(l.ticket), "free", id)
		default:
			e.mustNot(e.alloc.Cancel(l.ticket), "cancel", id)
		}
		e.stats.Released++
		e.retire(id)
	}
}

func (e *Engine) quarantine(id uint32, step fsm.Step) {
	l := &e.leases[id]
	if mutant("free-quarantined") {
		e.mustNot(e.alloc.Free(l.ticket), "free", id)
	} else {
		e.mustNot(e.alloc.Quarantine(l.ticket), "quarantine", id)
	}
	e.stats.QuarantinedLeases++
	if l.body.reason == "" {
		l.body.reason = "quarantined on " + step.Event.String()
	}
	e.cancelHopeless()
	e.cfg.Logger.Warn("kvready: staging slots quarantined", slog.String("lease", Handle{id: id, gen: l.gen}.String()),
		slog.String("from", step.From.String()), slog.String("cause", step.Event.String()), slog.String("reason", l.body.reason),
		slog.Int("slots", len(l.body.rows)))
}

// cancelHopeless takes out of the line every waiting lease that quarantine has
// made impossible to grant: left there, it would block every lease behind it
// for ever. The lease stays, waiting, with the reason; its handle is released
// as usual.
func (e *Engine) cancelHopeless() {
	if e.alloc.Waiting() == 0 {
		return
	}
	for i := range e.leases {
		l := &e.leases[i]
		if l.flags&inUse == 0 || l.flags&hopeless != 0 || l.m.State != fsm.Waiting || !e.alloc.Hopeless(l.ticket) {
			continue
		}
		e.mustNot(e.alloc.Cancel(l.ticket), "cancel", uint32(i))
		l.flags |= hopeless
		l.body.reason = "can never be granted: quarantined slots left too few in its pool groups"
		e.stats.Hopeless++
	}
}

// mustNot records an allocator refusal that the table's guarantees rule out.
// It is an invariant breach, reported loudly, never a reason to free memory.
func (e *Engine) mustNot(err error, op string, id uint32) {
	if err != nil {
		e.stats.InvariantBreaches++
		e.cfg.Logger.Error("kvready: allocator refused "+op+"; the slots stay where they are", slog.Uint64("lease", uint64(id)), slog.Any("error", err))
	}
}

// answerReadiness computes the interval once copies have landed.
func (e *Engine) answerReadiness(l *lease) {
	b := l.body
	if l.kind != Fetch {
		return
	}
	if l.outcome != Served && l.outcome != Partial {
		b.masks, _ = servedNone(b)
	}
	iv, err := staging.ReadinessOfView(e.cfg.TokensPerBlock, b.first, &b.view, b.masks)
	if err != nil {
		e.cfg.Logger.Error("kvready: readiness not computable", slog.Any("error", err))
		iv = staging.Interval{RestartFloor: b.first * e.cfg.TokensPerBlock, UsableUntil: b.first * e.cfg.TokensPerBlock}
	}
	b.interval = iv
	e.stats.ReadyLatency.add(e.now - b.lentAt)
}

var errNoAttempt = errors.New("backend returned neither an attempt nor ErrSubmissionRejected")
