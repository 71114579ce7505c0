package peer

import (
	"time"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/transfer"
)

// Coordinated cancellation, the sender's half: a receiver's Cancel for a
// publication this process serves stops it — nothing more is posted — and,
// once its flush completed, its final report (a DONE) tells the receiver
// nothing more of it can land, which under PER_OPERATION_QUIESCENCE settles
// this writer. A cancel for an attempt whose offer has not come leaves a
// tombstone: the late offer is refused, and answered with that final
// report, since nothing was or will be posted for it.

// tombstone is a receiver's cancel that came before its offer: the
// receiver's life it came from, and until when it is remembered.
type tombstone struct {
	receiver transfer.Peer
	inc      transfer.Incarnation
	until    time.Time
}

// cancelled is the handler of a Cancel message: taken only if it came on an
// endpoint of the receiver it names and is for this life of this process.
func (s *Sender) cancelled(from transfer.Peer, inc transfer.Incarnation, msg []byte) {
	c, err := DecodeCancel(msg)
	if err != nil || c.Receiver != from || c.ReceiverInc != inc || c.Writer.Peer != s.self || c.Incarnation != s.inc {
		s.n.ignored.Add(1)
		return
	}
	s.mu.Lock()
	wake := s.cancel(c)
	s.mu.Unlock()
	callAll(wake)
}

// cancel applies one receiver's cancel whose identity was checked; s.mu is
// held. It answers the Notify callbacks to call once s.mu is released.
func (s *Sender) cancel(c Cancel) []func() {
	key := sendKey{c.Session, c.Writer}
	if p := s.live[key]; p != nil {
		if p.plan.To != c.Receiver || p.inc != c.ReceiverInc || p.outcome != nil {
			s.n.ignored.Add(1) // another life of the receiver, or already concluded (a duplicate among them)
			return nil
		}
		s.n.cancels.Add(1)
		wake := s.conclude(p, contract.Cancelled{ByPeer: true}) // from now on nothing is posted
		switch {
		case p.posted:
			s.finals = append(s.finals, p) // its flush was posted after its puts: DONE once it completes
		case p.offer != nil:
			s.final(p.plan.To, p.inc, key, p.offer.Tokens.Start) // nothing was posted
		default:
			s.entomb(key, c) // its offer may still come
		}
		return wake
	}
	if s.stale(key) {
		s.n.ignored.Add(1)
		return nil
	}
	if _, dup := s.tombs[key]; dup {
		s.n.ignored.Add(1)
		return nil
	}
	if h, ok := s.held[key]; ok && h.offer.Receiver == c.Receiver && h.offer.ReceiverInc == c.ReceiverInc {
		delete(s.held, key) // the publish has not come: nothing was posted, and nothing will be
		s.final(c.Receiver, c.ReceiverInc, key, h.offer.Tokens.Start)
	}
	if s.entomb(key, c) {
		s.n.cancels.Add(1)
	}
	return nil
}

// entomb remembers a cancel whose offer has not come, if there is room; a
// cancel with no room is only a request lost — the receiver's pages still
// wait for their settlement, and a publish of the attempt posts once its
// offer comes, as it would have without the cancel.
func (s *Sender) entomb(key sendKey, c Cancel) bool {
	if len(s.tombs) >= s.cfg.Limits.Tombstones {
		s.n.ignored.Add(1)
		return false
	}
	s.tombs[key] = tombstone{receiver: c.Receiver, inc: c.ReceiverInc, until: s.cfg.Clock().Add(s.cfg.Limits.Window)}
	s.n.tombstones.Add(1)
	return true
}

// stale reports whether this sender knows a later attempt of the same
// request written as the same accessor: a cancel of an older attempt is for
// an attempt already replaced, and must not touch the new one.
func (s *Sender) stale(key sendKey) bool {
	later := func(k sendKey) bool {
		return k.as == key.as && k.session.Request == key.session.Request && k.session.Attempt > key.session.Attempt
	}
	for k := range s.live {
		if later(k) {
			return true
		}
	}
	for k := range s.plans {
		if later(k) {
			return true
		}
	}
	for k := range s.held {
		if later(k) {
			return true
		}
	}
	return false
}

// refuseLate refuses an offer its receiver cancelled before it came, and
// answers it with the final report: nothing was posted for it, and a
// tombstoned attempt never posts.
func (s *Sender) refuseLate(key sendKey, o Offer) {
	s.final(o.Receiver, o.ReceiverInc, key, o.Tokens.Start)
}

// finish sends the final report of every cancelled publication whose flush
// completed: the flush was posted after every put, so once it completed
// nothing of the publication can land. A flush that failed proves nothing,
// and no DONE is sent (the receiver's revocation or containment decides).
func (s *Sender) finish() {
	kept := s.finals[:0]
	for _, p := range s.finals {
		done, err := p.flush.Test()
		switch {
		case !done:
			kept = append(kept, p)
		case err == nil && p.carried && everyPutLanded(p):
			// Its DONE rode on its put, which landed: the receiver heard it.
		case err == nil:
			end := p.plan.Chunk.Tokens().Start
			if everyPutLanded(p) {
				end = p.plan.Chunk.Tokens().End
			}
			s.final(p.plan.To, p.inc, p.key, end)
		}
	}
	clear(s.finals[len(kept):])
	s.finals = kept
}

func everyPutLanded(p *publication) bool {
	for _, r := range p.puts {
		if done, err := r.Test(); !done || err != nil {
			return false
		}
	}
	return true
}

// final sends the DONE that ends this writer's part of a cancelled session,
// best effort: reaching tokenEnd, within the session's span (a DONE outside
// it would be a contract violation, and settle nothing).
func (s *Sender) final(to transfer.Peer, inc transfer.Incarnation, key sendKey, tokenEnd int64) {
	ev := transfer.Evidence{Kind: transfer.Done, Session: key.session, Accessor: key.as, Incarnation: s.inc, TokenEnd: tokenEnd}
	msg, err := transfer.AppendEvidence(nil, ev)
	if err != nil {
		return
	}
	ep, err := s.endpoint(to, inc)
	if err != nil {
		return
	}
	if _, err := ep.Send(msg); err == nil {
		s.n.finals.Add(1)
	}
}
