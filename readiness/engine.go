package readiness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/staging"
)

// Engine is the runner managers embed: a Core driven by goroutines that
// observe the backend. The owner goroutine calls every method; a round
// (Progress) takes in the evidence that became observable and performs the
// work the core asks for — it submits, queues copies and records their event,
// hands attempts to the watcher and access proofs to the Quiesce workers. The
// background goroutines only observe and answer through mailboxes; they never
// call the core, and nothing blocking ever runs on the owner goroutine.
type Engine struct {
	cfg    Config
	core   *Core
	stream gpu.Stream

	attempts attemptTable
	watch    *watcher
	quiet    *quiescer
	// The round's Quiesce work, one batch per backend, handed out at the
	// round's end; outstanding counts batches not yet taken back.
	qFetch, qPublish             *batch
	quiesceFetch, quiescePublish quiesceFunc
	seq                          uint64
	outstanding                  int
	retries                      retryHeap
	calls, retried               uint64

	// Copies queued in one round share one event: a stream completes in
	// order, so the event after the round's last copy proves all of them.
	copies      gpu.Completions[int32]
	batches     [][]Handle
	freeBatches []int32
	open        int32                   // batch collecting this round's copies, or -1
	onCopy      func(int32, gpu.Status) // bound once so that polling never allocates

	// Scratch, reused every round.
	outcomes  []outcomeMsg
	answers   []*batch
	results   []submitResult
	refusals  []copyRefusal
	failures  []copyFailure
	contained []Containment

	handed  int // items handed to the background in the latest round
	stopped bool

	obs *observing // nil unless Config.Observer is set
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
	h   Handle
	err error
}

// New assembles an engine over the caller's staging memory and starts the
// goroutines that observe the backend: one that polls attempts and
// QuiesceWorkers that run Quiesce calls.
func New(cfg Config) (*Engine, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.applyDefaults()
	core, err := newCore(cfg.core())
	if err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, core: core, stream: cfg.Stream, open: -1}
	e.cfg.ExtentName = core.cfg.ExtentName
	e.onCopy = e.batchDone
	if cfg.Fetcher != nil {
		e.quiesceFetch = cfg.Fetcher.Quiesce
	}
	if cfg.Publisher != nil {
		e.quiescePublish = cfg.Publisher.Quiesce
	}
	core.Tick(cfg.Clock.Now())
	e.watch = startWatcher(&e.attempts)
	e.quiet = startQuiescer(cfg.QuiesceWorkers, cfg.QuiesceTimeout)
	if cfg.Observer != nil {
		e.observeWith(cfg.Observer)
	}
	return e, nil
}

// Core returns the core the engine drives, for reading (Lease, Readiness,
// Stats); evidence must not be reported to it behind the engine's back.
func (e *Engine) Core() *Core { return e.core }

// Lend asks for a lease. Bad input — a kind without its backend, a row of an
// unknown group, a device row the stream cannot address — is refused with an
// error wrapping ErrInvalidRequest and changes nothing. The lease waits for
// slots in arrival order; it is granted and submitted in a later Progress.
func (e *Engine) Lend(req Request) (Handle, error) {
	switch {
	case e.core.closed:
		return Handle{}, ErrClosed
	case req.Kind == Fetch && e.cfg.Fetcher == nil:
		return Handle{}, fmt.Errorf("%w: a fetch, but the engine has no Fetcher", ErrInvalidRequest)
	case req.Kind == Publish && e.cfg.Publisher == nil:
		return Handle{}, fmt.Errorf("%w: a publish, but the engine has no Publisher", ErrInvalidRequest)
	}
	groups := e.cfg.Memory.NumGroups()
	for i, r := range req.Rows {
		if r.Group < 0 || r.Group >= groups || r.Device == 0 {
			continue // the core names what is wrong
		}
		if err := e.stream.Addressable(r.Device, e.cfg.Memory.Group(r.Group).SlotBytes); err != nil {
			if errors.Is(err, gpu.ErrDeviceLost) {
				return Handle{}, fmt.Errorf("%w: %w", ErrDeviceLost, err)
			}
			return Handle{}, fmt.Errorf("%w: row %d: the stream cannot copy a %d-byte row at device address %#x: %w",
				ErrInvalidRequest, i, e.cfg.Memory.Group(r.Group).SlotBytes, uint64(r.Device), err)
		}
	}
	return e.core.Lend(req)
}

