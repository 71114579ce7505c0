package readiness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/staging"
)

// Engine is the runner managers embed: a Core, the stream the copies go
// through, and goroutines only for what may block or to wake an owner that
// sleeps (SPEC §4 rule 14). The owner goroutine calls every method. A round
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
	cfg    Config
	core   *Core
	stream gpu.Stream
	clock  Clock

	wake     chan struct{}
	mail     *mailbox
	attempts attemptTable
	watch    *watcher
	awaited  gpu.Event // the copy event the watcher was last told of
	// The backends, by kind (sides[Fetch-1], sides[Publish-1]; nil for a kind
	// the engine has no backend for): each with its own Quiesce workers.
	sides  [2]*side
	seq    uint64 // the last Quiesce batch's sequence number
	calls  uint64 // Quiesce calls handed to workers
	probes uint64 // TryQuiesce calls asked on the owner

	// Copies queued in one round share one event: a stream completes in
	// order, so the event after the round's last copy proves all of them —
	// except that a lease's next layer waits for an event after its
	// previous one (rule 16), so that no layer is read later than its own
	// copies land.
	copies      gpu.Completions[int32]
	batches     [][]layerOf
	freeBatches []int32
	open        int32 // batch collecting this round's copies, or -1
	onCopy      func(int32, gpu.Status)

	// Scratch, reused every round.
	letters   []letter
	results   []submitResult
	refused   []copyRefusal
	failed    []copyFailure
	replies   []Evidence
	inline    []letter // proofs answered on the owner this round
	contain   []Containment
	recovered []Handle

	refusedEvidence, staleEvidence uint64

	timer    Timer // wakes the owner at the core's next deadline; nil without a TimerClock
	timerAt  int64 // when the armed timer fires, in the core's nanoseconds (0: never armed)
	haltSeen bool
	halt     error      // the core's halt in this package's terms (haltError)
	closing  bool       // Close was called
	stopped  bool       // the background goroutines have stopped
	obs      *observing // nil unless Config.Observer is set
}

type submitResult struct {
	h      Handle
	kind   Kind
	a      contract.Attempt
	err    error
	panics string
}

type copyRefusal struct {
	h   Handle
	row int
	err error
}

type copyFailure struct {
	h     Handle
	layer int // the first layer whose copies failed
	err   error
}

// layerOf is one layer of one lease's copies, proven by its batch's event.
type layerOf struct {
	h     Handle
	layer int
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
	e := &Engine{cfg: cfg, core: c, stream: cfg.Stream, clock: cfg.Clock, open: -1, wake: make(chan struct{}, 1)}
	// A lease holds at least one slot, so slots bound the leases that can
	// have letters out (see mailbox).
	e.mail = newMailbox(mailboxPerLease*slots+64, e.wake, cfg.OnWake)
	if tc, ok := cfg.Clock.(TimerClock); ok {
		e.timer = tc.NewTimer(e.mail.wakeOwner)
	}
	e.onCopy = e.batchDone
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
	switch {
	case e.core.Err() != nil:
		return Handle{}, e.Err()
	case e.core.Closed():
		return Handle{}, ErrClosed
	case req.Kind == Fetch && e.cfg.Fetcher == nil:
		return Handle{}, fmt.Errorf("%w: a fetch, but the engine has no Fetcher", ErrInvalidRequest)
	case req.Kind == Publish && e.cfg.Publisher == nil:
		return Handle{}, fmt.Errorf("%w: a publish, but the engine has no Publisher", ErrInvalidRequest)
	}
	mem := e.cfg.Memory
	for i, r := range req.Rows {
		if r.Group < 0 || r.Group >= mem.NumGroups() || r.Device == 0 {
			continue // the core names what is wrong
		}
		if err := e.stream.Addressable(r.Device, mem.Group(r.Group).SlotBytes); err != nil {
			if errors.Is(err, gpu.ErrDeviceLost) {
				return Handle{}, fmt.Errorf("%w: %w", ErrDeviceLost, err)
			}
			return Handle{}, fmt.Errorf("%w: row %d: the stream cannot copy a %d-byte row at device address %#x: %w",
				ErrInvalidRequest, i, mem.Group(r.Group).SlotBytes, uint64(r.Device), err)
		}
	}
	h, err := e.core.Lend(req)
	if err == nil {
		e.mail.ring() // a round will grant it
	}
	return h, err
}

