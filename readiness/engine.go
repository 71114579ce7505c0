package readiness

import (
	"errors"
	"fmt"
	"sync"

	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/staging"
)

// Engine is the runner managers embed: a Core, the stream the copies go
// through, and goroutines only for what may block or to wake an owner that
// sleeps (SPEC §4 rule 14). Any goroutine may call any method (rule 18). A round
// (Progress) takes in everything that arrived at once, through the core's one
// door, queries its copy events itself, and asks each access proof of the
// backend's non-blocking probe (contract.QuiesceProber) on the owner; only a
// proof the backend cannot answer now goes to that backend's own Quiesce
// workers. A watcher goroutine polls what cannot notify, to wake an owner
// asleep on Wake; it carries no evidence. The owner is woken when a round has
// work (Wake), or waits for a lease with Wait: an embedding needs no sleep
// loop.
//
// The background goroutines only observe: they put sightings and Quiesce
// answers in one bounded mailbox and never call the core; backends'
// goroutines never call the engine. Whatever a backend does — panics,
// repeated or early completions, changed answers, a Quiesce that never
// returns — costs at most its own leases and is counted against it
// (Stats.FetcherFaults, PublisherFaults); it never halts the engine.
type Engine struct {
	// mu serialises every public call (SPEC §4 rule 18): the core and the
	// owner's state are touched by one caller at a time, whichever goroutine
	// it is on. A wait releases it while it sleeps (waits.go).
	mu   sync.Mutex
	wait waiting

	cfg    Config
	core   *Core
	stream gpu.Stream
	clock  Clock
	// sys is the clock when it is the default one, read without building a
	// time.Time once a round; sysOK says it is.
	sys   systemClock
	sysOK bool

	wake     chan struct{}
	mail     *mailbox
	attempts attemptTable
	watch    *watcher
	// The backends, by kind (sides[Fetch-1], sides[Publish-1]; nil for a kind
	// the engine has no backend for): each with its own Quiesce workers.
	sides [2]*side
	pf    proofs    // the round's access proofs
	cp    copier    // the copies queued on the stream and their events
	tm    wakeTimer // wakes the owner at the core's next deadline

	// Scratch, reused every round.
	letters   []letter
	results   []submitResult
	replies   []Evidence
	contain   []Containment
	recovered []Handle

	refusedEvidence, staleEvidence uint64
	// resweep: a round dropped a stale sighting whose id the watcher skipped
	// meanwhile (attemptTable.resolve), so the sweeps Sync waited on did not
	// poll the id's attempt: Sync is not idle until one more has.
	resweep bool

	haltSeen bool
	closing  bool       // Close was called
	stopped  bool       // the background goroutines have stopped
	obs      *observing // nil unless Config.Observer is set
}

// New assembles an engine over the caller's staging memory. Its goroutines
// start as they are needed: QuiesceWorkers for Quiesce calls, one watcher once
// an attempt cannot notify or a copy is in flight.
func New(cfg Config) (*Engine, error) {
	if err := cfg.validate(true); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c, err := newCore(cfg, "engine")
	if err != nil {
		return nil, err
	}
	slots := 0
	for g := range cfg.Memory.NumGroups() {
		slots += cfg.Memory.Group(g).Slots
	}
	e := &Engine{cfg: cfg, core: c, stream: cfg.Stream, clock: cfg.Clock, cp: copier{open: -1}, wake: make(chan struct{}, 1)}
	// A lease holds at least one slot, so slots bound the leases that can
	// have letters out (see mailbox).
	e.mail = newMailbox(mailboxPerLease*slots+64, e.wake, cfg.OnWake)
	if tc, ok := cfg.Clock.(TimerClock); ok {
		e.tm.timer = tc.NewTimer(e.mail.wakeOwner)
	}
	e.cp.onCopy = e.batchDone
	e.cp.rq, _ = cfg.Stream.(gpu.RecordQuerier)
	e.sys, e.sysOK = cfg.Clock.(systemClock)
	e.watch = newWatcher(&e.attempts, cfg.Stream, e.mail)
	if cfg.Fetcher != nil {
		e.sides[Fetch-1] = newSide(Fetch, cfg.Fetcher.Quiesce, cfg.Fetcher, cfg.QuiesceWorkers, e.cfg.QuiesceTimeout, e.mail)
	}
	if cfg.Publisher != nil {
		e.sides[Publish-1] = newSide(Publish, cfg.Publisher.Quiesce, cfg.Publisher, cfg.QuiesceWorkers, e.cfg.QuiesceTimeout, e.mail)
	}
	c.Tick(cfg.Clock.Now())
	if cfg.Observer != nil {
		e.observeWith(cfg.Observer)
	}
	return e, nil
}

