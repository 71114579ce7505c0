package readiness

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvready/kvready/contract"
)

// quiesceFunc is a backend's Quiesce method (Fetcher's or Publisher's).
type quiesceFunc func(ctx context.Context, attempts []contract.Attempt) (bool, error)

// batch is the Quiesce work of one round for one backend: every lease whose
// access proof was asked for in that round, one call for all of them. The
// owner fills it and may cancel its context (the calls outlived
// QuiesceTimeout on the engine's clock); a worker answers it into the mailbox;
// the owner recycles it once answered.
type batch struct {
	pool     *quiescer
	quiesce  quiesceFunc
	leases   []Handle
	attempts []contract.Attempt
	ctx      callCtx
	letters  []letter // the worker's answers, put in the mailbox at once
	seq      uint64   // handed out in this order, from 1
}

func (b *batch) reset() {
	clear(b.attempts)
	clear(b.letters)
	b.leases, b.attempts, b.letters = b.leases[:0], b.attempts[:0], b.letters[:0]
	b.quiesce, b.pool, b.seq = nil, nil, 0
	b.ctx.reset()
}

// callCtx is the context of one batch's Quiesce calls: cancelled by the owner
// when the calls outlive QuiesceTimeout on the engine's clock, or when the
// engine stops. It is reused with its batch, so that asking for proofs
// allocates nothing; its done channel is made only if a backend asks for it.
// A backend must not keep it after its Quiesce call returned.
type callCtx struct {
	mu   sync.Mutex
	done chan struct{}
	err  error
}

// Deadline reports none: the timeout is on the engine's clock, not the wall's.
func (c *callCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done returns a channel closed once the call is cancelled.
func (c *callCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.err != nil {
			close(c.done)
		}
	}
	return c.done
}

// Err returns context.Canceled once the call is cancelled, nil before.
func (c *callCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Value carries nothing.
func (c *callCtx) Value(any) any { return nil }

func (c *callCtx) cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = context.Canceled
		if c.done != nil {
			close(c.done)
		}
	}
}

func (c *callCtx) reset() {
	c.mu.Lock()
	c.done, c.err = nil, nil
	c.mu.Unlock()
}

// quiescer runs one backend's Quiesce calls on a fixed set of worker
// goroutines — never one per lease, started with the first call handed to
// them — one call per batch. A batch answered true proves every entry; a
// batch answered false or with an error is asked again entry by entry, so one
// unproven delivery does not hold up its neighbours. After a true answer the
// worker polls each attempt once more, so that an answer the backend changed
// is caught before anything is copied. Workers only observe: their answers go
// to the mailbox, and the owner decides.
type quiescer struct {
	mu      sync.Mutex
	queue   []*batch      // handed out, not yet taken by a worker
	running []*batch      // taken by a worker, not yet answered
	signal  chan struct{} // capacity 1: "work was queued"
	mail    *mailbox
	faults  *faultCounts // the backend's
	stop    chan struct{}
	wg      sync.WaitGroup
	workers int
	started bool         // the workers run (owner only)
	handed  atomic.Int64 // batches handed out
	answer  atomic.Int64 // batches answered
	free    []*batch     // answered batches back from the owner (owner only)
	due     []Handle     // overdue's sorted scratch (owner only)
	// wall bounds a batch's calls in real time too: the engine's clock decides
	// when a call stops counting (it proves nothing from then on), and this
	// makes sure a backend blocked on a clock that does not move still gets
	// its context cancelled, so that no worker is pinned for longer.
	wall time.Duration
}

func newQuiescer(workers int, wall time.Duration, mail *mailbox, faults *faultCounts) *quiescer {
	return &quiescer{signal: make(chan struct{}, 1), mail: mail, faults: faults, stop: make(chan struct{}), wall: wall, workers: workers}
}

// newBatch returns a recycled batch for fn. Owner only.
func (q *quiescer) newBatch(fn quiesceFunc) *batch {
	var b *batch
	if n := len(q.free); n > 0 {
		b, q.free = q.free[n-1], q.free[:n-1]
	} else {
		b = &batch{}
	}
	b.quiesce, b.pool = fn, q
	return b
}

