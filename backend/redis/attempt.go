package redis

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvready/kvready/backend/notify"
	"github.com/kvready/kvready/contract"
)

// attempt is one submission. Its deadline is fixed at submission. Its
// goroutine sets the outcome once (ready) and closes released once no
// goroutine of the attempt will touch staging again.
type attempt struct {
	b        *Backend
	ctx      context.Context // the attempt's deadline; cancelled when its goroutine ends
	cancel   context.CancelFunc
	out      atomic.Pointer[outcomeBox]
	ready    chan struct{}
	released chan struct{}

	cancelOnce sync.Once
	cancelReq  chan struct{} // closed by RequestCancel

	notify notify.List // called once the outcome is set
}

type outcomeBox struct{ o contract.Outcome }

func (b *Backend) newAttempt() *attempt {
	return &attempt{b: b, ready: make(chan struct{}), released: make(chan struct{}), cancelReq: make(chan struct{})}
}

func (b *Backend) start(p *plan) (contract.Attempt, error) {
	a := b.newAttempt()
	if len(p.rows) == 0 {
		close(a.released)
		a.settle(contract.Delivered{})
		return a, nil
	}
	b.life.RLock()
	if b.closed {
		b.life.RUnlock()
		return nil, fmt.Errorf("redis: %s %q: %w: %w", p.op, p.extent, contract.ErrSubmissionRejected, ErrClosed)
	}
	// The bound runs from the submission, not from when the goroutine is
	// scheduled: the engine's deadlines run from the submission too.
	a.ctx, a.cancel = context.WithDeadline(b.ctx, time.Now().Add(b.set.timeout))
	b.running.Add(1)
	b.life.RUnlock()
	go a.run(p)
	return a, nil
}

// Poll returns the outcome, or nil while the submission is in flight. It never
// blocks, and once it has returned an outcome it returns the same one for ever.
func (a *attempt) Poll() contract.Outcome {
	if box := a.out.Load(); box != nil {
		return box.o
	}
	return nil
}

// Notify arranges for f to be called exactly once, from the attempt's
// goroutine, once Poll answers an outcome — before Notify returns if it
// already does. A nil f is ignored. It says nothing about access to staging.
func (a *attempt) Notify(f func()) { a.notify.Add(f) }

// NotifyCallee is Notify(c.Notified) without making the method value
// (notify.CalleeNotifier), for a stack of tiers that registers each lease.
func (a *attempt) NotifyCallee(c notify.Callee) { a.notify.AddCallee(c) }

// RequestCancel asks the attempt, best effort, to stop, and answers
// contract.CancelRequested, every time. It never blocks and starts no work:
// it marks the attempt, whose goroutine then sends nothing more, copies
// nothing more into staging and reports Cancelled — unless an outcome came
// first, which stays. A fetch reading straight into staging ends the calls
// it has out as far as the client lets it (go-redis drops one still waiting
// for a connection; one reading its reply runs to the reply or to the
// attempt's deadline), and Quiesce answers true once they have returned; a
// publication writing straight from staging lets its writes on the wire
// finish, and Quiesce waits for them. Over a client whose calls may outlive
// their deadline, a fetch's calls on the wire finish into the backend's
// buffers, never into staging. Nothing already stored is removed, no
// deadline moves, and a Quiesce that answered true stays true.
func (a *attempt) RequestCancel() (contract.CancelDisposition, error) {
	a.cancelOnce.Do(func() { close(a.cancelReq) })
	return contract.CancelRequested, nil
}

func (a *attempt) cancelRequested() bool {
	select {
	case <-a.cancelReq:
		return true
	default:
		return false
	}
}

// settle sets the outcome, once, and calls the notifications.
func (a *attempt) settle(o contract.Outcome) {
	a.out.Store(&outcomeBox{o})
	close(a.ready)
	a.notify.Fire()
}