// Wake returns the channel that receives a value when a round has work:
// evidence arrived, a copy event completed, or a deadline, Quiesce timeout or
// retry came due (with a TimerClock). Run Progress when it fires. One value
// stands for any number of wake-ups; a spurious one costs an idle round.
func (e *Engine) Wake() <-chan struct{} { return e.wake }

// Lend asks for a lease. Bad input — a kind without its backend, a row of an
// unknown group, a device row the stream cannot address, a fetch row below
// KnownBlocks — is refused with an error wrapping ErrInvalidRequest and
// changes nothing. The lease waits for slots in arrival order; it is granted
// and submitted in a later round.
func (e *Engine) Lend(req Request) (Handle, error) {
	// The rows' device addresses are asked of the stream before the lock
	// (the memory and the stream never change): a caller checking its rows
	// holds up no other caller. What it found is answered after the
	// engine's own refusals, as if asked under the lock.
	addrErr := e.addressable(req.Rows)
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.core.Err() != nil:
		return Handle{}, e.core.Err()
	case e.core.Closed():
		return Handle{}, ErrClosed
	case req.Kind == Fetch && e.cfg.Fetcher == nil:
		return Handle{}, fmt.Errorf("%w: a fetch, but the engine has no Fetcher", ErrInvalidRequest)
	case req.Kind == Publish && e.cfg.Publisher == nil:
		return Handle{}, fmt.Errorf("%w: a publish, but the engine has no Publisher", ErrInvalidRequest)
	case addrErr != nil:
		return Handle{}, addrErr
	}
	h, err := e.core.Lend(req)
	if err == nil {
		e.mail.ring() // a round will grant it
	}
	return h, err
}

// addressable asks the stream whether it can copy each row's device memory,
// and returns the first refusal as Lend answers it. Rows of an unknown group
// or at address 0 are passed by: the core names what is wrong with them.
func (e *Engine) addressable(rows []staging.Row) error {
	mem := e.cfg.Memory
	for i, r := range rows {
		if r.Group < 0 || r.Group >= mem.NumGroups() || r.Device == 0 {
			continue
		}
		if err := e.stream.Addressable(r.Device, mem.Group(r.Group).SlotBytes); err != nil {
			if errors.Is(err, gpu.ErrDeviceLost) {
				return fmt.Errorf("%w: %w", ErrDeviceLost, err)
			}
			return fmt.Errorf("%w: row %d: the stream cannot copy a %d-byte row at device address %#x: %w",
				ErrInvalidRequest, i, mem.Group(r.Group).SlotBytes, uint64(r.Device), err)
		}
	}
	return nil
}

// Release says the owner is done with the lease. The slots return to the
// allocator only once it is logically complete — access proven over and
// every local copy landed; until then the release is latched and nothing more
// is copied into its device rows. Releasing a quarantined lease gives up the
// owner's claim: its slots never return, and its handle stays readable. A
// stale handle, or a lease already released, is refused and changes nothing.
func (e *Engine) Release(h Handle) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	err := e.core.Release(h)
	if err == nil && !e.core.carries(h) {
		// Retired (its attempt was dropped at the fence), or parked: a
		// quarantined lease's attempt is kept for ever, and a sighting of it
		// still out names a record that carries no handle any more.
		e.attempts.gaveUp(uint32(h.Index()))
	}
	return e.owner(err)
}

