package peer

import (
	"slices"

	"github.com/kvready/kvready/transfer"
)

// Coordinated cancellation, the receiver's half: when the owner cancels a
// fetch, or its deadline passes, every writer that may hold the session's
// addresses is asked to stop, so that an honest one posts nothing more,
// flushes and sends its final report — settling sooner than containment.
// The request is never evidence: nothing here touches the session.

// cancelTarget is one writer of a session, as agreed: whom a Cancel goes to
// and whether the agreement lets it be sent.
type cancelTarget struct {
	writer  transfer.AccessorID
	inc     transfer.Incarnation
	granted bool // the agreement grants IN_FLIGHT_CANCELLATION
}

func cancelTargets(dst []cancelTarget, cfg transfer.CohortConfig) []cancelTarget {
	for _, a := range cfg.Accessors {
		dst = append(dst, cancelTarget{writer: a.ID, inc: a.Agreement.Incarnation(), granted: a.Agreement.Granted().Has(transfer.InFlightCancellation)})
	}
	return dst
}

// cancelWriters asks, once per session, every writer reached so far whose
// agreement grants IN_FLIGHT_CANCELLATION to stop; r.mu is held. The cancels
// wait in the outbox for the next Progress, which sends them: whoever
// noticed the deadline — an engine's worker in TryQuiesce, a Poll — the
// transport is driven from one place, in one order.
func (r *Receiver) cancelWriters(s *session, reason string) {
	if s.cancelled {
		return
	}
	s.cancelled = true
	if len(reason) > transfer.MaxReasonLen {
		reason = reason[:transfer.MaxReasonLen]
	}
	for _, t := range s.targets[:s.reached] {
		if t.granted {
			r.outbox = append(r.outbox, Cancel{Session: s.key, Writer: t.writer, Incarnation: t.inc, Receiver: r.self, ReceiverInc: r.inc, Reason: reason})
		}
	}
}

// sendCancels sends every cancel waiting, by session (a session's in offer
// order), best effort; r.mu is not held.
func (r *Receiver) sendCancels() {
	r.mu.Lock()
	out := r.outbox
	r.outbox = nil
	r.mu.Unlock()
	slices.SortStableFunc(out, func(a, b Cancel) int { return compareKeys(a.Session, b.Session) })
	for _, c := range out {
		if err := r.sendCancel(c); err != nil {
			r.n.unsent.Add(1)
			continue
		}
		r.n.cancels.Add(1)
	}
}

// sendCancel hands one cancel to its writer, through the configured seam or
// over an endpoint to exactly the life the session was agreed with.
func (r *Receiver) sendCancel(c Cancel) error {
	if r.cfg.Cancel != nil {
		return r.cfg.Cancel(c)
	}
	msg, err := AppendCancel(nil, c)
	if err != nil {
		return err
	}
	ep, err := r.endpoint(c.Writer.Peer, c.Incarnation)
	if err != nil {
		return err
	}
	req, err := ep.Send(msg)
	if err != nil {
		return err
	}
	if done, err := req.Test(); done && err != nil {
		return err
	}
	return nil
}

func isDelivered(o transfer.Outcome) bool {
	_, ok := o.(transfer.Delivered)
	return ok
}
