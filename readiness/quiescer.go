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

// batch is the Quiesce work of one progress round for one backend: every lease
// whose access proof became needed in that round. The owner fills it, a worker
// answers it, the owner reads the answers and recycles it.
type batch struct {
	quiesce  quiesceFunc
	refs     []ref
	attempts []contract.Attempt
	proven   []bool   // per entry, filled by the worker
	reasons  []string // per entry, why it is unproven
}

func (b *batch) reset() {
	clear(b.attempts)
	b.refs, b.attempts, b.proven, b.reasons = b.refs[:0], b.attempts[:0], b.proven[:0], b.reasons[:0]
	b.quiesce = nil
}

// quiescer runs Quiesce calls on a fixed set of worker goroutines — never one
// per lease — one call per batch. A batch answered true proves every entry; a
// batch answered false or with an error is asked again entry by entry, so one
// unproven delivery does not quarantine its neighbours.
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
func (q *quiescer) newBatch(fn quiesceFunc) *batch {
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
	b.quiesce = fn
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
	var mine []*batch
	for {
		// Take one batch at a time so that idle workers share the queue.
		mine = q.takeOne(mine[:0])
		if len(mine) == 0 {
			select {
			case <-q.work.signal:
				continue
			case <-q.ctx.Done():
				return
			}
		}
		b := mine[0]
		q.answer(b)
		q.answers.put(b)
	}
}

// takeOne moves at most one batch from the work mailbox into dst, re-signalling
// if more remain so another worker wakes.
func (q *quiescer) takeOne(dst []*batch) []*batch {
	q.work.mu.Lock()
	defer q.work.mu.Unlock()
	if len(q.work.items) == 0 {
		return dst
	}
	dst = append(dst, q.work.items[0])
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
	return dst
}

func (q *quiescer) answer(b *batch) {
	n := len(b.attempts)
	b.proven, b.reasons = b.proven[:0], b.reasons[:0]
	for range n {
		b.proven = append(b.proven, false)
		b.reasons = append(b.reasons, "")
	}
	ok, reason := q.call(b.quiesce, b.attempts)
	if ok {
		for i := range b.proven {
			b.proven[i] = true
		}
		return
	}
	if n == 1 {
		b.reasons[0] = reason
		return
	}
	for i := range b.attempts {
		ok, reason := q.call(b.quiesce, b.attempts[i:i+1])
		b.proven[i], b.reasons[i] = ok, reason
	}
}

// call asks once, with a bounded wait. Only (true, nil) proves anything: false,
// an error, a timeout or a panic all mean "cannot be established".
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
	case err != nil && errors.Is(err, context.DeadlineExceeded):
		return false, fmt.Sprintf("quiesce did not answer within %v: %v", q.timeout, err)
	case err != nil:
		return false, "quiesce error: " + err.Error()
	case !ok:
		return false, "quiesce answered false: access end cannot be established"
	}
	return true, ""
}

// close stops the workers. A worker inside a backend call that ignores its
// context cannot be stopped; close waits for it, so call it only once no call
// is outstanding, or accept the wait.
func (q *quiescer) close() {
	q.cancel()
	q.wg.Wait()
}