// Release says the manager is done with the lease; see Core.Release.
func (e *Engine) Release(h Handle) error { return e.core.Release(h) }

// Cancel cancels a submitted lease still waiting for its outcome, locally;
// see Core.Cancel.
func (e *Engine) Cancel(h Handle) error { return e.core.Cancel(h) }

// Lease describes the lease h names; see Core.Lease.
func (e *Engine) Lease(h Handle) (LeaseInfo, error) { return e.core.Lease(h) }

// Readiness returns where a fetched request may resume; see Core.Readiness.
func (e *Engine) Readiness(h Handle) (staging.Interval, error) { return e.core.Readiness(h) }

// Runs appends to dst the staging runs the lease holds; see Core.Runs.
func (e *Engine) Runs(h Handle, dst []staging.Run) ([]staging.Run, error) {
	return e.core.Runs(h, dst)
}

// Count returns the number of leases in state s.
func (e *Engine) Count(s fsm.State) int { return e.core.Count(s) }

// Stats returns a snapshot of the counters.
func (e *Engine) Stats() Stats {
	s := e.core.Stats()
	s.QuiesceCalls, s.QuiesceRetries = e.calls, e.retried
	return s
}

// Retry asks the backend again, at the next round, whether the lease's access
// has ended — an explicit evidence retry. The engine retries by itself with
// back-off; Retry asks now. It changes nothing for a lease whose proof is not
// awaited or already being asked for.
func (e *Engine) Retry(h Handle) error {
	if _, err := e.core.lookup(h); err != nil {
		return err
	}
	if !e.core.AwaitingProof(h) {
		return nil
	}
	e.ask(h, true)
	return nil
}

// Progress runs one round: it tells the core the time (deadlines and
// containment deadlines fire first), takes in every piece of evidence that
// has become observable — device loss, outcomes, copy completions, Quiesce
// answers — and performs the work the core asks for. It never blocks. It
// returns the number of moves made.
//
// A round in which nothing happened costs the same however many leases are in
// flight: each source of evidence is checked in O(what it delivered + 1).
func (e *Engine) Progress() int {
	before := e.core.moves
	e.handed = 0
	now := e.cfg.Clock.Now()
	e.core.Tick(now)
	e.checkHealth()
	e.takeOutcomes()
	e.pollCopies()
	e.takeAnswers()
	e.retryDue(now.UnixNano())
	e.perform()
	e.flush()
	e.stopIfDrained()
	if e.obs != nil {
		e.observed()
	}
	return int(e.core.moves - before)
}

// Sync runs rounds until the engine is idle: everything handed to the
// background goroutines before the call has been observed — every watched
// attempt polled again, every Quiesce call answered — and a round changes
// nothing. It waits on those goroutines, never on a backend's own timing:
// retries scheduled for later on the clock are not waited for. With a manual
// clock it makes each step of a test or simulation deterministic. It returns
// the number of moves made, or ctx's error if the background did not catch up
// in time (a Quiesce that ignores its context blocks it).
func (e *Engine) Sync(ctx context.Context) (int, error) {
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("readiness: Sync: the engine did not become idle: %w", err)
		}
		// Catch up first, so that each round takes in everything observable
		// at once: how the evidence is split between rounds never depends on
		// when a goroutine happened to run.
		if err := e.catchUp(ctx); err != nil {
			return total, err
		}
		n := e.Progress()
		total += n
		if n == 0 && e.handed == 0 && e.watch.out.n.Load() == 0 && e.quiet.answers.n.Load() == 0 {
			return total, nil
		}
	}
}

// catchUp waits until the watcher has swept everything handed to it and every
// Quiesce batch handed out has been answered.
func (e *Engine) catchUp(ctx context.Context) error {
	if err := e.catchUpWatcher(ctx); err != nil {
		return err
	}
	return e.catchUpQuiesce(ctx)
}