// Release says the owner is done with the lease. The slots return to the
// allocator only once it is logically complete — access proven over and
// every local copy landed; until then the release is latched and nothing more
// is copied into its device rows. Releasing a quarantined lease gives up the
// owner's claim: its slots never return, and its handle stays readable. A
// stale handle, or a lease already released, is refused and changes nothing.
func (e *Engine) Release(h Handle) error { return e.owner(e.core.Release(h)) }

// Cancel cancels, locally, a lease still waiting for its outcome: it latches
// Cancelled (not by the peer) at once. A submitted lease's drain starts and
// its backend is asked, once and best effort, to stop — which proves nothing:
// the slots return only once Quiesce answers true. A lease not yet submitted
// is withdrawn, its slots back at once without a release (its handle then
// reads as released). A stale handle, or a lease whose outcome is already
// latched, is refused, saying why, and nothing changes.
func (e *Engine) Cancel(h Handle) error { return e.owner(e.core.Cancel(h)) }

// Retry asks the backend again, at the next round, whether the lease's access
// has ended. The engine retries by itself with back-off; Retry asks now. It
// changes nothing for a lease whose proof is not awaited, or whose Quiesce
// call is outstanding.
func (e *Engine) Retry(h Handle) error { return e.owner(e.core.Retry(h)) }

// owner wakes the owner for the work an owner's request made: a cancel
// request or a proof to ask for, or slots a release returned that a waiting
// lease may now be granted (the next round grants it).
func (e *Engine) owner(err error) error {
	if e.core.HasReady() || (err == nil && e.core.Count(StateWaiting) > 0) {
		e.mail.ring()
	}
	if err != nil && errors.Is(err, ErrHalted) {
		return e.Err()
	}
	return err
}

// Lease describes the lease h names. The latest KeepReleased released leases
// stay readable (state released).
func (e *Engine) Lease(h Handle) (LeaseInfo, error) {
	info, err := e.core.Lease(h)
	return info, err
}

// Readiness returns where a fetched request may resume: answerable once every
// local copy has landed (State.Answerable), and still after the release. With
// full attention the interval starts at 0 and ends at TokensPerBlock × the end
// of the contiguous run of blocks, from KnownBlocks, whose rows arrived in
// every layer group; a window group (Config.Attention) needs only its sinks
// and its window. A miss or a failure answers what was already known; the
// lease's outcome says which it was. Before then it is refused with an error
// wrapping ErrNotReady.
func (e *Engine) Readiness(h Handle) (staging.Interval, error) {
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
	iv, st, err := e.core.LayerReadiness(h, layer)
	return iv, LayerStatus(st), err
}

// WaitLayer runs rounds on the owner goroutine until layer of the fetch h is
// ready, and returns the interval it answers (vLLM's wait_for_layer_load). It
// returns at once, with an error wrapping ErrLayerFailed and naming why, when
// a copy of the layer or of an earlier one failed; with ErrNotReady when the
// layer will never be answered (the lease was quarantined, or released before
// its copies landed); ctx's error (wrapped) if ctx ends first; ErrHalted if
// the engine halts.
func (e *Engine) WaitLayer(ctx context.Context, h Handle, layer int) (staging.Interval, error) {
	for {
		iv, st, err := e.LayerReadiness(h, layer)
		switch {
		case err != nil:
			return iv, err
		case st == LayerReady:
			return iv, nil
		case st == LayerFailed:
			info, _ := e.core.Lease(h)
			return iv, fmt.Errorf("%w: layer %d of %v: %s", ErrLayerFailed, layer, h, info.Reason)
		case st == LayerNever:
			return iv, fmt.Errorf("%w: layer %d of %v is never answered: the lease was quarantined or released before its copies landed", ErrNotReady, layer, h)
		}
		if err := e.Err(); err != nil {
			return iv, err
		}
		if e.Progress() > 0 || e.core.HasReady() {
			continue
		}
		select {
		case <-e.wake:
		case <-ctx.Done():
			return iv, fmt.Errorf("readiness: waiting for layer %d of %v: %w", layer, h, ctx.Err())
		}
	}
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
	return e.owner(e.core.Computed(h, layer, after))
}

// Arrived appends to dst, for a fetch whose readiness is answerable, the
// block ordinals of each layer group whose rows landed on the device, one
// entry per group in the order of the request's groups: after a partial hit,
// which rows arrived (not only the contiguous interval).
func (e *Engine) Arrived(h Handle, dst []staging.GroupBlocks) ([]staging.GroupBlocks, error) {
	return e.core.Arrived(h, dst)
}

// Runs appends to dst the staging runs the lease holds (one per pool group it
// uses). A lease that holds no slots — waiting, released or quarantined — adds
// none.
func (e *Engine) Runs(h Handle, dst []staging.Run) ([]staging.Run, error) {
	return e.core.Runs(h, dst)
}