// hand queues a batch for the workers, starting them the first time. It
// never blocks. Owner only.
func (q *quiescer) hand(seq uint64, b *batch) {
	if !q.started {
		q.started = true
		for range q.workers {
			q.wg.Add(1)
			go q.run()
		}
	}
	b.seq = seq
	q.handed.Add(1)
	q.mu.Lock()
	q.queue = append(q.queue, b)
	q.mu.Unlock()
	q.mail.handoffs.Add(1)
	signal(q.signal)
}

// outstanding returns the batches handed out and not yet answered.
func (q *quiescer) outstanding() int64 { return q.handed.Load() - q.answer.Load() }

// recycle takes an answered batch back. Owner only.
func (q *quiescer) recycle(b *batch) {
	if b.seq == 0 {
		q.reuse(b)
		return
	}
	q.mu.Lock()
	for i, r := range q.running {
		if r == b {
			q.running = append(q.running[:i], q.running[i+1:]...)
			break
		}
	}
	q.mu.Unlock()
	b.reset()
	q.free = append(q.free, b)
}

// reuse takes back a batch that was never handed out (its proofs were all
// answered on the owner): no worker saw it or its context, so it is cleared
// without the locks a handed-out batch needs. Owner only.
func (q *quiescer) reuse(b *batch) {
	clear(b.attempts)
	b.leases, b.attempts = b.leases[:0], b.attempts[:0]
	b.quiesce, b.pool = nil, nil
	q.free = append(q.free, b)
}

// overdue cancels the calls of the batches that ask about any of hs, queued
// or running. Owner only. It costs O((leases in batches + len(hs)) log
// len(hs)): a whole round's leases can come due at once.
func (q *quiescer) overdue(hs []Handle) {
	q.due = append(q.due[:0], hs...)
	slices.SortFunc(q.due, func(a, b Handle) int { return cmp.Compare(a.Uint64(), b.Uint64()) })
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, list := range [][]*batch{q.queue, q.running} {
		for _, b := range list {
			for _, l := range b.leases {
				if _, found := slices.BinarySearchFunc(q.due, l, func(a, b Handle) int { return cmp.Compare(a.Uint64(), b.Uint64()) }); found {
					b.ctx.cancel()
					break
				}
			}
		}
	}
}

// cancelAll cancels every call queued or running. Owner only.
func (q *quiescer) cancelAll() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, list := range [][]*batch{q.queue, q.running} {
		for _, b := range list {
			b.ctx.cancel()
		}
	}
}

// take hands a worker the oldest queued batch, re-signalling if more remain so
// that another worker wakes.
func (q *quiescer) take() *batch {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.queue) == 0 {
		return nil
	}
	b := q.queue[0]
	n := copy(q.queue, q.queue[1:])
	q.queue[n] = nil
	q.queue = q.queue[:n]
	q.running = append(q.running, b)
	if n > 0 {
		signal(q.signal)
	}
	return b
}

func (q *quiescer) run() {
	defer q.wg.Done()
	var (
		mu      sync.Mutex
		current *batch
	)
	// One timer per worker, reset for each batch: cancelling on time
	// allocates nothing.
	timer := time.AfterFunc(time.Hour, func() {
		mu.Lock()
		if current != nil {
			current.ctx.cancel()
		}
		mu.Unlock()
	})
	timer.Stop()
	defer timer.Stop()
	for {
		b := q.take()
		if b == nil {
			select {
			case <-q.signal:
				continue
			case <-q.stop:
				return
			}
		}
		mu.Lock()
		current = b
		mu.Unlock()
		timer.Reset(q.wall)
		q.answerBatch(b)
		timer.Stop()
		mu.Lock()
		current = nil
		mu.Unlock()
		// Counted once the letters are in: an owner that sees every batch
		// answered finds all their letters in the mailbox.
		b.letters = append(b.letters, letter{done: b})
		for i := range b.letters {
			b.letters[i].seq = b.seq
		}
		q.mail.put(b.letters...)
		// The owner may have looked between the letters and the count (a
		// drain waits for every call to be answered): the last answer wakes
		// it again.
		if q.answer.Add(1) == q.handed.Load() {
			q.mail.wakeOwner()
		}
	}
}

