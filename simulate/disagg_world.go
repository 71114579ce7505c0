package simulate

import (
	"cmp"
	"fmt"
	"time"

	"github.com/kvready/kvready/backend/peer"
	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/sim"
)

// What a manager tells the driver, and what it asks of it: the writers an
// attempt's addresses go to, the pages it lends and returns, the outcomes
// it reads. The driver passes lends, frees and reads on to the checker,
// which judges them by the pages' bytes and the network's record alone.

// The attempts' outcomes, as the summary counts them.
const (
	outDelivered = "delivered"
	outFailed    = "failed"
	outTimeout   = "timed out"
	outPeerLost  = "peer lost"
	outCancelled = "cancelled"
	outByPeer    = "cancelled by peer"
	outWithdrawn = "withdrawn"
	outRefused   = "refused: no room left"
)

// advert is the advertisement of the current incarnation of a prefill
// process: it supports every capability this version defines. A real
// decode side learns it in a handshake; the simulation hands it over.
func (d *disaggDriver) advert(p transfer.Peer) (transfer.Capabilities, error) {
	if d.ucx != nil {
		return d.ucx.advert(p)
	}
	node, ok := d.prefill[p]
	if !ok {
		return transfer.Capabilities{}, fmt.Errorf("simulate: no prefill process %q", p)
	}
	name, inc := node.Self()
	return transfer.Capabilities{Peer: name, Incarnation: inc, Version: transfer.ProtocolVersion, Supported: transfer.KnownCapabilities}, nil
}

// prefillTransport is the transport of prefill process p's current life:
// its simulated node, or in the prefill process of a run over UCX its own.
func (d *disaggDriver) prefillTransport(p transfer.Peer) transfer.Transport {
	if d.child != nil {
		return d.child.tr
	}
	return d.prefill[p]
}

// self is the decode side's advertisement.
func (d *disaggDriver) self() transfer.Capabilities {
	if d.child != nil {
		return d.child.decode
	}
	name, inc := d.decode.Self()
	return transfer.Capabilities{Peer: name, Incarnation: inc, Version: transfer.ProtocolVersion, Supported: transfer.KnownCapabilities}
}

// writer returns a's writer id, or false when a has none of that name.
func (a *dattempt) writer(id transfer.AccessorID) (dwriter, bool) {
	for _, w := range a.writers {
		if w.id == id {
			return w, true
		}
	}
	return dwriter{}, false
}

// spawn hands the addresses of a's pages to the attempt's writer id, on the
// current incarnation of its prefill process: it writes each of its pages p
// at addr(p) — the packed key of the registration holding it, and the
// offset in it. A writer that is the prefill side's Sender puts from the
// staging slots its manager lent it: the addresses go to it as an Offer
// over the network. Any other is a scripted transfer/sim writer, from a
// source of its own that nothing changes.
func (d *disaggDriver) spawn(a *dattempt, id transfer.AccessorID, addr func(page int) (key []byte, off int)) error {
	w, ok := a.writer(id)
	if !ok {
		return fmt.Errorf("simulate: %s has no writer %s", a.key(), id)
	}
	if d.sends(w) {
		return d.offer(a, id, addr)
	}
	spec := sim.WriterSpec{
		Node: d.prefill[id.Peer], To: disaggDecode, Session: a.key(), Accessor: id,
		Tokens: a.tokens(), Reports: w.reports, Behaviour: w.behaviour,
	}
	for _, p := range w.pages {
		key, off := addr(p)
		spec.Pieces = append(spec.Pieces, sim.Piece{Src: pageTag{kind: pageData, request: a.r.id, index: p, attempt: a.n}.content(), Off: off, Key: key})
	}
	if _, err := d.net.Spawn(spec); err != nil {
		return fmt.Errorf("simulate: writer %s of %s: %w", id, a.key(), err)
	}
	d.writers[w.behaviour]++
	return nil
}

// sends reports whether writer w is the prefill side's Sender (behind its
// manager) rather than a scripted writer: an honest one, with chance
// SenderRate. The behaviours an honest Sender never has — never reporting,
// failing midway, submitting late — stay scripted.
func (d *disaggDriver) sends(w dwriter) bool { return w.sender }

// offer sends writer id — a Sender of the prefill side — its Offer: every
// page of a's chunk (a writer is handed every page; its share is its own
// plan's), from the decode process to the current life of its prefill
// process. A send the network refuses loses the offer, as one to a dead
// process is lost: the attempt's deadline stands.
func (d *disaggDriver) offer(a *dattempt, id transfer.AccessorID, addr func(page int) (key []byte, off int)) error {
	adv, err := d.advert(id.Peer)
	if err != nil {
		return err
	}
	inc := adv.Incarnation
	name, dinc := d.decode.Self()
	o := peer.Offer{Session: a.key(), Writer: id, Incarnation: inc, Receiver: name, ReceiverInc: dinc, Tokens: a.tokens()}
	for j := range a.r.pages {
		key, off := addr(j)
		o.Pages = append(o.Pages, peer.OfferPage{Group: 0, Index: j, Key: key, Offset: off, Len: SlotBytes})
	}
	msg, err := peer.AppendOffer(nil, o)
	if err != nil {
		return fmt.Errorf("simulate: the offer to %s of %s: %w", id, a.key(), err)
	}
	d.senders++
	ep := d.offerEps[id.Peer]
	if ep == nil || ep.Err() != nil || (d.ucx != nil && !reaches(ep, inc)) {
		// Over UCX a dead life's endpoint may never fail (sm reports no
		// dead peer): the new life is reached on a new one.
		if ep, err = d.decode.Connect(id.Peer); err != nil {
			return nil
		}
		d.offerEps[id.Peer] = ep
	}
	if !reaches(ep, inc) {
		return nil
	}
	if _, err := ep.Send(msg); err == nil && d.ucx != nil {
		d.ucx.sent(a, msg)
	}
	return nil
}