// Count returns the number of leases in state s.
func (e *Engine) Count(s State) int { return e.core.Count(s) }

// Err returns why the engine halted (ErrHalted wrapping an *InvariantError
// or a *FatalError), or nil while it runs.
func (e *Engine) Err() error { return e.core.Err() }

// Stats returns a snapshot of the counters.
func (e *Engine) Stats() Stats {
	s := e.core.Stats()
	s.QuiesceCalls, s.QuiesceProbes = e.calls, e.probes
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
	before := e.core.Moves()
	e.core.Tick(e.clock.Now())
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
	return int(e.core.Moves() - before)
}

// Until names what Wait waits for.
type Until uint8

const (
	// UntilSettled waits until the lease can go no further without its owner:
	// readiness is answerable (logically_complete), or it was quarantined, or
	// it can never be granted. Release it then.
	UntilSettled Until = iota + 1
	// UntilReleased waits until the lease's slots are back (released) or out
	// for good (quarantined).
	UntilReleased
	// UntilGranted waits until the lease holds its staging slots (it left
	// waiting), or can never be granted: a layerwise publish takes its
	// layers (Computed) from then on.
	UntilGranted
)

// Wait runs rounds on the owner goroutine until the lease h reaches what
// until names, and returns its description; between rounds it sleeps until
// woken (Wake) or ctx ends. It returns ctx's error (wrapped) if ctx ends
// first, ErrHalted if the engine halts, and ErrStaleHandle once h's record is
// no longer readable. Wait is how an owner blocks on a lease without a sleep
// loop; a manager with many leases runs Progress on Wake instead.
func (e *Engine) Wait(ctx context.Context, h Handle, until Until) (LeaseInfo, error) {
	if until != UntilSettled && until != UntilReleased && until != UntilGranted {
		return LeaseInfo{}, fmt.Errorf("readiness: Wait until %d; want UntilSettled, UntilReleased or UntilGranted", until)
	}
	for {
		info, err := e.Lease(h)
		if err != nil {
			return info, err
		}
		if reached(info, until) {
			return info, nil
		}
		if err := e.Err(); err != nil {
			return info, err
		}
		if e.Progress() > 0 || e.core.HasReady() {
			continue
		}
		select {
		case <-e.wake:
		case <-ctx.Done():
			return info, fmt.Errorf("readiness: waiting for %v (%v): %w", h, info.State, ctx.Err())
		}
	}
}

func reached(info LeaseInfo, until Until) bool {
	switch {
	case info.State.Terminal():
		return true
	case until == UntilSettled:
		return info.State.Answerable() || info.Ungrantable
	case until == UntilGranted:
		return info.State != State(fsm.Waiting) || info.Ungrantable
	}
	return false
}

// Sync runs rounds until the engine is idle: everything handed to the
// background before the call has been observed — every Quiesce call
// answered, every watched attempt polled again — and a round changes nothing.
// It waits on those goroutines, never on a backend's own timing: retries and
// deadlines later on the clock are not waited for. With a manual clock it
// makes each step of a test or simulation deterministic. It returns the number
// of moves made, or ctx's error if the background did not catch up in time (a
// Quiesce that blocks, ignoring its context, holds it up).
func (e *Engine) Sync(ctx context.Context) (int, error) {
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("readiness: Sync: the engine did not become idle: %w", err)
		}
		if err := e.catchUp(ctx); err != nil {
			return total, err
		}
		n := e.Progress()
		total += n
		// Calls before letters: a worker puts its letters before it counts
		// its answer, so once none is outstanding every letter is in the
		// mailbox. Read the other way round, a worker that answers between
		// the two reads leaves its letters untaken.
		if n == 0 && e.outstandingCalls() == 0 && !e.core.HasReady() && e.mail.n.Load() == 0 {
			return total, nil
		}
	}
}

// catchUp waits until every Quiesce batch handed out has been answered and
// the watcher has swept everything handed to it.
func (e *Engine) catchUp(ctx context.Context) error {
	// The worker that answers the last call outstanding wakes the owner
	// after counting it, so waiting on the wake-up alone never misses it.
	woke := false
	for e.outstandingCalls() > 0 {
		select {
		case <-e.wake:
			woke = true
		case <-ctx.Done():
			return fmt.Errorf("readiness: Sync: %d Quiesce calls still unanswered: %w", e.outstandingCalls(), ctx.Err())
		}
	}
	if woke {
		e.mail.ring() // keep it for the round that follows
	}
	if e.stopped || !e.watch.started {
		return nil
	}
	select {
	case <-e.watch.sync():
	case <-ctx.Done():
		return fmt.Errorf("readiness: Sync: the watcher did not catch up: %w", ctx.Err())
	}
	return nil
}