// catchUpWatcher waits for a whole sweep of the watcher that began after
// everything handed to it so far.
func (e *Engine) catchUpWatcher(ctx context.Context) error {
	if e.stopped {
		return nil
	}
	done := make(chan struct{})
	e.watch.syncs.put(done)
	e.watch.wake()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("readiness: Sync: the outcome watcher did not catch up: %w", ctx.Err())
	}
	return nil
}

// catchUpQuiesce waits until every Quiesce batch handed out has been answered.
func (e *Engine) catchUpQuiesce(ctx context.Context) error {
	for int(e.quiet.answers.n.Load()) < e.outstanding {
		select {
		case <-e.quiet.answers.signal:
		case <-ctx.Done():
			return fmt.Errorf("readiness: Sync: %d Quiesce batches still unanswered: %w", e.outstanding-int(e.quiet.answers.n.Load()), ctx.Err())
		}
	}
	return nil
}

func (e *Engine) checkHealth() {
	if e.core.lost || e.cfg.Health == nil || mutant("ignore-device-loss") {
		return
	}
	if lost, reason := e.cfg.Health.Lost(e.cfg.Device); lost {
		e.core.DeviceLost(fmt.Sprintf("device %d: %s", e.cfg.Device, reason))
	}
}

// takeOutcomes reports the answers the watcher saw, in lease order: the order
// in which the watcher happened to find them must not change what a round
// does.
func (e *Engine) takeOutcomes() {
	e.outcomes = e.watch.out.take(e.outcomes[:0])
	if len(e.outcomes) > 1 {
		slices.SortFunc(e.outcomes, func(a, b outcomeMsg) int {
			if c := cmp.Compare(a.h.id, b.h.id); c != 0 {
				return c
			}
			return cmp.Compare(a.h.gen, b.h.gen)
		})
	}
	for _, m := range e.outcomes {
		if m.panic != "" {
			_ = e.core.Violation(m.h, m.panic)
			continue
		}
		_ = e.core.Answer(m.h, m.outcome)
	}
	clear(e.outcomes)
}

// takeAnswers reports the Quiesce answers the workers produced, in the order
// the batches were handed out, so that a round's effects do not depend on
// which worker finished first.
func (e *Engine) takeAnswers() {
	e.answers = e.quiet.answers.take(e.answers[:0])
	if len(e.answers) > 1 {
		slices.SortFunc(e.answers, func(a, b *batch) int { return cmp.Compare(a.seq, b.seq) })
	}
	now := e.core.now
	for _, b := range e.answers {
		e.outstanding--
		for i, h := range b.leases {
			s := e.slot(h)
			if s == nil {
				continue // the lease was retired meanwhile
			}
			s.flags &^= asking
			if b.proven[i] {
				// The re-poll first: an answer changed before the proof is a
				// violation, caught before anything is copied.
				if b.panics[i] != "" {
					_ = e.core.Violation(h, b.panics[i])
				} else {
					_ = e.core.Answer(h, b.repoll[i])
				}
				_ = e.core.Proven(h)
				continue
			}
			_ = e.core.Unproven(h, b.reasons[i])
			if e.core.AwaitingProof(h) && !mutant("never-retry") {
				backoff := e.cfg.RetryBackoff << min(s.retries, 20)
				s.retries = min(s.retries+1, 255)
				s.flags |= scheduled
				e.retries.push(now+int64(min(backoff, e.cfg.MaxRetryBackoff)), h)
			}
		}
		e.quiet.recycle(b)
	}
	clear(e.answers)
}

// retryDue asks again for the proofs whose back-off has passed.
func (e *Engine) retryDue(now int64) {
	for {
		h, ok := e.retries.pop(now)
		if !ok {
			return
		}
		s := e.slot(h)
		if s == nil || s.flags&scheduled == 0 || !e.core.AwaitingProof(h) {
			continue // fenced, contained, or already asked again explicitly
		}
		e.retried++
		e.ask(h, false)
	}
}

// slot returns the lease's attempt record, or nil if the handle is stale.
func (e *Engine) slot(h Handle) *attemptSlot { return e.attempts.get(h) }