// Cancel cancels, locally, a lease still waiting for its outcome: it latches
// Cancelled (not by the peer) at once. A submitted lease's drain starts and
// its backend is asked, once and best effort, to stop — which proves nothing:
// the slots return only once Quiesce answers true. A lease not yet submitted
// is withdrawn, its slots back at once without a release (its handle then
// reads as released). A stale handle, or a lease whose outcome is already
// latched, is refused, saying why, and nothing changes.
//
// The result answers the logical and the physical result apart (SPEC §4
// rule 19, the reference's CancelResult), whatever the error: Logical says
// what the cancel did (ACCEPTED with a nil error; ALREADY_TERMINAL,
// NOT_FOUND or REJECTED with the refusal), Physical whether anything may
// still touch the memory right after it, and SafeToReuse whether it may be
// reused now — for a submitted lease not until its backend's Quiesce answers
// true: watch its LeaseInfo.Disposition, or Wait for its release. Core.Cancel
// says which answer each case gets.
func (e *Engine) Cancel(h Handle) (CancelResult, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, err := e.core.Cancel(h)
	return r, e.owner(err)
}

// Retry asks the backend again, at the next round, whether the lease's access
// has ended. The engine retries by itself with back-off; Retry asks now. It
// changes nothing for a lease whose proof is not awaited, or whose Quiesce
// call is outstanding.
func (e *Engine) Retry(h Handle) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.owner(e.core.Retry(h))
}

// owner wakes the owner for the work an owner's request made: a cancel
// request or a proof to ask for, or slots a release returned that a waiting
// lease may now be granted (the next round grants it).
func (e *Engine) owner(err error) error {
	if e.core.HasReady() || (err == nil && e.core.Count(StateWaiting) > 0) {
		e.mail.ring()
	}
	if err != nil && errors.Is(err, ErrHalted) {
		return e.core.Err()
	}
	return err
}

// Lease describes the lease h names. The latest KeepReleased released leases
// stay readable (state released).
func (e *Engine) Lease(h Handle) (LeaseInfo, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.core.Lease(h)
}

// Readiness returns where a fetched request may resume: answerable once every
// local copy has landed (State.Answerable), and still after the release. With
// full attention the interval starts at 0 and ends at TokensPerBlock × the end
// of the contiguous run of blocks, from KnownBlocks, whose rows arrived in
// every layer group; a window group (Config.Attention) needs only its sinks
// and its window. A miss or a failure answers what was already known; the
// lease's outcome says which it was. Before then it is refused with an error
// wrapping ErrNotReady — and for ever for a served fetch released before its
// copies were issued: nothing reached its device rows (rule 4).
func (e *Engine) Readiness(h Handle) (staging.Interval, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.core.Readiness(h)
}

// Layers returns the number of layers a fetch's copies go in (Config.Layers:
// layer k is the k-th layer id, ascending; 1 without Layers).
func (e *Engine) Layers() int { return e.core.Layers() }

// LayerReadiness answers whether layer (0..Layers()-1) of the fetch h is
// ready — its copies' event completed — and with LayerReady the interval it
// answers: the same for every layer, the lease's own once every layer landed
// (SPEC §4 rule 16). LayerFailed: a copy of it or of an earlier layer failed;
// it never becomes ready, the lease's served rows did not arrive, and the
// lease goes on to containment as any failed copy does. It costs O(1) and
// allocates nothing; a stale handle, a publish or a layer out of range is an
// error.
func (e *Engine) LayerReadiness(h Handle, layer int) (staging.Interval, LayerStatus, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.core.LayerReadiness(h, layer)
}