// reaches reports whether ep reaches life inc of its peer.
func reaches(ep transfer.Endpoint, inc transfer.Incarnation) bool {
	_, at := ep.Peer()
	return at == inc
}

// lend records pages (pool indices, in chunk order) lent to a.
func (d *disaggDriver) lend(a *dattempt, pages []int) {
	a.pages = append(a.pages[:0], pages...)
	for j, p := range pages {
		d.chk.lend(p, pageTag{request: a.r.id, index: j, attempt: a.n})
	}
}

// settled records a's pages back in the pool.
func (d *disaggDriver) settled(a *dattempt) {
	if a.settled || a.contained {
		return
	}
	for _, p := range a.pages {
		d.chk.free(p)
	}
	a.settled = true
	if a.submitted >= 0 {
		d.held--
		d.settle.add(time.Duration(d.step-a.submitted) * DisaggStep)
	}
}

// contained records a's pages out of circulation for ever.
func (d *disaggDriver) contained(a *dattempt) {
	if !a.settled && !a.contained {
		a.contained = true
		d.held--
		d.inDoubt++
	}
}

// read has the checker read a's pages as the manager uses them: delivered.
func (d *disaggDriver) read(a *dattempt) {
	for j, p := range a.pages {
		d.chk.read(p, pageTag{request: a.r.id, index: j, attempt: a.n})
	}
}

// outcome records the outcome the manager saw for a, once: a delivery or a
// cancel ends the request; anything else is retried with a new attempt
// while attempts are left, and the request fails after the last.
func (d *disaggDriver) outcome(a *dattempt, kind string) {
	if a.outcome != "" {
		return
	}
	a.outcome = kind
	d.attempts[kind]++
	r := a.r
	if r.current() != a || r.state != dInFlight {
		return
	}
	switch {
	case kind == outDelivered:
		d.end(r, dDelivered)
	case kind == outCancelled:
		d.end(r, dCancelled)
	case len(r.attempts) < d.cfg.MaxAttempts:
		d.retries++
		d.enqueue(r)
	default:
		d.end(r, dFailed)
	}
}

func (d *disaggDriver) end(r *dreq, st dreqState) {
	r.state, r.endedAt = st, d.step
	d.ended++
}

// finished reports whether the run is over: every request ended, every
// attempt's pages and every publication's source slots back or contained,
// and nothing left for the network to do (a late write still lands, and is
// seen).
func (d *disaggDriver) finished() bool {
	return d.arrived == d.cfg.Requests && d.ended == d.cfg.Requests && d.held == 0 && d.pre.pending() == 0 && d.idle
}

// why says what keeps the run from finishing.
func (d *disaggDriver) why() string {
	return fmt.Sprintf("%d of %d requests arrived, %d ended, %d waiting for pages, %d attempts still holding pages, %d publications still holding source slots",
		d.arrived, d.cfg.Requests, d.ended, len(d.queue), d.held, d.pre.pending())
}

// firstFit finds the first run of k pages not used, or -1: a request's
// pages lie one after another, so one registration covers them.
func firstFit(used []bool, k int) int {
	free := 0
	for i, u := range used {
		if u {
			free = 0
			continue
		}
		if free++; free == k {
			return i - k + 1
		}
	}
	return -1
}

// firstLoss reports whether this is the first endpoint error heard from
// this incarnation of peer: the network tells one for every endpoint the
// dead process ever opened, and what a loss means is the same each time.
func (d *disaggDriver) firstLoss(peer transfer.Peer, inc transfer.Incarnation) bool {
	k := lostPeer{peer, inc}
	if d.lost[k] {
		return false
	}
	d.lost[k] = true
	return true
}

type lostPeer struct {
	peer transfer.Peer
	inc  transfer.Incarnation
}

// compareKeys orders sessions by request, then attempt.
func compareKeys(a, b transfer.SessionKey) int {
	return cmp.Or(cmp.Compare(a.Request, b.Request), cmp.Compare(a.Attempt, b.Attempt))
}

// outcomeKind names a session's latched outcome as the summary counts
// attempts: a failure is a timeout, a lost peer or a writer's failure.
func outcomeKind(info transfer.CohortInfo) string {
	switch o := info.Outcome.(type) {
	case transfer.Delivered:
		return outDelivered
	case transfer.Cancelled:
		if o.ByPeer {
			return outByPeer
		}
		return outCancelled
	case transfer.Failed:
		if o.Reason == "timeout" {
			return outTimeout
		}
		for _, acc := range info.Accessors {
			if acc.Lost {
				return outPeerLost
			}
		}
	}
	return outFailed
}