// ask adds a lease to this round's Quiesce batch of its backend.
func (e *Engine) ask(h Handle, explicit bool) {
	s := e.slot(h)
	if s == nil || s.flags&asking != 0 {
		return
	}
	if explicit {
		e.retried++
	}
	s.flags = s.flags&^scheduled | asking
	b, fn := &e.qFetch, e.quiesceFetch
	if s.kind() == Publish {
		b, fn = &e.qPublish, e.quiescePublish
	}
	if *b == nil {
		e.seq++
		*b = e.quiet.newBatch(fn, e.seq)
	}
	(*b).leases = append((*b).leases, h)
	(*b).attempts = append((*b).attempts, s.a)
}

// perform does the work the core asks for, and reports what the backend and
// the device answered at once, until the core asks for nothing more.
func (e *Engine) perform() {
	rd := &e.core.ready
	for !rd.Empty() {
		for _, s := range rd.Submissions {
			e.results = append(e.results, e.submit(s))
		}
		failedAt := len(e.failures)
		for i := range rd.Copies {
			e.queueCopy(&rd.Copies[i], failedAt)
		}
		for _, h := range rd.CopyLeases {
			if !e.failedCopy(h, failedAt) {
				e.record(h)
			}
		}
		for _, h := range rd.Quiesce {
			e.ask(h, false)
		}
		for _, h := range rd.Forget {
			e.forget(h)
		}
		for _, c := range rd.Containments {
			// Its attempt is kept for ever; only the polling stops.
			e.attempts.unwatch(c.Lease)
		}
		e.contained = append(e.contained, rd.Containments...)
		e.core.Advance()
		e.report()
	}
}