// Computed reports layer (0..Layers()-1) of the layerwise publish h
// (Request.Layerwise) computed, as vLLM's save_kv_layer does: the layer's
// device→staging copies of every row are queued behind after — an event
// recorded on the manager's compute stream, on the engine's device — or at
// once for the zero Event (the layer is computed and synchronised already).
// The engine's stream must then be a gpu.Waiter (gpu/sim's and gpu/cuda's
// are). Layers are reported in order, once each, once the lease is granted
// (Wait for it: a lease still waiting for slots refuses it). The publish is
// submitted when every layer landed in staging; releasing or cancelling it
// before every layer was reported withdraws it: nothing is submitted, and
// its slots return once the copies already queued landed. Anything else is
// refused with an error wrapping ErrInvalidRequest (or the lifecycle's
// refusal) and changes nothing. The layer's copies are queued at the next
// round (Progress, or any Wait), which Computed wakes the owner for.
func (e *Engine) Computed(h Handle, layer int, after gpu.Event) error {
	if !after.IsZero() {
		if _, ok := e.stream.(gpu.Waiter); !ok {
			return fmt.Errorf("readiness: layer %d of %v computed after %v: %w: the engine's stream (%T) cannot wait for another stream's event (it is no gpu.Waiter); synchronise and report the zero Event", layer, h, after, ErrInvalidRequest, e.stream)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.owner(e.core.Computed(h, layer, after))
}

// Arrived appends to dst, for a fetch whose readiness is answerable, the
// block ordinals of each layer group whose rows landed on the device, one
// entry per group in the order of the request's groups: after a partial hit,
// which rows arrived (not only the contiguous interval).
func (e *Engine) Arrived(h Handle, dst []staging.GroupBlocks) ([]staging.GroupBlocks, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.core.Arrived(h, dst)
}

// Runs appends to dst the staging runs the lease holds (one per pool group it
// uses). A lease that holds no slots — waiting, released or quarantined — adds
// none.
func (e *Engine) Runs(h Handle, dst []staging.Run) ([]staging.Run, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.core.Runs(h, dst)
}

// Count returns the number of leases in state s.
func (e *Engine) Count(s State) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.core.Count(s)
}

// Exclusive runs f while the engine runs nothing else: no other call, no
// round, no callback. The engine's callbacks (Config.OnTransition,
// OnContainment, OnRecovery) run under the same exclusion, so what they
// write an embedding can read in f without a lock of its own: a callback that
// fires for every move (several a lease) then pays no lock per move, and the
// reader pays one per read. f must not call the engine — it would wait for
// itself — and should be short: every other caller waits for it.
func (e *Engine) Exclusive(f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f()
}

// Err returns why the engine halted (ErrHalted wrapping an *InvariantError
// or a *FatalError), or nil while it runs.
func (e *Engine) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.core.Err()
}

// Stats returns a snapshot of the counters.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stats()
}

func (e *Engine) stats() Stats {
	s := e.core.Stats()
	s.QuiesceCalls, s.QuiesceProbes = e.pf.calls, e.pf.probes
	s.Refused, s.StaleEvidence = e.refusedEvidence, e.staleEvidence
	s.Handoffs = e.mail.handoffs.Load()
	for _, sd := range e.sides {
		if sd != nil {
			sd.faults.add(s.Faults(sd.kind))
		}
	}
	return s
}

// Progress runs one round: it tells the core the time (deadlines, containment
// deadlines, Quiesce timeouts and retries fire first), takes in every piece of
// evidence that has become observable — device loss, the mailbox, copy
// completions — and performs the work the core asks for. It never blocks. It
// returns the number of moves made.
//
// A round in which nothing happened costs the same however many leases are in
// flight: each source of evidence is checked in O(what it delivered + 1).
func (e *Engine) Progress() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.progress()
}

// progress runs a round and returns its moves. A round that only landed
// layers (not a lease's last) moves nothing, yet every wait asleep is woken
// and WaitLayer looks again (it reads e.cp.landed): otherwise the round that
// takes a layer's completion, run by a wait the watcher woke for it, would
// put that wait back to sleep with its layer ready and nothing left to wake it.
func (e *Engine) progress() int {
	before, landed := e.core.Moves(), e.cp.landed
	if e.sysOK {
		e.core.tickAt(e.sys.unixNano())
	} else {
		e.core.Tick(e.clock.Now())
	}
	e.perform()
	e.checkHealth()
	e.takeMail()
	// The owner queries its copy events and asks for proofs inline, as long
	// as that moves something: only what may block (a Quiesce the backend
	// cannot answer now) or what stays pending (a copy still in flight) is
	// handed to another goroutine, at the end of the round.
	for {
		e.pollCopies()
		e.perform()
		if !e.flush() {
			break
		}
	}
	e.handOff()
	e.stopIfDrained()
	e.noticeHalt()
	if e.obs != nil {
		e.observed()
	}
	moved := int(e.core.Moves() - before)
	if moved > 0 || e.cp.landed != landed || e.core.Err() != nil {
		e.wait.broadcast()
	}
	return moved
}

