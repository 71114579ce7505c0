package readiness

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kvready/kvready/contract"
)

// quiesceFunc is a backend's Quiesce method (Fetcher's or Publisher's).
type quiesceFunc func(ctx context.Context, attempts []contract.Attempt) (bool, error)

// batch is the Quiesce work of one round for one backend: every lease whose
// access proof was asked for in that round. The owner fills it, a worker
// answers it, the owner reads the answers and recycles it.
type batch struct {
	seq      uint64
	quiesce  quiesceFunc
	leases   []Handle
	attempts []contract.Attempt
	// Per entry, filled by the worker.
	proven  []bool
	reasons []string           // why it is unproven
	repoll  []contract.Outcome // what Poll answered right after the proof
	panics  []string           // a panic in that Poll
}

func (b *batch) reset() {
	clear(b.attempts)
	clear(b.repoll)
	clear(b.reasons)
	clear(b.panics)
	b.leases, b.attempts, b.proven = b.leases[:0], b.attempts[:0], b.proven[:0]
	b.reasons, b.repoll, b.panics = b.reasons[:0], b.repoll[:0], b.panics[:0]
	b.quiesce = nil
}

// quiescer runs Quiesce calls on a fixed set of worker goroutines — never one
// per lease — one call per batch. A batch answered true proves every entry; a
// batch answered false or with an error is asked again entry by entry, so one
// unproven delivery does not hold up its neighbours. After a true answer the
// worker polls each attempt once more, so that an answer the backend changed
// is caught before anything is copied.
type quiescer struct {
	work    *mailbox[*batch]
	answers *mailbox[*batch]
	timeout time.Duration
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu   sync.Mutex // guards free
	free []*batch
}

func startQuiescer(workers int, timeout time.Duration) *quiescer {
	q := &quiescer{work: newMailbox[*batch](), answers: newMailbox[*batch](), timeout: timeout}
	q.ctx, q.cancel = context.WithCancel(context.Background())
	for range workers {
		q.wg.Add(1)
		go q.run()
	}
	return q
}

// newBatch returns a recycled batch.
func (q *quiescer) newBatch(fn quiesceFunc, seq uint64) *batch {
	q.mu.Lock()
	var b *batch
	if n := len(q.free); n > 0 {
		b = q.free[n-1]
		q.free = q.free[:n-1]
	}
	q.mu.Unlock()
	if b == nil {
		b = &batch{}
	}
	b.quiesce, b.seq = fn, seq
	return b
}

func (q *quiescer) recycle(b *batch) {
	b.reset()
	q.mu.Lock()
	q.free = append(q.free, b)
	q.mu.Unlock()
}

func (q *quiescer) run() {
	defer q.wg.Done()
	for {
		b := q.takeOne()
		if b == nil {
			select {
			case <-q.work.signal:
				continue
			case <-q.ctx.Done():
				return
			}
		}
		q.answer(b)
		q.answers.put(b)
	}
}

// takeOne takes the oldest batch, re-signalling if more remain so another
// worker wakes.
func (q *quiescer) takeOne() *batch {
	q.work.mu.Lock()
	defer q.work.mu.Unlock()
	if len(q.work.items) == 0 {
		return nil
	}
	b := q.work.items[0]
	n := copy(q.work.items, q.work.items[1:])
	q.work.items[n] = nil
	q.work.items = q.work.items[:n]
	q.work.n.Store(int64(n))
	if n > 0 {
		select {
		case q.work.signal <- struct{}{}:
		default:
		}
	}
	return b
}

func (q *quiescer) answer(b *batch) {
	n := len(b.attempts)
	for range n {
		b.proven = append(b.proven, false)
		b.reasons = append(b.reasons, "")
		b.repoll = append(b.repoll, nil)
		b.panics = append(b.panics, "")
	}
	ok, reason := q.call(b.quiesce, b.attempts)
	switch {
	case ok:
		for i := range b.proven {
			b.proven[i] = true
		}
	case n == 1:
		b.reasons[0] = reason
	default:
		for i := range b.attempts {
			b.proven[i], b.reasons[i] = q.call(b.quiesce, b.attempts[i:i+1])
		}
	}
	for i, a := range b.attempts {
		if b.proven[i] {
			b.repoll[i], b.panics[i] = safePoll(a)
		}
	}
}

// call asks once, with a bounded wait. Only (true, nil) proves anything:
// false, an error, a timeout or a panic all mean "cannot be established".
func (q *quiescer) call(fn quiesceFunc, attempts []contract.Attempt) (proven bool, reason string) {
	ctx, cancel := context.WithTimeout(q.ctx, q.timeout)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			proven, reason = false, fmt.Sprintf("backend panicked in Quiesce: %v", r)
		}
	}()
	ok, err := fn(ctx, attempts)
	switch {
	case err != nil && errors.Is(err, context.DeadlineExceeded) && mutant("quiesce-timeout-as-proof"):
		return true, ""
	case err != nil && errors.Is(err, context.DeadlineExceeded):
		return false, fmt.Sprintf("Quiesce did not answer within %v: %v", q.timeout, err)
	case err != nil:
		return false, "Quiesce error: " + err.Error()
	case !ok:
		return false, "Quiesce answered false: the end of access cannot be established yet"
	case ctx.Err() != nil:
		// The contract reports a cancelled wait as an error, never as true:
		// a true that outlived its context is not trusted.
		return false, "Quiesce answered true after its context ended; a cancelled wait proves nothing"
	}
	return true, ""
}

// close stops the workers. A worker inside a backend call that ignores its
// context cannot be stopped; close waits for it, so call it only once no call
// is outstanding.
func (q *quiescer) close() {
	q.cancel()
	q.wg.Wait()
}