// run is the attempt goroutine: it hands batches to the workers and takes
// their results back. Over a client whose calls end at their deadline
// (direct), the workers read a fetch straight into the staging rows and
// write a publication straight from them. Otherwise a fetch is read into the
// backend's scratch, which this goroutine copies into staging, and a
// publication's batch is copied into the backend's buffers just before it is
// handed over.
//
// Access to staging ends (released) once every batch lent to a worker has
// come back (direct: a worker's call ends at the attempt's deadline), when
// this goroutine stops copying (a fetch into scratch), or after the last copy
// into the backend's buffers (a publication via copies).
func (a *attempt) run(p *plan) {
	b := a.b
	defer b.running.Done()
	// Ending the context drops this attempt's calls not yet on the wire
	// (waiting for a connection or a dial) and ends those on it; the
	// deadline ends them anyway. After a cancel request with calls out, the
	// context is left to its deadline, so that what is on the wire finishes.
	keep := false
	defer func() {
		if !keep {
			a.cancel()
		}
	}()
	released := false
	release := func() { // from here on no goroutine of this attempt touches staging
		if !released {
			released = true
			p.rows = nil
			close(a.released)
		}
	}
	defer release()
	direct := b.direct

	batches := b.split(a.ctx, a.cancelReq, p, direct)
	results := make(chan *batch, len(batches)) // workers never block handing results back
	for _, j := range batches {
		j.done = results
	}
	served := make([]contract.Name, 0, len(p.names))
	var failure string
	cancelled := false
	next, out, prepared := 0, 0, 0
	for failure == "" && !cancelled && (next < len(batches) || out > 0) {
		var jobs chan *batch
		var j *batch
		if next < len(batches) {
			jobs, j = b.jobs, batches[next]
			if p.op == opPublish && prepared == next {
				a.prepare(p, j, direct)
				if prepared++; prepared == len(batches) && !direct {
					release()
				}
			}
		}
		select {
		case jobs <- j:
			next++
			out++
		case r := <-results:
			out--
			switch {
			case a.ctx.Err() != nil: // past the bound: copy nothing more
				failure = a.ended()
			case a.cancelRequested():
				// A worker may have dropped this batch for the cancel; either
				// way, nothing more is copied once a cancel was asked for.
				cancelled = true
			default:
				failure = a.take(p, r, &served)
			}
		case <-a.ctx.Done():
			failure = a.ended()
		case <-a.cancelReq:
			cancelled = true
		}
	}
	var o contract.Outcome
	switch {
	case failure != "":
		o = contract.Failed{Reason: failure}
	case cancelled:
		o = contract.Cancelled{}
	default:
		o = contract.Delivered{Served: contract.NewNameSet(served...)}
	}
	if direct && out > 0 {
		// Workers still hold rows of staging. Tell the outcome now and wait
		// for their calls, each of which ends by the attempt's deadline: on
		// a failure, end them now; on a cancel, end a fetch's (what it would
		// read is of no use; the rows may return sooner) but let a
		// publication's writes finish.
		a.settle(o)
		if !cancelled || p.op == opFetch {
			a.cancel()
		}
		for ; out > 0; out-- {
			<-results
		}
		release()
		return
	}
	keep = cancelled && out > 0 // a fetch's calls on the wire finish into the backend's scratch
	release()
	a.settle(o)
}

// prepare fills a publication's batch with the values to write: the staging
// rows themselves (direct), or copies of them in the backend's buffers.
func (a *attempt) prepare(p *plan, j *batch, direct bool) {
	j.pooled = !direct
	for i := range j.keys {
		row := p.rows[j.unit(i)]
		if direct {
			j.bufs[i] = row
			continue
		}
		j.bufs[i] = a.b.bufs.get(len(row))
		copy(j.bufs[i], row)
	}
}

// ended is the reason of an attempt whose context ended.
func (a *attempt) ended() string {
	if a.b.ctx.Err() != nil {
		return "backend closed before the store answered"
	}
	return fmt.Sprintf("timeout: the store did not answer within the attempt bound (%v)", a.b.set.timeout)
}

// take applies one batch's results: the units served, and for a fetch into
// scratch the copy of each value into its staging row, in this goroutine. It
// returns the reason of the first failure, or "".
func (a *attempt) take(p *plan, r *batch, served *[]contract.Name) string {
	for i := range r.keys {
		u, err := r.unit(i), r.errs[i]
		landed := false
		if err == nil && p.op == opFetch {
			// The sink refused a value of the wrong length before a byte of
			// it landed; a value cut off part way is an error too.
			landed, err = r.sinks[i].result()
		}
		switch {
		case err != nil:
			return fmt.Sprintf("unit %d (%s): %v", u, short(p.names[u]), err)
		case p.op == opPublish:
			*served = append(*served, p.names[u])
		case landed:
			if r.pooled {
				copy(p.rows[u], r.bufs[i])
				if r.tee != nil && r.tee[i] != nil {
					teeCopy(r.tee[i], r.bufs[i])
				}
			}
			*served = append(*served, p.names[u])
		default:
			// a miss: never published, expired or evicted
		}
		if r.pooled {
			a.b.bufs.put(r.bufs[i])
		}
		r.bufs[i] = nil
	}
	return ""
}

// short abbreviates a name for messages.
func short(n contract.Name) string { return n.String()[:16] + "…" }