func (q *quiescer) answerBatch(b *batch) {
	ok, reason := q.call(&b.ctx, b.quiesce, b.attempts)
	if ok {
		for i := range b.attempts {
			b.letters = proven(b.letters, b.leases[i], b.attempts[i], q.faults)
		}
		return
	}
	if len(b.attempts) == 1 {
		b.letters = append(b.letters, letter{ev: Evidence{What: QuiesceUnproven, Lease: b.leases[0], Reason: reason}})
		return
	}
	for i := range b.attempts {
		if ok, reason := q.call(&b.ctx, b.quiesce, b.attempts[i:i+1]); ok {
			b.letters = proven(b.letters, b.leases[i], b.attempts[i], q.faults)
		} else {
			b.letters = append(b.letters, letter{ev: Evidence{What: QuiesceUnproven, Lease: b.leases[i], Reason: reason}})
		}
	}
}

// proven appends the evidence of a true answer: the attempt polled again
// first, so that an answer changed before the proof is a violation caught
// before anything is copied.
func proven(dst []letter, h Handle, a contract.Attempt, faults *faultCounts) []letter {
	dst = append(dst, letter{}, letter{ev: Evidence{What: QuiesceTrue, Lease: h}})
	provenAnswer(&dst[len(dst)-2].ev, h, a, faults)
	return dst
}

// provenAnswer writes into ev (zero) what an attempt proven over answers when
// it is polled once more, before the proof is reported: its outcome, or the
// panic that took its place (counted against the backend). It writes the
// fields in place rather than returning the evidence: returned, the evidence
// is too wide for registers, and its caller read it back whole from narrow
// stores a moment old, which the processor cannot forward (once a lease).
func provenAnswer(ev *Evidence, h Handle, a contract.Attempt, faults *faultCounts) {
	o, p := safePoll(a)
	ev.Lease = h
	if p != "" {
		faults.panics.Add(1)
		ev.What, ev.Reason = PollPanicked, p
		return
	}
	ev.What, ev.Outcome = PollAnswered, o
}

// call asks once. Only (true, nil) proves anything: false, an error or a
// panic all mean "cannot be established". A true is evidence whenever it
// comes: the context's end only asks the backend to stop waiting.
func (q *quiescer) call(ctx context.Context, fn quiesceFunc, attempts []contract.Attempt) (proven bool, reason string) {
	defer func() {
		if r := recover(); r != nil {
			q.faults.panics.Add(1)
			proven, reason = false, fmt.Sprintf("backend panicked in Quiesce: %v", r)
		}
	}()
	ok, err := fn(ctx, attempts)
	switch {
	case err != nil && ctx.Err() != nil:
		return false, "Quiesce ended with its context (it outlived its timeout, or the engine stopped): " + err.Error()
	case err != nil:
		return false, "Quiesce error: " + err.Error()
	case !ok:
		return false, "Quiesce answered false: the end of access cannot be established yet"
	}
	return true, ""
}

// close stops the workers, cancelling every call still outstanding. A worker
// inside a backend call that ignores its context cannot be stopped; close
// waits for it, so call it only once no call is outstanding.
func (q *quiescer) close() {
	if !q.started {
		return
	}
	q.mu.Lock()
	for _, b := range q.running {
		b.ctx.cancel()
	}
	q.mu.Unlock()
	close(q.stop)
	q.wg.Wait()
}

// safePoll calls Poll, turning a panic into a reason: a misbehaving backend is
// contained, never allowed to crash the manager.
func safePoll(a contract.Attempt) (o contract.Outcome, panicked string) {
	defer func() {
		if r := recover(); r != nil {
			o, panicked = nil, fmt.Sprintf("backend panicked in Poll: %v", r)
		}
	}()
	return a.Poll(), ""
}