// outstandingCalls returns the Quiesce batches handed to workers and not yet
// answered.
func (e *Engine) outstandingCalls() int64 {
	var n int64
	for _, sd := range e.sides {
		if sd != nil {
			n += sd.workers.outstanding()
		}
	}
	return n
}

func (e *Engine) checkHealth() {
	if e.core.Lost() || e.cfg.Health == nil {
		return
	}
	if lost, reason := e.cfg.Health.Lost(e.cfg.Device); lost {
		e.step(Evidence{What: DeviceGone, Reason: fmt.Sprintf("device %d: %s", e.cfg.Device, reason)})
	}
}

// step reports one piece of evidence through the core's door, counting what
// the core refused (the core itself changes nothing on a refusal).
func (e *Engine) step(ev Evidence) {
	err := e.core.Step(ev)
	switch {
	case err == nil:
	case errors.Is(err, ErrStaleHandle):
		e.staleEvidence++
	case errors.Is(err, ErrHalted):
	default:
		e.refusedEvidence++
	}
}

// takeMail reports what the background and the backends' notifications made
// observable, in the order it arrived.
func (e *Engine) takeMail() {
	if e.mail.over.Load() {
		e.core.Halt(errors.New("the evidence mailbox outgrew its bound: more letters than leases in flight can produce"))
		return
	}
	e.letters = e.mail.take(e.letters[:0])
	if len(e.letters) > 1 {
		slices.SortStableFunc(e.letters, letterOrder)
	}
	for _, l := range e.letters {
		switch {
		case l.done != nil:
			l.done.pool.recycle(l.done)
		case l.poll:
			e.sighted(l.ev.Lease, l.ev.Outcome)
		default:
			e.step(l.ev)
		}
	}
	clear(e.letters)
}

// sighted takes in an attempt that a completion or the watcher says has
// answered. What the watcher's Poll saw is the engine's first sight of the
// answer and is stepped as it was seen: polling again here would let a
// backend that changed its answer in between have its second answer taken
// for its first (a miss reported as a failure); a later change is caught by
// the poll after the access proof. A completion carries no answer: the
// evidence is what Poll answers here, on the owner, and a completion Poll
// does not bear out is the backend's fault, the attempt watched from then on
// so that its outcome still arrives. An attempt already forgotten (fenced)
// is not asked again.
func (e *Engine) sighted(h Handle, seen contract.Outcome) {
	s, ok := e.attempts.get(h)
	if !ok {
		return
	}
	if seen != nil {
		e.step(Evidence{What: PollAnswered, Lease: h, Outcome: seen})
		return
	}
	if !e.answer(h, s.kind, s.a) {
		e.sides[s.kind-1].faults.early.Add(1)
		e.attempts.rewatch(h)
		e.watch.kick()
	}
}

// answer polls an attempt on the owner (Poll never blocks, by contract) and
// reports what it answered.
func (e *Engine) answer(h Handle, k Kind, a contract.Attempt) (answered bool) {
	o, p := safePoll(a)
	switch {
	case p != "":
		e.sides[k-1].faults.panics.Add(1)
		e.step(Evidence{What: PollPanicked, Lease: h, Reason: p})
		return true
	case o != nil:
		e.step(Evidence{What: PollAnswered, Lease: h, Outcome: o})
		return true
	}
	return false
}

// perform does the work the core asks for, and reports what the backend and
// the device answered at once, until the core asks for nothing more.
func (e *Engine) perform() {
	for e.core.HasReady() {
		rd := e.core.Ready()
		for _, s := range rd.Submissions {
			e.results = append(e.results, e.submit(s))
		}
		failedAt := len(e.failed)
		next := 0
		for _, m := range rd.Layers {
			if m.After > next && e.open >= 0 {
				if b := e.batches[e.open]; b[len(b)-1].h == m.Lease || !m.Behind.IsZero() {
					// A lease's next layer gets its own event; so do the
					// copies queued before a wait, which would otherwise be
					// proven only once the owner's compute is done.
					e.closeBatch(failedAt)
				}
			}
			if !m.Behind.IsZero() && !e.failedCopy(m.Lease, failedAt) {
				if err := e.waitFor(m.Behind); err != nil {
					// Nothing of the layer is queued: its copies are
					// refused before they started.
					for ; next < m.After; next++ {
						e.refused = append(e.refused, copyRefusal{h: m.Lease, row: rd.Copies[next].Row, err: err})
					}
				}
			}
			for ; next < m.After; next++ {
				e.queueCopy(&rd.Copies[next], failedAt)
			}
			if !e.failedCopy(m.Lease, failedAt) {
				e.record(m.Lease, m.Layer)
			}
		}
		for _, p := range rd.Proofs {
			e.ask(p)
		}
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
			e.attempts.drop(h)
		}
		for _, c := range rd.Containments {
			e.attempts.unwatch(c.Lease) // its attempt is kept for ever; only the polling stops
		}
		e.contain = append(e.contain, rd.Containments...)
		e.recovered = append(e.recovered, rd.Recovered...)
		e.core.Advance()
		e.report()
	}
}

