package peer

import (
	"cmp"
	"context"
	"fmt"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/transfer"
)

// What the engine asks of a receiver's attempts: their outcome, and the
// proof that the whole cohort is settled.

// observe reads the session at the clock's time: its outcome, once latched,
// is kept (and answered for ever), and a leased session's registrations are
// revoked. It answers the Notify callbacks to call once r.mu is released.
func (r *Receiver) observe(s *session) []func() {
	if s.ended {
		return nil
	}
	p := r.tx.Poll(s.key) // applies the deadlines
	if p == transfer.InDoubt && !s.inDoubt {
		s.inDoubt = true // for ever: IN_DOUBT never turns reusable
		r.n.inDoubt.Add(1)
	}
	var wake []func()
	if s.outcome == nil {
		if o, _ := r.tx.Outcome(s.key); o != nil {
			s.outcome = r.translate(s, o)
			r.n.outcomes.add(s.outcome)
			wake, s.waiters = s.waiters, nil
			r.changed.fire()
			if _, failed := o.(transfer.Failed); failed && !r.cfg.Clock().Before(s.deadline) {
				r.cancelWriters(s, "the session's deadline passed")
			}
		}
	}
	if r.cfg.Leased && s.outcome != nil && !s.revoked && p != transfer.InDoubt {
		if ok, fences := r.revoke(s); ok && r.tx.Revoked(s.key, fences) == nil {
			s.revoked = true
			r.n.revocations.Add(1)
			if fences {
				r.n.fenced.Add(1)
			}
		} else {
			r.retry = true // the next Progress observes again, changed table or not
		}
	}
	return wake
}

// translate maps the session's outcome onto the engine's: a delivery names
// the pages it served (Served), a failure and a cancel keep their kind.
func (r *Receiver) translate(s *session, o transfer.Outcome) contract.Outcome {
	switch o := o.(type) {
	case transfer.Delivered:
		return contract.Delivered{Served: Served(s.pages, o.TokenEnd)}
	case transfer.Cancelled:
		if s.failure != "" && !o.ByPeer {
			return contract.Failed{Reason: s.failure}
		}
		return contract.Cancelled{ByPeer: o.ByPeer}
	case transfer.Failed:
		return contract.Failed{Reason: o.Reason}
	}
	return contract.Failed{Reason: fmt.Sprintf("peer: an outcome of no known kind: %v", o)}
}

// prove answers whether the session's pages are reusable now, retiring the
// session the first time they are: its pages are the engine's again.
func (r *Receiver) prove(s *session) (contract.Access, []func()) {
	if s.ended {
		return contract.AccessEnded, nil
	}
	wake := r.observe(s)
	if !r.tx.Poll(s.key).Reusable() {
		return contract.AccessUnproven, wake
	}
	if err := r.tx.Retire(s.key); err != nil {
		return contract.AccessUnproven, wake
	}
	s.ended = true
	delete(r.live, s.key)
	r.order = r.order[:0]
	r.n.live.Add(^uint64(0))
	r.n.settle.add(r.cfg.Clock().Sub(s.submitted))
	return contract.AccessEnded, wake
}

func (r *Receiver) sessions(attempts []contract.Attempt) ([]*session, error) {
	out := make([]*session, len(attempts))
	for i, a := range attempts {
		f, ok := a.(*fetchAttempt)
		if !ok || f.r != r {
			return nil, fmt.Errorf("peer: attempt %d (%T) is not this receiver's", i, a)
		}
		out[i] = f.s
	}
	return out, nil
}

// TryQuiesce answers, without waiting, whether every listed attempt's pages
// are reusable — NOT_EXPOSED or QUIESCED_* by the session's own account,
// after the revocation for a leased session — retiring each session the
// first time it is. AccessUnproven otherwise, IN_DOUBT included (for ever:
// the engine contains the lease at its own deadline). It never answers
// AccessUnknown: nothing is ever learnt by waiting inside the call, only by
// evidence arriving (Progress), so the engine asks again on its back-off.
func (r *Receiver) TryQuiesce(attempts []contract.Attempt) (contract.Access, error) {
	ss, err := r.sessions(attempts)
	if err != nil {
		return contract.AccessUnproven, err
	}
	r.mu.Lock()
	all := contract.AccessEnded
	var wake []func()
	for _, s := range ss {
		a, w := r.prove(s)
		wake = append(wake, w...)
		if a != contract.AccessEnded {
			all = contract.AccessUnproven
		}
	}
	r.mu.Unlock()
	callAll(wake)
	return all, nil
}