// submit hands one staged lease to its backend.
func (e *Engine) submit(s Submission) (r submitResult) {
	r.h, r.kind = s.Lease, s.Kind
	defer func() {
		if p := recover(); p != nil {
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

// report tells the core what the round's submissions and copies answered, and
// raises the containment signals.
func (e *Engine) report() {
	for _, r := range e.results {
		switch {
		case r.panics != "":
			_ = e.core.Escaped(r.h, r.panics)
		case r.a != nil:
			// Poll once here, on the owner (Poll never blocks, by contract):
			// an attempt already answered is not handed to the watcher.
			o, p := safePoll(r.a)
			answered := o != nil || p != ""
			e.keep(r.h, r.kind, r.a, !answered)
			_ = e.core.Submitted(r.h)
			if r.err != nil {
				_ = e.core.Violation(r.h, fmt.Sprintf("the submission returned both an attempt and an error (%v)", r.err))
			}
			switch {
			case p != "":
				_ = e.core.Violation(r.h, p)
			case o != nil:
				_ = e.core.Answer(r.h, o)
			}
		case errors.Is(r.err, contract.ErrSubmissionRejected):
			_ = e.core.Rejected(r.h, r.err.Error())
		case r.err != nil:
			_ = e.core.Escaped(r.h, r.err.Error())
		default:
			_ = e.core.Escaped(r.h, "the backend returned neither an attempt nor an error")
		}
	}
	clear(e.results)
	e.results = e.results[:0]
	for _, r := range e.refusals {
		_ = e.core.CopyRefused(r.h, r.row, r.err.Error())
	}
	clear(e.refusals)
	e.refusals = e.refusals[:0]
	for _, f := range e.failures {
		_ = e.core.CopyFailed(f.h, f.err.Error())
	}
	clear(e.failures)
	e.failures = e.failures[:0]
	for _, c := range e.contained {
		if e.cfg.OnContainment != nil {
			e.cfg.OnContainment(c)
		}
	}
	clear(e.contained)
	e.contained = e.contained[:0]
}

// keep records a lease's attempt and, if watch is set, has the watcher poll it.
func (e *Engine) keep(h Handle, k Kind, a contract.Attempt, watch bool) {
	e.attempts.keep(h, k, a, watch)
	if watch {
		e.handed++
	}
}

// forget drops a fenced lease's attempt: the backend's access is proven over,
// so nothing about it is needed any more. The watcher is not woken: it has
// nothing new to poll.
func (e *Engine) forget(h Handle) { e.attempts.drop(h) }

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
		e.refusals = append(e.refusals, copyRefusal{h: c.Lease, row: c.Row, err: err})
	default:
		e.failures = append(e.failures, copyFailure{h: c.Lease, err: err})
	}
}

// failedCopy reports whether a copy of the lease failed in this round.
func (e *Engine) failedCopy(h Handle, from int) bool {
	for _, f := range e.failures[from:] {
		if f.h == h {
			return true
		}
	}
	return false
}

// record adds the lease to this round's copy batch; the event recorded after
// the round's last copy is the evidence that every one of them landed.
func (e *Engine) record(h Handle) {
	if e.open < 0 {
		if n := len(e.freeBatches); n > 0 {
			e.open = e.freeBatches[n-1]
			e.freeBatches = e.freeBatches[:n-1]
		} else {
			e.batches = append(e.batches, nil)
			e.open = int32(len(e.batches) - 1)
		}
	}
	e.batches[e.open] = append(e.batches[e.open], h)
}

// flush records the event after this round's copies and hands the round's
// attempts and Quiesce batches to the background goroutines.
func (e *Engine) flush() {
	if idx := e.open; idx >= 0 {
		e.open = -1
		ev, err := e.stream.Record()
		if err == nil {
			err = e.copies.Push(ev, idx)
		}
		if err != nil {
			for _, h := range e.batches[idx] {
				_ = e.core.CopyFailed(h, "recording the event after the copies failed: "+err.Error())
			}
			e.recycleBatch(idx)
		}
	}
	if e.handed > 0 {
		e.watch.wake()
	}
	for _, b := range []**batch{&e.qFetch, &e.qPublish} {
		if *b != nil {
			e.handed++
			e.outstanding++
			e.calls++
			e.quiet.work.put(*b)
			*b = nil
		}
	}
}

func (e *Engine) recycleBatch(idx int32) {
	clear(e.batches[idx])
	e.batches[idx] = e.batches[idx][:0]
	e.freeBatches = append(e.freeBatches, idx)
}

// batchDone hands a completed (or failed) event to every lease it covers.
func (e *Engine) batchDone(idx int32, st gpu.Status) {
	for _, h := range e.batches[idx] {
		if st == gpu.Complete {
			_ = e.core.CopiesLanded(h)
		} else {
			_ = e.core.CopyFailed(h, "the device reported the copies' event failed")
		}
	}
	e.recycleBatch(idx)
}

func (e *Engine) pollCopies() {
	if e.copies.Len() == 0 {
		return
	}
	if _, err := e.copies.Poll(e.stream, e.onCopy); err != nil {
		e.cfg.Logger.Error("kvready: querying a copy event failed; the copies behind it stay unproven", slog.Any("error", err))
	}
}

// Report says what an engine still holds.
type Report struct {
	// Held counts leases by state; released ones stay counted while their
	// records are readable, quarantined ones for ever.
	Held [fsm.NumStates]int
	// SlotsHeld are slots still lent (not free, not quarantined).
	SlotsHeld int
	// SlotsQuarantined are slots out of circulation for ever.
	SlotsQuarantined int
	// Drained reports that the engine is closed, no lease can still change,
	// and the background goroutines have stopped.
	Drained bool
}

// Close stops admission and tells every lease (see Core.Close), then runs one
// round without blocking and reports what is still held. Call Progress (or
// Sync) until the report says Drained; leases whose access is never proven
// are contained at their containment deadline, so with a clock that moves
// every close drains. Calling it again only runs a round and reports.
func (e *Engine) Close() Report {
	e.core.Close()
	e.Progress()
	return e.Report()
}

// Report describes what the engine holds now.
func (e *Engine) Report() Report {
	s := e.core.Stats()
	return Report{Held: s.Leases, SlotsHeld: s.SlotsHeld, SlotsQuarantined: s.SlotsQuarantined, Drained: e.stopped}
}

// stopIfDrained stops the background goroutines once a closed engine has no
// lease that can still change and no Quiesce call outstanding.
func (e *Engine) stopIfDrained() {
	if e.stopped || e.outstanding > 0 || !e.core.Drained() {
		return
	}
	e.stopped = true
	e.watch.close()
	e.quiet.close()
}