// submit hands one staged lease to its backend.
func (e *Engine) submit(s Submission) (r submitResult) {
	r.h, r.kind = s.Lease, s.Kind
	defer func() {
		if p := recover(); p != nil {
			e.sides[s.Kind-1].faults.panics.Add(1)
			r.a, r.err, r.panics = nil, nil, fmt.Sprintf("backend panicked in %v: %v", s.Kind, p)
		}
	}()
	if s.Kind == Publish {
		r.a, r.err = e.cfg.Publisher.Publish(*s.Extent)
	} else {
		r.a, r.err = e.cfg.Fetcher.Fetch(*s.Extent, nil)
	}
	return r
}

// requestCancel asks a lease's attempt, once, to stop. It never blocks, by
// contract; a panic is recorded as the request's error.
func (e *Engine) requestCancel(h Handle) (ev Evidence) {
	ev = Evidence{What: CancelReplied, Lease: h}
	s, ok := e.attempts.get(h)
	if !ok {
		ev.Reason = "no attempt kept for the lease"
		return ev
	}
	defer func() {
		if p := recover(); p != nil {
			e.sides[s.kind-1].faults.panics.Add(1)
			ev.Disposition, ev.Reason = 0, fmt.Sprintf("backend panicked in RequestCancel: %v", p)
		}
	}()
	d, err := contract.RequestCancel(s.a)
	if err != nil {
		ev.Reason = "RequestCancel: " + err.Error()
		return ev
	}
	ev.Disposition = d
	return ev
}

// report tells the core what the round's submissions, copies and cancel
// requests answered, and raises the containment signals.
func (e *Engine) report() {
	for _, r := range e.results {
		switch {
		case r.panics != "":
			e.step(Evidence{What: SubmitEscaped, Lease: r.h, Reason: r.panics})
		case r.a != nil:
			e.accept(r)
		case errors.Is(r.err, contract.ErrSubmissionRejected):
			e.step(Evidence{What: SubmitRejected, Lease: r.h, Reason: r.err.Error()})
		case r.err != nil:
			e.step(Evidence{What: SubmitEscaped, Lease: r.h, Reason: r.err.Error()})
		default:
			e.step(Evidence{What: SubmitEscaped, Lease: r.h, Reason: "the backend returned neither an attempt nor an error"})
		}
	}
	clear(e.results)
	e.results = e.results[:0]
	for _, r := range e.refused {
		e.step(Evidence{What: CopyRefusedByDevice, Lease: r.h, Row: r.row, Reason: r.err.Error()})
	}
	clear(e.refused)
	e.refused = e.refused[:0]
	for _, f := range e.failed {
		e.step(Evidence{What: CopyLost, Lease: f.h, Layer: f.layer, Reason: f.err.Error()})
	}
	clear(e.failed)
	e.failed = e.failed[:0]
	for _, ev := range e.replies {
		e.step(ev)
	}
	clear(e.replies)
	e.replies = e.replies[:0]
	for _, c := range e.contain {
		if e.cfg.OnContainment != nil {
			e.cfg.OnContainment(c)
		}
	}
	clear(e.contain)
	e.contain = e.contain[:0]
	for _, h := range e.recovered {
		if e.cfg.OnRecovery != nil {
			e.cfg.OnRecovery(h)
		}
	}
	e.recovered = e.recovered[:0]
}