// Quiesce is TryQuiesce's answer as the contract's: true when every listed
// attempt's pages are reusable now, false otherwise. It never waits (see
// TryQuiesce); a ctx already done is an error.
func (r *Receiver) Quiesce(ctx context.Context, attempts []contract.Attempt) (bool, error) {
	return quiesceNow(ctx, attempts, r.TryQuiesce)
}

// Settle waits until every listed attempt has an outcome, or ctx ends. It
// wakes when an outcome is observed — by Progress, a Poll, a cancel — so it
// waits on a driver or on the owner calling Progress; it proves nothing
// about the pages.
func (r *Receiver) Settle(ctx context.Context, attempts []contract.Attempt) error {
	ss, err := r.sessions(attempts)
	if err != nil {
		return err
	}
	for {
		r.mu.Lock()
		done := true
		var wake []func()
		for _, s := range ss {
			wake = append(wake, r.observe(s)...)
			done = done && s.outcome != nil
		}
		ch := r.changed.wait()
		r.mu.Unlock()
		callAll(wake)
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// fetchAttempt is the engine's handle on a session.
type fetchAttempt struct {
	r *Receiver
	s *session
}

// Poll answers the session's outcome once it is latched, and the same for
// ever; nil before. It never blocks.
func (a *fetchAttempt) Poll() contract.Outcome {
	a.r.mu.Lock()
	wake := a.r.observe(a.s)
	o := a.s.outcome
	a.r.mu.Unlock()
	callAll(wake)
	return o
}

// Notify calls f once the outcome is known: at once if it is.
func (a *fetchAttempt) Notify(f func()) {
	a.r.mu.Lock()
	wake := a.r.observe(a.s)
	if a.s.outcome == nil {
		a.s.waiters = append(a.s.waiters, f)
	} else {
		wake = append(wake, f)
	}
	a.r.mu.Unlock()
	callAll(wake)
}

// RequestCancel cancels the session (transfer.Transceiver.Cancel): a local
// Cancelled if no outcome is latched yet, and a fence — no writer is handed
// anything more — and, unless the session was delivered, asks every writer
// offered its addresses to stop (a Cancel, where its agreement grants
// IN_FLIGHT_CANCELLATION, sent at the next Progress). It never waits and
// never ends access: the writers still settle, and Quiesce still proves
// it. A second call answers the same, and asks nothing more.
func (a *fetchAttempt) RequestCancel() (contract.CancelDisposition, error) {
	a.r.mu.Lock()
	if a.s.cancel == nil {
		a.s.cancel = &cancelAnswer{d: contract.CancelRequested}
		if res := a.r.tx.Cancel(a.s.key, "cancel requested by the engine"); res.Logical == transfer.NotFound || res.Logical == transfer.Rejected {
			a.s.cancel = &cancelAnswer{d: contract.CancelRequested, err: fmt.Errorf("peer: cancel of %s answered %s: %s", a.s.key, res.Logical, res.Reason)}
		}
		if o, _ := a.r.tx.Outcome(a.s.key); !isDelivered(o) {
			a.r.cancelWriters(a.s, "cancelled by the owner")
		}
	}
	c := *a.s.cancel
	wake := a.r.observe(a.s)
	a.r.mu.Unlock()
	callAll(wake)
	return c.d, c.err
}

func callAll(fs []func()) {
	for _, f := range fs {
		f()
	}
}

func compareKeys(a, b transfer.SessionKey) int {
	return cmp.Or(cmp.Compare(a.Request, b.Request), cmp.Compare(a.Attempt, b.Attempt))
}