// perform does the work the core asks for, and reports what the backend and
// the device answered at once, until the core asks for nothing more.
func (e *Engine) perform() {
	for e.core.HasReady() {
		rd := e.core.Ready()
		for i := range rd.Submissions {
			e.results = append(e.results, submitResult{})
			e.submit(&rd.Submissions[i], &e.results[len(e.results)-1])
		}
		if len(rd.Layers) > 0 {
			e.queueCopies(rd)
		}
		for _, p := range rd.Proofs {
			e.ask(p)
		}
		if rd.rare() {
			e.performRare(rd)
		}
		e.core.Advance()
		e.reportAnswers()
	}
}

// performRare does the work of a Ready that most rounds have none of:
// overdue Quiesce calls, cancel requests, forgotten attempts, containments
// and recoveries.
func (e *Engine) performRare(rd *Ready) {
	if len(rd.Overdue) > 0 {
		for _, sd := range e.sides {
			if sd != nil {
				sd.workers.overdue(rd.Overdue)
			}
		}
	}
	for _, h := range rd.Cancels {
		e.replies = append(e.replies, e.requestCancel(h))
	}
	for _, h := range rd.Forget {
		e.attempts.drop(uint32(h.Index()))
	}
	if len(rd.Containments) > 0 {
		for _, c := range rd.Containments {
			e.attempts.unwatch(uint32(c.Lease.Index())) // its attempt is kept for ever; only the polling stops
		}
		e.contain = append(e.contain, rd.Containments...)
	}
	if len(rd.Recovered) > 0 {
		e.recovered = append(e.recovered, rd.Recovered...)
	}
}

// Report says what an engine still holds, and — as the reference's
// ShutdownResult — whether its memory may be handed back to its owner.
type Report struct {
	// Held counts leases by state; quarantined ones stay counted for ever.
	Held [NumStates]int
	// SlotsHeld are slots still lent (not free, not quarantined).
	SlotsHeld int
	// SlotsQuarantined are slots out of circulation.
	SlotsQuarantined int
	// Drained reports that the engine is closed, no lease can still change,
	// and the background goroutines have stopped.
	Drained bool
	// Halted is why the engine halted (nil while it runs): it releases
	// nothing any more, and a drain never completes.
	Halted error
	// InDoubt counts the leases whose memory was not proven reusable when
	// the report was taken (the reference's in_doubt_context_count): their
	// disposition ACTIVE, QUIESCING or IN_DOUBT — quarantined leases, kept
	// for ever, included. A shutdown that gave up waiting leaves them in
	// doubt; a clean drain leaves none.
	InDoubt int
	// Physical is the memory's disposition as a whole: IN_DOUBT while any
	// lease is in doubt or any slot is quarantined (an earlier engine's
	// included: SlotsInherited), as the reference allows a count only
	// beside IN_DOUBT; else QUIESCED_SUCCESS once a lease was ever handed to
	// a backend (every access to it proven over), NOT_EXPOSED if none was.
	Physical Disposition
}

// SafeToRelease reports whether the engine's staging memory may be handed
// back to its owner — freed, or lent by another engine with nothing it must
// inherit — as the reference's safe_to_release_managers does: the engine
// drained (Drained: closed, not halted, its goroutines stopped), no lease is
// in doubt, and the memory as a whole is reusable (no slot quarantined).
func (r Report) SafeToRelease() bool {
	return r.Drained && r.Halted == nil && r.InDoubt == 0 && r.Physical.Reusable()
}