// accept keeps a new attempt and reports it. It is polled once here, on the
// owner: one already answered — a backend serving from a local cache — is
// taken in at once and never watched. The rest notify the engine when they
// can (contract.Notifier), or are watched.
func (e *Engine) accept(r submitResult) {
	sd := e.sides[r.kind-1]
	o, p := safePoll(r.a)
	answered := o != nil || p != ""
	n, notifies := r.a.(contract.Notifier)
	e.attempts.keep(r.h, r.kind, r.a, false)
	var nt *notice
	if !answered && notifies {
		nt = &notice{h: r.h, mail: e.mail, faults: &sd.faults}
		e.attempts.notified(r.h, nt)
	}
	e.step(Evidence{What: SubmitAccepted, Lease: r.h})
	if r.err != nil {
		e.step(Evidence{What: PollPanicked, Lease: r.h, Reason: fmt.Sprintf("the submission returned both an attempt and an error (%v)", r.err)})
	}
	switch {
	case p != "":
		sd.faults.panics.Add(1)
		e.step(Evidence{What: PollPanicked, Lease: r.h, Reason: p})
	case o != nil:
		e.step(Evidence{What: PollAnswered, Lease: r.h, Outcome: o})
	case notifies && notify(n, nt):
	default:
		e.attempts.rewatch(r.h)
		e.watch.kick()
	}
}

// ask adds a lease to this round's Quiesce batch of its backend.
func (e *Engine) ask(p Proof) {
	s, ok := e.attempts.get(p.Lease)
	if !ok {
		return // no attempt kept: the core asks only where one was returned
	}
	sd := e.sides[s.kind-1]
	if sd.round == nil {
		sd.round = sd.workers.newBatch(sd.quiesce)
	}
	sd.round.leases = append(sd.round.leases, p.Lease)
	sd.round.attempts = append(sd.round.attempts, s.a)
}

// prove asks the round's proofs of one backend on the owner when the
// backend can answer without blocking (contract.QuiesceProber), one call for
// the round's batch and, unless that proved every lease over, one per lease;
// what it cannot answer now goes to the backend's workers, to its blocking
// Quiesce.
// It reports whether anything was answered here.
func (e *Engine) prove(sd *side) (answered bool) {
	b := sd.round
	if b == nil {
		return false
	}
	sd.round = nil
	if sd.prober != nil {
		e.probes++
		switch ans, reason := sd.try(b.attempts); {
		case ans == contract.AccessEnded:
			for i := range b.attempts {
				e.inline = proven(e.inline, b.leases[i], b.attempts[i], &sd.faults)
			}
			b.leases, b.attempts = b.leases[:0], b.attempts[:0]
		case ans == contract.AccessUnproven && len(b.attempts) == 1:
			e.inline = append(e.inline, letter{ev: Evidence{What: QuiesceUnproven, Lease: b.leases[0], Reason: reason}})
			b.leases, b.attempts = b.leases[:0], b.attempts[:0]
		case len(b.attempts) > 1:
			// Asked one by one, so that one delivery still running, or one
			// that cannot be proven, holds up none of its neighbours.
			k := 0
			for i, a := range b.attempts {
				e.probes++
				switch ans, reason := sd.try(b.attempts[i : i+1]); ans {
				case contract.AccessEnded:
					e.inline = proven(e.inline, b.leases[i], a, &sd.faults)
				case contract.AccessUnproven:
					e.inline = append(e.inline, letter{ev: Evidence{What: QuiesceUnproven, Lease: b.leases[i], Reason: reason}})
				default:
					b.leases[k], b.attempts[k] = b.leases[i], a
					k++
				}
			}
			clear(b.attempts[k:])
			b.leases, b.attempts = b.leases[:k], b.attempts[:k]
		}
	}
	if len(b.leases) == 0 {
		b.pool.recycle(b)
		return true
	}
	answered = len(e.inline) > 0
	e.calls++
	e.seq++
	sd.workers.hand(e.seq, b)
	return answered
}

// takeInline reports the proofs answered on the owner this round.
func (e *Engine) takeInline() {
	for _, l := range e.inline {
		e.step(l.ev)
	}
	clear(e.inline)
	e.inline = e.inline[:0]
}

// queueCopy queues one copy. A refusal before it started is reported as such;
// any other error leaves the copy unproven, and the lease's other copies are
// skipped.
func (e *Engine) queueCopy(c *Copy, failedAt int) {
	if e.failedCopy(c.Lease, failedAt) {
		return
	}
	var err error
	if c.ToDevice {
		err = e.stream.CopyHtoD(c.Device, c.Staging)
	} else {
		err = e.stream.CopyDtoH(c.Staging, c.Device)
	}
	switch {
	case err == nil:
	case errors.Is(err, gpu.ErrCopyRefused):
		e.refused = append(e.refused, copyRefusal{h: c.Lease, row: c.Row, err: err})
	default:
		e.failed = append(e.failed, copyFailure{h: c.Lease, layer: c.Layer, err: err})
	}
}

// waitFor puts the stream behind the owner's event (Engine.Computed checked
// that the stream can wait).
func (e *Engine) waitFor(ev gpu.Event) error {
	w, ok := e.stream.(gpu.Waiter)
	if !ok {
		return fmt.Errorf("%w: the engine's stream (%T) cannot wait for %v", gpu.ErrCopyRefused, e.stream, ev)
	}
	if err := w.Wait(ev); err != nil {
		return fmt.Errorf("%w: waiting for %v: %w", gpu.ErrCopyRefused, ev, err)
	}
	return nil
}

// failedCopy reports whether a copy of the lease failed in this round.
func (e *Engine) failedCopy(h Handle, from int) bool {
	for _, f := range e.failed[from:] {
		if f.h == h {
			return true
		}
	}
	return false
}

// record adds a layer of the lease to this round's copy batch; the event
// recorded after the batch's last copy is the evidence that every one of
// them landed.
func (e *Engine) record(h Handle, layer int) {
	if e.open < 0 {
		if n := len(e.freeBatches); n > 0 {
			e.open = e.freeBatches[n-1]
			e.freeBatches = e.freeBatches[:n-1]
		} else {
			e.batches = append(e.batches, nil)
			e.open = int32(len(e.batches) - 1)
		}
	}
	e.batches[e.open] = append(e.batches[e.open], layerOf{h, layer})
}

// closeBatch records the event after the open batch's copies, in the middle
// of a round: a lease's next layer is about to be queued. If it cannot be
// recorded, the batch's copies are unproven: each lease's failure is
// reported with the round's others, and its later copies are skipped.
func (e *Engine) closeBatch(failedAt int) {
	idx := e.open
	e.open = -1
	ev, err := e.stream.Record()
	if err == nil {
		err = e.copies.Push(ev, idx)
	}
	if err == nil {
		return
	}
	for _, x := range e.batches[idx] {
		if !e.failedCopy(x.h, failedAt) {
			e.failed = append(e.failed, copyFailure{h: x.h, layer: x.layer, err: fmt.Errorf("recording the event after the copies failed: %w", err)})
		}
	}
	e.recycleBatch(idx)
}

// flush records the event after this round's copies and asks the round's
// proofs (prove). It reports whether the round should go on: an event was
// recorded (the owner queries it at once: a copy may land as fast as it is
// asked) or a proof was answered on the owner.
func (e *Engine) flush() (more bool) {
	if idx := e.open; idx >= 0 {
		more = true
		e.open = -1
		ev, err := e.stream.Record()
		if err == nil {
			err = e.copies.Push(ev, idx)
		}
		if err != nil {
			for i, x := range e.batches[idx] {
				if firstOfLease(e.batches[idx], i) {
					e.step(Evidence{What: CopyLost, Lease: x.h, Layer: x.layer, Reason: "recording the event after the copies failed: " + err.Error()})
				}
			}
			e.recycleBatch(idx)
			e.perform()
		}
	}
	for _, sd := range e.sides {
		if sd != nil && e.prove(sd) {
			more = true
		}
	}
	if len(e.inline) > 0 {
		e.takeInline()
	}
	return more
}

// handOff ends a round: it tells the watcher the oldest copy event the round
// left pending — the only way an owner asleep on Wake learns that it landed
// — and arms the wake-up for the core's next deadline.
func (e *Engine) handOff() {
	if oldest, _ := e.copies.Oldest(); oldest != e.awaited {
		e.awaited = oldest
		e.watch.await(oldest)
	}
	e.armTimer()
}

// armTimer arranges a wake-up at the core's next deadline, when the clock can.
// It only ever moves the timer earlier: deadlines come and go with every
// lease, and resetting a runtime timer for each would cost more than the
// round it saves. A timer that fires with nothing due costs one idle round,
// which arms it again.
func (e *Engine) armTimer() {
	if e.timer == nil {
		return
	}
	at, ok := e.core.NextDue()
	if !ok {
		return // an armed timer may fire early: one idle round
	}
	next, now := at.UnixNano(), e.core.Now().UnixNano()
	if e.timerAt > now && next >= e.timerAt {
		return // armed, not yet fired, and no later than what is due
	}
	e.timerAt = next
	e.timer.Reset(time.Duration(max(next-now, 0)))
}

func (e *Engine) recycleBatch(idx int32) {
	clear(e.batches[idx])
	e.batches[idx] = e.batches[idx][:0]
	e.freeBatches = append(e.freeBatches, idx)
}

// batchDone hands a completed (or failed) event to every lease it covers.
func (e *Engine) batchDone(idx int32, st gpu.Status) {
	for i, x := range e.batches[idx] {
		if st == gpu.Complete {
			e.step(Evidence{What: LayerDone, Lease: x.h, Layer: x.layer})
		} else if firstOfLease(e.batches[idx], i) {
			// A lease's later layers in the batch fail with its first.
			e.step(Evidence{What: CopyLost, Lease: x.h, Layer: x.layer, Reason: "the device reported the copies' event failed"})
		}
	}
	e.recycleBatch(idx)
}

// firstOfLease reports whether batch[i] is its lease's first layer in the
// batch: a failure is reported once per lease, at its first layer.
func firstOfLease(batch []layerOf, i int) bool {
	return !slices.ContainsFunc(batch[:i], func(y layerOf) bool { return y.h == batch[i].h })
}

func (e *Engine) pollCopies() {
	if e.copies.Len() == 0 {
		return
	}
	if _, err := e.copies.Poll(e.stream, e.onCopy); err != nil {
		e.cfg.Logger.Error("kvready: querying a copy event failed; the copies behind it stay unproven", slog.Any("error", err))
	}
}

// noticeHalt tells the owner, once, that the engine halted.
func (e *Engine) noticeHalt() {
	if e.haltSeen {
		return
	}
	if err := e.Err(); err != nil {
		e.haltSeen = true
		if e.cfg.OnHalt != nil {
			e.cfg.OnHalt(err)
		}
		e.mail.ring()
	}
}

// Report says what an engine still holds.
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
}

// Close stops admission (Lend then fails with ErrClosed) and tells every
// lease: waiting ones are released at once, those still waiting for an
// outcome are cancelled locally, and every other one is released once it is
// fenced and its copies landed, or contained at its containment deadline.
// Then it runs one round without blocking and reports what is still held. Run
// rounds (Progress on Wake, or Sync) until the report says Drained; with a
// clock that moves every close drains. Calling it again only runs a round and
// reports. The engine's claim on its memory ends as Close returns (claim.go):
// slots still held stay out of circulation for later engines; Shutdown to hand
// over every slot.
func (e *Engine) Close() Report {
	defer e.core.HandOver()
	return e.close()
}

func (e *Engine) close() Report {
	e.closing = true
	e.core.Close()
	e.Progress()
	return e.Report()
}

// Report describes what the engine holds now.
func (e *Engine) Report() Report {
	s := e.core.Stats()
	halted := e.Err()
	return Report{Held: s.Leases, SlotsHeld: s.SlotsHeld, SlotsQuarantined: s.SlotsQuarantined, Drained: e.stopped && halted == nil, Halted: halted}
}

// stopIfDrained stops the background goroutines once a closed engine has no
// lease that can still change and no Quiesce call outstanding. A closed
// engine that halted takes nothing in any more, so there is nothing left to
// observe: its outstanding Quiesce calls are cancelled, and its goroutines
// stop once they have answered (it never reports Drained: its slots stay).
func (e *Engine) stopIfDrained() {
	if e.stopped {
		return
	}
	halted := e.closing && e.core.Err() != nil
	if halted {
		for _, sd := range e.sides {
			if sd != nil {
				sd.workers.cancelAll()
			}
		}
	}
	if e.outstandingCalls() > 0 || !(halted || e.core.Drained()) {
		return
	}
	e.stopped = true
	if e.timer != nil {
		e.timer.Stop()
	}
	e.watch.close()
	for _, sd := range e.sides {
		if sd != nil {
			sd.workers.close()
		}
	}
}

// Shutdown closes the engine (Close) and runs rounds, woken as they have
// work, until its goroutines have stopped: it drained, or it halted and its
// outstanding Quiesce calls, cancelled, have answered. Leases whose access is
// never proven are contained at their containment deadline, so with a clock
// that moves every shutdown drains. It returns the final report, and ctx's
// error (wrapped) if ctx ended first, or the halt. The claim on the memory ends
// as it returns (claim.go).
func (e *Engine) Shutdown(ctx context.Context) (Report, error) {
	defer e.core.HandOver()
	rep := e.close()
	for !e.stopped {
		select {
		case <-e.wake:
		case <-ctx.Done():
			return rep, fmt.Errorf("readiness: %s: %w", undrained(rep, e.outstandingCalls()), ctx.Err())
		}
		e.Progress()
		rep = e.Report()
	}
	if rep.Halted != nil {
		return rep, rep.Halted
	}
	return rep, nil
}
